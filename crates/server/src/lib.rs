//! The minibroker broker: its core and its TCP server.
//!
//! # Layout
//! - [`Broker`] — the core: topics → partitions → producer state + log, in domain terms (a topic
//!   name, a partition, a record batch, a [`Verdict`], a [`BrokerError`]); no wire type appears in
//!   its API. Each front end is a thin translation onto it.
//! - [`FrontEnd`] — what a wire protocol plugs into the shared connection machinery; `native` is
//!   the native protocol's: decode, call the core, encode.
//! - [`run`] / [`serve`] — the tokio server over an already-bound listener and a shutdown future:
//!   connection limit, pipelined answers, idle and write timeouts, graceful drain with a deadline.
//! - [`budget`] — what everything a client makes the broker keep costs against the storage limit.
//! - [`Config`] — every limit, from TOML.
//! - [`stats`] — the counters and latency histograms behind the metrics.
//! - [`groups`] — the consumer-group coordinator and committed offsets (Kafka's classic
//!   protocol, in domain terms).
//! - [`data_dir`] — a durable broker's directory: topics, producer-id reservations, and the
//!   partitions' segment files (`minibroker_log`); `flush` — group commit of fsyncs.
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
pub mod check;
mod clock;
mod config;
mod connection;
mod counters;
pub mod data_dir;
pub mod descriptors;
mod embedded;
mod error;
mod flush;
mod front_end;
pub mod groups;
mod listener;
mod native;
mod producers;
mod signal;
pub mod stats;
mod topics;

pub use broker::{
    Broker, Fetched, MAX_DESCRIBE_PAGE, PartitionMetrics, PartitionSummary, ProducerIdentity,
    TopicSummary,
};
pub use budget::{BATCH_OVERHEAD_BYTES, accounted_bytes};
pub use config::{Config, FlushPolicy, TopicConfig, batch_room};
pub use counters::{ConnectionCounts, OutcomeCounts};
pub use embedded::EmbeddedBroker;
pub use error::{BrokerError, ErrorKind, ServerError};
pub use front_end::{FrontEnd, Next};
pub use listener::{run, serve, serve_front_end};
pub use minibroker_state::{Outcome, ProducerPage, ProducerView, Verdict};
pub use producers::FIRST_ISSUED_ID;
pub use signal::{AppendSignal, AppendWait};
pub use topics::{MAX_TOPIC_NAME_LEN, TopicCache};
