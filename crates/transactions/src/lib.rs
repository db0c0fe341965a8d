//! minibroker's transaction coordinator (KIP-98), beside the group coordinator: the state of one
//! transactional id and every transition Kafka's coordinator allows it (Apache Kafka's
//! `TransactionMetadata`), as a pure type with no I/O; the coordinator that persists each
//! transition before it is answered; and the service that writes the markers a Prepare* state
//! calls for to the partitions, settles the groups' offsets, completes it, and keeps the clock.
//!
//! # Layout
//! - [`TxnState`] — the states, and which may follow which.
//! - [`Transaction`] — one transactional id: its producer id and epoch, its timeout, its
//!   partitions and groups, and the requests that move it (init, add, end, complete, fence).
//! - `record` — a transactional id's durable record ([`Transaction::encode`],
//!   [`Transaction::decode`]), in the data directory's checksummed envelope.
//! - [`TransactionLog`] — where each change is made durable before its answer: one file of
//!   appended records, the last per id current, compacted at open and as it grows.
//! - [`TransactionCoordinator`] — every transactional id, each change durable before it is
//!   applied and answered; `writer` — the log's thread, which writes and syncs the changes
//!   waiting together in one group (off the runtime).
//! - [`TransactionService`] — the coordinator wired to the broker's partitions and groups, and
//!   its clock (timeouts, unfinished ends, expiry); [`TransactionConfig`] its configuration.
//! - [`SharedTransactions`] — the seam where a cluster's brokers share their transactions:
//!   each id under its lease, each change a compare-and-set in the cluster's database, an end
//!   (markers, offsets, Complete*) one database transaction.
//! - [`ConnectionNumber`] — client connections in the order they were opened: an EndTxn from a
//!   connection older than the one that began the open transaction is a delayed end of an
//!   earlier one, and is refused (`openers`).
//! - [`TxnError`] — each refusal, named as Kafka's error code is; the Kafka front end picks the
//!   code its request version has (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH).
//!
//! # Example
//! ```
//! use minibroker_transactions::{Change, EndEpoch, Transaction, TxnState};
//!
//! let mut txn = Transaction::new("pipeline", 1000, 60_000, 0);
//! let (producer_id, epoch) = (txn.producer_id(), txn.epoch());
//! txn.add_partitions(producer_id, epoch, [("out".to_owned(), 0)], 10)?;
//! assert_eq!(txn.state(), TxnState::Ongoing);
//! let end = txn.end((producer_id, epoch), true, EndEpoch::Kept, 20)?;
//! assert_eq!(end, Change::Changed); // PrepareCommit, to persist
//! // ... the COMMIT markers are written to every partition of the transaction ...
//! txn.complete(30)?;
//! assert_eq!(txn.state(), TxnState::CompleteCommit);
//! # Ok::<(), minibroker_transactions::TxnError>(())
//! ```

mod config;
mod coordinator;
mod log;
mod openers;
mod record;
mod service;
mod shared;
mod state;
mod transaction;
mod writer;

pub use config::TransactionConfig;
pub use coordinator::{
    CoordinatorError, Limits, MAX_GROUPS_PER_TRANSACTION, MAX_TRANSACTIONAL_ID_BYTES,
    TransactionCoordinator,
};
pub use log::{COMPACT_BYTES, FILE_NAME, TransactionLog, TransactionLogError};
pub use openers::ConnectionNumber;
pub use record::RecordError;
pub use service::{AddPartitionsError, OffsetCommitError, TransactionCounts, TransactionService};
pub use shared::{SharedFuture, SharedTransactions};
pub use state::TxnState;
pub use transaction::{Change, EndEpoch, InitOutcome, Transaction, TxnError};
