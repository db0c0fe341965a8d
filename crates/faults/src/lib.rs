//! A fault-injecting TCP proxy for minibroker's native protocol and for Kafka's ([`kafka`]).
//!
//! The proxy sits between clients and a broker and forwards whole frames, so it can lose exactly
//! one request or one acknowledgement — the faults an idempotent producer must survive:
//!
//! | fault | what happens | what the producer sees |
//! |---|---|---|
//! | drop request | a request never reaches the broker | a timeout; it resends, the broker ACCEPTS |
//! | drop response | the broker stored the batch, the ack is lost | a timeout; it resends, the broker says DUPLICATE |
//! | delay | a frame (and all behind it) is held up | slow answers, maybe timeouts |
//! | reset | after forwarding a request, both connections are reset | every in-flight batch lost; reconnect, resend |
//! | hold | a request is held back and released later, even after the client gave up on it | a stale retry reaching the broker after newer batches |
//! | duplicate | a request reaches the broker twice in a row; the client gets the first answer | nothing: the broker judges the copy a DUPLICATE |
//!
//! Besides the seeded faults, [`Proxy::hold_next`] holds the next request of one Kafka API until
//! [`Proxy::release_held`], so a test can put one request exactly where it wants: past the
//! transaction end that follows it, say (KAFKA-17754's shape).
//!
//! Every fault has a rate (probability per frame, from a seeded generator, so a run can be
//! repeated) and/or a schedule of frame numbers (counted per direction across all connections,
//! starting at 1) for tests that need one exact fault.

mod config;
mod embedded;
pub mod kafka;
mod proxy;
mod rng;
mod routes;

pub use config::{Fault, FaultConfig, FaultError};
pub use embedded::EmbeddedProxy;
pub use kafka::KafkaAware;
pub use proxy::{FaultCounts, Proxy};
pub use rng::SplitMix64;
