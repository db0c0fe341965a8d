//! Why an append or a read was refused.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

/// A failed operation on a log's files: what was being done, in which directory, and the I/O
/// error that stopped it.
#[derive(Debug, Error)]
#[error("{what} in {} failed: {source}", .dir.display())]
pub struct StorageFailure {
    /// What was being done ("writing batches", "syncing a segment").
    pub what: String,
    /// The log's directory.
    pub dir: PathBuf,
    /// Why it failed.
    #[source]
    pub source: io::Error,
}

impl StorageFailure {
    /// `what` failed in `dir` with `source`.
    #[must_use]
    pub fn new(what: impl Into<String>, dir: impl Into<PathBuf>, source: io::Error) -> Self {
        Self {
            what: what.into(),
            dir: dir.into(),
            source,
        }
    }
}

/// An append or read the log cannot serve.
#[derive(Debug, Clone, Error)]
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
    Storage(#[source] Arc<StorageFailure>),
    /// The partition stopped taking writes after a storage error: the first one.
    #[error("the partition is read-only after a storage error: {0}")]
    ReadOnly(#[source] Arc<LogError>),
    /// The files on disk cannot be served as a log (a damaged sealed segment, a missing one).
    #[error("the log's files are damaged: {0}")]
    Damaged(String),
    /// The partition's topic was deleted: its files are gone, and a topic re-created under the
    /// same name owns the directory now.
    #[error("the partition's topic was deleted")]
    Deleted,
}

impl LogError {
    /// [`Self::Storage`]: `what` failed in `dir` with `source`.
    #[must_use]
    pub fn storage(what: impl Into<String>, dir: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Storage(Arc::new(StorageFailure::new(what, dir, source)))
    }

    /// Whether it says the partition's topic was deleted (itself, or as a read-only reason).
    #[must_use]
    pub fn is_deleted(&self) -> bool {
        match self {
            Self::Deleted => true,
            Self::ReadOnly(first) => first.is_deleted(),
            _ => false,
        }
    }
}
