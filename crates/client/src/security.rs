//! A client's TLS and login, for a native listener that asks for them
//! (`listen_security_protocol`): the TLS session is opened before the first request, and the
//! login — SCRAM-SHA-256/512, or PLAIN — is the connection's first exchange, so every request
//! after it is the user's. SCRAM's server-final is checked: the broker, too, must know the
//! password's keys.

use bytes::Bytes;
use minibroker_protocol::{
    AuthenticateRequest, ErrorCode, ErrorResponse, Request, Response, serde_bytes,
};
use minibroker_security::{ScramClient, ScramMechanism};
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;

use crate::{Client, ClientError};

/// TLS to the broker: the client configuration (the CA it trusts) and the name the broker's
/// certificate must hold.
#[derive(Clone)]
pub struct ClientTls {
    /// The TLS configuration.
    pub config: Arc<rustls::ClientConfig>,
    /// The broker's name as its certificate holds it (a DNS name or an IP address).
    pub server_name: ServerName<'static>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// How a client logs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoginMechanism {
    /// SCRAM-SHA-256 or SCRAM-SHA-512: the password never crosses the wire.
    Scram(ScramMechanism),
    /// PLAIN: the password crosses the wire (over TLS only, sensibly).
    Plain,
}

impl LoginMechanism {
    /// The mechanism of a SASL name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(Self::Plain),
            name => ScramMechanism::from_name(name).map(Self::Scram),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::Scram(mechanism) => mechanism.name(),
        }
    }
}

/// A user and password to log in with.
#[derive(Clone)]
pub struct Credentials {
    /// The mechanism.
    pub mechanism: LoginMechanism,
    /// The user.
    pub user: String,
    /// The password.
    pub password: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs.
        f.debug_struct("Credentials")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

fn failed(message: &str) -> ClientError {
    ClientError::Broker(ErrorResponse::new(ErrorCode::AuthenticationFailed, message))
}

impl Client {
    /// Logs in with `credentials`: the connection's requests are the user's from now on.
    ///
    /// # Errors
    /// [`ClientError::Broker`] with AUTHENTICATION_FAILED when the broker refuses the login or
    /// its SCRAM proof does not match; transport failures.
    pub async fn login(&self, credentials: &Credentials) -> Result<(), ClientError> {
        let mechanism = credentials.mechanism.name();
        let step = |token: Vec<u8>| async move {
            let request = Request::Authenticate(AuthenticateRequest {
                mechanism,
                token: serde_bytes::Bytes::new(&token),
            });
            match self.request(&request).await? {
                Response::Authenticate(answer) => Ok((answer.token, answer.complete)),
                Response::Error(error) => Err(ClientError::Broker(error)),
                other => Err(ClientError::UnexpectedResponse {
                    expected: "authenticate",
                    got: format!("{other:?}").chars().take(120).collect(),
                }),
            }
        };
        match credentials.mechanism {
            LoginMechanism::Plain => {
                let mut message = vec![0];
                message.extend_from_slice(credentials.user.as_bytes());
                message.push(0);
                message.extend_from_slice(&credentials.password);
                let (_, complete) = step(message).await?;
                if !complete {
                    return Err(failed("the broker did not finish the PLAIN login"));
                }
            }
            LoginMechanism::Scram(scram) => {
                let nonce =
                    minibroker_security::server_nonce().map_err(|e| failed(&e.to_string()))?;
                let (mut client, first) =
                    ScramClient::start(scram, &credentials.user, &credentials.password, &nonce);
                let (server_first, _) = step(first).await?;
                let last = client
                    .finish(&server_first)
                    .map_err(|e| failed(&e.to_string()))?;
                let (server_final, complete): (Bytes, bool) = step(last).await?;
                if !complete || client.check_server(&server_final).is_err() {
                    return Err(failed("the broker's SCRAM proof did not match"));
                }
            }
        }
        Ok(())
    }
}
