//! A partition's start moved up, for every broker at once: by DeleteRecords, and by retention.
//! The start is the partition row's `log_start_offset`; the batches wholly below it (and the
//! aborted transactions that ended below it) are deleted in the same statement, and each
//! broker's copy follows the start on its next pass.
//!
//! Each statement takes one partition row's lock, alone: a window's commit locks several in
//! key order, and a statement that locked several in another order could deadlock with it.
//! Any broker may run retention; running it twice, or on two brokers at once, moves nothing
//! further (the start only moves up, and what is below it is gone already).

use tokio_postgres::GenericClient;

/// The end of a statement whose `moved` part moved partition `$1`/`$2`'s start: the batches
/// wholly below the new start are deleted with it, and so are the aborted transactions that
/// ended below it (no read reaches them); the new start is its answer.
macro_rules! deleted_below_moved {
    () => {
        "gone AS (
             DELETE FROM minibroker.batches b USING moved
             WHERE b.topic_id = $1 AND b.partition = $2
                 AND b.last_offset < moved.log_start_offset
         ), gone_aborts AS (
             DELETE FROM minibroker.aborted_transactions a USING moved
             WHERE a.topic_id = $1 AND a.partition = $2
                 AND a.last_offset < moved.log_start_offset
         )
         SELECT log_start_offset FROM moved"
    };
}

/// The part of a retention statement that moves partition `$1`/`$2`'s start up to its
/// `first_kept` batch.
macro_rules! moved_to_first_kept {
    () => {
        "moved AS (
             UPDATE minibroker.partitions p SET log_start_offset = first_kept.offset
             FROM first_kept
             WHERE p.topic_id = $1 AND p.partition = $2
                 AND first_kept.offset > p.log_start_offset
             RETURNING p.log_start_offset
         ), "
    };
}

/// Retention by age alone, for partition `$1`/`$2` and the newest timestamp `$3` a batch must
/// reach to stay: the first batch kept is found walking the partition in offset order from its
/// start, which stops at once when nothing is too old (the usual case).
const RETENTION_BY_AGE: &str = concat!(
    "WITH ends AS (
             SELECT high_watermark FROM minibroker.partitions
             WHERE topic_id = $1 AND partition = $2
         ), first_kept AS (
             SELECT coalesce(
                 (SELECT base_offset FROM minibroker.batches
                  WHERE topic_id = $1 AND partition = $2
                      AND max_timestamp >= $3::bigint
                  ORDER BY last_offset LIMIT 1),
                 (SELECT high_watermark FROM ends)) AS offset
         ), ",
    moved_to_first_kept!(),
    deleted_below_moved!()
);

/// Retention by size too (`$4` bytes at most, `$3` as above or NULL): each batch needs the
/// bytes after it, so the whole partition is read.
const RETENTION_BY_SIZE: &str = concat!(
    "WITH ends AS (
             SELECT high_watermark FROM minibroker.partitions
             WHERE topic_id = $1 AND partition = $2
         ), held AS (
             SELECT base_offset, max_timestamp,
                 coalesce(sum(octet_length(bytes)) OVER (ORDER BY last_offset DESC
                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS newer_bytes
             FROM minibroker.batches WHERE topic_id = $1 AND partition = $2
         ), first_kept AS (
             SELECT coalesce(min(base_offset), (SELECT high_watermark FROM ends))
                 AS offset
             FROM held
             WHERE ($3::bigint IS NULL OR max_timestamp >= $3::bigint)
                 AND ($4::bigint IS NULL OR newer_bytes < $4::bigint)
         ), ",
    moved_to_first_kept!(),
    deleted_below_moved!()
);

/// What [`delete_records`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The start is now this offset (Kafka's low watermark).
    Start(i64),
    /// The offset lies past the high watermark: nothing was deleted.
    PastEnd {
        /// The high watermark.
        high_watermark: i64,
    },
    /// The cluster has no such partition.
    UnknownPartition,
}

/// Moves the start of `topic_id`/`partition` up to `before` (-1: the high watermark), deleting
/// the batches wholly below it. A `before` at or below the start changes nothing.
///
/// # Errors
/// PostgreSQL's error (nothing is deleted then).
pub async fn delete_records(
    client: &impl GenericClient,
    topic_id: i64,
    partition: i32,
    before: i64,
) -> Result<Deleted, tokio_postgres::Error> {
    let moved = client
        .query_opt(
            concat!(
                "WITH ends AS (
                 SELECT high_watermark FROM minibroker.partitions
                 WHERE topic_id = $1 AND partition = $2
             ), moved AS (
                 UPDATE minibroker.partitions p
                 SET log_start_offset = GREATEST(p.log_start_offset,
                     CASE WHEN $3::bigint = -1 THEN ends.high_watermark ELSE $3::bigint END)
                 FROM ends
                 WHERE p.topic_id = $1 AND p.partition = $2
                     AND $3::bigint >= -1 AND $3::bigint <= ends.high_watermark
                 RETURNING p.log_start_offset
             ), ",
                deleted_below_moved!()
            ),
            &[&topic_id, &partition, &before],
        )
        .await?;
    if let Some(row) = moved {
        return Ok(Deleted::Start(row.get(0)));
    }
    let end = client
        .query_opt(
            "SELECT high_watermark FROM minibroker.partitions
             WHERE topic_id = $1 AND partition = $2",
            &[&topic_id, &partition],
        )
        .await?;
    Ok(
        end.map_or(Deleted::UnknownPartition, |row| Deleted::PastEnd {
            high_watermark: row.get(0),
        }),
    )
}

/// What a topic keeps: its retention (`None`: no limit), as a broker works it out from the
/// topic's settings and its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Keep {
    /// Batches whose newest record is older than this many milliseconds go.
    pub ms: Option<i64>,
    /// The oldest batch goes while the partition would still hold this many bytes without it.
    pub bytes: Option<i64>,
}

/// Applies `keep` to every partition of `topic_id` as of `now_ms`: each partition's start moves
/// up to its first batch that is kept, and the batches below it are deleted. What is judged is
/// what the statement sees (its snapshot): a batch committed meanwhile lies past its end, and
/// stays. A batch is kept
/// from the first one (in offset order) that is neither too old nor too many bytes back from
/// the end: as a log drops its oldest pieces one at a time while the rule says so. Returns the
/// partitions whose start moved, with their new start.
///
/// # Errors
/// PostgreSQL's error (the partitions done so far stay done).
pub async fn apply_retention(
    client: &impl GenericClient,
    topic_id: i64,
    keep: Keep,
    now_ms: i64,
) -> Result<Vec<(i32, i64)>, tokio_postgres::Error> {
    if keep == Keep::default() {
        return Ok(Vec::new());
    }
    let cutoff = keep.ms.map(|ms| now_ms.saturating_sub(ms));
    let partitions = client
        .query(
            "SELECT partition FROM minibroker.partitions WHERE topic_id = $1 ORDER BY partition",
            &[&topic_id],
        )
        .await?;
    let mut moved = Vec::new();
    for row in partitions {
        let partition: i32 = row.get(0);
        let start = match keep.bytes {
            None => {
                client
                    .query_opt(RETENTION_BY_AGE, &[&topic_id, &partition, &cutoff])
                    .await?
            }
            Some(bytes) => {
                client
                    .query_opt(RETENTION_BY_SIZE, &[&topic_id, &partition, &cutoff, &bytes])
                    .await?
            }
        };
        if let Some(start) = start {
            moved.push((partition, start.get(0)));
        }
    }
    Ok(moved)
}
