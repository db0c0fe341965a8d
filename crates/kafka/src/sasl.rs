//! SASL on the Kafka listener (`kafka_security_protocol = "SASL_PLAINTEXT"`): a connection is
//! served nothing but ApiVersions, SaslHandshake and SaslAuthenticate until it has logged in as a
//! user of `users_file`, as Kafka's `SaslServerAuthenticator` does; any other request before
//! that closes it.
//!
//! SaslHandshake picks the mechanism (UNSUPPORTED_SASL_MECHANISM, with the list, for another);
//! SaslAuthenticate v0-2 carries its tokens (after a version 0 handshake they come bare, one
//! frame each, as older clients send them): PLAIN's one message, or SCRAM's client-first and
//! client-final (`minibroker_security::ScramExchange`). A failed login is answered
//! SASL_AUTHENTICATION_FAILED after `auth_failure_delay_ms`, and the connection closes. PLAIN's
//! check costs a PBKDF2, so it runs on a blocking thread.

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_net::Config;
use minibroker_security::{Reloading, ScramExchange, ScramMechanism, Users, UsersFileError};
use ring::rand::SecureRandom;
use std::sync::Arc;
use std::time::Duration;

use crate::front_end::KafkaFrontEnd;

/// A mechanism the listener offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// PLAIN (RFC 4616), checked against the user's SCRAM credential.
    Plain,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    Scram(ScramMechanism),
}

impl Mechanism {
    fn from_name(name: &str) -> Option<Self> {
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

/// What the listener needs to log clients in.
#[derive(Debug)]
pub struct SaslSettings {
    /// The mechanisms offered, in the configured order.
    pub mechanisms: Vec<Mechanism>,
    /// The users file, read again when it changes (a user added or removed needs no restart).
    users: Reloading<Users>,
    /// What an unknown user's stand-in salt is made from: the same for the broker's life.
    secret: [u8; 32],
    /// How long a failed login waits for its answer.
    pub failure_delay: Duration,
    /// How long a login lasts before the client must re-authenticate (KIP-368); `None`: for
    /// the connection's life.
    pub session_lifetime: Option<Duration>,
    /// One edit of the users file at a time (AlterUserScramCredentials).
    editing: std::sync::Mutex<()>,
}

impl SaslSettings {
    /// The settings of `config`, its users file read: `None` for a PLAINTEXT listener.
    ///
    /// # Errors
    /// The users file cannot be read, or a line of it does not.
    pub fn from_config(config: &Config) -> Result<Option<Self>, UsersFileError> {
        let net = &config.net;
        if !net.kafka_security_protocol.uses_sasl() {
            return Ok(None);
        }
        let users = Reloading::open(net.users_file.clone(), Users::load)?;
        let mut secret = [0u8; 32];
        // Without a random source the secret stays zero: stand-in salts are then guessable per
        // name, which tells nothing a login could not.
        let _ = ring::rand::SystemRandom::new().fill(&mut secret);
        Ok(Some(Self {
            mechanisms: net
                .sasl_enabled_mechanisms
                .iter()
                .filter_map(|name| Mechanism::from_name(name))
                .collect(),
            users,
            secret,
            failure_delay: Duration::from_millis(net.auth_failure_delay_ms),
            editing: std::sync::Mutex::new(()),
            session_lifetime: (net.sasl_session_lifetime_ms > 0)
                .then(|| Duration::from_millis(net.sasl_session_lifetime_ms)),
        }))
    }

    /// The users as the file says now.
    #[must_use]
    pub fn users(&self) -> Arc<Users> {
        self.users.current()
    }

    /// Applies `edit` to the users file as it is now on disk, saves it, and holds the result
    /// at once.
    ///
    /// # Errors
    /// The file cannot be read or written, as text for an answer.
    pub fn edit_users<R>(&self, edit: impl FnOnce(&mut Users) -> R) -> Result<R, String> {
        let _one_at_a_time = self
            .editing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(path) = self.users.path() else {
            return Err("no users_file".into());
        };
        let edited = Users::load(path).and_then(|mut users| {
            let result = edit(&mut users);
            users.save(path)?;
            Ok((users, result))
        });
        match edited {
            Ok((users, result)) => {
                self.users.replace(users);
                Ok(result)
            }
            Err(error) => {
                tracing::warn!(%error, "the users file could not be edited");
                Err(error.to_string())
            }
        }
    }

    fn names(&self) -> Vec<StrBytes> {
        self.mechanisms
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect()
    }
}

/// Where a connection is in its login.
#[derive(Debug, Default)]
pub enum Login {
    /// A listener without SASL: no login (the principal is the client certificate's name, or
    /// ANONYMOUS).
    #[default]
    NotAsked,
    /// Waiting for SaslHandshake.
    Waiting,
    /// The mechanism is chosen; waiting for its first token.
    Chose(Mechanism),
    /// SCRAM's client-first is answered; waiting for client-final.
    Scram(Box<ScramExchange>),
    /// Logged in as this user.
    As(String),
}

impl Login {
    /// Whether requests other than the SASL ones may be served.
    #[must_use]
    pub fn lets_through(&self) -> bool {
        matches!(self, Self::NotAsked | Self::As(_))
    }
}

/// A SaslAuthenticate answer, and whether the connection closes after it.
pub(crate) struct Answered {
    pub(crate) answer: SaslAuthenticateResponse,
    pub(crate) close: bool,
}

fn failed(message: &str) -> Answered {
    Answered {
        answer: SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::SaslAuthenticationFailed.code())
            .with_error_message(Some(StrBytes::from_string(message.to_owned()))),
        close: true,
    }
}

impl KafkaFrontEnd {
    pub(crate) fn sasl_handshake(
        &mut self,
        request: &SaslHandshakeRequest,
    ) -> SaslHandshakeResponse {
        let Some(sasl) = self.config.sasl.clone() else {
            // As Kafka on a PLAINTEXT listener.
            return SaslHandshakeResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code());
        };
        let answer = SaslHandshakeResponse::default().with_mechanisms(sasl.names());
        let reauthenticating = match &self.login {
            // KIP-368: a logged-in connection logs in again, as the same user, when its
            // session has a lifetime.
            Login::As(user) if sasl.session_lifetime.is_some() => Some(user.clone()),
            Login::Waiting => None,
            _ => {
                return answer.with_error_code(ResponseError::IllegalSaslState.code());
            }
        };
        match Mechanism::from_name(&request.mechanism).filter(|m| sasl.mechanisms.contains(m)) {
            Some(mechanism) => {
                self.login = Login::Chose(mechanism);
                self.reauthenticating = reauthenticating;
                answer
            }
            None => {
                tracing::info!(mechanism = %request.mechanism, "a SASL mechanism not offered");
                answer.with_error_code(ResponseError::UnsupportedSaslMechanism.code())
            }
        }
    }

    pub(crate) async fn sasl_authenticate(&mut self, request: SaslAuthenticateRequest) -> Answered {
        let Some(sasl) = self.config.sasl.clone() else {
            return Answered {
                answer: SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::IllegalSaslState.code()),
                close: true,
            };
        };
        let token = request.auth_bytes;
        let answered = match std::mem::take(&mut self.login) {
            Login::Chose(Mechanism::Plain) => self.plain(&sasl, token).await,
            Login::Chose(Mechanism::Scram(mechanism)) => self.scram_first(&sasl, mechanism, &token),
            Login::Scram(exchange) => match exchange.finish(&token) {
                Ok(done) => self.logged_in(done.user, "SCRAM", Bytes::from(done.server_final)),
                Err(error) => {
                    tracing::info!(%error, "a SCRAM login failed");
                    failed(
                        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM",
                    )
                }
            },
            other => {
                self.login = other;
                return Answered {
                    answer: SaslAuthenticateResponse::default()
                        .with_error_code(ResponseError::IllegalSaslState.code())
                        .with_error_message(Some(StrBytes::from_static_str(
                            "SaslAuthenticate before SaslHandshake",
                        ))),
                    close: true,
                };
            }
        };
        if answered.close {
            self.logins.count(false);
            tokio::time::sleep(sasl.failure_delay).await;
        } else if self.login.lets_through() {
            self.logins.count(true);
        }
        answered
    }

    async fn plain(&mut self, sasl: &Arc<SaslSettings>, token: Bytes) -> Answered {
        let (user, password) = match minibroker_security::parse_plain(&token) {
            Ok(parts) => parts,
            Err(error) => {
                tracing::info!(%error, "a PLAIN login failed");
                return failed("Authentication failed: Invalid username or password");
            }
        };
        let checked = {
            let (users, user) = (sasl.users(), user.clone());
            tokio::task::spawn_blocking(move || users.verify_plain(&user, &password))
                .await
                .unwrap_or(false)
        };
        if !checked {
            tracing::info!(user, "a PLAIN login failed");
            return failed("Authentication failed: Invalid username or password");
        }
        self.logged_in(user, "PLAIN", Bytes::new())
    }

    fn scram_first(
        &mut self,
        sasl: &SaslSettings,
        mechanism: ScramMechanism,
        token: &[u8],
    ) -> Answered {
        let nonce = match minibroker_security::server_nonce() {
            Ok(nonce) => nonce,
            Err(error) => return failed(&error.to_string()),
        };
        let users = sasl.users();
        let started = ScramExchange::start(
            mechanism,
            token,
            |user| users.credential(user, mechanism).cloned(),
            &sasl.secret,
            &nonce,
        );
        match started {
            Ok((exchange, server_first)) => {
                self.login = Login::Scram(Box::new(exchange));
                Answered {
                    answer: SaslAuthenticateResponse::default()
                        .with_auth_bytes(Bytes::from(server_first)),
                    close: false,
                }
            }
            Err(error) => {
                tracing::info!(%error, "a SCRAM login failed");
                failed(&format!("Authentication failed: {error}"))
            }
        }
    }

    /// A bare SASL token (after SaslHandshake v0): answered bare, in a frame of its own; a
    /// failed login closes the connection without an answer, as Kafka does for version 0.
    pub(crate) async fn raw_sasl_token(
        &mut self,
        token: Bytes,
        out: &mut bytes::BytesMut,
    ) -> minibroker_net::Next {
        use bytes::BufMut;
        let answered = self
            .sasl_authenticate(SaslAuthenticateRequest::default().with_auth_bytes(token))
            .await;
        if answered.close {
            return minibroker_net::Next::Close;
        }
        if self.login.lets_through() {
            self.raw_sasl = false;
        }
        let reply = answered.answer.auth_bytes;
        // SCRAM's and PLAIN's tokens are far below 4 GiB.
        out.put_u32(reply.len() as u32);
        out.extend_from_slice(&reply);
        minibroker_net::Next::Continue
    }

    fn logged_in(&mut self, user: String, how: &str, last_token: Bytes) -> Answered {
        match self.reauthenticating.take() {
            Some(before) if before != user => {
                tracing::info!(before, user, "a re-authentication as another user; closing");
                return failed("Re-authentication as a different user is not allowed");
            }
            Some(_) => tracing::info!(user, mechanism = how, "re-authenticated"),
            None => {
                let principal = format!("User:{user}");
                let Some(slot) = self.per_principal.take(principal) else {
                    tracing::info!(
                        user,
                        "the user holds max_connections_per_principal already; login refused"
                    );
                    return failed("Too many connections for this user");
                };
                self.principal_slot = Some(slot);
                tracing::info!(user, mechanism = how, "authenticated");
            }
        }
        self.principal = format!("User:{user}");
        self.login = Login::As(user);
        let lifetime = self
            .config
            .sasl
            .as_ref()
            .and_then(|sasl| sasl.session_lifetime);
        self.session_ends = lifetime.map(|lifetime| std::time::Instant::now() + lifetime);
        let lifetime_ms = lifetime.map_or(0, |l| i64::try_from(l.as_millis()).unwrap_or(i64::MAX));
        Answered {
            answer: SaslAuthenticateResponse::default()
                .with_auth_bytes(last_token)
                .with_session_lifetime_ms(lifetime_ms),
            close: false,
        }
    }

    /// Whether the login's session is over (KIP-368) and not yet renewed.
    pub(crate) fn session_expired(&self) -> bool {
        self.session_ends
            .is_some_and(|ends| std::time::Instant::now() >= ends)
    }
}
