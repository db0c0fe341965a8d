//! The exactly-once rule in one PostgreSQL transaction: a window of batches, from any broker
//! for any partition, is judged and stored at once.
//!
//! [`commit_window`] locks the window's partition rows in key order (two brokers' windows never
//! deadlock; one waits for the other) and runs each batch in arrival order through
//! `minibroker_state::decide_and_record` (`judge`), the same function a single broker runs
//! under its shard lock, so both give the same answers. Accepted batches take offsets from
//! their partition's high watermark. The batches, the changed producer rows and the new high
//! watermarks are written, and the transaction commits. Only then is anything answered.
//!
//! The partition row's lock is what makes a window the only writer of its partitions, as the
//! shard lock is on one broker: a producer's row is judged as it is under the lock and
//! written before the lock is let go. That happens in one of two ways:
//! - **One round trip**, when the broker knows every producer's row of the window from its
//!   last windows ([`KnownProducers`]): the window is judged at once, and BEGIN, the lock, a
//!   check of those rows' versions, the writes and COMMIT go to the server together. The
//!   server runs them in order; the check fails the transaction when a row is not the one the
//!   window was judged against (another broker wrote it), and the window is then judged again
//!   the other way. Its offsets are only known under the lock, so the writes carry them
//!   relative to each partition's end and the server makes them real.
//! - **Two round trips** otherwise: BEGIN goes with the lock and the producers' rows read,
//!   and the writes with COMMIT.
//!
//! Either way a write the server refuses aborts the transaction, and the COMMIT after it then
//! rolls back: a window is answered as stored only when every write and the COMMIT succeeded.
//! Statements are prepared once per connection ([`Statements`]).
//!
//! A COMMIT whose answer is lost is [`CommitError::Unknown`]: the window may be stored or not,
//! and is never answered as stored. A retry then meets the rule: DUPLICATE with the original
//! offset when it was stored, ACCEPTED when it was not.

mod judge;
mod known;
mod statements;
mod writes;

use bytes::Bytes;
use minibroker_state::{BatchHeader, BatchMetadata, ProducerEntry, Verdict};
use std::collections::{BTreeSet, HashMap, HashSet};
use thiserror::Error;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use judge::{Held, Holding, judge, settle};
pub use known::KnownProducers;
use known::KnownRow;
pub use statements::Statements;
use writes::WindowWrites;

/// One batch for one partition, as a broker took it (already checked as a batch).
#[derive(Debug, Clone)]
pub struct Append {
    /// The cluster's id of its topic.
    pub topic_id: i64,
    /// The partition.
    pub partition: i32,
    /// Its producer's id, epoch and sequences, for the rule; `None` for a producer that is not
    /// idempotent, whose batch is always stored.
    pub header: Option<BatchHeader>,
    /// Offsets it takes: its last offset delta + 1.
    pub offsets: u32,
    /// The batch as sent; its base offset is stamped when it is stored.
    pub bytes: Bytes,
}

/// What the window's commit answers one stored or judged batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The rule's verdict, with the offset the batch (or, for a duplicate, its original) has.
    pub verdict: Verdict,
    /// The partition's log start offset, as Kafka's answer reports it.
    pub log_start_offset: i64,
}

/// Why one batch of a window was refused before the rule saw it (the rest of the window is
/// stored all the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AppendRefused {
    /// The partition's row is gone (its topic was deleted) or never was.
    #[error("the cluster has no partition {partition} of the topic with id {topic_id}")]
    UnknownPartition {
        /// The topic's id.
        topic_id: i64,
        /// The partition.
        partition: i32,
    },
    /// The bytes are not a batch: shorter than a batch header, or taking no offset.
    #[error("not a record batch: {bytes} bytes taking {offsets} offsets")]
    NotABatch {
        /// Its length.
        bytes: usize,
        /// The offsets it said it takes.
        offsets: u32,
    },
    /// A transactional batch for a partition its transaction has not added at its epoch
    /// (never, or a late batch of a transaction that has ended).
    #[error("producer {producer_id}'s transaction at epoch {epoch} has not added the partition")]
    NotAddedToTransaction {
        /// The producer.
        producer_id: i64,
        /// Its epoch.
        epoch: i16,
    },
    /// A transactional batch at an epoch whose abort reached the partition before any batch of
    /// the aborted transaction did: it may be one of them, late (KAFKA-17754). The producer
    /// must move to a newer epoch.
    #[error(
        "producer {producer_id} at epoch {epoch}: a transaction of this epoch was aborted on the partition before any of its batches arrived; move to a new epoch"
    )]
    AbortedEpoch {
        /// The producer.
        producer_id: i64,
        /// Its epoch.
        epoch: i16,
    },
    /// A plain batch of a producer whose transaction is open on the partition.
    #[error(
        "a non-transactional batch of producer {producer_id} while its transaction is open on the partition"
    )]
    InTransaction {
        /// The producer.
        producer_id: i64,
    },
}

/// Why a window was not stored, or may not have been.
#[derive(Debug, Error)]
pub enum CommitError {
    /// The transaction failed before its COMMIT: nothing of the window is stored.
    #[error("storing the window failed (nothing of it is stored): {0}")]
    Failed(#[source] tokio_postgres::Error),
    /// The COMMIT got no answer: the window may or may not be stored.
    #[error("the window's commit got no answer (it may or may not be stored): {0}")]
    Unknown(#[source] tokio_postgres::Error),
    /// A producer's row is not one the rule could have written: it is never guessed at.
    #[error(
        "producer {producer_id}'s row for partition {partition} of the topic with id {topic_id} \
         is not one the rule writes; refusing to judge its batches"
    )]
    Damaged {
        /// The topic's id.
        topic_id: i64,
        /// The partition.
        partition: i32,
        /// The producer.
        producer_id: i64,
    },
}

type PartitionKey = (i64, i32);
type ProducerKey = (i64, i32, i64);
/// A producer's epoch on a partition: (topic id, partition, producer id, epoch).
type AddedKey = (i64, i32, i64, i16);

/// What the producers' transactions allow on a window's partitions.
#[derive(Debug, Default)]
pub(super) struct TransactionFits {
    /// The partitions ongoing transactions added, at their epochs.
    pub(super) added: HashSet<AddedKey>,
    /// The epochs refused on partitions where they aborted before any batch arrived.
    pub(super) refused: HashSet<AddedKey>,
}

/// What a window answers each of its batches.
pub type Answers = Vec<Result<Appended, AppendRefused>>;

/// The SQLSTATE `minibroker.expect_window` fails a window with: it was judged against rows that
/// have changed since.
const STALE: &str = "MB001";

/// Judges and stores `appends` in one transaction on `client` (see the module's docs), and
/// answers each in order. `known` holds the rows this connection's windows left; a window whose
/// producers are all there is judged before its rows are read, in one round trip.
///
/// # Errors
/// [`CommitError`]: nothing of the window is answered as stored then.
pub async fn commit_window(
    client: &mut Client,
    statements: &Statements,
    known: &KnownProducers,
    appends: &[Append],
) -> Result<Answers, CommitError> {
    let producers = producer_keys(appends);
    // A transactional batch is judged against the partitions its transaction added, which
    // are read under the partitions' locks: such a window takes two round trips.
    let transactional = appends.iter().any(|append| {
        append
            .header
            .is_some_and(|header| header.is_transactional())
    });
    let recalled = (!transactional).then(|| known.recall(&producers)).flatten();
    let committed = match recalled {
        Some(rows) => match in_one_trip(client, statements, appends, rows).await {
            Ok(Some(committed)) => Ok(committed),
            Ok(None) => {
                tracing::debug!("a window met changed producer rows; judging it again");
                known.forget(&producers);
                roll_back(client).await;
                in_two_trips(client, statements, appends).await
            }
            Err(error) => Err(error),
        },
        None => in_two_trips(client, statements, appends).await,
    };
    match committed {
        Ok((answers, left)) => {
            known.remember(left);
            Ok(answers)
        }
        Err(error) => {
            // The rows may have changed (a COMMIT without an answer) or not: read them next.
            known.forget(&producers);
            if matches!(error, CommitError::Failed(_) | CommitError::Damaged { .. }) {
                roll_back(client).await;
            }
            Err(error)
        }
    }
}

/// A window's answers and the producers' rows it left.
type Committed = (Answers, Vec<(ProducerKey, KnownRow)>);

/// Undoes whatever of the window the server took, so the connection is ready for the next
/// one (a ROLLBACK after a COMMIT that rolled back only warns).
async fn roll_back(client: &Client) {
    if let Err(error) = client.batch_execute("ROLLBACK").await {
        tracing::debug!(%error, "ROLLBACK after a window that was not stored");
    }
}

/// The window judged against `rows` (what its producers' rows were when this broker last
/// wrote or read them), then BEGIN, the lock, the server's check of those rows, the writes and
/// COMMIT, all sent at once: one round trip. `None` when the check failed: nothing is stored,
/// and the window must be judged again with its rows read.
async fn in_one_trip(
    client: &Client,
    statements: &Statements,
    appends: &[Append],
    rows: HashMap<ProducerKey, KnownRow>,
) -> Result<Option<Committed>, CommitError> {
    let partitions = window_partitions(appends);
    let entries = rows
        .into_iter()
        .map(|(key, row)| (key, (row.entry, Some(row.version))))
        .collect();
    let judged = judge(appends, entries, None, &TransactionFits::default());
    let writes = WindowWrites::new(&judged, partitions.iter().copied());
    let (topic_ids, partition_numbers): (Vec<i64>, Vec<i32>) = partitions.into_iter().unzip();
    let lock_parameters: [&(dyn ToSql + Sync); 2] = [&topic_ids, &partition_numbers];
    // Sent in this order on the first poll; the server runs them in order, the check and the
    // writes once the partitions are locked.
    let (begun, locked, written, committed) = futures::join!(
        client.batch_execute("BEGIN"),
        client.query(&statements.lock_partitions, &lock_parameters),
        writes.execute(client, statements),
        client.batch_execute("COMMIT"),
    );
    if let Err(error) = &written
        && error.code().map(SqlState::code) == Some(STALE)
    {
        return Ok(None);
    }
    let locked = begun
        .and(locked)
        .and_then(|locked| written.map(|()| locked))
        .map_err(CommitError::Failed)?;
    committed.map_err(CommitError::Unknown)?;
    // The check passed: every partition of the window is there.
    Ok(Some(settle(&judged, &held_of(&locked))))
}

/// The window judged once its partitions are locked and its producers' rows read (BEGIN goes
/// with them), then its writes sent with COMMIT: two round trips.
async fn in_two_trips(
    client: &Client,
    statements: &Statements,
    appends: &[Append],
) -> Result<Committed, CommitError> {
    let (held, entries, added) = read_window(client, statements, appends).await?;
    let judged = judge(appends, entries, Some(&held), &added);
    let writes = WindowWrites::new(&judged, held.keys().copied());
    let firsts = first_transactional(appends, &judged);
    let first_parameters: [&(dyn ToSql + Sync); 4] = [&firsts.0, &firsts.1, &firsts.2, &firsts.3];
    let note_firsts = async {
        if firsts.0.is_empty() {
            Ok(0)
        } else {
            client
                .execute(&statements.note_first_offsets, &first_parameters)
                .await
        }
    };
    // Sent in this order: the first offsets are noted from the high watermarks the writes move.
    let (noted, written, committed) = futures::join!(
        note_firsts,
        writes.execute(client, statements),
        client.batch_execute("COMMIT")
    );
    noted.map_err(CommitError::Failed)?;
    written.map_err(CommitError::Failed)?;
    committed.map_err(CommitError::Unknown)?;
    Ok(settle(&judged, &held))
}

/// The accepted transactional batches of a window, as columns: topic id, partition, producer
/// id, and offset past the partition's end before the window (the first of each producer's in
/// a partition first: a transaction's first batch there is where it holds the partition's last
/// stable offset back).
fn first_transactional(
    appends: &[Append],
    judged: &judge::Judged,
) -> (Vec<i64>, Vec<i32>, Vec<i64>, Vec<i64>) {
    let mut columns = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut seen = HashSet::new();
    for (append, verdict) in appends.iter().zip(&judged.verdicts) {
        let Some(header) = append.header.filter(|header| header.is_transactional()) else {
            continue;
        };
        let Ok((verdict, _)) = verdict else { continue };
        let (minibroker_state::Outcome::Accepted, Some(offset)) =
            (verdict.outcome, verdict.base_offset)
        else {
            continue;
        };
        if !seen.insert((append.topic_id, append.partition, header.producer_id())) {
            continue;
        }
        columns.0.push(append.topic_id);
        columns.1.push(append.partition);
        columns.2.push(header.producer_id());
        columns.3.push(offset - judge::PROVISIONAL);
    }
    columns
}

/// The window's producers, each once, in key order.
fn producer_keys(appends: &[Append]) -> Vec<ProducerKey> {
    let keys: BTreeSet<ProducerKey> = appends
        .iter()
        .filter_map(|append| {
            let header = append.header.as_ref()?;
            Some((append.topic_id, append.partition, header.producer_id()))
        })
        .collect();
    keys.into_iter().collect()
}

/// The window's partitions, each once, in key order (the order their rows are locked in).
fn window_partitions(appends: &[Append]) -> BTreeSet<PartitionKey> {
    appends
        .iter()
        .map(|append| (append.topic_id, append.partition))
        .collect()
}

fn held_of(rows: &[Row]) -> HashMap<PartitionKey, Held> {
    rows.iter()
        .map(|row| {
            let held = Held {
                log_start_offset: row.get(2),
                high_watermark: row.get(3),
            };
            ((row.get(0), row.get(1)), held)
        })
        .collect()
}

/// What a window reads under its partitions' locks: the partitions, their producers' rows, and
/// the partitions their transactions added.
type Read = (
    HashMap<PartitionKey, Held>,
    HashMap<ProducerKey, Holding>,
    TransactionFits,
);

/// Begins the window's transaction, locks its partitions in key order and reads them, their
/// producers' rows and, for transactional batches, the partitions their transactions added.
async fn read_window(
    client: &Client,
    statements: &Statements,
    appends: &[Append],
) -> Result<Read, CommitError> {
    let (topic_ids, partition_numbers): (Vec<i64>, Vec<i32>) =
        window_partitions(appends).into_iter().unzip();
    let producers = producer_keys(appends);
    let producer_columns = (
        producers.iter().map(|key| key.0).collect::<Vec<_>>(),
        producers.iter().map(|key| key.1).collect::<Vec<_>>(),
        producers.iter().map(|key| key.2).collect::<Vec<_>>(),
    );
    // Sent together: the server runs them in order, so the producers are read once the
    // partitions are locked, by a statement whose snapshot is taken then.
    let lock_parameters: [&(dyn ToSql + Sync); 2] = [&topic_ids, &partition_numbers];
    let producer_parameters: [&(dyn ToSql + Sync); 3] = [
        &producer_columns.0,
        &producer_columns.1,
        &producer_columns.2,
    ];
    let transactional: Vec<ProducerKey> = appends
        .iter()
        .filter_map(|append| {
            let header = append.header.as_ref().filter(|h| h.is_transactional())?;
            Some((append.topic_id, append.partition, header.producer_id()))
        })
        .collect();
    let added_columns = (
        transactional.iter().map(|key| key.0).collect::<Vec<_>>(),
        transactional.iter().map(|key| key.1).collect::<Vec<_>>(),
        transactional.iter().map(|key| key.2).collect::<Vec<_>>(),
    );
    let added_parameters: [&(dyn ToSql + Sync); 3] =
        [&added_columns.0, &added_columns.1, &added_columns.2];
    let read_added = async {
        if transactional.is_empty() {
            Ok(Vec::new())
        } else {
            client
                .query(&statements.read_added, &added_parameters)
                .await
        }
    };
    let (_begun, locked, producer_rows, added_rows) = futures::try_join!(
        client.batch_execute("BEGIN"),
        client.query(&statements.lock_partitions, &lock_parameters),
        client.query(&statements.read_producers, &producer_parameters),
        read_added,
    )
    .map_err(CommitError::Failed)?;
    let entries = producer_rows
        .iter()
        .map(entry_of_row)
        .collect::<Result<_, _>>()?;
    let mut fits = TransactionFits::default();
    for row in &added_rows {
        let key = |epoch| (row.get(0), row.get(1), row.get(2), epoch);
        fits.added.extend(row.get::<_, Option<i16>>(3).map(key));
        fits.refused.extend(row.get::<_, Option<i16>>(4).map(key));
    }
    Ok((held_of(&locked), entries, fits))
}

/// A producer's row as the rule's entry, with its version.
fn entry_of_row(row: &Row) -> Result<(ProducerKey, Holding), CommitError> {
    let key: ProducerKey = (row.get(0), row.get(1), row.get(2));
    let damaged = || CommitError::Damaged {
        topic_id: key.0,
        partition: key.1,
        producer_id: key.2,
    };
    let first_sequences: Vec<i32> = row.get(6);
    let last_sequences: Vec<i32> = row.get(7);
    let base_offsets: Vec<Option<i64>> = row.get(8);
    if first_sequences.len() != last_sequences.len() || first_sequences.len() != base_offsets.len()
    {
        return Err(damaged());
    }
    let batches: Vec<BatchMetadata> = first_sequences
        .into_iter()
        .zip(last_sequences)
        .zip(base_offsets)
        .map(
            |((first_sequence, last_sequence), base_offset)| BatchMetadata {
                first_sequence,
                last_sequence,
                base_offset,
            },
        )
        .collect();
    let entry = ProducerEntry::from_parts(row.get(3), row.get(4), &batches, row.get(5))
        .ok_or_else(damaged)?;
    Ok((key, (entry, Some(row.get(9)))))
}
