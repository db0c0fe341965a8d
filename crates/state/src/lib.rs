//! The exactly-once rule of minibroker.
//!
//! Every produce request carries a producer id, an epoch and a per-partition sequence number. The
//! broker, not the producer, removes duplicates: [`ProducerStateManager`] answers each request
//! [`Outcome::Accepted`], [`Outcome::Duplicate`], [`Outcome::OutOfOrder`] or
//! [`Outcome::FencedEpoch`] before anything is appended, and only an accepted request changes the
//! stored state.
//!
//! # Layout
//! - [`decide`] — the rule itself, a pure function over (stored entry, incoming batch).
//! - [`ProducerEntry`] — what is remembered per (partition, producer): epoch and last 5 batches.
//! - [`decide_and_record`] — the rule and its bookkeeping on one entry, wherever entries are
//!   kept (the manager's shards, or the cluster's rows).
//! - [`ProducerStateManager`] — the entries, sharded by partition behind `std` mutexes, with an
//!   append closure run under the lock so validate-and-append is atomic.
//! - [`SequenceRange`] — the sequences one batch occupies, with wrap-around after `i32::MAX`.
//! - [`PartitionTransactions`] — a partition's open and aborted transactions and its last stable
//!   offset; [`ProducerStateManager::end_transaction`] records the markers that end them.
//! - `snapshot` — a partition's producer state as bytes, and back (the snapshot files).
//!
//! # Example
//! ```
//! use minibroker_state::{BatchHeader, Outcome, ProducerStateManager, SequenceRange};
//!
//! let mgr = ProducerStateManager::new();
//! let mut log: Vec<&str> = Vec::new();
//! let header = BatchHeader::new(7, 0, 0, SequenceRange::single(0)?)?;
//! for _attempt in 0..2 {
//!     // The second attempt is a retry: it is acknowledged with the original offset.
//!     let verdict = mgr.append_batch(&header, |_| {
//!         log.push("record");
//!         Ok::<_, std::convert::Infallible>(log.len() as i64 - 1)
//!     });
//!     println!("{:?}", verdict);
//! }
//! assert_eq!(log.len(), 1);
//! # Ok::<(), minibroker_state::StateError>(())
//! ```

mod entry;
mod error;
mod manager;
mod rule;
mod sequence;
mod snapshot;
mod transactions;

pub use entry::{BatchMetadata, CACHED_BATCHES, ProducerEntry};
pub use error::StateError;
pub use manager::{
    BatchHeader, MarkerVerdict, NewEntry, PartitionId, ProducerPage, ProducerStateManager,
    ProducerView, Verdict, decide_and_record, default_shard_count,
};
pub use rule::{Decision, Outcome, decide};
pub use sequence::{SequenceRange, next_sequence};
pub use snapshot::{Snapshot, SnapshotError, decode_snapshot, encode_snapshot};
pub use transactions::{AbortedTransaction, PartitionTransactions};
