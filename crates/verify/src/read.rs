//! Reading a whole topic back through the client.

use minibroker_client::{Client, ClientError};
use std::collections::BTreeMap;

use crate::{AckedBatch, PartitionLog, Report, StoredBatch, check};

/// Bytes asked for per fetch.
const FETCH_BYTES: u32 = 1 << 20;

/// Reads every batch of every partition of `topic`, reassembling batches split across fetches.
///
/// # Errors
/// Transport failures and broker errors (an unknown topic among them).
pub async fn read_topic(client: &Client, topic: &str) -> Result<Vec<PartitionLog>, ClientError> {
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
        let mut batches: BTreeMap<i64, StoredBatch> = BTreeMap::new();
        let mut offset = 0;
        loop {
            let fetched = client.fetch(topic, partition, offset, FETCH_BYTES).await?;
            for part in &fetched.batches {
                let entry = batches
                    .entry(part.batch_base_offset)
                    .or_insert(StoredBatch {
                        base_offset: part.batch_base_offset,
                        producer_id: part.producer_id,
                        epoch: part.epoch,
                        sequence: part.sequence,
                        records: 0,
                    });
                entry.records += part.records.len();
                offset = part.first_offset + part.records.len() as i64;
            }
            if fetched.batches.is_empty() || offset >= fetched.high_watermark {
                break;
            }
        }
        logs.push(PartitionLog {
            partition,
            batches: batches.into_values().collect(),
        });
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
    let logs = read_topic(client, topic).await?;
    Ok(check(topic, &logs, acknowledged))
}
