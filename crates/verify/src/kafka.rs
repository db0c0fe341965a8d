//! Reading a topic over the Kafka protocol, so the same exactly-once check runs against any
//! Kafka-compatible broker (this one's Kafka listener, Apache Kafka, Redpanda): Metadata for the
//! partition count, then Fetch from the log start to the high watermark, batch by batch, with
//! the producer metadata every v2 batch header carries.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{PartitionLog, StoredBatch};

/// The Metadata and Fetch versions used (supported by Kafka 2.8 and later, and by minibroker).
const METADATA_VERSION: i16 = 9;
const FETCH_VERSION: i16 = 11;
/// Largest answer accepted.
const MAX_FRAME: usize = 64 << 20;
/// Kafka's OFFSET_OUT_OF_RANGE.
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// Why a topic could not be read over the Kafka protocol.
#[derive(Debug, Error)]
pub enum KafkaReadError {
    /// The connection failed.
    #[error("cannot reach {addr}: {source}")]
    Io {
        /// The broker.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A message could not be encoded or decoded.
    #[error("Kafka protocol error: {0}")]
    Protocol(String),
    /// The broker answered with an error code.
    #[error("the broker answered error {code} for {what}")]
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

/// One connection to a Kafka listener, for request-and-answer use (the verifier's reads, and
/// `minibroker groups`).
pub struct KafkaConnection {
    addr: String,
    stream: TcpStream,
    next_correlation_id: i32,
}

impl KafkaConnection {
    /// Connects to `addr`.
    ///
    /// # Errors
    /// [`KafkaReadError::Io`] if it cannot.
    pub async fn connect(addr: &str) -> Result<Self, KafkaReadError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| KafkaReadError::Io {
                addr: addr.to_owned(),
                source,
            })?;
        Ok(Self {
            addr: addr.to_owned(),
            stream,
            next_correlation_id: 1,
        })
    }

    fn io(&self, source: std::io::Error) -> KafkaReadError {
        KafkaReadError::Io {
            addr: self.addr.clone(),
            source,
        }
    }

    /// Sends `request` as `api` at `version` and decodes the answer.
    ///
    /// # Errors
    /// Connection and protocol failures.
    pub async fn call<Q: Encodable, A: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Q,
    ) -> Result<A, KafkaReadError> {
        let protocol = |error: anyhow::Error| KafkaReadError::Protocol(format!("{error:#}"));
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let mut frame = BytesMut::new();
        minibroker_records::encode_request(
            &mut frame,
            api,
            version,
            correlation_id,
            Some("minibroker-verify"),
            request,
        )
        .map_err(|error| KafkaReadError::Protocol(error.to_string()))?;
        self.stream
            .write_all(&frame)
            .await
            .map_err(|e| self.io(e))?;
        let length = self.stream.read_u32().await.map_err(|e| self.io(e))? as usize;
        if length > MAX_FRAME {
            return Err(KafkaReadError::Protocol(format!(
                "an answer of {length} bytes"
            )));
        }
        let mut answer = vec![0; length];
        self.stream
            .read_exact(&mut answer)
            .await
            .map_err(|e| self.io(e))?;
        let mut answer = Bytes::from(answer);
        let header = ResponseHeader::decode(&mut answer, api.response_header_version(version))
            .map_err(protocol)?;
        if header.correlation_id != correlation_id {
            return Err(KafkaReadError::Protocol(format!(
                "answer {} for request {correlation_id}",
                header.correlation_id
            )));
        }
        A::decode(&mut answer, version).map_err(protocol)
    }
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// Reads every batch of every partition of `topic` from the Kafka listener at `addr`.
///
/// # Errors
/// Connection and protocol failures, broker error codes (an unknown topic among them), and
/// batches that do not decode.
pub async fn read_topic_kafka(
    addr: &str,
    topic: &str,
) -> Result<Vec<PartitionLog>, KafkaReadError> {
    let mut conn = KafkaConnection::connect(addr).await?;
    let metadata = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(topic_name(topic))),
        ]))
        .with_allow_auto_topic_creation(false);
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
    let mut logs = Vec::with_capacity(partitions.len());
    for partition in partitions {
        logs.push(read_partition(&mut conn, topic, partition).await?);
    }
    Ok(logs)
}

async fn read_partition(
    conn: &mut KafkaConnection,
    topic: &str,
    partition: i32,
) -> Result<PartitionLog, KafkaReadError> {
    let mut batches = Vec::new();
    let mut offset = 0i64;
    loop {
        let wanted = FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(1 << 20);
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(vec![wanted]),
            ]);
        let answer: FetchResponse = conn.call(ApiKey::Fetch, FETCH_VERSION, &request).await?;
        let data = answer
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| KafkaReadError::Protocol("no partition in the Fetch answer".into()))?;
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
            offset = decoded.base_offset + i64::from(decoded.info.record_count);
            batches.push(StoredBatch::new(decoded.base_offset, &decoded.info));
        }
        if offset >= data.high_watermark || offset == before {
            break;
        }
    }
    Ok(PartitionLog {
        partition: u32::try_from(partition).unwrap_or(u32::MAX),
        batches,
    })
}

/// The whole batches in a Fetch answer's records (a broker may cut the last one short).
fn whole_batches(mut records: Bytes) -> Vec<Bytes> {
    let mut batches = Vec::new();
    while records.len() >= 12 {
        let length = (&records[8..12]).get_i32();
        let Ok(length) = usize::try_from(length) else {
            break;
        };
        if records.len() < 12 + length {
            break;
        }
        batches.push(records.split_to(12 + length));
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_cut_short_at_the_end_is_left_out() {
        let writer = minibroker_records::Writer {
            producer_id: 1,
            epoch: 0,
            base_sequence: 0,
        };
        let one = minibroker_records::encode(writer, &["a".into()], 0).expect("encodes");
        let mut records = BytesMut::new();
        records.extend_from_slice(&one);
        records.extend_from_slice(&one);
        records.extend_from_slice(&one[..20]);
        assert_eq!(whole_batches(records.freeze()).len(), 2);
    }
}
