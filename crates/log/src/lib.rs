//! Append-only partition logs.
//!
//! A [`PartitionLog`] stores batches in offset order. Each [`StoredBatch`] keeps its records and
//! the producer id, epoch and base sequence that wrote it: the log is the source of truth from
//! which producer state could be rebuilt, and it lets a verifier check exactly-once after the fact.
//!
//! Memory is proportional to what is stored: a batch's records are copied into one contiguous
//! buffer with a `u32` end position per record, so a record costs its bytes plus four.
//!
//! # Example
//! ```
//! use minibroker_log::{PartitionLog, ReadLimits, Writer};
//!
//! let mut log = PartitionLog::new();
//! let writer = Writer { producer_id: 1, epoch: 0, base_sequence: 0 };
//! let offset = log.append(writer, &[b"a".as_slice(), b"b"])?;
//! assert_eq!(offset, 0);
//! let read = log.read(1, ReadLimits::default())?;
//! assert_eq!(read[0].records, vec![bytes::Bytes::from_static(b"b")]);
//! # Ok::<(), minibroker_log::LogError>(())
//! ```

mod batch;
mod error;
mod partition;

pub use batch::{BatchSlice, StoredBatch, Writer};
pub use error::LogError;
pub use partition::{PartitionLog, ReadLimits};
