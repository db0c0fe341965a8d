//! Append-only partition logs of Kafka v2 record batches.
//!
//! A [`PartitionLog`] stores batches in offset order, each exactly as its producer sent it,
//! stamped with its base offset (see `minibroker_records`). The stored batch carries its
//! producer id, epoch and base sequence in its header, so the log alone says which sequences
//! every producer used: a verifier can check exactly-once after the fact, and recovery can
//! rebuild producer state from it. Reads hand out whole stored batches; whoever needs the records
//! decodes them.
//!
//! A [`PartitionLog`] is either a [`MemoryLog`] (batch bytes copied into large chunks, each batch
//! a small index entry beside its bytes) or a [`DurableLog`] (segment files in a directory, with
//! crash recovery). Every file operation of the durable log goes through the
//! [`minibroker_storage::Storage`] trait, so tests can run it on
//! [`minibroker_storage::sim::SimStorage`], which forgets unsynced bytes on a simulated crash.
//!
//! # Layout
//! - `memory` — the in-memory log; `durable` and `segment` — the segment files, their index and
//!   recovery; `partition` — the enum the broker uses.
//!   `recovery` — how a durable log is read back from its directory; `offset_files` — the
//!   start and cleaner offsets saved beside the segments; `names` — the files' names.
//! - `open_files` — sealed segments' files, opened when read, a bounded number at a time.
//! - `cleaner` — log compaction's rule, shared by both logs; `batch` — checks and lookups on
//!   one stored batch; [`Health`] — a partition's one health state.
//! - [`dir_check`] — `minibroker check-data`'s offline reading of a partition's directory.
//!
//! # Example
//! ```
//! use minibroker_log::{PartitionLog, ReadLimits};
//! use minibroker_records::{NewRecord, Writer, encode, inspect};
//!
//! let writer = Writer { producer_id: 1, epoch: 0, base_sequence: 0 };
//! let batch = encode(writer, &[NewRecord::value("a"), NewRecord::value("b")], 0)?;
//! let mut log = PartitionLog::new();
//! assert_eq!(log.append(&batch, inspect(&batch)?.record_count, 0)?.base_offset, 0);
//! let read = log.read(1, ReadLimits::default())?;
//! assert_eq!(minibroker_records::base_offset(&read[0]), 0); // the whole batch holding offset 1
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
mod cleaner;
pub mod dir_check;
mod durable;
mod error;
mod health;
mod memory;
mod names;
mod offset_files;
mod open_files;
mod partition;
mod recovery;
/// The checksummed envelope of the small files beside the segments (see
/// [`minibroker_envelope`]).
pub use minibroker_envelope as sealed;
mod segment;
/// The disk the log writes to (see [`minibroker_storage`]).
use minibroker_storage as storage;

pub use batch::first_record_at_or_after;
pub use cleaner::{CleanRules, CleanStats, OffsetMap, Throttle};
pub use durable::{
    Appended, CleanedUp, DurableClean, DurableCleaned, DurableLog, MAX_PENDING_BYTES, Opened,
    PREALLOCATE_BYTES, Retention, SegmentConfig, SnapshotStore, SyncPoint, WriteBack,
};
pub use error::{LogError, StorageFailure};
pub use health::Health;
pub use memory::{MemoryClean, MemoryCleaned, MemoryLog, ReadLimits, Released};
pub use open_files::OpenFiles;
pub use partition::{CleanPlan, Cleaned, PartitionLog};
