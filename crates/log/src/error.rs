//! Why an append or a read was refused.

use thiserror::Error;

/// An append or read the log cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LogError {
    /// A batch must hold at least one record.
    #[error("a batch must hold at least one record")]
    EmptyBatch,
    /// A batch's records must fit one 4 GiB buffer.
    #[error("a batch's records must total less than 4 GiB")]
    BatchTooLarge,
    /// A read asked for an offset the log does not have.
    #[error(
        "offset {requested} is out of range: the log holds offsets {start} to {end} (exclusive)"
    )]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: i64,
        /// The first offset held.
        start: i64,
        /// The next offset to be written.
        end: i64,
    },
}
