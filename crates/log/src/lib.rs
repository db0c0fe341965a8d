//! Append-only partition logs of Kafka v2 record batches.
//!
//! A [`PartitionLog`] stores batches in offset order, each exactly as its producer sent it,
//! stamped with its base offset (see `minibroker_records`). The stored batch carries its
//! producer id, epoch and base sequence in its header, so the log alone says which sequences
//! every producer used: a verifier can check exactly-once after the fact, and recovery can
//! rebuild producer state from it. Reads hand out whole stored batches; whoever needs the records
//! decodes them.
//!
//! Memory is what is stored: batch bytes are copied into large chunks, and each batch costs a
//! small index entry beside its bytes.
//!
//! # Example
//! ```
//! use minibroker_log::{PartitionLog, ReadLimits};
//! use minibroker_records::{NewRecord, Writer, encode, inspect};
//!
//! let writer = Writer { producer_id: 1, epoch: 0, base_sequence: 0 };
//! let batch = encode(writer, &[NewRecord::value("a"), NewRecord::value("b")], 0)?;
//! let mut log = PartitionLog::new();
//! assert_eq!(log.append(&batch, inspect(&batch)?.record_count)?, 0);
//! let read = log.read(1, ReadLimits::default())?;
//! assert_eq!(minibroker_records::base_offset(&read[0]), 0); // the whole batch holding offset 1
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
mod error;
mod partition;

pub use batch::StoredBatch;
pub use error::LogError;
pub use partition::{PartitionLog, ReadLimits};
