//! A client for minibroker.
//!
//! # Layout
//! - [`Client`] — one TCP connection; requests are pipelined and matched to responses by
//!   correlation id, each with a timeout.
//! - [`Producer`] — an idempotent producer: gets a producer id and epoch, numbers batches per
//!   partition, keeps up to five in flight, and after a timeout or a dropped connection reconnects
//!   and resends the *same* batches with the *same* sequences, counting DUPLICATE as success.
//!
//! # Example
//! ```no_run
//! use minibroker_client::{Producer, ProducerConfig};
//!
//! # async fn example() -> Result<(), minibroker_client::ProducerError> {
//! let mut producer = Producer::connect("127.0.0.1:9092", ProducerConfig::default()).await?;
//! let ack = producer.send("orders", 0, vec!["hello".into()]).await?;
//! println!("stored at offset {:?}", ack.base_offset);
//! # Ok(()) }
//! ```

mod client;
mod error;
mod producer;

pub use client::{Client, ClientConfig, PendingResponse};
pub use error::{ClientError, ProducerError};
pub use minibroker_protocol as protocol;
pub use producer::{Ack, Producer, ProducerConfig, ProducerStats};
