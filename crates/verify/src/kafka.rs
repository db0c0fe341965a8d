//! Reading a topic over the Kafka protocol, so the same exactly-once check runs against any
//! Kafka-compatible broker (this one's Kafka listener, Apache Kafka, Redpanda): Metadata for the
//! partition count, then Fetch from the log start to the high watermark, batch by batch, with
//! the producer metadata every v2 batch header carries. Transaction markers (control batches)
//! are kept apart from the data; a `read_committed` read also returns the last stable offset and
//! the aborted transactions the broker names, for `crate::isolation`.

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use minibroker_kafka_client::{KafkaClientError, KafkaConnection, whole_batches};
use thiserror::Error;

use crate::isolation::{FetchedBatch, PartitionRead, PartitionReads};
use crate::{PartitionLog, StoredBatch};

/// The Metadata and Fetch versions used (supported by Kafka 2.8 and later, and by minibroker).
const METADATA_VERSION: i16 = 9;
const FETCH_VERSION: i16 = 11;
/// Kafka's OFFSET_OUT_OF_RANGE.
const OFFSET_OUT_OF_RANGE: i16 = 1;
/// How long a Fetch may wait for data. Some brokers (Tansu among them) answer a Fetch that may
/// not wait with no partition at all, so the read asks for at least one byte and lets it wait.
const FETCH_WAIT_MS: i32 = 500;
/// Answers without the partition, or without records below the end, retried before giving up.
const EMPTY_ANSWER_RETRIES: u32 = 10;
/// The pause before such a retry.
const EMPTY_ANSWER_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Why a topic could not be read over the Kafka protocol.
#[derive(Debug, Error)]
pub enum KafkaReadError {
    /// A request got no answer: connection, framing or decoding.
    #[error(transparent)]
    Client(#[from] KafkaClientError),
    /// An answer lacks what was asked for.
    #[error("Kafka protocol error: {0}")]
    Protocol(String),
    /// The broker answered with an error code.
    #[error("the broker answered {} for {what}", minibroker_kafka_client::error_name(*.code))]
    Broker {
        /// Kafka's error code.
        code: i16,
        /// What was asked.
        what: String,
    },
    /// A stored batch did not decode.
    #[error(transparent)]
    Records(#[from] minibroker_records::RecordsError),
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// Reads every data batch of every partition of `topic` from the Kafka listener at `addr`
/// (markers left out).
///
/// # Errors
/// Connection and protocol failures, broker error codes (an unknown topic among them), and
/// batches that do not decode.
pub async fn read_topic_kafka(
    addr: &str,
    topic: &str,
) -> Result<Vec<PartitionLog>, KafkaReadError> {
    let reads = read_topic_isolated(addr, topic, false).await?;
    Ok(reads.iter().map(PartitionReads::data_log).collect())
}

/// Reads every partition of `topic` as a `read_uncommitted` consumer sees it and, when
/// `read_committed`, as a `read_committed` one does too.
///
/// # Errors
/// As [`read_topic_kafka`].
pub async fn read_topic_isolated(
    addr: &str,
    topic: &str,
    read_committed: bool,
) -> Result<Vec<PartitionReads>, KafkaReadError> {
    let mut conn = KafkaConnection::connect(addr)
        .await?
        .with_client_id("minibroker-verify");
    let partitions = partition_indexes(&mut conn, topic).await?;
    let mut reads = Vec::with_capacity(partitions.len());
    for partition in partitions {
        // The read_committed read first: what it shows was decided before the full read, which
        // then sees how every transaction it shows ended.
        let committed = if read_committed {
            Some(read_partition(&mut conn, topic, partition, Read::Committed).await?)
        } else {
            None
        };
        let all = read_partition(&mut conn, topic, partition, Read::Uncommitted).await?;
        reads.push(PartitionReads {
            partition: u32::try_from(partition).unwrap_or(u32::MAX),
            all: all.batches,
            committed,
        });
    }
    Ok(reads)
}

/// The partitions of `topic`, in index order (Metadata).
async fn partition_indexes(
    conn: &mut KafkaConnection,
    topic: &str,
) -> Result<Vec<i32>, KafkaReadError> {
    let metadata = minibroker_kafka_client::metadata_request(topic, false);
    let metadata: MetadataResponse = conn
        .call(ApiKey::Metadata, METADATA_VERSION, &metadata)
        .await?;
    let found = metadata
        .topics
        .first()
        .ok_or_else(|| KafkaReadError::Protocol("no topic in the Metadata answer".into()))?;
    if found.error_code != 0 {
        return Err(KafkaReadError::Broker {
            code: found.error_code,
            what: format!("topic {topic:?}"),
        });
    }
    let mut partitions: Vec<i32> = found.partitions.iter().map(|p| p.partition_index).collect();
    partitions.sort_unstable();
    Ok(partitions)
}

/// Which read of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Everything, as `read_uncommitted`.
    Uncommitted,
    /// As `read_committed`.
    Committed,
    /// As `read_committed`, keeping each batch's bytes.
    CommittedWithRecords,
}

/// The value of every record a `read_committed` consumer of `topic` gets from the Kafka listener
/// at `addr`, partition by partition.
///
/// # Errors
/// As [`read_topic_kafka`].
pub async fn read_committed_values(
    addr: &str,
    topic: &str,
) -> Result<Vec<(u32, Bytes)>, KafkaReadError> {
    let mut conn = KafkaConnection::connect(addr)
        .await?
        .with_client_id("minibroker-verify");
    let mut values = Vec::new();
    for partition in partition_indexes(&mut conn, topic).await? {
        let read = read_partition(&mut conn, topic, partition, Read::CommittedWithRecords).await?;
        let kept = crate::isolation::kept_by_client(&read);
        for batch in read
            .batches
            .iter()
            .filter(|b| kept.contains(&b.base_offset))
        {
            let Some(bytes) = &batch.bytes else { continue };
            let decoded = minibroker_records::decode(bytes)?;
            values.extend(decoded.records.into_iter().map(|r| {
                (
                    u32::try_from(partition).unwrap_or(u32::MAX),
                    r.value.unwrap_or_default(),
                )
            }));
        }
    }
    Ok(values)
}

async fn read_partition(
    conn: &mut KafkaConnection,
    topic: &str,
    partition: i32,
    kind: Read,
) -> Result<PartitionRead, KafkaReadError> {
    let read_committed = kind != Read::Uncommitted;
    let mut read = PartitionRead::default();
    let mut offset = 0i64;
    let mut empty_answers = EmptyAnswers::default();
    loop {
        let wanted = FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(1 << 20);
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_isolation_level(i8::from(read_committed))
            .with_max_wait_ms(FETCH_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(vec![wanted]),
            ]);
        let answer: FetchResponse = conn.call(ApiKey::Fetch, FETCH_VERSION, &request).await?;
        let Some(data) = answer.responses.first().and_then(|t| t.partitions.first()) else {
            if empty_answers.wait_for_another().await {
                continue;
            }
            return Err(KafkaReadError::Protocol(format!(
                "no partition in {} Fetch answers for {topic}/{partition} at offset {offset}",
                empty_answers.seen
            )));
        };
        if data.error_code == OFFSET_OUT_OF_RANGE && data.log_start_offset > offset {
            // Older records were deleted: start where the log starts now.
            offset = data.log_start_offset;
            continue;
        }
        if data.error_code != 0 {
            return Err(KafkaReadError::Broker {
                code: data.error_code,
                what: format!("{topic}/{partition} at offset {offset}"),
            });
        }
        let before = offset;
        for batch in whole_batches(data.records.clone().unwrap_or_default()) {
            let decoded = minibroker_records::decode(&batch)?;
            offset = minibroker_records::end_offset(&batch);
            let commit = minibroker_records::marker(&batch)?.map(|marker| marker.commit);
            read.batches.push(FetchedBatch {
                base_offset: decoded.base_offset,
                info: decoded.info,
                commit,
                bytes: (kind == Read::CommittedWithRecords).then(|| batch.clone()),
                payloads: if decoded.info.control {
                    Vec::new()
                } else {
                    crate::StoredPayload::of_records(&decoded.records).collect()
                },
            });
        }
        for aborted in data.aborted_transactions.iter().flatten() {
            let named = (aborted.producer_id.0, aborted.first_offset);
            if !read.aborted.contains(&named) {
                read.aborted.push(named);
            }
        }
        read.end = if read_committed {
            data.last_stable_offset
        } else {
            data.high_watermark
        };
        if offset >= read.end {
            break;
        }
        if offset == before {
            // Nothing below the end came back: retry a few times (a broker may still be
            // making it readable), then stop where the records stop.
            if !empty_answers.wait_for_another().await {
                break;
            }
        } else {
            empty_answers = EmptyAnswers::default();
        }
    }
    Ok(read)
}

/// Fetch answers in a row that brought nothing to read.
#[derive(Debug, Default)]
struct EmptyAnswers {
    seen: u32,
}

impl EmptyAnswers {
    /// Counts one more; if retries are left, pauses and returns `true`.
    async fn wait_for_another(&mut self) -> bool {
        self.seen += 1;
        if self.seen > EMPTY_ANSWER_RETRIES {
            return false;
        }
        tokio::time::sleep(EMPTY_ANSWER_PAUSE).await;
        true
    }
}

impl PartitionReads {
    /// The data batches (markers left out), for the exactly-once check, with the payload ids
    /// of every batch whose transaction did not abort (an aborted one's records are not stored,
    /// as a consumer sees it; their retry in a later transaction is no duplicate).
    #[must_use]
    pub fn data_log(&self) -> PartitionLog {
        let fates = crate::isolation::fates(&self.all);
        let data = || self.all.iter().filter(|b| !b.info.control);
        PartitionLog {
            partition: self.partition,
            batches: data()
                .map(|b| StoredBatch::new(b.base_offset, &b.info))
                .collect(),
            payloads: data()
                .filter(|b| fates.get(&b.base_offset) != Some(&crate::isolation::Fate::Aborted))
                .flat_map(|b| b.payloads.iter().copied())
                .collect(),
        }
    }
}
