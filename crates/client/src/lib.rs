//! A client for minibroker.
//!
//! # Layout
//! - [`Client`] — one TCP connection; requests are pipelined and matched to responses by
//!   correlation id, each with a timeout.
//! - [`Producer`] — an idempotent producer: gets a producer id and epoch, numbers records per
//!   partition (a batch of `n` records spans `n` sequences), encodes each batch once as a Kafka v2
//!   record batch, keeps up to five in flight, and after a timeout or a dropped connection
//!   reconnects and resends the *same* batches, counting DUPLICATE as success.
//! - [`PartitionReader`] — every record of a partition from an offset to its end, decoded.
//! - `security` — the connection's TLS and login, for a native listener that asks for them.
//!
//! # Example
//! ```no_run
//! use minibroker_client::{NewRecord, Producer, ProducerConfig};
//!
//! # async fn example() -> Result<(), minibroker_client::ProducerError> {
//! let mut producer = Producer::connect("127.0.0.1:9092", ProducerConfig::default()).await?;
//! let record = NewRecord::value("hello").with_key("user-1").with_header("source", "docs");
//! let ack = producer.send("orders", 0, vec![record]).await?;
//! println!("stored at offset {:?}", ack.base_offset);
//! # Ok(()) }
//! ```

mod client;
mod error;
mod producer;
mod reader;
mod security;

pub use client::{Client, ClientConfig, PendingResponse};
pub use error::{ClientError, ConnectionEnd, ProducerError};
pub use minibroker_protocol as protocol;
pub use minibroker_records::{ConsumedRecord, DecodedBatch, NewRecord};
pub use producer::{Ack, Producer, ProducerConfig, ProducerStats};
pub use reader::PartitionReader;
pub use security::{ClientTls, Credentials, LoginMechanism};
