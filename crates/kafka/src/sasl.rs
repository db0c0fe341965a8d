//! SASL on the Kafka listener (`kafka_security_protocol = "SASL_PLAINTEXT"` or `"SASL_SSL"`):
//! the login (`minibroker_host::login::Session`) framed as Kafka frames it. A connection is served
//! nothing but ApiVersions, SaslHandshake and SaslAuthenticate until it has logged in, as
//! Kafka's `SaslServerAuthenticator` does; any other request before that closes it.
//!
//! SaslHandshake picks the mechanism (UNSUPPORTED_SASL_MECHANISM, with the list, for another);
//! SaslAuthenticate v0-2 carries its tokens (after a version 0 handshake they come bare, one
//! frame each, as older clients send them). A failed login is answered
//! SASL_AUTHENTICATION_FAILED after `auth_failure_delay_ms`, and the connection closes; a
//! login tells its session's lifetime (KIP-368).

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_host::login::{Choice, Step};

use crate::front_end::KafkaFrontEnd;

/// A SaslAuthenticate answer, and whether the connection closes after it.
pub(crate) struct Answered {
    pub(crate) answer: SaslAuthenticateResponse,
    pub(crate) close: bool,
}

fn refused(error: ResponseError, message: &str) -> Answered {
    Answered {
        answer: SaslAuthenticateResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(StrBytes::from_string(message.to_owned()))),
        close: true,
    }
}

impl KafkaFrontEnd {
    pub(crate) fn sasl_handshake(
        &mut self,
        request: &SaslHandshakeRequest,
    ) -> SaslHandshakeResponse {
        let offered: Vec<StrBytes> = self
            .session
            .settings()
            .map(|settings| settings.mechanism_names())
            .unwrap_or_default()
            .into_iter()
            .map(StrBytes::from_static_str)
            .collect();
        let answer = SaslHandshakeResponse::default().with_mechanisms(offered);
        match self.session.choose(&request.mechanism) {
            Choice::Chosen => answer,
            Choice::Unsupported => {
                answer.with_error_code(ResponseError::UnsupportedSaslMechanism.code())
            }
            // As Kafka on a PLAINTEXT listener, or a handshake out of turn.
            Choice::IllegalState => answer.with_error_code(ResponseError::IllegalSaslState.code()),
        }
    }

    pub(crate) async fn sasl_authenticate(&mut self, request: SaslAuthenticateRequest) -> Answered {
        match self.session.step(request.auth_bytes).await {
            Step::Challenge(token) => Answered {
                answer: SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(token)),
                close: false,
            },
            Step::LoggedIn {
                user,
                last,
                lifetime,
            } => {
                self.guard.logged_in(&user);
                let lifetime_ms = i64::try_from(minibroker_host::login::lifetime_ms(lifetime))
                    .unwrap_or(i64::MAX);
                Answered {
                    answer: SaslAuthenticateResponse::default()
                        .with_auth_bytes(Bytes::from(last))
                        .with_session_lifetime_ms(lifetime_ms),
                    close: false,
                }
            }
            Step::Failed(message) => refused(ResponseError::SaslAuthenticationFailed, &message),
            Step::IllegalState => refused(
                ResponseError::IllegalSaslState,
                "SaslAuthenticate before SaslHandshake",
            ),
        }
    }

    /// A bare SASL token (after SaslHandshake v0): answered bare, in a frame of its own; a
    /// failed login closes the connection without an answer, as Kafka does for version 0.
    pub(crate) async fn raw_sasl_token(
        &mut self,
        token: Bytes,
        out: &mut bytes::BytesMut,
    ) -> minibroker_net::Next {
        let answered = self
            .sasl_authenticate(SaslAuthenticateRequest::default().with_auth_bytes(token))
            .await;
        if answered.close {
            return minibroker_net::Next::Close;
        }
        if self.session.lets_through() {
            self.raw_sasl = false;
        }
        let reply = answered.answer.auth_bytes;
        // SCRAM's and PLAIN's tokens are far below 4 GiB.
        let _fits =
            minibroker_net::framing::put_frame(out, &reply, minibroker_net::framing::MAX_LENGTH);
        minibroker_net::Next::Continue
    }
}
