//! minibroker's host: the listeners, the connection loop every protocol shares, and the
//! lifecycle of one broker process.
//!
//! Every protocol minibroker speaks frames its messages the same way — a 4-byte big-endian
//! length, then the body — so one connection loop serves them all: limits, pipelined answers,
//! idle and write timeouts, and a graceful drain with a deadline. A [`FrontEnd`] is what differs:
//! it turns one request frame into its answer frames, calling the broker core in between
//! (`minibroker_native`, `minibroker_kafka`).
//!
//! # Layout
//! - [`Host`] — start (the broker core and its group coordinator, and their clocks), add
//!   listeners, mark ready, stop: one lifecycle for `serve`, the embedded brokers, demo and
//!   bench.
//! - [`Node`] — what a front end is made from and the metrics read: the core, the coordinator,
//!   connection slots and counts, request timings, readiness.
//! - [`FrontEnd`] — the seam a protocol plugs into; `connection` — one connection's loop;
//!   `listener` — the accept loop, the connection limit and the drain.
//! - [`framing`] — the length-prefixed frames (`minibroker_framing`).
//! - [`timings`] — request latencies per connection, summed for the metrics.
//! - [`quotas`] — connections per client address and per principal.
//! - [`login`] — SASL logins: the settings and one connection's [`login::Session`].
//! - [`access`] — authorisation: the ACLs and producer-id owners, and one connection's
//!   [`access::Guard`].
//! - [`tls`] — TLS on a listener: certificates, client certificates and their names.
//!
//! # Example
//! A host serving a protocol that answers every frame by echoing it:
//! ```no_run
//! use bytes::{Bytes, BytesMut};
//! use minibroker_net::framing::{FramingError, MAX_LENGTH, put_frame};
//! use minibroker_net::{FrontEnd, Host, Next};
//!
//! struct Echo;
//!
//! impl FrontEnd for Echo {
//!     async fn answer(&mut self, frame: Bytes, out: &mut BytesMut) -> Next {
//!         match put_frame(out, &frame, MAX_LENGTH) {
//!             Ok(()) => Next::Continue,
//!             Err(_) => Next::Close,
//!         }
//!     }
//!
//!     fn framing_error(&mut self, _: &FramingError, _: &mut BytesMut) {}
//! }
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let host = Host::start(&minibroker_net::Config::default())?;
//! let listener = Host::bind("127.0.0.1:0".parse()?).await?;
//! println!("listening on {}", host.serve(listener, |_node, _peer| Echo)?);
//! host.set_ready();
//! tokio::signal::ctrl_c().await?;
//! host.stop().await?;
//! # Ok(()) }
//! ```

pub mod access;
mod config;
mod connection;
mod front_end;
mod host;
mod listener;
pub mod login;
mod node;
pub mod quotas;
pub mod timings;
pub mod tls;

/// The length-prefixed frames of every connection (`minibroker_framing`).
pub use minibroker_framing as framing;

pub use config::{ClientAuth, Config, NetConfig, SASL_MECHANISMS, SecurityProtocol};
pub use front_end::{FrontEnd, Next, Peer};
pub use host::{Host, HostError};
pub use login::LoginCounts;
pub use node::{ConnectionCounts, Node};
/// The TLS library the listeners use (its configuration types appear in [`Host::serve_with`]).
pub use tokio_rustls::rustls;
