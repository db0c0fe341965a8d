//! The minibroker broker: its core and its TCP server.
//!
//! # Layout
//! - [`Broker`] — topics → partitions → producer state + log; one synchronous `handle` per request.
//! - [`run`] / [`serve`] — the tokio server over an already-bound listener and a shutdown future:
//!   connection limit, pipelined answers, idle timeout, graceful drain with a deadline.
//! - [`Config`] — every limit, from TOML.
//!
//! # Example
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("listening on {}", listener.local_addr()?);
//! minibroker_server::run(listener, minibroker_server::Config::default(), async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await?;
//! # Ok(()) }
//! ```

mod broker;
pub mod budget;
mod config;
mod connection;
mod error;
mod listener;
pub mod producers;
pub mod topics;

pub use broker::{Broker, ConnectionCounts, OutcomeCounts};
pub use budget::{BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, accounted_bytes};
pub use config::{Config, TopicConfig};
pub use error::{RequestError, ServerError};
pub use listener::{run, serve};
