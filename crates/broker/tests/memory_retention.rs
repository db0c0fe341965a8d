//! Retention on an in-memory broker: the oldest batches go as a partition grows past its
//! `retention_bytes` (or ages past `retention_ms`), their charge goes back to the storage limit,
//! and producers keep their state, so a retry is still a duplicate.

use bytes::Bytes;
use minibroker_broker::Isolation;
use minibroker_broker::{Broker, BrokerConfig, ErrorKind, Outcome, TopicConfig, Unacknowledged};
use minibroker_records::{NewRecord, Writer};

const RECORD_BYTES: usize = 10_000;

/// A batch of one record of [`RECORD_BYTES`] at `timestamp`, from producer 1 at `sequence` (the
/// way the benchmark makes them: encoded at sequence 0, then restamped).
fn batch(sequence: i32, timestamp: i64) -> Bytes {
    let template = minibroker_records::encode(
        Writer {
            producer_id: 1,
            epoch: 0,
            base_sequence: 0,
        },
        &[NewRecord {
            timestamp: Some(timestamp),
            ..NewRecord::value(vec![b'v'; RECORD_BYTES])
        }],
        0,
    )
    .unwrap();
    let mut batch = template.to_vec();
    minibroker_records::set_base_sequence(&mut batch, sequence);
    Bytes::from(batch)
}

fn broker(retention_bytes: Option<u64>, retention_ms: Option<u64>, max_stored: u64) -> Broker {
    Broker::new(&BrokerConfig {
        topics: vec![TopicConfig {
            name: "t".into(),
            partitions: 1,
            retention_bytes,
            retention_ms,
        }],
        max_stored_bytes: max_stored,
        ..BrokerConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn a_partition_keeps_its_newest_bytes_and_gives_the_rest_back_to_the_limit() {
    // The limit holds 8 MiB; the producer writes 30 MB into a partition keeping 2 MiB.
    let broker = broker(Some(2 << 20), None, 8 << 20);
    let mut topics = Unacknowledged::default();
    let batches = 3_000;
    for sequence in 0..batches {
        let verdict = broker
            .produce_stored(&mut topics, "t", 0, &batch(sequence, 0))
            .await
            .unwrap();
        assert_eq!(verdict.outcome, Outcome::Accepted);
        assert_eq!(verdict.base_offset, Some(i64::from(sequence)));
    }
    let (start, end) = broker.offsets("t", 0).unwrap();
    assert_eq!(end, i64::from(batches));
    assert!(start > 0, "retention dropped the oldest batches");
    let kept = broker.stored_bytes();
    assert!(
        (2 << 20..4 << 20).contains(&kept),
        "keeps at least its 2 MiB and at most two chunks more: {kept}"
    );
    let (charged, _) = broker.storage_charged();
    assert!(
        charged < 5 << 20,
        "the dropped batches' charge came back: {charged}"
    );

    let below = broker
        .fetch("t", 0, start - 1, 1 << 20, 0, Isolation::ReadUncommitted)
        .unwrap_err();
    assert_eq!(below.kind(), ErrorKind::OffsetOutOfRange);
    let first = broker
        .fetch("t", 0, start, 1 << 20, 0, Isolation::ReadUncommitted)
        .unwrap();
    assert_eq!(first.log_start_offset, start);
    assert_eq!(minibroker_records::base_offset(&first.batches[0]), start);

    // The producer's state outlives its batches: the last one resent is a duplicate.
    let retry = broker
        .produce_stored(&mut topics, "t", 0, &batch(batches - 1, 0))
        .await
        .unwrap();
    assert_eq!(retry.outcome, Outcome::Duplicate);
    assert_eq!(retry.base_offset, Some(i64::from(batches) - 1));
}

#[tokio::test]
async fn without_retention_the_limit_refuses_what_does_not_fit() {
    let broker = broker(None, None, 8 << 20);
    let mut topics = Unacknowledged::default();
    let mut refused = None;
    for sequence in 0..3_000 {
        if let Err(error) = broker
            .produce_stored(&mut topics, "t", 0, &batch(sequence, 0))
            .await
        {
            refused = Some((sequence, error.kind()));
            break;
        }
    }
    let (sequence, kind) = refused.expect("the limit is reached");
    assert_eq!(kind, ErrorKind::StorageFull);
    assert!(sequence > 700, "about 8 MiB were stored first: {sequence}");
    assert_eq!(broker.offsets("t", 0).unwrap().0, 0);
}

#[tokio::test]
async fn maintenance_drops_chunks_whose_records_are_too_old() {
    let broker = broker(None, Some(60_000), 64 << 20);
    let mut topics = Unacknowledged::default();
    let now = minibroker_records::now_millis();
    // 300 old batches (about three 1 MiB chunks), then 100 new ones.
    for sequence in 0..400 {
        let timestamp = if sequence < 300 { now - 3_600_000 } else { now };
        broker
            .produce_stored(&mut topics, "t", 0, &batch(sequence, timestamp))
            .await
            .unwrap();
    }
    let charged_before = broker.storage_charged().0;
    broker.run_maintenance(now);
    let (start, end) = broker.offsets("t", 0).unwrap();
    assert!((200..=300).contains(&start), "start {start}");
    assert_eq!(end, 400);
    assert!(broker.storage_charged().0 < charged_before);
}
