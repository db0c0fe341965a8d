//! minibroker's security, in domain terms: the credentials a broker keeps, the server side of
//! the SASL mechanisms Kafka clients speak, the ACLs that say who may do what, and certificates
//! for TLS. No I/O on the network path: the listener
//! feeds it SaslAuthenticate tokens and sends back what it answers.
//!
//! # Layout
//! - [`scram`] — Kafka's SCRAM credential (salt, iterations, StoredKey, ServerKey) and its text
//!   form, the SCRAM-SHA-256/512 server exchange ([`ScramExchange`]) with Kafka's quirks, and
//!   PLAIN's message.
//! - [`scram_client`] — the client side of the exchange, for minibroker's own clients.
//! - [`users`] — the users file: every user's credentials, one line each, in Kafka's format.
//! - [`acl`] — Kafka's authorisation model: ACLs, the ACLs file, and the decision with its
//!   reason ([`Authorizer`]).
//! - [`owners`] — which principal each producer id was issued to, kept across restarts.
//! - [`field`] — how a name a client chose (a principal, a resource) is written as one field of
//!   those files, whatever it holds.
//! - [`pki`] — certificates for TLS: an authority, server and client certificates.
//! - `file` — the files' reading and writing through `minibroker_storage` ([`FileError`]), and
//!   [`Reloading`], a file read again when it changes.
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

pub mod acl;
pub mod field;
mod file;
pub mod owners;
pub mod pki;
pub mod scram;
pub mod scram_client;
pub mod users;

pub use acl::{Acl, Acls, Authorizer, Decision, Operation, ResourceType};
pub use file::{FileError, Reloading};
pub use owners::{ProducerOwners, Use};
pub use scram::{
    Authenticated, DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramError,
    ScramExchange, ScramMechanism, parse_plain, server_nonce,
};
pub use scram_client::ScramClient;
pub use users::{InvalidUserName, Users, UsersFileError, check_user_name};
