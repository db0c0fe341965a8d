//! minibroker's connection machinery: the accept loop, the connection loop every protocol
//! shares, the connection limits, the drain, and TLS sessions. It knows nothing of the broker:
//! what a connection says is a [`FrontEnd`]'s business, and the process that owns the listeners
//! (`minibroker_host`) brings the front ends, the limits and the TLS configuration.
//!
//! Every protocol minibroker speaks frames its messages the same way — a 4-byte big-endian
//! length, then the body — so one connection loop serves them all: limits, pipelined answers,
//! idle and write timeouts, and a graceful drain with a deadline.
//!
//! # Layout
//! - [`FrontEnd`] — the seam a protocol plugs into; `connection` — one connection's loop.
//! - [`serve`] — the accept loop, the connection limit and the drain; [`Slots`] — what every
//!   listener of a process shares; [`Limits`] — what each connection is served under.
//! - [`framing`] — the length-prefixed frames (`minibroker_framing`).
//! - [`quotas`] — connections per client address (and, for the host, per principal).
//! - [`tls`] — what a TLS session gives the accept loop.
//!
//! # Example
//! A listener answering every frame by echoing it:
//! ```no_run
//! use bytes::{Bytes, BytesMut};
//! use minibroker_net::framing::{FramingError, MAX_LENGTH, put_frame};
//! use minibroker_net::{FrontEnd, Limits, Next, Slots};
//! use std::sync::Arc;
//! use std::time::Duration;
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
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let limits = Limits {
//!     max_connections: 100,
//!     max_frame_bytes: 1 << 20,
//!     max_in_flight: 16,
//!     idle_timeout: Duration::from_secs(600),
//!     write_timeout: Duration::from_secs(30),
//!     authentication_timeout: Duration::from_secs(10),
//!     drain_timeout: Duration::from_secs(5),
//! };
//! let slots = Arc::new(Slots::new(limits.max_connections, None));
//! let shutdown = std::future::pending::<()>(); // a real server stops on a signal
//! minibroker_net::serve(listener, None, slots, limits, shutdown, |_peer| Echo).await;
//! # Ok(()) }
//! ```

mod connection;
mod front_end;
mod listener;
pub mod quotas;
mod slots;
pub mod tls;

/// The length-prefixed frames of every connection (`minibroker_framing`).
pub use minibroker_framing as framing;

pub use front_end::{FrontEnd, Next, NotStored, Peer};
pub use listener::serve;
pub use slots::{ConnectionCounts, Limits, Slots};
/// The TLS library the listeners use.
pub use tokio_rustls::rustls;
