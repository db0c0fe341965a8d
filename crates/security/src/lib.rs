//! minibroker's authentication, in domain terms: the credentials a broker keeps and the server
//! side of the SASL mechanisms Kafka clients speak. No I/O on the network path: the listener
//! feeds it SaslAuthenticate tokens and sends back what it answers.
//!
//! # Layout
//! - [`scram`] — Kafka's SCRAM credential (salt, iterations, StoredKey, ServerKey) and its text
//!   form, the SCRAM-SHA-256/512 server exchange ([`ScramExchange`]) with Kafka's quirks, and
//!   PLAIN's message.
//! - [`users`] — the users file: every user's credentials, one line each, in Kafka's format.
//!
//! # Example
//! ```
//! use minibroker_security::{ScramCredential, ScramMechanism, Users};
//!
//! let mechanism = ScramMechanism::Sha256;
//! let mut users = Users::default();
//! users.set("alice", mechanism, ScramCredential::generate(mechanism, b"secret", 4096)?);
//! assert!(users.verify_plain("alice", b"secret"));
//! assert!(!users.verify_plain("alice", b"guess"));
//! assert!(users.to_text().contains("alice SCRAM-SHA-256 salt="));
//! # Ok::<(), minibroker_security::ScramError>(())
//! ```

pub mod scram;
pub mod users;

pub use scram::{
    Authenticated, DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramError,
    ScramExchange, ScramMechanism, parse_plain, server_nonce,
};
pub use users::{InvalidUserName, Users, UsersFileError, check_user_name};
