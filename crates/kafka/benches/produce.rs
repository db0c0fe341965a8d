//! What one Kafka Produce request costs the broker, without the network, split into its parts:
//! the whole front end (the request read in place, the broker core, the answer written), the
//! broker core alone (the rule and the append, what every front end pays), `kafka-protocol`'s
//! decode and encode alone (what the front end did before `produce_wire`), and the in-place
//! read and write alone. The front end's cost less the core's is what the Kafka path adds to
//! a produce; `bench --kafka` measures the same over TCP, where the kernel's share is added.
//!
//! One producer, one partition, 1 record of 100 B per request (and 100 records), every request
//! ACCEPTED: each iteration stamps the batch with the next sequence (and its CRC), as a producer
//! would. The in-memory broker keeps 16 MiB (`retention_bytes`), as `bench --embedded` does.
//!
//! Run with `cargo bench -p minibroker-kafka`. Figures are printed, never asserted.

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, RequestHeader, RequestKind, ResponseHeader,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use minibroker_broker::{Broker, Outcome, Unacknowledged};
use minibroker_host::Config;
use minibroker_host::Host;
use minibroker_kafka::produce_wire::{self, PartitionAnswer};
use minibroker_kafka::{KafkaConfig, KafkaFrontEnd};
use minibroker_kafka_client::encode_request;
use minibroker_net::{FrontEnd, Next};
use minibroker_records::{NewRecord, Writer, encode, set_base_sequence};
use std::hint::black_box;
use std::ops::Range;
use std::sync::Arc;

/// The version librdkafka and the Java client send today.
const VERSION: i16 = 9;
const TOPIC: &str = "bench";

/// A Produce request's frame body (no length prefix, as a connection hands it over) with one
/// batch of `records` × 100 B, and where the batch is in it.
fn produce_frame(records: usize) -> (Vec<u8>, Range<usize>) {
    let writer = Writer {
        producer_id: 1000,
        epoch: 0,
        base_sequence: 0,
    };
    let values: Vec<_> = (0..records)
        .map(|_| NewRecord::value(Bytes::from(vec![b'x'; 100])))
        .collect();
    let batch = encode(writer, &values, 0).expect("encodes");
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch.clone())),
                ]),
        ]);
    let mut framed = BytesMut::new();
    encode_request(
        &mut framed,
        ApiKey::Produce,
        VERSION,
        1,
        Some("bench"),
        &request,
    )
    .expect("encodes");
    let body = framed[4..].to_vec();
    let at = body
        .windows(batch.len())
        .position(|window| window == batch.as_ref())
        .expect("the batch is in the request");
    (body, at..at + batch.len())
}

/// An in-memory broker as `bench --embedded` runs it.
fn config() -> Config {
    let mut config = Config::default();
    config.broker.retention_bytes = Some(16 << 20);
    config
}

/// The broker core alone.
fn broker() -> Broker {
    Broker::new(&config().broker).expect("a valid configuration")
}

/// A host around it, for the front end (inside the runtime: it starts the broker's clocks).
fn host() -> Host {
    Host::start(&config()).expect("a valid configuration")
}

/// Stamps the next sequence on the batch at `at` in `frame`.
fn next_request(frame: &mut [u8], at: &Range<usize>, sequence: &mut i32, records: usize) {
    set_base_sequence(&mut frame[at.clone()], *sequence);
    *sequence = (*sequence + records as i32) & i32::MAX;
}

/// The error code of the one partition in a Produce answer frame.
fn error_code(mut frame: Bytes) -> i16 {
    let _length = frame.split_to(4);
    ResponseHeader::decode(&mut frame, ApiKey::Produce.response_header_version(VERSION))
        .expect("decodes");
    let answer = ProduceResponse::decode(&mut frame, VERSION).expect("decodes");
    answer.responses[0].partition_responses[0].error_code
}

/// The answer the front end gives one accepted produce.
fn accepted_answer() -> ResponseKind {
    ResponseKind::Produce(ProduceResponse::default().with_responses(vec![
        TopicProduceResponse::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_responses(vec![
                PartitionProduceResponse::default()
                    .with_index(0)
                    .with_base_offset(1234)
                    .with_log_start_offset(0),
            ]),
    ]))
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    for records in [1usize, 100] {
        let (template, at) = produce_frame(records);
        let mut group = c.benchmark_group(format!("produce {records}x100B"));
        group.throughput(Throughput::Elements(1));

        let mut frame = template.clone();
        let mut sequence = 0;
        let host = runtime.block_on(async { host() });
        let mut front_end = runtime.block_on(async {
            KafkaFrontEnd::new(
                host.node(),
                Arc::new(KafkaConfig::from_config(
                    &Config::default(),
                    "127.0.0.1".into(),
                    9092,
                )),
                &minibroker_net::Peer::plain(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            )
        });
        let mut out = BytesMut::with_capacity(64 << 10);
        let mut serve = |out: &mut BytesMut| {
            next_request(&mut frame, &at, &mut sequence, records);
            let request = Bytes::copy_from_slice(&frame);
            runtime.block_on(async {
                assert_eq!(front_end.answer(request, out).await, Next::Continue);
                front_end.store_answered(out).await.expect("stored");
            });
        };
        group.bench_function("front end", |b| {
            b.iter(|| {
                serve(&mut out);
                out.clear();
            });
        });
        // Every request was in sequence, so the one after them is accepted too.
        serve(&mut out);
        assert_eq!(
            error_code(out.split().freeze()),
            0,
            "the produce was refused"
        );

        let mut frame = template.clone();
        let mut sequence = 0;
        let core = broker();
        let mut topics = Unacknowledged::default();
        group.bench_function("broker core", |b| {
            b.iter(|| {
                next_request(&mut frame, &at, &mut sequence, records);
                let batch = &frame[at.clone()];
                let verdict = runtime
                    .block_on(core.produce_stored(&mut topics, TOPIC, 0, batch))
                    .expect("stored");
                assert_eq!(verdict.outcome, Outcome::Accepted);
            });
        });

        let request = Bytes::copy_from_slice(&template);
        group.bench_function("decode", |b| {
            b.iter(|| {
                let mut body = black_box(request.clone());
                let header = RequestHeader::decode(
                    &mut body,
                    ApiKey::Produce.request_header_version(VERSION),
                )
                .expect("decodes");
                let request =
                    RequestKind::decode(ApiKey::Produce, &mut body, VERSION).expect("decodes");
                (header, request)
            });
        });

        let mut out = BytesMut::with_capacity(4096);
        group.bench_function("build and encode the answer", |b| {
            b.iter(|| {
                let answer = black_box(accepted_answer());
                ResponseHeader::default()
                    .with_correlation_id(1)
                    .encode(&mut out, ApiKey::Produce.response_header_version(VERSION))
                    .expect("encodes");
                answer.encode(&mut out, VERSION).expect("encodes");
                out.clear();
            });
        });

        // What the front end does instead: the request read in place, the answer written.
        group.bench_function("read in place", |b| {
            b.iter(|| {
                produce_wire::read(black_box(&template), VERSION)
                    .expect("reads")
                    .partitions
                    .len()
            });
        });
        let view = produce_wire::read(&template, VERSION).expect("reads");
        let answers = [PartitionAnswer {
            index: 0,
            error_code: 0,
            base_offset: 1234,
            log_start_offset: 0,
            error_message: None,
        }];
        group.bench_function("write the answer in place", |b| {
            b.iter(|| {
                produce_wire::write_answer(&mut out, black_box(&view), &answers, VERSION);
                out.clear();
            });
        });
        group.finish();
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
