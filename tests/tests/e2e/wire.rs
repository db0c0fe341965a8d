//! Wire tests: exact frames in, exact responses out, including every kind of bad input.

use anyhow::Result;
use minibroker_broker::budget::{PRODUCER_ENTRY_BYTES, topic_bytes};
use minibroker_broker::{BATCH_OVERHEAD_BYTES, BrokerConfig};
use minibroker_host::Config;
use minibroker_protocol::{
    ErrorCode, FetchRequest, InitProducerRequest, Outcome, ProduceResponse, Request, Response,
    VERSION,
};
use minibroker_tests::{RawConnection, TestBroker, frame, produce, start_broker};

fn outcome(response: &Response) -> (Outcome, Option<i64>) {
    match response {
        Response::Produce(ProduceResponse {
            outcome,
            base_offset,
        }) => (*outcome, *base_offset),
        other => panic!("expected a produce response, got {other:?}"),
    }
}

fn error_code(response: &Response) -> ErrorCode {
    match response {
        Response::Error(error) => {
            assert!(!error.message.is_empty(), "error without a message");
            error.code
        }
        other => panic!("expected an error response, got {other:?}"),
    }
}

#[tokio::test]
async fn seed_example_over_the_wire() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let steps = [
        (0, 0, Outcome::Accepted, Some(0)),
        (0, 1, Outcome::Accepted, Some(1)),
        (0, 1, Outcome::Duplicate, Some(1)),
        (0, 5, Outcome::OutOfOrder, None),
        (1, 0, Outcome::Accepted, Some(2)),
        (0, 2, Outcome::FencedEpoch, None),
    ];
    for (i, (epoch, sequence, expected, offset)) in steps.into_iter().enumerate() {
        let request = produce("seed", 0, 1, epoch, sequence, &[b"r"]);
        let response = conn.call(i as u32 + 1, &request).await?;
        assert_eq!(outcome(&response), (expected, offset), "step {i}");
    }
    Ok(())
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let mut all = Vec::new();
    for sequence in 0..200 {
        let request = produce("pipe", 0, 7, 0, sequence, &[b"x"]);
        all.extend_from_slice(&frame(1000 + sequence as u32, &request)?);
    }
    conn.write_raw(&all).await?;
    for sequence in 0..200 {
        let (id, response) = conn.receive().await?;
        assert_eq!(id, 1000 + sequence as u32);
        assert_eq!(
            outcome(&response),
            (Outcome::Accepted, Some(i64::from(sequence)))
        );
    }
    Ok(())
}

#[tokio::test]
async fn frames_split_into_single_bytes_are_reassembled() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let bytes = frame(5, &produce("split", 0, 1, 0, 0, &[b"hello"]))?;
    for byte in bytes.iter() {
        conn.write_raw(&[*byte]).await?;
        tokio::task::yield_now().await;
    }
    let (id, response) = conn.receive().await?;
    assert_eq!((id, outcome(&response)), (5, (Outcome::Accepted, Some(0))));
    Ok(())
}

#[tokio::test]
async fn garbage_body_gets_an_error_and_the_connection_stays_usable() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    // length 8: version, correlation id 42, then three bytes that are no request.
    conn.write_raw(&[0, 0, 0, 8, VERSION, 0, 0, 0, 42, 0xff, 0xff, 0xff])
        .await?;
    let (id, response) = conn.receive().await?;
    assert_eq!(
        (id, error_code(&response)),
        (42, ErrorCode::MalformedRequest)
    );
    let response = conn.call(43, &Request::Metadata).await?;
    assert!(matches!(response, Response::Metadata(_)));
    Ok(())
}

#[tokio::test]
async fn unknown_request_kind_is_malformed() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    conn.write_raw(&[0, 0, 0, 6, VERSION, 0, 0, 0, 9, 77])
        .await?;
    let (id, response) = conn.receive().await?;
    assert_eq!(
        (id, error_code(&response)),
        (9, ErrorCode::MalformedRequest)
    );
    Ok(())
}

#[tokio::test]
async fn frame_shorter_than_its_header_gets_an_error_with_id_zero() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    conn.write_raw(&[0, 0, 0, 2, VERSION, 0]).await?;
    let (id, response) = conn.receive().await?;
    assert_eq!(
        (id, error_code(&response)),
        (0, ErrorCode::MalformedRequest)
    );
    assert!(matches!(
        conn.call(1, &Request::Metadata).await?,
        Response::Metadata(_)
    ));
    Ok(())
}

#[tokio::test]
async fn unsupported_version_is_reported() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    conn.write_raw(&[0, 0, 0, 6, 99, 0, 0, 0, 3, 4]).await?;
    let (id, response) = conn.receive().await?;
    assert_eq!(
        (id, error_code(&response)),
        (3, ErrorCode::UnsupportedVersion)
    );
    Ok(())
}

#[tokio::test]
async fn oversize_frame_closes_only_that_connection() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            max_frame_bytes: 1024,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut bystander = RawConnection::connect(broker.addr).await?;
    let mut offender = RawConnection::connect(broker.addr).await?;
    // Claims 1 GiB; the broker must refuse it from the length alone.
    offender
        .write_raw(&[0x40, 0, 0, 0, VERSION, 0, 0, 0, 1])
        .await?;
    let last_words = offender.expect_closed().await?;
    assert_eq!(last_words.len(), 1);
    assert_eq!(error_code(&last_words[0]), ErrorCode::MalformedRequest);
    let response = bystander
        .call(1, &produce("t", 0, 1, 0, 0, &[b"ok"]))
        .await?;
    assert_eq!(outcome(&response), (Outcome::Accepted, Some(0)));
    Ok(())
}

#[tokio::test]
async fn truncated_frame_closes_only_that_connection() -> Result<()> {
    let broker = start_broker().await?;
    let mut offender = RawConnection::connect(broker.addr).await?;
    let whole = frame(1, &produce("t", 0, 1, 0, 0, &[b"never stored"]))?;
    offender.write_raw(&whole[..whole.len() - 3]).await?;
    offender.finish_writing().await?;
    offender.expect_closed().await?;
    let mut other = RawConnection::connect(broker.addr).await?;
    let response = other
        .call(2, &produce("t", 0, 1, 0, 0, &[b"stored"]))
        .await?;
    assert_eq!(outcome(&response), (Outcome::Accepted, Some(0)));
    Ok(())
}

#[tokio::test]
async fn unknown_topic_is_an_error_when_auto_create_is_off() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            auto_create_topics: false,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let response = conn.call(1, &produce("nope", 0, 1, 0, 0, &[b"x"])).await?;
    assert_eq!(error_code(&response), ErrorCode::UnknownTopic);
    Ok(())
}

#[tokio::test]
async fn fetch_and_describe_never_create_topics() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let fetch = Request::Fetch(FetchRequest {
        topic: "ghost",
        partition: 0,
        offset: 0,
        max_bytes: 100,
    });
    assert_eq!(
        error_code(&conn.call(1, &fetch).await?),
        ErrorCode::UnknownTopic
    );
    assert!(broker.broker.metadata().is_empty());
    Ok(())
}

#[tokio::test]
async fn partition_out_of_range_is_an_error() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let response = conn.call(1, &produce("t", 1, 1, 0, 0, &[b"x"])).await?;
    assert_eq!(error_code(&response), ErrorCode::PartitionOutOfRange);
    if let Response::Error(error) = response {
        assert!(
            error.message.contains("has 1 partition"),
            "{}",
            error.message
        );
    }
    Ok(())
}

#[tokio::test]
async fn negative_fields_are_invalid_and_create_nothing() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    // Producer id -1 is Kafka's "not idempotent"; below it nothing is valid.
    for (i, request) in [
        produce("t", 0, -2, 0, 0, &[b"x"]),
        produce("t", 0, 1, -1, 0, &[b"x"]),
        produce("t", 0, 1, 0, -1, &[b"x"]),
    ]
    .iter()
    .enumerate()
    {
        let response = conn.call(i as u32, request).await?;
        assert_eq!(
            error_code(&response),
            ErrorCode::InvalidInput,
            "request {i}"
        );
    }
    let init = Request::InitProducer(InitProducerRequest {
        producer_id: Some(-5),
    });
    assert_eq!(
        error_code(&conn.call(9, &init).await?),
        ErrorCode::InvalidInput
    );
    assert!(broker.broker.metadata().is_empty());
    Ok(())
}

/// A valid one-record batch with its header field at `at` overwritten by `value`, and a CRC
/// that matches again (so only the field's meaning is wrong).
fn with_field(at: usize, value: &[u8]) -> Vec<u8> {
    let mut batch = minibroker_tests::batch(1, 0, 0, &[b"x"]);
    batch[at..at + value.len()].copy_from_slice(value);
    let sequence = i32::from_be_bytes(batch[53..57].try_into().expect("4 bytes"));
    minibroker_records::set_base_sequence(&mut batch, sequence);
    batch
}

#[tokio::test]
async fn bad_batches_are_refused_with_their_codes_and_create_nothing() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let good = minibroker_tests::batch(1, 0, 0, &[b"x"]);
    let mut bad_crc = good.clone();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0xff;
    let mut old_magic = good.clone();
    old_magic[16] = 1;
    let cases = [
        (b"not a batch".to_vec(), ErrorCode::CorruptBatch),
        (good[..good.len() - 1].to_vec(), ErrorCode::CorruptBatch),
        (bad_crc, ErrorCode::CorruptBatch),
        (old_magic, ErrorCode::InvalidBatch),
        // No records.
        (with_field(57, &0i32.to_be_bytes()), ErrorCode::InvalidBatch),
        // Transactional (attribute bit 4).
        (with_field(21, &16i16.to_be_bytes()), ErrorCode::Unsupported),
    ];
    for (i, (batch, code)) in cases.into_iter().enumerate() {
        let request = minibroker_tests::OwnedProduce {
            topic: "t".into(),
            partition: 0,
            batch,
        };
        let response = conn.call(i as u32, &request).await?;
        assert_eq!(error_code(&response), code, "case {i}");
    }
    assert!(broker.broker.metadata().is_empty());
    // The connection is still good.
    let response = conn.call(99, &produce("t", 0, 1, 0, 0, &[b"x"])).await?;
    assert_eq!(outcome(&response), (Outcome::Accepted, Some(0)));
    Ok(())
}

#[tokio::test]
async fn a_producer_that_is_not_idempotent_is_appended_without_the_rule() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    // Producer id -1: the same batch twice is stored twice, as Kafka does without idempotence.
    for (i, offset) in [(1, 0), (2, 1)] {
        let response = conn.call(i, &produce("t", 0, -1, -1, -1, &[b"x"])).await?;
        assert_eq!(outcome(&response), (Outcome::Accepted, Some(offset)));
    }
    assert!(broker.broker.producers("t", 0)?.is_empty());
    Ok(())
}

#[tokio::test]
async fn bad_topic_name_is_invalid_input() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    for name in ["", "has space", "..", &"x".repeat(250)] {
        let response = conn.call(1, &produce(name, 0, 1, 0, 0, &[b"x"])).await?;
        assert_eq!(error_code(&response), ErrorCode::InvalidInput, "{name:?}");
    }
    Ok(())
}

#[tokio::test]
async fn fetch_offset_out_of_range_is_an_error() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    conn.call(1, &produce("t", 0, 1, 0, 0, &[b"a", b"b"]))
        .await?;
    let fetch = |offset| {
        Request::Fetch(FetchRequest {
            topic: "t",
            partition: 0,
            offset,
            max_bytes: 100,
        })
    };
    assert_eq!(
        error_code(&conn.call(2, &fetch(3)).await?),
        ErrorCode::OffsetOutOfRange
    );
    assert_eq!(
        error_code(&conn.call(3, &fetch(-1)).await?),
        ErrorCode::OffsetOutOfRange
    );
    match conn.call(4, &fetch(1)).await? {
        Response::Fetch(fetched) => {
            assert_eq!(fetched.high_watermark, 2);
            // The whole batch holding offset 1, which starts at 0.
            assert_eq!(fetched.batches.len(), 1);
            let batch = minibroker_records::decode(&fetched.batches[0])?;
            assert_eq!(batch.base_offset, 0);
            let values: Vec<_> = batch.records.iter().map(|r| r.value.clone()).collect();
            assert_eq!(
                values,
                vec![
                    Some(bytes::Bytes::from_static(b"a")),
                    Some(bytes::Bytes::from_static(b"b"))
                ]
            );
        }
        other => panic!("expected fetch, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn init_producer_for_an_unknown_id_is_an_error() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let request = Request::InitProducer(InitProducerRequest {
        producer_id: Some(12),
    });
    assert_eq!(
        error_code(&conn.call(1, &request).await?),
        ErrorCode::UnknownProducerId
    );
    Ok(())
}

#[tokio::test]
async fn storage_limit_refuses_the_batch_and_leaves_state_untouched() -> Result<()> {
    // Room for the topic, the producer's state entry, the first batch (8 bytes of value) and a
    // batch of one byte, with their overheads.
    let charge = |value: &[u8]| {
        minibroker_tests::batch(1, 0, 0, &[value]).len() as u64 + BATCH_OVERHEAD_BYTES
    };
    let config = Config {
        broker: BrokerConfig {
            max_stored_bytes: topic_bytes(1)
                + PRODUCER_ENTRY_BYTES
                + charge(b"12345678")
                + charge(b"9"),
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let first = conn
        .call(1, &produce("t", 0, 1, 0, 0, &[b"12345678"]))
        .await?;
    assert_eq!(outcome(&first), (Outcome::Accepted, Some(0)));
    let before = broker.broker.producers("t", 0)?;
    let full = conn.call(2, &produce("t", 0, 1, 0, 1, &[b"345"])).await?;
    assert_eq!(error_code(&full), ErrorCode::StorageFull);
    assert_eq!(broker.broker.producers("t", 0)?, before);
    // The refused sequence was not recorded: a smaller batch with it is accepted.
    // (Batches of empty records are charged their overhead too, so they cannot grow memory.)
    let fits = conn.call(3, &produce("t", 0, 1, 0, 1, &[b"9"])).await?;
    assert_eq!(outcome(&fits), (Outcome::Accepted, Some(1)));
    Ok(())
}
