//! The Produce reader and answer writer of `produce_wire`, held to `kafka-protocol`:
//!
//! - every request the crate encodes, at every version served, reads to the same fields;
//! - every damaged request (cut short, a byte changed, a length made huge) the reader accepts,
//!   the crate decodes to the same fields — the reader never accepts what the crate would read
//!   otherwise — and the reader never panics;
//! - every answer written decodes with the crate to the answer meant.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
    TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use minibroker_kafka::produce_wire::{self, PartitionAnswer, PartitionData, ProduceView};
use proptest::prelude::*;
use std::collections::BTreeMap;

const VERSIONS: std::ops::RangeInclusive<i16> = 3..=12;

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

/// Strings as clients send them, some not ASCII.
fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9._\\-é€]{0,12}"
}

/// Unknown tagged fields, which a flexible request may carry at any level.
fn tags() -> impl Strategy<Value = BTreeMap<i32, Bytes>> {
    prop::collection::btree_map(0..1000i32, prop::collection::vec(any::<u8>(), 0..6), 0..3)
        .prop_map(|tags| {
            tags.into_iter()
                .map(|(tag, value)| (tag, Bytes::from(value)))
                .collect()
        })
}

fn partition() -> impl Strategy<Value = PartitionProduceData> {
    (
        any::<i32>(),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..80)),
        tags(),
    )
        .prop_map(|(index, records, tags)| {
            let mut data = PartitionProduceData::default()
                .with_index(index)
                .with_records(records.map(Bytes::from));
            data.unknown_tagged_fields = tags;
            data
        })
}

fn topic() -> impl Strategy<Value = TopicProduceData> {
    (name(), prop::collection::vec(partition(), 0..4), tags()).prop_map(
        |(name, partitions, tags)| {
            let mut topic = TopicProduceData::default()
                .with_name(TopicName(text(&name)))
                .with_partition_data(partitions);
            topic.unknown_tagged_fields = tags;
            topic
        },
    )
}

/// A request as the crate would send it, with its header.
#[derive(Debug, Clone)]
struct Sent {
    version: i16,
    header: RequestHeader,
    request: ProduceRequest,
}

fn sent() -> impl Strategy<Value = Sent> {
    (
        VERSIONS,
        any::<i32>(),
        prop::option::of(name()),
        prop::option::of(name()),
        any::<i16>(),
        any::<i32>(),
        prop::collection::vec(topic(), 0..4),
        tags(),
    )
        .prop_map(
            |(
                version,
                correlation_id,
                client_id,
                transactional_id,
                acks,
                timeout,
                topics,
                tags,
            )| {
                let header = RequestHeader::default()
                    .with_request_api_key(ApiKey::Produce as i16)
                    .with_request_api_version(version)
                    .with_correlation_id(correlation_id)
                    .with_client_id(client_id.map(|id| text(&id)));
                let mut request = ProduceRequest::default()
                    .with_transactional_id(transactional_id.map(|id| TransactionalId(text(&id))))
                    .with_acks(acks)
                    .with_timeout_ms(timeout)
                    .with_topic_data(topics);
                request.unknown_tagged_fields = tags;
                if version < 9 {
                    // Tagged fields exist only in the flexible version.
                    request.unknown_tagged_fields.clear();
                    for topic in &mut request.topic_data {
                        topic.unknown_tagged_fields.clear();
                        for partition in &mut topic.partition_data {
                            partition.unknown_tagged_fields.clear();
                        }
                    }
                }
                Sent {
                    version,
                    header,
                    request,
                }
            },
        )
}

fn encode(sent: &Sent) -> Vec<u8> {
    let mut frame = BytesMut::new();
    let header_version = ApiKey::Produce.request_header_version(sent.version);
    sent.header
        .encode(&mut frame, header_version)
        .expect("the header encodes");
    sent.request
        .encode(&mut frame, sent.version)
        .expect("the request encodes");
    frame.to_vec()
}

/// What the crate reads from `frame`, in the reader's terms; `None` when it refuses it.
fn decoded_by_the_crate(frame: &[u8], version: i16) -> Option<(i32, ProduceRequest)> {
    let mut bytes = Bytes::copy_from_slice(frame);
    let header =
        RequestHeader::decode(&mut bytes, ApiKey::Produce.request_header_version(version)).ok()?;
    let request = ProduceRequest::decode(&mut bytes, version).ok()?;
    Some((header.correlation_id, request))
}

/// Whether the reader's view holds the same fields as the crate's request.
fn same_fields(view: &ProduceView<'_>, correlation_id: i32, request: &ProduceRequest) -> bool {
    let topics: Vec<&str> = request.topic_data.iter().map(|t| t.name.as_str()).collect();
    let partitions: Vec<PartitionData<'_>> = request
        .topic_data
        .iter()
        .enumerate()
        .flat_map(|(ordinal, topic)| {
            topic.partition_data.iter().map(move |p| PartitionData {
                topic: ordinal,
                index: p.index,
                records: p.records.as_deref(),
            })
        })
        .collect();
    view.correlation_id == correlation_id
        && view.transactional_id == request.transactional_id.as_ref().map(|id| id.as_str())
        && view.acks == request.acks
        && view.timeout_ms == request.timeout_ms
        && view.topics == topics
        && view.partitions == partitions
}

#[derive(Debug, Clone)]
enum Damage {
    CutAt(usize),
    Set(usize, u8),
    /// Four bytes of 0x7f from here: a huge length or count.
    Huge(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<usize>().prop_map(Damage::CutAt),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Damage::Set(at, byte)),
        any::<usize>().prop_map(Damage::Huge),
    ]
}

fn apply(frame: &mut Vec<u8>, damage: &Damage) {
    if frame.is_empty() {
        return;
    }
    match *damage {
        Damage::CutAt(at) => frame.truncate(at % frame.len()),
        Damage::Set(at, byte) => {
            let at = at % frame.len();
            frame[at] = byte;
        }
        Damage::Huge(at) => {
            let at = at % frame.len();
            for byte in frame.iter_mut().skip(at).take(4) {
                *byte = 0x7f;
            }
        }
    }
}

fn answers() -> impl Strategy<Value = Vec<(i16, i64, i64, Option<String>)>> {
    prop::collection::vec(
        (
            any::<i16>(),
            any::<i64>(),
            any::<i64>(),
            prop::option::of(name()),
        ),
        0..16,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn every_request_the_crate_encodes_reads_to_the_same_fields(sent in sent()) {
        let frame = encode(&sent);
        let view = produce_wire::read(&frame, sent.version).expect("a request the crate wrote");
        prop_assert!(same_fields(&view, sent.header.correlation_id, &sent.request), "{view:?}");
    }

    #[test]
    fn a_damaged_request_is_read_only_as_the_crate_reads_it(
        sent in sent(),
        damages in prop::collection::vec(damage(), 1..4),
    ) {
        let mut frame = encode(&sent);
        for damage in &damages {
            apply(&mut frame, damage);
        }
        if let Ok(view) = produce_wire::read(&frame, sent.version) {
            let crate_read = decoded_by_the_crate(&frame, sent.version);
            prop_assert!(crate_read.is_some(), "the reader accepted what the crate refuses");
            let (correlation_id, request) = crate_read.expect("checked");
            prop_assert!(same_fields(&view, correlation_id, &request), "{view:?} / {request:?}");
        }
    }

    #[test]
    fn every_answer_written_decodes_with_the_crate_to_the_answer_meant(
        sent in sent(),
        chosen in answers(),
    ) {
        let frame = encode(&sent);
        let version = sent.version;
        let view = produce_wire::read(&frame, version).expect("a request the crate wrote");
        let answers: Vec<PartitionAnswer> = view
            .partitions
            .iter()
            .enumerate()
            .map(|(i, partition)| {
                let (error_code, base_offset, log_start_offset, message) =
                    chosen.get(i).cloned().unwrap_or((0, 0, 0, None));
                PartitionAnswer {
                    index: partition.index,
                    error_code,
                    base_offset,
                    log_start_offset,
                    error_message: message,
                }
            })
            .collect();
        let mut out = BytesMut::new();
        produce_wire::write_answer(&mut out, &view, &answers, version);

        // What the crate would have encoded for the same answer.
        let mut next = answers.iter();
        let responses = sent.request.topic_data.iter().map(|topic| {
            let partitions = topic.partition_data.iter().map(|_| {
                let answer = next.next().expect("one answer per partition");
                let mut response = PartitionProduceResponse::default()
                    .with_index(answer.index)
                    .with_error_code(answer.error_code)
                    .with_base_offset(answer.base_offset)
                    .with_log_append_time_ms(-1);
                if version >= 5 {
                    response = response.with_log_start_offset(answer.log_start_offset);
                }
                if version >= 8 {
                    response = response.with_error_message(answer.error_message.as_deref().map(text));
                }
                response
            });
            TopicProduceResponse::default()
                .with_name(topic.name.clone())
                .with_partition_responses(partitions.collect())
        });
        let meant = ProduceResponse::default().with_responses(responses.collect());

        let mut bytes = out.freeze();
        let length = u32::from_be_bytes(bytes[..4].try_into().expect("a length"));
        prop_assert_eq!(length as usize, bytes.len() - 4);
        let _ = bytes.split_to(4);
        let header = ResponseHeader::decode(&mut bytes, ApiKey::Produce.response_header_version(version))
            .expect("the header decodes");
        prop_assert_eq!(header.correlation_id, sent.header.correlation_id);
        let decoded = ProduceResponse::decode(&mut bytes, version).expect("the answer decodes");
        prop_assert!(bytes.is_empty(), "{} bytes after the answer", bytes.len());
        prop_assert_eq!(decoded, meant);
    }
}

#[test]
fn a_hostile_count_is_refused_before_anything_is_allocated_for_it() {
    let sent = Sent {
        version: 3,
        header: RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(3),
        request: ProduceRequest::default(),
    };
    let mut frame = encode(&sent);
    // The topic count is the request's last four bytes.
    let at = frame.len() - 4;
    frame[at..].copy_from_slice(&i32::MAX.to_be_bytes());
    assert_eq!(
        produce_wire::read(&frame, 3),
        Err(produce_wire::Malformed::BadLength)
    );
}
