//! The load generator's two wires: one produce request and its answer, in the native protocol or
//! in Kafka's (Produce v9, encoded with the `kafka-protocol` crate), around the same prebuilt
//! v2 batch — so both front ends, and any Kafka-compatible broker, are measured by one generator.

use anyhow::Result;
use bytes::{Bytes, BytesMut};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest as KafkaProduce, ProduceResponse as KafkaAnswer, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use minibroker_protocol::{FrameCodec, Outcome, ProduceRequest, Request, Response, codec};
use tokio_util::codec::Encoder;

/// Which protocol the generator speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// minibroker's native protocol.
    Native,
    /// The Kafka protocol.
    Kafka,
}

const KAFKA_PRODUCE_VERSION: i16 = 9;

/// The InitProducerId version the generator asks with.
const IDENTITY_VERSION: i16 = 4;

/// One partition's produce request, encoded once: each send restamps its correlation id and its
/// batch's base sequence (and CRC) in place and copies the frame out, so the generator spends no
/// time encoding on either wire.
pub struct Prepared {
    frame: Vec<u8>,
    /// Where the correlation id is in the frame (big-endian u32 or i32).
    correlation_at: usize,
    /// Where the batch is in the frame.
    batch: std::ops::Range<usize>,
}

impl Prepared {
    /// Appends the request for `correlation_id`, its batch starting at `sequence`, to `out`.
    pub fn write(&mut self, correlation_id: u32, sequence: i32, out: &mut BytesMut) {
        let at = self.correlation_at;
        self.frame[at..at + 4].copy_from_slice(&correlation_id.to_be_bytes());
        minibroker_records::set_base_sequence(&mut self.frame[self.batch.clone()], sequence);
        out.extend_from_slice(&self.frame);
    }
}

impl Wire {
    /// Encodes the produce request of `batch` to `topic`/`partition` once.
    pub fn prepare(self, topic: &str, partition: u32, batch: &[u8]) -> Result<Prepared> {
        let mut frame = BytesMut::new();
        self.encode_produce(0, topic, partition, batch, &mut frame)?;
        let at = frame
            .windows(batch.len())
            .position(|window| window == batch)
            .ok_or_else(|| anyhow::anyhow!("the batch is not in its request"))?;
        Ok(Prepared {
            frame: frame.to_vec(),
            // Length prefix, then (native) a version byte, or (Kafka) the API key and version.
            correlation_at: match self {
                Self::Native => 5,
                Self::Kafka => 8,
            },
            batch: at..at + batch.len(),
        })
    }

    /// Appends one produce request frame for `batch` to `out`.
    fn encode_produce(
        self,
        correlation_id: u32,
        topic: &str,
        partition: u32,
        batch: &[u8],
        out: &mut BytesMut,
    ) -> Result<()> {
        match self {
            Self::Native => {
                let request = Request::Produce(ProduceRequest {
                    topic,
                    partition,
                    batch: minibroker_protocol::serde_bytes::Bytes::new(batch),
                });
                FrameCodec::default().encode((correlation_id, &request), out)?;
            }
            Self::Kafka => {
                let data = PartitionProduceData::default()
                    .with_index(i32::try_from(partition)?)
                    .with_records(Some(Bytes::copy_from_slice(batch)));
                let request = KafkaProduce::default()
                    .with_acks(-1)
                    .with_timeout_ms(30_000)
                    .with_topic_data(vec![
                        TopicProduceData::default()
                            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                            .with_partition_data(vec![data]),
                    ]);
                minibroker_kafka_client::encode_request(
                    out,
                    ApiKey::Produce,
                    KAFKA_PRODUCE_VERSION,
                    correlation_id as i32,
                    None,
                    &request,
                )?;
            }
        }
        Ok(())
    }

    /// A successful answer to a produce of partition 0 of the benchmark's topic, for the
    /// do-nothing baseline: its frame body, where a request's correlation id is (in its frame
    /// body), and where the answer's is.
    pub fn fixed_ack(self) -> (Bytes, usize, usize) {
        match self {
            Self::Native => {
                let body = codec::encode_body(
                    0,
                    &Response::Produce(minibroker_protocol::ProduceResponse {
                        outcome: Outcome::Accepted,
                        base_offset: Some(0),
                    }),
                )
                .expect("the fixed acknowledgement encodes");
                // A version byte, then the correlation id, in both.
                (body, 1, 1)
            }
            Self::Kafka => {
                use kafka_protocol::messages::produce_response::{
                    PartitionProduceResponse, TopicProduceResponse,
                };
                let answer = KafkaAnswer::default().with_responses(vec![
                    TopicProduceResponse::default()
                        .with_name(TopicName(StrBytes::from_static_str(super::TOPIC)))
                        .with_partition_responses(vec![
                            PartitionProduceResponse::default().with_base_offset(0),
                        ]),
                ]);
                // The request's API key and version come before its correlation id; the
                // answer's header starts with it.
                let body = kafka_answer(ApiKey::Produce, KAFKA_PRODUCE_VERSION, &answer);
                (body, 4, 0)
            }
        }
    }

    /// For the Kafka wire, the do-nothing baseline's answer to [`Self::producer_identity`]'s
    /// request (producer id 1, epoch 0), and that request's API key.
    pub fn fixed_identity_ack(self) -> Option<(i16, Bytes)> {
        use kafka_protocol::messages::InitProducerIdResponse;
        if self == Self::Native {
            return None;
        }
        let answer = InitProducerIdResponse::default()
            .with_producer_id(kafka_protocol::messages::ProducerId(1))
            .with_producer_epoch(0);
        let body = kafka_answer(ApiKey::InitProducerId, IDENTITY_VERSION, &answer);
        Some((ApiKey::InitProducerId as i16, body))
    }

    /// Asks a Kafka broker at `addr` for a producer id and epoch (InitProducerId v4, not
    /// transactional), over a connection of its own, as a real idempotent producer does before
    /// its first batch: brokers that issue ids refuse batches from ids they never issued. The
    /// native protocol takes the caller's id.
    pub async fn producer_identity(self, proposed: i64, addr: &str) -> Result<(i64, i16)> {
        use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};
        if self == Self::Native {
            return Ok((proposed, 0));
        }
        // Not transactional (the crate's default is an empty transactional id), and no id yet
        // (-1, -1): what librdkafka sends for a new idempotent producer.
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(kafka_protocol::messages::ProducerId(-1))
            .with_producer_epoch(-1);
        let mut connection = minibroker_kafka_client::KafkaConnection::connect(addr).await?;
        let answer: InitProducerIdResponse = connection
            .call(ApiKey::InitProducerId, IDENTITY_VERSION, &request)
            .await?;
        if answer.error_code != 0 {
            anyhow::bail!(
                "InitProducerId failed with {}",
                minibroker_kafka_client::error_name(answer.error_code)
            );
        }
        Ok((answer.producer_id.0, answer.producer_epoch))
    }

    /// The outcome slot (accepted, duplicate, out of order, fenced) of an answer frame's body,
    /// or `None` for an error answer.
    pub fn outcome(self, body: Bytes) -> Option<Outcome> {
        match self {
            Self::Native => match codec::decode_response(&body) {
                Ok((_, Response::Produce(produce))) => Some(produce.outcome),
                _ => None,
            },
            Self::Kafka => {
                let mut body = body;
                let version = ApiKey::Produce.response_header_version(KAFKA_PRODUCE_VERSION);
                ResponseHeader::decode(&mut body, version).ok()?;
                let answer = KafkaAnswer::decode(&mut body, KAFKA_PRODUCE_VERSION).ok()?;
                let code = answer
                    .responses
                    .first()?
                    .partition_responses
                    .first()?
                    .error_code;
                // Kafka answers a recognised retry as success: it counts as accepted here.
                match ResponseError::try_from_code(code) {
                    None => Some(Outcome::Accepted),
                    Some(ResponseError::DuplicateSequenceNumber) => Some(Outcome::Duplicate),
                    Some(ResponseError::OutOfOrderSequenceNumber) => Some(Outcome::OutOfOrder),
                    Some(ResponseError::InvalidProducerEpoch) => Some(Outcome::FencedEpoch),
                    Some(_) => None,
                }
            }
        }
    }
}

/// A Kafka answer's frame body: its header (correlation id 0) and `answer`, at `version` of `api`.
fn kafka_answer(
    api: ApiKey,
    version: i16,
    answer: &impl kafka_protocol::protocol::Encodable,
) -> Bytes {
    use kafka_protocol::protocol::Encodable;
    let mut body = BytesMut::new();
    ResponseHeader::default()
        .encode(&mut body, api.response_header_version(version))
        .expect("the header encodes");
    answer
        .encode(&mut body, version)
        .expect("the fixed answer encodes");
    body.freeze()
}
