//! Why an append or a read was refused.

use thiserror::Error;

/// An append or read the log cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LogError {
    /// A batch must hold at least one record and fit one 4 GiB buffer.
    #[error(
        "a batch must hold at least one record and be smaller than 4 GiB, got {bytes} bytes and {records} records"
    )]
    BadBatch {
        /// The batch's size.
        bytes: usize,
        /// Its record count.
        records: u32,
    },
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
    /// A write, sync or read of the log's files failed; after a failed write or sync the
    /// partition is read-only.
    #[error("storage error: {0}")]
    Storage(String),
    /// The partition stopped taking writes after a storage error.
    #[error("the partition is read-only after a storage error: {0}")]
    ReadOnly(String),
    /// The files on disk cannot be served as a log (a damaged sealed segment, a missing one).
    #[error("the log's files are damaged: {0}")]
    Damaged(String),
}
