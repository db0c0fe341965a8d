//! Errors: [`RequestError`] for a request the broker refuses (it becomes an error response), and
//! [`ServerError`] for the server itself failing to start or run.

use minibroker_protocol::{ErrorCode, ErrorResponse};
use thiserror::Error;

/// A request the broker cannot serve. Each maps to one [`ErrorCode`] and is sent back as an
/// error response; the connection stays open.
#[derive(Debug, Error)]
pub enum RequestError {
    /// The request's body did not decode.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// Wrong protocol version.
    #[error("{0}")]
    UnsupportedVersion(String),
    /// No such topic, and auto-creation is off or does not apply (fetch, describe). Only valid
    /// names (at most 249 plain characters) get this far.
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
    /// A field out of range (negative id, epoch or sequence; a bad topic name).
    #[error("{0}")]
    InvalidInput(String),
    /// A produce request with no records.
    #[error("a produce request must carry at least one record")]
    EmptyBatch,
    /// A fetch offset the log does not hold.
    #[error("{0}")]
    OffsetOutOfRange(String),
    /// init-producer for an id the broker never issued.
    #[error("producer id {0} was never issued by this broker; ask for a new one with no id")]
    UnknownProducerId(i64),
    /// The epoch of this producer id cannot grow further.
    #[error("producer id {0} has reached the largest epoch; ask for a new producer id")]
    EpochExhausted(i64),
    /// A storage limit is reached.
    #[error("{0}")]
    StorageFull(String),
    /// The broker is stopping.
    #[error("the broker is shutting down")]
    ShuttingDown,
    /// Something inside the broker failed unexpectedly.
    #[error("internal error: {0}")]
    Internal(String),
}

impl RequestError {
    /// The wire code for this error.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Malformed(_) => ErrorCode::MalformedRequest,
            Self::UnsupportedVersion(_) => ErrorCode::UnsupportedVersion,
            Self::UnknownTopic(_) => ErrorCode::UnknownTopic,
            Self::PartitionOutOfRange { .. } => ErrorCode::PartitionOutOfRange,
            Self::InvalidInput(_) => ErrorCode::InvalidInput,
            Self::EmptyBatch => ErrorCode::EmptyBatch,
            Self::OffsetOutOfRange(_) => ErrorCode::OffsetOutOfRange,
            Self::UnknownProducerId(_) => ErrorCode::UnknownProducerId,
            Self::EpochExhausted(_) => ErrorCode::EpochExhausted,
            Self::StorageFull(_) => ErrorCode::StorageFull,
            Self::ShuttingDown => ErrorCode::ShuttingDown,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The error response sent for this error.
    #[must_use]
    pub fn to_response(&self) -> ErrorResponse {
        ErrorResponse::new(self.code(), self.to_string())
    }
}

impl From<minibroker_state::StateError> for RequestError {
    fn from(error: minibroker_state::StateError) -> Self {
        Self::InvalidInput(error.to_string())
    }
}

/// The server could not start or stopped on a failure of its own.
#[derive(Debug, Error)]
pub enum ServerError {
    /// Configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
}
