//! The minibroker broker core: topics, partitions, producer ids, the storage budget,
//! durability and the data directory, in domain terms. It knows no wire protocol and no socket:
//! the front ends (`minibroker_native`, `minibroker_kafka`) translate their wire onto it, and the
//! host (`minibroker_host`) runs its maintenance and serves it.
//!
//! # Layout
//! - [`Broker`] — topics → partitions → producer state + log: produce (the exactly-once rule,
//!   then the append, under one lock), fetch, offsets, producer ids, topic administration; its
//!   `durability` recovers producer state at start, snapshots it, and runs retention and expiry.
//! - `Partition` — a partition's log, its group commit of fsyncs (`group_commit`) and its one
//!   health state; `topics` — the registry of topics and their partitions; `topic_settings` — a
//!   topic's own settings (Kafka's dynamic topic configs) and their file.
//! - `producers` — producer ids and epochs handed out by InitProducerId; `snapshot` — a
//!   partition's producer state taken under its locks and written later; `signal` — the wake-up
//!   of fetches waiting for a partition's next append.
//! - [`Unacknowledged`] — one connection's produces whose answers wait for their batches to be
//!   stored, and the one `commit` step that stores them.
//! - [`budget`] — what everything a client makes the broker keep costs against the storage limit.
//! - [`BrokerConfig`] — the core's section of the configuration: every limit it enforces.
//! - [`stats`] — the counters and latency histograms behind the metrics.
//! - [`data_dir`] — a durable broker's directory: topics, producer-id reservations, and the
//!   partitions' segment files (`minibroker_log`); [`data_dir_check`] — `minibroker check-data`'s reading
//!   of it; [`descriptors`] — the open-file plan.
//!
//! # Example
//! ```
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use minibroker_broker::{Broker, BrokerConfig, Outcome, Unacknowledged};
//! use minibroker_records::{NewRecord, Writer, encode};
//!
//! let broker = Broker::new(&BrokerConfig::default())?;
//! let producer = broker.init_producer(None)?;
//! let writer = Writer { producer_id: producer.producer_id, epoch: producer.epoch, base_sequence: 0 };
//! let batch = encode(writer, &[NewRecord::value("hello")], 0)?;
//! let mut unacknowledged = Unacknowledged::default();
//! let first = broker.produce(&mut unacknowledged, "orders", 0, &batch)?;
//! let retry = broker.produce(&mut unacknowledged, "orders", 0, &batch)?;
//! unacknowledged.commit().await?; // before either verdict is sent
//! assert_eq!((first.outcome, retry.outcome), (Outcome::Accepted, Outcome::Duplicate));
//! # Ok(()) }
//! ```

mod broker;
pub mod budget;
mod clock;
mod config;
mod counters;
pub mod data_dir;
pub mod data_dir_check;
pub mod descriptors;
mod error;
mod group_commit;
mod partition;
mod producers;
mod signal;
mod snapshot;
pub mod stats;
mod topic_settings;
mod topics;
mod unacknowledged;

pub use broker::{
    Broker, Fetched, HIGH_WATERMARK, Isolation, MAX_DESCRIBE_PAGE, PartitionMetrics,
    PartitionSummary, Placed, Produced, ProducerIdentity, TopicSummary,
};
pub use budget::{BATCH_OVERHEAD_BYTES, StorageBudget, accounted_bytes};
pub use config::{
    BrokerConfig, DEFAULT_MAX_FRAME_BYTES, FlushPolicy, MAX_TIMEOUT_MS, TopicConfig, batch_room,
};
pub use counters::OutcomeCounts;
pub use error::{BrokerError, DataDirProblem, ErrorKind, ServerError, quote_prefix};
pub use minibroker_state::{Outcome, ProducerPage, ProducerView, Verdict};
pub use producers::FIRST_ISSUED_ID;
pub use signal::{AppendSignal, AppendWait};
pub use topic_settings::configs::{ConfigEntry, ConfigSource, ConfigType};
pub use topic_settings::{Cleanup, Compaction, Overrides, SettingChange, TopicSettings};
pub use topics::{MAX_TOPIC_NAME_LEN, validate_topic_name};
pub use unacknowledged::Unacknowledged;
