//! Errors: [`BrokerError`] for a request the broker core refuses, with an [`ErrorKind`] each front
//! end maps to its wire once; and [`ServerError`] for the server failing to start.

use minibroker_log::LogError;
use minibroker_records::RecordsError;
use minibroker_state::StateError;
use std::path::PathBuf;
use thiserror::Error;

/// A request the broker core cannot serve. The exactly-once rule's refusals (DUPLICATE and so
/// on) are outcomes, not errors.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// A topic name no topic can have; `name` is already quoted and cut short.
    #[error("invalid topic name {name}: use 1 to 249 of the characters A-Z a-z 0-9 . _ -")]
    InvalidTopicName {
        /// A short, escaped prefix of the name.
        name: String,
    },
    /// No such topic, and auto-creation is off or does not apply (fetch, describe).
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    /// The partition index is not below the topic's partition count.
    #[error("partition {partition} is out of range: topic {topic:?} has {count} partition(s)")]
    PartitionOutOfRange {
        /// Topic name.
        topic: String,
        /// Partition asked for.
        partition: u32,
        /// Partitions the topic has.
        count: u32,
    },
    /// A producer id, epoch or sequence outside its range.
    #[error(transparent)]
    InvalidField(#[from] StateError),
    /// A record batch that is damaged or not acceptable.
    #[error(transparent)]
    Batch(#[from] RecordsError),
    /// A batch larger than a fetch answer could hand back (see [`crate::batch_room`]).
    #[error(
        "a record batch of {bytes} bytes is larger than the {max} bytes accepted here (the broker's frame limit, or the topic's max.message.bytes)"
    )]
    BatchTooLarge {
        /// The batch's size.
        bytes: usize,
        /// The largest accepted.
        max: usize,
    },
    /// A control batch sent by a client: only the broker writes transaction markers.
    #[error("a control batch: transaction markers are written by the broker, not by producers")]
    ControlBatch,
    /// A batch that does not fit the producer's transaction on the partition (Kafka's
    /// INVALID_TXN_STATE): a transactional batch for a partition its transaction has not added,
    /// or a plain batch while its transaction is open there.
    #[error("producer {producer_id} at epoch {epoch}: {reason}")]
    InvalidTxnState {
        /// The producer id.
        producer_id: i64,
        /// Its epoch.
        epoch: i16,
        /// What does not fit.
        reason: &'static str,
    },
    /// A transactional batch for a partition its coordinator has not added to the producer's
    /// transaction at its epoch (KIP-890 part 1): Kafka's INVALID_TXN_STATE, or
    /// TRANSACTION_ABORTABLE to the Produce versions that know it.
    #[error(
        "producer {producer_id} at epoch {epoch}: the partition was not added to the producer's transaction"
    )]
    NotAddedToTransaction {
        /// The producer id.
        producer_id: i64,
        /// Its epoch.
        epoch: i16,
    },
    /// A transactional batch at an epoch whose abort reached the partition before any of the
    /// aborted transaction's batches did: it may be one of them, late, so none of that epoch is
    /// taken; the producer must move to a new epoch (Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER, on
    /// which clients bump their epoch, KIP-360).
    #[error(
        "producer {producer_id} at epoch {epoch}: a transaction of this epoch was aborted on the partition before any of its batches arrived, so a batch of it may still be on its way; move to a new epoch (InitProducerId)"
    )]
    AbortedEpoch {
        /// The producer id.
        producer_id: i64,
        /// Its epoch.
        epoch: i16,
    },
    /// A transaction marker older than the producer's epoch on the partition.
    #[error(
        "producer {producer_id}'s epoch on the partition is {current}, above the marker's {epoch}"
    )]
    MarkerFenced {
        /// The producer id.
        producer_id: i64,
        /// The marker's epoch.
        epoch: i16,
        /// The epoch on file.
        current: i16,
    },
    /// A fetch offset outside the partition's log.
    #[error(transparent)]
    Log(#[from] LogError),
    /// init-producer for an id the broker never issued, or has forgotten.
    #[error(
        "producer id {0} is not known to this broker (never issued, or forgotten); ask for a new one with no id"
    )]
    UnknownProducerId(i64),
    /// The epoch of this producer id cannot grow further.
    #[error("producer id {0} has reached the largest epoch; ask for a new producer id")]
    EpochExhausted(i64),
    /// Every producer id up to `i64::MAX` has been issued.
    #[error("every producer id has been issued")]
    ProducerIdsExhausted,
    /// A cluster's committed batch begins past the end of this broker's copy of its partition:
    /// one before it has not been placed (see `Broker::place_committed`).
    #[error(
        "topic {topic:?} partition {partition}: a committed batch at offset {base_offset}, past this broker's copy, which ends at {end}"
    )]
    CopyGap {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The copy's next offset.
        end: i64,
        /// Where the batch begins.
        base_offset: i64,
    },
    /// The storage budget cannot hold what the request would store.
    #[error("the broker's store is full ({limit} bytes); {refused} was not stored")]
    StoreFull {
        /// The limit (`max_stored_bytes`).
        limit: u64,
        /// What was refused, for people.
        refused: &'static str,
    },
    /// A topic setting that is unknown, or a value it cannot take.
    #[error("invalid topic setting {name}: {reason}")]
    InvalidConfig {
        /// The setting's name (quoted and cut short if it is not one).
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// CreateTopics for a topic that exists.
    #[error("topic {0:?} already exists")]
    TopicAlreadyExists(String),
    /// A partition count no topic may have.
    #[error("a topic needs 1 to {max} partitions, not {partitions}")]
    InvalidPartitions {
        /// Asked for.
        partitions: u32,
        /// `max_partitions_per_topic`.
        max: u32,
    },
    /// A topic asked to grow to no more partitions than it has (partitions are never removed).
    #[error("topic {topic:?} has {current} partitions; it can only grow, not to {asked}")]
    PartitionsNotIncreased {
        /// The topic.
        topic: String,
        /// Its partitions now.
        current: u32,
        /// Asked for.
        asked: u32,
    },
    /// The broker holds its maximum of topics.
    #[error("the broker holds its maximum of {0} topics")]
    TooManyTopics(usize),
    /// A new topic's partitions do not fit the broker-wide cap.
    #[error(
        "the broker holds {held} of its maximum of {max} partitions; a topic of {wanted} does not fit"
    )]
    TooManyPartitions {
        /// Partitions that exist.
        held: u32,
        /// `max_partitions`.
        max: u32,
        /// The new topic's partitions.
        wanted: u32,
    },
    /// A new topic's partitions would need more file descriptors than the process may open.
    #[error(
        "the broker holds {held} partitions, the most its open-file limit allows is {max}; a topic of {wanted} does not fit (raise the limit: ulimit -n)"
    )]
    TooManyDescriptors {
        /// Partitions that exist.
        held: u32,
        /// What the descriptor plan allows.
        max: u64,
        /// The new topic's partitions.
        wanted: u32,
    },
    /// A file of the data directory could not be written (the topic list, the producer-id
    /// reservation).
    #[error("storage error: {what}: {source}")]
    Storage {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A write to a partition that stopped taking writes after a storage error.
    #[error(
        "storage error: the partition is read-only after a storage error ({0}); restart the broker once the disk is fixed"
    )]
    ReadOnly(#[source] std::sync::Arc<LogError>),
}

/// What kind of refusal a [`BrokerError`] is: what a front end maps to its error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A field outside its range, or a bad topic name.
    InvalidInput,
    /// No such topic.
    UnknownTopic,
    /// No such partition.
    PartitionOutOfRange,
    /// A record batch with damaged bytes (length, CRC, encoding).
    CorruptBatch,
    /// A well-formed record batch that is not acceptable.
    InvalidBatch,
    /// A record batch larger than the broker accepts.
    BatchTooLarge,
    /// A fetch offset outside the log.
    OffsetOutOfRange,
    /// An unknown producer id.
    UnknownProducerId,
    /// An epoch that cannot be bumped.
    EpochExhausted,
    /// A storage, topic, partition or id limit.
    StorageFull,
    /// The topic to create exists.
    TopicAlreadyExists,
    /// A partition count outside the allowed range.
    InvalidPartitions,
    /// A disk write, sync or read failed; the partition is read-only.
    Storage,
    /// A batch outside the producer's transaction.
    InvalidTxnState,
    /// A transactional batch for a partition not added to its transaction.
    NotAddedToTransaction,
    /// A transactional batch of an epoch that must not write any more on the partition.
    AbortedEpoch,
    /// A marker of an older producer epoch.
    ProducerFenced,
}

impl BrokerError {
    /// The kind of refusal, for the front end's error code.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidTopicName { .. } | Self::InvalidField(_) | Self::InvalidConfig { .. } => {
                ErrorKind::InvalidInput
            }
            Self::UnknownTopic(_) => ErrorKind::UnknownTopic,
            Self::ReadOnly(first) if first.is_deleted() => ErrorKind::UnknownTopic,
            Self::Log(error) if error.is_deleted() => ErrorKind::UnknownTopic,
            Self::Log(LogError::Deleted) => ErrorKind::UnknownTopic,
            Self::PartitionOutOfRange { .. } => ErrorKind::PartitionOutOfRange,
            Self::Batch(RecordsError::Corrupt(_) | RecordsError::Decode(_)) => {
                ErrorKind::CorruptBatch
            }
            Self::Batch(_) | Self::Log(LogError::BadBatch { .. }) => ErrorKind::InvalidBatch,
            Self::BatchTooLarge { .. } => ErrorKind::BatchTooLarge,
            Self::ControlBatch => ErrorKind::InvalidBatch,
            Self::InvalidTxnState { .. } => ErrorKind::InvalidTxnState,
            Self::AbortedEpoch { .. } => ErrorKind::AbortedEpoch,
            Self::NotAddedToTransaction { .. } => ErrorKind::NotAddedToTransaction,
            Self::MarkerFenced { .. } => ErrorKind::ProducerFenced,
            Self::Log(LogError::OffsetOutOfRange { .. }) => ErrorKind::OffsetOutOfRange,
            Self::UnknownProducerId(_) => ErrorKind::UnknownProducerId,
            Self::TopicAlreadyExists(_) => ErrorKind::TopicAlreadyExists,
            Self::InvalidPartitions { .. } | Self::PartitionsNotIncreased { .. } => {
                ErrorKind::InvalidPartitions
            }
            Self::EpochExhausted(_) => ErrorKind::EpochExhausted,
            Self::Storage { .. }
            | Self::CopyGap { .. }
            | Self::ReadOnly(_)
            | Self::Log(LogError::Storage(_) | LogError::ReadOnly(_) | LogError::Damaged(_)) => {
                ErrorKind::Storage
            }
            Self::ProducerIdsExhausted
            | Self::StoreFull { .. }
            | Self::TooManyTopics(_)
            | Self::TooManyPartitions { .. }
            | Self::TooManyDescriptors { .. } => ErrorKind::StorageFull,
        }
    }
}

/// What is wrong with a data directory or one of its files; see [`ServerError::DataDir`].
#[derive(Debug, Error)]
pub enum DataDirProblem {
    /// The file system refused an operation.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A partition's files do not form a log that can be served.
    #[error(transparent)]
    Log(#[from] LogError),
    /// A checksummed file that does not open.
    #[error(transparent)]
    Sealed(#[from] minibroker_log::sealed::SealError),
    /// A file's content cannot be what the file holds.
    #[error("{0}")]
    Content(String),
}

impl ServerError {
    /// [`ServerError::DataDir`] for `path`.
    pub fn data_dir(path: impl Into<PathBuf>, problem: impl Into<DataDirProblem>) -> Self {
        Self::DataDir {
            path: path.into(),
            problem: problem.into(),
        }
    }

    /// [`ServerError::DataDir`] for `path`, where `what` failed with `source`.
    pub fn data_dir_io(
        path: impl Into<PathBuf>,
        what: &'static str,
        source: std::io::Error,
    ) -> Self {
        Self::data_dir(path, DataDirProblem::Io { what, source })
    }
}

impl From<String> for DataDirProblem {
    fn from(content: String) -> Self {
        Self::Content(content)
    }
}

impl From<&str> for DataDirProblem {
    fn from(content: &str) -> Self {
        Self::Content(content.to_owned())
    }
}

/// The server could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    /// A configuration value that makes no sense.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The configuration file could not be read.
    #[error("cannot read {path}: {source}")]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The configuration is not valid TOML, or has unknown keys.
    #[error("invalid configuration{}: {source}", .path.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default())]
    ParseConfig {
        /// The file, if it came from one.
        path: Option<PathBuf>,
        /// What is wrong.
        source: toml::de::Error,
    },
    /// The data directory cannot be used: its files cannot be read or written, or they do not
    /// form a log that can be served.
    #[error("cannot use the data directory {path}: {problem}")]
    DataDir {
        /// The directory, or the file in it.
        path: PathBuf,
        /// What is wrong.
        #[source]
        problem: DataDirProblem,
    },
    /// A topic declared in the configuration cannot be created.
    #[error("invalid configuration: declared topic {name:?}: {source}")]
    DeclaredTopic {
        /// The topic.
        name: String,
        /// Why.
        source: BrokerError,
    },
}

/// Characters of client input quoted in an error message, at most.
const QUOTED_CHARS: usize = 64;

/// `text` for an error message: escaped, and cut to its first few characters with its length, so
/// an error about a hostile input is never large.
#[must_use]
pub fn quote_prefix(text: &str) -> String {
    let mut chars = text.chars();
    let prefix: String = chars.by_ref().take(QUOTED_CHARS).collect();
    if chars.next().is_none() {
        format!("{prefix:?}")
    } else {
        format!("{prefix:?}... ({} bytes)", text.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_escapes_and_cuts_long_input() {
        assert_eq!(quote_prefix("ok"), "\"ok\"");
        let hostile = "\u{1}".repeat(1 << 20);
        let quoted = quote_prefix(&hostile);
        assert!(quoted.len() < 500, "{}", quoted.len());
        assert!(quoted.ends_with("(1048576 bytes)"), "{quoted}");
        assert!(quoted.starts_with("\"\\u{1}"), "{quoted}");
    }
}
