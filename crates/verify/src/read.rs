//! Reading a whole topic back through the client.

use minibroker_client::{Client, ClientError, PartitionReader};

use crate::{AckedBatch, PartitionLog, Report, StoredBatch, StoredPayload, check};

/// Reads every batch of every partition of `topic`.
///
/// # Errors
/// Transport failures, broker errors (an unknown topic among them) and batches that do not
/// decode.
pub async fn read_topic(client: &Client, topic: &str) -> Result<Vec<PartitionLog>, ClientError> {
    read_topic_reporting(client, topic, &mut |_| {}).await
}

/// [`read_topic`], telling `records_read` how many records each batch read held.
///
/// # Errors
/// As [`read_topic`].
pub async fn read_topic_reporting(
    client: &Client,
    topic: &str,
    records_read: &mut (dyn FnMut(u64) + Send),
) -> Result<Vec<PartitionLog>, ClientError> {
    let metadata = client.metadata().await?;
    let Some(info) = metadata.topics.iter().find(|t| t.name == topic) else {
        return Err(ClientError::Broker(
            minibroker_client::protocol::ErrorResponse::new(
                minibroker_client::protocol::ErrorCode::UnknownTopic,
                format!("unknown topic {topic:?}"),
            ),
        ));
    };
    let mut logs = Vec::with_capacity(info.partitions as usize);
    for partition in 0..info.partitions {
        let mut reader = PartitionReader::new(client, topic, partition, 0);
        let mut log = PartitionLog {
            partition,
            ..PartitionLog::default()
        };
        while let Some(batch) = reader.next_batch().await? {
            records_read(u64::from(batch.info.record_count));
            log.batches
                .push(StoredBatch::new(batch.base_offset, &batch.info));
            log.payloads
                .extend(StoredPayload::of_records(&batch.records));
        }
        logs.push(log);
    }
    Ok(logs)
}

/// Reads `topic` and checks it, against `acknowledged` if given.
///
/// # Errors
/// As [`read_topic`].
pub async fn verify(
    client: &Client,
    topic: &str,
    acknowledged: Option<&[AckedBatch]>,
) -> Result<Report, ClientError> {
    verify_reporting(client, topic, acknowledged, &mut |_| {}).await
}

/// [`verify`], telling `records_read` how many records each batch read held (for progress).
///
/// # Errors
/// As [`read_topic`].
pub async fn verify_reporting(
    client: &Client,
    topic: &str,
    acknowledged: Option<&[AckedBatch]>,
    records_read: &mut (dyn FnMut(u64) + Send),
) -> Result<Report, ClientError> {
    let logs = read_topic_reporting(client, topic, records_read).await?;
    Ok(check(topic, &logs, acknowledged))
}
