//! What every broker reads back of what the cluster committed: each partition's ends, and the
//! stored batches from an offset on, which a broker places in its copy (`Broker::place_committed`)
//! for its fetches to read.

use bytes::Bytes;
use tokio_postgres::GenericClient;

/// One partition of a topic, with its ends as last committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionEnds {
    /// The topic's id.
    pub topic_id: i64,
    /// The topic's name.
    pub topic: String,
    /// The topic's partition count.
    pub partitions: i32,
    /// The partition.
    pub partition: i32,
    /// Its first offset.
    pub log_start_offset: i64,
    /// The offset the next batch will get.
    pub high_watermark: i64,
    /// The topic's own settings.
    pub settings: Vec<(String, String)>,
}

/// A stored batch, its base offset stamped in its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    /// Its first offset.
    pub base_offset: i64,
    /// Its last offset.
    pub last_offset: i64,
    /// The batch.
    pub bytes: Bytes,
}

/// Every partition of every topic, with its ends.
///
/// # Errors
/// PostgreSQL's error.
pub async fn partition_ends(
    client: &impl GenericClient,
) -> Result<Vec<PartitionEnds>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT t.topic_id, t.name, t.partitions, p.partition, p.log_start_offset,
                    p.high_watermark, t.settings
             FROM minibroker.topics t JOIN minibroker.partitions p USING (topic_id)
             ORDER BY t.topic_id, p.partition",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| PartitionEnds {
            topic_id: row.get(0),
            topic: row.get(1),
            partitions: row.get(2),
            partition: row.get(3),
            log_start_offset: row.get(4),
            high_watermark: row.get(5),
            settings: crate::topics::settings_of(&row.get::<_, Vec<String>>(6)),
        })
        .collect())
}

/// The stored batches of `topic_id`/`partition` that end at or after `from`, in offset order,
/// at most `limit` of them.
///
/// # Errors
/// PostgreSQL's error.
pub async fn batches_from(
    client: &impl GenericClient,
    topic_id: i64,
    partition: i32,
    from: i64,
    limit: i64,
) -> Result<Vec<StoredBatch>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT base_offset, last_offset, bytes FROM minibroker.batches
             WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3
             ORDER BY last_offset LIMIT $4",
            &[&topic_id, &partition, &from, &limit],
        )
        .await?;
    Ok(rows.iter().map(stored_batch).collect())
}

/// A batch's row as `SELECT base_offset, last_offset, bytes` reads it.
fn stored_batch(row: &tokio_postgres::Row) -> StoredBatch {
    StoredBatch {
        base_offset: row.get(0),
        last_offset: row.get(1),
        bytes: Bytes::from(row.get::<_, Vec<u8>>(2)),
    }
}

/// The first stored batch of `topic_id`/`partition` that ends at or after `from` and holds a
/// record of `timestamp` or later (by its newest timestamp): where ListOffsets by time finds its
/// answer.
///
/// # Errors
/// PostgreSQL's error.
pub async fn first_batch_since(
    client: &impl GenericClient,
    topic_id: i64,
    partition: i32,
    from: i64,
    timestamp: i64,
) -> Result<Option<StoredBatch>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT base_offset, last_offset, bytes FROM minibroker.batches
             WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3
                 AND max_timestamp >= $4
             ORDER BY last_offset LIMIT 1",
            &[&topic_id, &partition, &from, &timestamp],
        )
        .await?;
    Ok(row.as_ref().map(stored_batch))
}

/// The first stored batch of `topic_id`/`partition` at or past `from` whose newest record is
/// the partition's newest by timestamp (the earliest such batch when several tie), with that
/// timestamp, for ListOffsets' largest timestamp. It reads the whole partition: no index
/// orders batches by time.
///
/// # Errors
/// PostgreSQL's error.
pub async fn batch_of_max_timestamp(
    client: &impl GenericClient,
    topic_id: i64,
    partition: i32,
    from: i64,
) -> Result<Option<(StoredBatch, i64)>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT base_offset, last_offset, bytes, max_timestamp FROM minibroker.batches
             WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3
             ORDER BY max_timestamp DESC, last_offset LIMIT 1",
            &[&topic_id, &partition, &from],
        )
        .await?;
    Ok(row.map(|row| (stored_batch(&row), row.get(3))))
}

/// Where a copy of `topic_id`/`partition` that holds nothing begins, to hold about `bytes` of
/// what lies from `from` on: the base offset of the oldest batch whose newer batches come to
/// less than `bytes` (as a log keeps its pieces under `retention.bytes`; at least the newest
/// batch), or `None` when there is none.
///
/// # Errors
/// PostgreSQL's error.
pub async fn tail_start(
    client: &impl GenericClient,
    topic_id: i64,
    partition: i32,
    from: i64,
    bytes: i64,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT min(base_offset) FROM (
                 SELECT base_offset,
                     coalesce(sum(octet_length(bytes)) OVER (ORDER BY last_offset DESC
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS newer
                 FROM minibroker.batches
                 WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3
             ) held WHERE newer < $4",
            &[&topic_id, &partition, &from, &bytes],
        )
        .await?;
    Ok(row.get(0))
}

/// One producer of a partition, as DescribeProducers shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerRow {
    /// Its id.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// The last sequence of its newest batch here, if it has one.
    pub last_sequence: Option<i32>,
    /// Its newest batch's timestamp (ms).
    pub last_timestamp: i64,
}

/// The producers of `topic_id`/`partition`, by producer id.
///
/// # Errors
/// PostgreSQL's error.
pub async fn producer_rows(
    client: &impl GenericClient,
    topic_id: i64,
    partition: i32,
) -> Result<Vec<ProducerRow>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT producer_id, epoch, last_sequences[1], last_timestamp
             FROM minibroker.producer_states
             WHERE topic_id = $1 AND partition = $2 ORDER BY producer_id",
            &[&topic_id, &partition],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| ProducerRow {
            producer_id: row.get(0),
            epoch: row.get(1),
            last_sequence: row.get(2),
            last_timestamp: row.get(3),
        })
        .collect())
}
