//! Transactions as every broker of a cluster shares them: each transactional id's state, the
//! partitions its ongoing transaction added, and the offsets it commits for groups.
//!
//! Only the broker holding the id's lease (`coordinators`) changes its state, and every change
//! is a compare-and-set on (producer id, epoch, state) checked in the same transaction as the
//! lease: two brokers can never both move one transaction on, and a broker that lost the lease
//! moves nothing. An end is one database transaction: the state set to Complete*, a marker at
//! the end of each of its partitions, the producer's rows there closed, its partitions let go
//! and its groups' pending offsets settled; nothing of an end is ever half written.
//!
//! The transaction coordinator's own record of an id (`minibroker_transactions`) is kept whole
//! beside the columns the database compares, so a broker that takes an id over reads it back as
//! the last holder left it.

use thiserror::Error;
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::groups::{CommitColumns, StoredOffset, Tenure};

/// Why a transaction's write was refused.
#[derive(Debug, Error)]
pub enum TransactionWriteError {
    /// This broker's run no longer holds the id's (or the group's) lease at that epoch.
    #[error("this broker no longer coordinates it")]
    NotCoordinator,
    /// The id's producer id, epoch or state is not the one the coordinator read.
    #[error("the transactional id changed since it was read")]
    Changed,
    /// A group's member or generation is not the saved one.
    #[error("the member or its generation is not the group's")]
    NotMember,
    /// No open transaction of the producer, at its epoch, has added the group.
    #[error("no open transaction of the producer at its epoch has added the group")]
    NotInTransaction,
    /// A newer epoch of the producer's transactional id fenced it.
    #[error("the producer was fenced by a newer epoch of its transactional id")]
    Fenced,
    /// PostgreSQL refused or could not be reached.
    #[error("the cluster's database: {0}")]
    Postgres(#[from] tokio_postgres::Error),
}

impl TransactionWriteError {
    fn of(error: tokio_postgres::Error) -> Self {
        match error.code().map(SqlState::code) {
            Some("MB002") => Self::NotCoordinator,
            Some("MB003") => Self::NotMember,
            Some("MB004") => Self::Changed,
            Some("MB005") => Self::NotInTransaction,
            Some("MB006") => Self::Fenced,
            _ => Self::Postgres(error),
        }
    }
}

/// A transactional id's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionRow {
    /// The transactional id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// Its state, by Kafka's name.
    pub state: String,
    /// The groups its ongoing transaction commits offsets of.
    pub groups: Vec<String>,
    /// Its transaction timeout (ms).
    pub timeout_ms: i64,
    /// When its ongoing transaction began (ms since the epoch), if one is.
    pub started_ms: Option<i64>,
    /// The transaction coordinator's record of it.
    pub record: Vec<u8>,
}

impl TransactionRow {
    /// The (producer id, epoch, state) a change of it compares.
    fn compared(row: Option<&Self>) -> (Option<i64>, Option<i16>, Option<&str>) {
        (
            row.map(|row| row.producer_id),
            row.map(|row| row.epoch),
            row.map(|row| row.state.as_str()),
        )
    }
}

/// The partitions a change adds to the ongoing transaction: (topic, partition) pairs.
pub type Added<'a> = &'a [(String, i32)];

/// Stores `changed` in place of `before` (`None`: the id is new), if they are still what the
/// database holds, and lets the producer's transactional batches into the partitions `added`.
///
/// # Errors
/// [`TransactionWriteError`]: nothing changed.
pub async fn save_transaction(
    client: &impl GenericClient,
    tenure: Tenure<'_>,
    before: Option<&TransactionRow>,
    changed: &TransactionRow,
    added: Added<'_>,
) -> Result<(), TransactionWriteError> {
    let (old_producer, old_epoch, old_state) = TransactionRow::compared(before);
    let topics: Vec<&str> = added.iter().map(|(topic, _)| topic.as_str()).collect();
    let partitions: Vec<i32> = added.iter().map(|(_, partition)| *partition).collect();
    client
        .execute(
            "SELECT minibroker.save_transaction($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
                                                $12, $13, $14, $15)",
            &[
                &changed.transactional_id,
                &tenure.run_id,
                &tenure.epoch,
                &old_producer,
                &old_epoch,
                &old_state,
                &changed.producer_id,
                &changed.epoch,
                &changed.state,
                &changed.groups,
                &changed.timeout_ms,
                &changed.started_ms,
                &changed.record,
                &topics,
                &partitions,
            ],
        )
        .await
        .map_err(TransactionWriteError::of)?;
    Ok(())
}

/// How a transaction ends: its producer and epoch on the markers, commit or abort, and the
/// marker batch for each of its partitions (its base offset is set where it is stored).
#[derive(Debug, Clone)]
pub struct Ending<'a> {
    /// The producer id the markers carry.
    pub producer_id: i64,
    /// The epoch they carry.
    pub epoch: i16,
    /// COMMIT or ABORT.
    pub commit: bool,
    /// (topic, partition, marker batch) for each partition of the transaction.
    pub markers: &'a [(String, i32, bytes::Bytes)],
    /// The markers' timestamp (ms since the epoch).
    pub timestamp: i64,
}

/// Ends `before`'s transaction as `ending` says, and stores `completed` in its place: one
/// database transaction (see the module docs). Returns how many markers were written (a
/// partition gone, or where a newer epoch of the producer already ended it, takes none).
///
/// # Errors
/// [`TransactionWriteError`]: nothing of the end happened.
pub async fn end_transaction(
    client: &impl GenericClient,
    tenure: Tenure<'_>,
    before: &TransactionRow,
    completed: &TransactionRow,
    ending: &Ending<'_>,
) -> Result<i32, TransactionWriteError> {
    let topics: Vec<&str> = ending.markers.iter().map(|(t, _, _)| t.as_str()).collect();
    let partitions: Vec<i32> = ending.markers.iter().map(|(_, p, _)| *p).collect();
    let markers: Vec<&[u8]> = ending.markers.iter().map(|(_, _, m)| m.as_ref()).collect();
    let written = client
        .query_one(
            "SELECT minibroker.end_transaction($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
                                               $12, $13, $14, $15, $16, $17, $18)",
            &[
                &completed.transactional_id,
                &tenure.run_id,
                &tenure.epoch,
                &before.producer_id,
                &before.epoch,
                &before.state,
                &completed.producer_id,
                &completed.epoch,
                &completed.state,
                &completed.timeout_ms,
                &completed.record,
                &ending.producer_id,
                &ending.epoch,
                &ending.commit,
                &topics,
                &partitions,
                &markers,
                &ending.timestamp,
            ],
        )
        .await
        .map_err(TransactionWriteError::of)?;
    Ok(written.get(0))
}

/// A transaction's offsets for a group: kept pending until the transaction ends, if `tenure`
/// still holds the group's lease, `member` (when given) is the group's, and the producer's open
/// transaction `(transactional id, producer id, epoch)` has added the group.
///
/// # Errors
/// [`TransactionWriteError`]: nothing is kept.
pub async fn commit_pending_offsets(
    client: &impl GenericClient,
    tenure: Tenure<'_>,
    group_id: &str,
    member: Option<(i32, &str)>,
    (transactional_id, producer_id, epoch): (&str, i64, i16),
    offsets: &[StoredOffset],
) -> Result<(), TransactionWriteError> {
    let columns = CommitColumns::new(group_id, tenure, member, offsets);
    let mut parameters: Vec<&(dyn ToSql + Sync)> = columns.parameters().to_vec();
    parameters.extend([
        &transactional_id as &(dyn ToSql + Sync),
        &producer_id,
        &epoch,
    ]);
    client
        .execute(
            "SELECT minibroker.commit_pending_offsets($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
                                                      $11, $12, $13)",
            &parameters,
        )
        .await
        .map_err(TransactionWriteError::of)?;
    Ok(())
}

/// `transactional_id`'s row, if the cluster has the id.
///
/// # Errors
/// PostgreSQL's error.
pub async fn find_transaction(
    client: &impl GenericClient,
    transactional_id: &str,
) -> Result<Option<TransactionRow>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT transactional_id, producer_id, epoch, state, groups, timeout_ms, started_ms,
                    record
             FROM minibroker.transactions WHERE transactional_id = $1",
            &[&transactional_id],
        )
        .await?;
    Ok(row.as_ref().map(transaction_row))
}

/// Every transactional id's row, by id.
///
/// # Errors
/// PostgreSQL's error.
pub async fn list_transactions(
    client: &impl GenericClient,
) -> Result<Vec<TransactionRow>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT transactional_id, producer_id, epoch, state, groups, timeout_ms, started_ms,
                    record
             FROM minibroker.transactions ORDER BY transactional_id",
            &[],
        )
        .await?;
    Ok(rows.iter().map(transaction_row).collect())
}

/// The partitions with offsets of `group_id` waiting in an open transaction.
///
/// # Errors
/// PostgreSQL's error.
pub async fn pending_partitions(
    client: &impl GenericClient,
    group_id: &str,
) -> Result<Vec<(String, i32)>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT DISTINCT topic, partition FROM minibroker.group_pending_offsets
             WHERE group_id = $1",
            &[&group_id],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

fn transaction_row(row: &tokio_postgres::Row) -> TransactionRow {
    TransactionRow {
        transactional_id: row.get(0),
        producer_id: row.get(1),
        epoch: row.get(2),
        state: row.get(3),
        groups: row.get(4),
        timeout_ms: row.get(5),
        started_ms: row.get(6),
        record: row.get(7),
    }
}

/// The transactional ids whose ongoing transaction is past its timeout at `now_ms` and whose
/// lease no broker holds: their coordinator is gone, and a live broker is to abort them.
///
/// # Errors
/// PostgreSQL's error.
pub async fn orphaned_transactions(
    client: &impl GenericClient,
    now_ms: i64,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT t.transactional_id FROM minibroker.transactions t
             WHERE t.state = 'Ongoing' AND t.started_ms + t.timeout_ms < $1
               AND NOT EXISTS (
                   SELECT 1 FROM minibroker.coordinator_leases l
                   WHERE l.key_type = 1 AND l.key = t.transactional_id
                     AND l.expires > clock_timestamp())
             ORDER BY t.transactional_id LIMIT 100",
            &[&now_ms],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The aborted transactions of `topic_id`/`partition` with a batch in `from..=to`: (producer
/// id, first offset), by first offset, as a read_committed Fetch names them.
///
/// # Errors
/// PostgreSQL's error.
pub async fn aborted_between(
    client: &impl GenericClient,
    (topic_id, partition): (i64, i32),
    from: i64,
    to: i64,
) -> Result<Vec<(i64, i64)>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT producer_id, first_offset FROM minibroker.aborted_transactions
             WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 AND first_offset <= $4
             ORDER BY first_offset",
            &[&topic_id, &partition, &from, &to],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// The transactions open in `topic_id`/`partition` whose first batch there is below `before`:
/// (producer id, first offset). A copy that starts at `before` holds them open.
///
/// # Errors
/// PostgreSQL's error.
pub async fn open_before(
    client: &impl GenericClient,
    (topic_id, partition): (i64, i32),
    before: i64,
) -> Result<Vec<(i64, i64)>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT producer_id, first_offset FROM minibroker.transaction_partitions
             WHERE topic_id = $1 AND partition = $2 AND first_offset < $3
             ORDER BY first_offset",
            &[&topic_id, &partition, &before],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}
