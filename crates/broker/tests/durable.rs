//! What a durable broker keeps besides batches, on a simulated disk: topics (created and
//! deleted), producer ids that are never issued twice, retention, and the interval flush.

use bytes::Bytes;
use minibroker_broker::Isolation;
use minibroker_broker::{
    Broker, BrokerConfig, ErrorKind, FlushPolicy, Outcome, TopicConfig, Unacknowledged,
};
use minibroker_records::{NewRecord, Writer};
use minibroker_storage::sim::SimStorage;
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn config() -> BrokerConfig {
    BrokerConfig {
        data_dir: Some("/data".into()),
        segment_bytes: 4096,
        ..BrokerConfig::default()
    }
}

fn open(storage: &SimStorage, config: &BrokerConfig) -> Broker {
    Broker::with_storage(config, Arc::new(storage.clone())).expect("open")
}

fn batch(producer_id: i64, sequence: i32, timestamp: i64) -> Bytes {
    let writer = Writer {
        producer_id,
        epoch: 0,
        base_sequence: sequence,
    };
    let record = NewRecord {
        timestamp: Some(timestamp),
        ..NewRecord::value("v".repeat(500))
    };
    minibroker_records::encode(writer, &[record], 0).unwrap()
}

#[tokio::test]
async fn topics_survive_restarts_and_a_deleted_topic_stays_deleted() {
    let storage = SimStorage::new();
    let broker = open(&storage, &config());
    broker.create_topic("kept", 3).unwrap();
    broker.create_topic("dropped", 1).unwrap();
    let mut topics = Unacknowledged::default();
    broker
        .produce_stored(&mut topics, "dropped", 0, &batch(1, 0, 0))
        .await
        .unwrap();
    broker.delete_topic("dropped").unwrap();
    drop(broker);
    let restarted = open(&storage.crash(1), &config());
    let names: Vec<(String, u32)> = restarted
        .metadata()
        .into_iter()
        .map(|t| (t.name, t.partitions))
        .collect();
    assert_eq!(names, vec![("kept".to_owned(), 3)]);
    // Recreated under the same name, it starts empty: no batch, no producer state.
    restarted.create_topic("dropped", 1).unwrap();
    assert_eq!(restarted.offsets("dropped", 0).unwrap(), (0, 0));
    let mut topics = Unacknowledged::default();
    let verdict = restarted
        .produce_stored(&mut topics, "dropped", 0, &batch(1, 0, 0))
        .await
        .unwrap();
    assert_eq!(verdict.outcome, Outcome::Accepted);
    assert_eq!(verdict.base_offset, Some(0));
}

#[tokio::test]
async fn a_grown_topic_keeps_its_records_and_its_new_partitions_through_a_crash() {
    let storage = SimStorage::new();
    let broker = open(&storage, &config());
    broker.create_topic("grown", 2).unwrap();
    let mut topics = Unacknowledged::default();
    // The connection's cache holds the topic as it was before it grows.
    broker
        .produce_stored(&mut topics, "grown", 1, &batch(1, 0, 0))
        .await
        .unwrap();
    broker.create_partitions("grown", 2, false).unwrap_err();
    broker.create_partitions("grown", 5, true).unwrap();
    assert_eq!(
        broker.topic("grown", false).unwrap().partitions,
        2,
        "only checked"
    );
    broker.create_partitions("grown", 5, false).unwrap();
    let verdict = broker
        .produce_stored(&mut topics, "grown", 4, &batch(2, 0, 0))
        .await
        .unwrap();
    assert_eq!(verdict.base_offset, Some(0));
    // The old partitions are the same logs: producer 1 goes on from its sequence.
    let verdict = broker
        .produce_stored(&mut topics, "grown", 1, &batch(1, 1, 0))
        .await
        .unwrap();
    assert_eq!(
        (verdict.outcome, verdict.base_offset),
        (Outcome::Accepted, Some(1))
    );
    drop(broker);
    // Nothing synced beyond what the broker synced itself: the count and the records are kept.
    let restarted = open(&storage.crash(2), &config());
    assert_eq!(restarted.topic("grown", false).unwrap().partitions, 5);
    assert_eq!(restarted.offsets("grown", 1).unwrap(), (0, 2));
    assert_eq!(restarted.offsets("grown", 4).unwrap(), (0, 1));
    let retry = restarted
        .produce_stored(&mut Unacknowledged::default(), "grown", 4, &batch(2, 0, 0))
        .await
        .unwrap();
    assert_eq!(
        retry.outcome,
        Outcome::Duplicate,
        "producer state of a new partition kept"
    );
}

#[tokio::test]
async fn producer_ids_are_never_issued_twice_across_crashes() {
    let storage = SimStorage::new();
    let mut issued = Vec::new();
    let mut disk = storage;
    for round in 0..4 {
        let broker = open(&disk, &config());
        for _ in 0..700 {
            issued.push(broker.init_producer(None).unwrap().producer_id);
        }
        drop(broker);
        disk = disk.crash(round);
    }
    let mut unique = issued.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), issued.len());
}

#[tokio::test]
async fn retention_deletes_old_segments_and_reads_below_the_start_are_out_of_range() {
    let storage = SimStorage::new();
    let config = BrokerConfig {
        topics: vec![TopicConfig {
            name: "short".into(),
            partitions: 1,
            retention_bytes: None,
            retention_ms: Some(60_000),
        }],
        ..config()
    };
    let broker = open(&storage, &config);
    let mut topics = Unacknowledged::default();
    let now = minibroker_records::now_millis();
    // Old records, then new ones: the old segments go, the new stay.
    for sequence in 0..40 {
        let timestamp = if sequence < 30 { now - 3_600_000 } else { now };
        broker
            .produce_stored(&mut topics, "short", 0, &batch(1, sequence, timestamp))
            .await
            .unwrap();
    }
    broker.run_maintenance(now);
    let (start, end) = broker.offsets("short", 0).unwrap();
    assert!(start > 0 && start <= 30, "start {start}");
    assert_eq!(end, 40);
    let below = broker
        .fetch("short", 0, 0, 1 << 20, 0, Isolation::ReadUncommitted)
        .unwrap_err();
    assert_eq!(below.kind(), ErrorKind::OffsetOutOfRange);
    assert!(
        !broker
            .fetch("short", 0, start, 1 << 20, 0, Isolation::ReadUncommitted)
            .unwrap()
            .batches
            .is_empty()
    );
    drop(broker);
    let restarted = open(&storage.crash(0), &config);
    assert_eq!(restarted.offsets("short", 0).unwrap(), (start, end));
    // The producer carries on after retention and a restart.
    let mut topics = Unacknowledged::default();
    let next = restarted
        .produce_stored(&mut topics, "short", 0, &batch(1, 40, now))
        .await
        .unwrap();
    assert_eq!(next.outcome, Outcome::Accepted);
}

#[tokio::test]
async fn the_interval_policy_acknowledges_at_once_and_syncs_on_its_tick() {
    let storage = SimStorage::new();
    let config = BrokerConfig {
        flush: FlushPolicy::Interval(50),
        ..config()
    };
    let broker = open(&storage, &config);
    let mut topics = Unacknowledged::default();
    // The first produce creates the topic, which syncs the topic list.
    broker
        .produce_stored(&mut topics, "t", 0, &batch(1, 0, 0))
        .await
        .unwrap();
    let before = storage.faults.syncs.load(Ordering::Relaxed);
    for sequence in 1..4 {
        broker
            .produce_stored(&mut topics, "t", 0, &batch(1, sequence, 0))
            .await
            .unwrap();
    }
    assert_eq!(storage.faults.syncs.load(Ordering::Relaxed), before);
    // Nothing synced yet: a crash may lose the tail (the policy's promise is a process crash).
    broker.flush_all();
    assert!(storage.faults.syncs.load(Ordering::Relaxed) > before);
    let crashed = open(&storage.crash(0), &config);
    assert_eq!(crashed.offsets("t", 0).unwrap(), (0, 4));
}

#[tokio::test]
async fn a_flipped_byte_in_a_sealed_segment_is_a_storage_error_and_the_partition_read_only() {
    // With its index present a sealed segment is not scanned at start, and a flipped byte in
    // record data was served as stored (VALUE1003 for VALUE0003), with no warning.
    let storage = SimStorage::new();
    let config = config();
    let broker = open(&storage, &config);
    let mut topics = Unacknowledged::default();
    for sequence in 0..20 {
        broker
            .produce_stored(&mut topics, "t", 0, &batch(1, sequence, 0))
            .await
            .unwrap();
    }
    drop(broker);
    let sealed = storage
        .paths()
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with("00000000000000000000.log"))
        .expect("the first segment");
    let mut bytes = storage.contents(&sealed).expect("its bytes");
    let value = bytes.len() - 100;
    bytes[value] ^= 0x01;
    storage.set_contents(&sealed, bytes);
    let restarted = open(&storage, &config);
    let error = restarted
        .fetch("t", 0, 0, 1 << 20, 0, Isolation::ReadUncommitted)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Storage, "{error}");
    assert!(
        error.to_string().contains("00000000000000000000.log"),
        "{error}"
    );
    // The partition is read-only, and the rest of the log is not served around the damage.
    let mut topics = Unacknowledged::default();
    let refused = restarted
        .produce_stored(&mut topics, "t", 0, &batch(2, 0, 0))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Storage, "{refused}");
}

/// `storage` with one bit of the file at `path` changed.
fn flip_bit_in(storage: &SimStorage, path: &str, at: usize) {
    let path = std::path::Path::new(path);
    let mut bytes = storage.contents(path).expect("the file exists");
    bytes[at] ^= 0x04;
    storage.set_contents(path, bytes);
}

#[tokio::test]
async fn a_damaged_topic_list_or_producer_id_file_stops_the_broker_and_deletes_nothing() {
    // A flipped byte in a topic name made the next start delete that topic's whole log, with
    // only a WARN; a flipped digit made it issue producer id 1000 a second time.
    let storage = SimStorage::new();
    let config = config();
    let broker = open(&storage, &config);
    let mut topics = Unacknowledged::default();
    broker
        .produce_stored(&mut topics, "orders", 0, &batch(1, 0, 0))
        .await
        .unwrap();
    broker.init_producer(None).unwrap();
    drop(broker);
    let files_before = storage.paths();
    for file in ["/data/topics", "/data/producer-ids"] {
        let len = storage.contents(std::path::Path::new(file)).unwrap().len();
        for at in 0..len {
            let damaged = storage.crash(0);
            flip_bit_in(&damaged, file, at);
            let Err(error) = Broker::with_storage(&config, Arc::new(damaged.clone())) else {
                panic!("{file} damaged at byte {at} was read");
            };
            assert!(
                error.to_string().contains(file),
                "{file} byte {at}: {error}"
            );
            assert_eq!(
                damaged.paths(),
                files_before,
                "{file} byte {at}: files changed"
            );
        }
    }
}

#[tokio::test]
async fn an_older_data_directory_is_read_and_an_unknown_directory_set_aside() {
    // Files as brokers before the checksummed envelope wrote them: plain text.
    let storage = SimStorage::new();
    let config = config();
    drop(open(&storage, &config));
    storage.set_contents("/data/topics".as_ref(), b"old 2\n".to_vec());
    storage.set_contents("/data/producer-ids".as_ref(), b"5000\n".to_vec());
    storage.set_contents(
        "/data/logs/stray/0/00000000000000000000.log".as_ref(),
        Vec::new(),
    );
    let broker = open(&storage, &config);
    assert_eq!(broker.offsets("old", 1).unwrap(), (0, 0));
    assert!(broker.init_producer(None).unwrap().producer_id >= 5000);
    // The stray directory is kept aside, not deleted.
    let paths = storage.paths();
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("/data/set-aside") && p.ends_with("0/00000000000000000000.log")),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.starts_with("/data/logs/stray")));
    // The next change writes the new format, which reads back.
    broker.create_topic("new", 1).unwrap();
    drop(broker);
    assert_eq!(storage.contents("/data/topics".as_ref()).unwrap()[0], 0);
    let restarted = open(&storage, &config);
    assert_eq!(restarted.offsets("old", 1).unwrap(), (0, 0));
    assert_eq!(restarted.offsets("new", 0).unwrap(), (0, 0));
}

#[tokio::test]
async fn topics_beyond_the_open_file_limit_are_refused_and_other_partitions_still_roll() {
    // One client creating ~1,000 topics under a limit of 1,024 made another client's partition
    // fail its roll (KAFKA_STORAGE_ERROR), and stay read-only after descriptors were freed.
    let config = BrokerConfig {
        max_open_files: Some(1024),
        ..config()
    };
    let broker = open(&SimStorage::new(), &config);
    let mut topics = Unacknowledged::default();
    broker.create_topic("victim", 1).unwrap();
    let mut refused = 0;
    for topic in 0..1_000 {
        match broker.create_topic(&format!("t{topic}"), 1) {
            Ok(()) => {}
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::StorageFull, "{error}");
                assert!(error.to_string().contains("open-file limit"), "{error}");
                refused += 1;
            }
        }
    }
    // 1,024 less 256 kept aside, 512 for connections (half) and 128 sealed files: 128.
    assert_eq!(refused, 1_000 - 127);
    // The victim rolls through many segments, each closed once sealed, and reads back.
    for sequence in 0..200 {
        let verdict = broker
            .produce_stored(&mut topics, "victim", 0, &batch(1, sequence, 1_000))
            .await
            .unwrap();
        assert_eq!(verdict.outcome, Outcome::Accepted);
    }
    let described = broker.describe_topic("victim").unwrap();
    assert_eq!(described[0].log_end_offset, 200);
    let fetched = broker
        .fetch("victim", 0, 0, 1 << 20, 0, Isolation::ReadUncommitted)
        .unwrap();
    assert!(!fetched.batches.is_empty());
}

/// The producer ids of the batches `broker` serves from `offset` of `topic`'s partition 0.
fn producers_from(broker: &Broker, topic: &str, offset: i64) -> Vec<i64> {
    let fetched = broker
        .fetch(topic, 0, offset, 1 << 20, 0, Isolation::ReadUncommitted)
        .unwrap();
    fetched
        .batches
        .iter()
        .map(|batch| minibroker_records::inspect(batch).unwrap().producer_id)
        .collect()
}

#[tokio::test]
async fn a_topic_created_again_under_a_deleted_ones_name_serves_only_its_own_records() {
    let storage = SimStorage::new();
    let broker = open(&storage, &config());
    broker.create_topic("t", 1).unwrap();
    // A connection that keeps the old topic cached, as an open producer connection does.
    let mut old = Unacknowledged::default();
    for sequence in 0..20 {
        broker
            .produce_stored(&mut old, "t", 0, &batch(1, sequence, 0))
            .await
            .unwrap();
    }
    // A read of the old topic's first sealed segment opens (and caches) its file.
    assert_eq!(producers_from(&broker, "t", 0).first(), Some(&1));
    broker.delete_topic("t").unwrap();
    broker.create_topic("t", 1).unwrap();
    let mut fresh = Unacknowledged::default();
    for sequence in 0..20 {
        let verdict = broker
            .produce_stored(&mut fresh, "t", 0, &batch(2, sequence, 0))
            .await
            .unwrap();
        assert_eq!(verdict.base_offset, Some(i64::from(sequence)));
    }
    let mut served = Vec::new();
    while served.len() < 20 {
        let next = producers_from(&broker, "t", served.len() as i64);
        assert!(!next.is_empty(), "offset {} not served", served.len());
        served.extend(next);
    }
    assert_eq!(served, vec![2; 20], "only the new topic's records");
    // The old connection finds the new topic, where its producer is unknown.
    let late = broker
        .produce_stored(&mut old, "t", 0, &batch(1, 20, 0))
        .await;
    assert!(
        late.as_ref()
            .map_or(true, |v| v.outcome != Outcome::Accepted),
        "{late:?}"
    );
    drop(broker);
    let restarted = open(&storage.crash(3), &config());
    assert_eq!(restarted.offsets("t", 0).unwrap(), (0, 20));
    assert_eq!(producers_from(&restarted, "t", 0).first(), Some(&2));
}

/// A keyed record of 500 bytes.
fn keyed(producer_id: i64, sequence: i32, key: &str) -> Bytes {
    let writer = Writer {
        producer_id,
        epoch: 0,
        base_sequence: sequence,
    };
    let record = NewRecord {
        key: Some(Bytes::from(key.to_owned())),
        timestamp: Some(0),
        ..NewRecord::value("v".repeat(500))
    };
    minibroker_records::encode(writer, &[record], 0).unwrap()
}

#[tokio::test]
async fn a_compaction_pass_still_running_when_its_topic_is_deleted_touches_nothing_after() {
    let storage = SimStorage::new();
    let config = BrokerConfig {
        // Slow enough that the pass is still reading when the topic is deleted.
        cleaner_io_max_bytes_per_second: Some(8_000),
        ..config()
    };
    let broker = Arc::new(open(&storage, &config));
    let compacted = [("cleanup.policy", "compact")];
    broker.create_topic_with("table", 1, &compacted).unwrap();
    let mut old = Unacknowledged::default();
    for sequence in 0..24 {
        broker
            .produce_stored(&mut old, "table", 0, &keyed(1, sequence, "k"))
            .await
            .unwrap();
    }
    let pass = {
        let broker = Arc::clone(&broker);
        std::thread::spawn(move || broker.compact_now("table", 0))
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    broker.delete_topic("table").unwrap();
    broker.create_topic_with("table", 1, &compacted).unwrap();
    let mut fresh = Unacknowledged::default();
    for sequence in 0..20 {
        let key = format!("k{sequence}");
        let verdict = broker
            .produce_stored(&mut fresh, "table", 0, &keyed(2, sequence, &key))
            .await
            .unwrap();
        assert_eq!(verdict.outcome, Outcome::Accepted);
    }
    let finished = pass.join().unwrap();
    assert!(
        finished.as_ref().is_ok_and(Option::is_none),
        "the pass of the deleted topic ends without a swap: {finished:?}"
    );
    assert_eq!(broker.offsets("table", 0).unwrap(), (0, 20));
    drop(old);
    drop(fresh);
    let broker = Arc::into_inner(broker).expect("the only handle");
    drop(broker);
    // Every acknowledged record of the new topic is there after a crash, and the directory
    // opens.
    let restarted = open(&storage.crash(4), &config);
    assert_eq!(restarted.offsets("table", 0).unwrap(), (0, 20));
    let mut served = Vec::new();
    while served.len() < 20 {
        let next = producers_from(&restarted, "table", served.len() as i64);
        assert!(!next.is_empty());
        served.extend(next);
    }
    assert_eq!(served, vec![2; 20]);
}

/// Every record `broker` serves of `topic`'s partition 0, as (offset, key, value), reading
/// `read_committed` (aborted transactions and markers left out, as a consumer drops them).
fn committed_records(broker: &Broker, topic: &str) -> Vec<(i64, String, Option<String>)> {
    let (_, end) = broker.offsets(topic, 0).unwrap();
    let text = |bytes: &Bytes| String::from_utf8_lossy(bytes).into_owned();
    let mut records = Vec::new();
    let mut next = 0;
    while next < end {
        let fetched = broker
            .fetch(topic, 0, next, 1 << 20, 0, Isolation::ReadCommitted)
            .unwrap();
        assert!(!fetched.batches.is_empty(), "offset {next} not served");
        for stored in &fetched.batches {
            next = minibroker_records::end_offset(stored);
            let batch = minibroker_records::decode(stored).unwrap();
            let aborted = fetched.aborted.iter().any(|txn| {
                txn.producer_id == batch.info.producer_id
                    && (txn.first_offset..=txn.last_offset).contains(&batch.base_offset)
            });
            if batch.info.control || aborted {
                continue;
            }
            for record in batch.records {
                let key = record.key.as_ref().map(text).unwrap_or_default();
                records.push((record.offset, key, record.value.as_ref().map(text)));
            }
        }
    }
    records
}

#[tokio::test]
async fn compaction_never_brings_back_a_committed_transactions_value_a_tombstone_deleted() {
    let storage = SimStorage::new();
    let broker = open(&storage, &config());
    let settings = [("cleanup.policy", "compact"), ("delete.retention.ms", "0")];
    broker.create_topic_with("table", 1, &settings).unwrap();
    let mut connection = Unacknowledged::default();
    // K=secret-v1 written in a transaction that commits, one for J that aborts.
    for (producer_id, key, commit) in [(7, "K", true), (8, "J", false)] {
        broker
            .add_to_transaction("table", 0, producer_id, 0)
            .unwrap();
        let writer = Writer {
            producer_id,
            epoch: 0,
            base_sequence: 0,
        };
        let record = NewRecord {
            key: Some(Bytes::from(key)),
            timestamp: Some(0),
            ..NewRecord::value(format!("{key}-secret-v1"))
        };
        let written = minibroker_records::encode_transactional(writer, &[record], 0).unwrap();
        broker
            .produce_stored(&mut connection, "table", 0, &written)
            .await
            .unwrap();
        broker
            .write_marker(&mut connection, "table", 0, producer_id, 0, commit)
            .unwrap();
        connection.commit().await.unwrap();
    }
    // J's older committed value, which the aborted transaction's record must not hide.
    broker
        .produce_stored(&mut connection, "table", 0, &keyed(2, 0, "J"))
        .await
        .unwrap();
    // K deleted (the tombstone's own timestamp is long past delete.retention.ms).
    let writer = Writer {
        producer_id: 1,
        epoch: 0,
        base_sequence: 0,
    };
    let tombstone = NewRecord {
        key: Some(Bytes::from("K")),
        value: None,
        timestamp: Some(0),
        ..NewRecord::default()
    };
    let tombstone = minibroker_records::encode(writer, &[tombstone], 0).unwrap();
    broker
        .produce_stored(&mut connection, "table", 0, &tombstone)
        .await
        .unwrap();
    let mut filler = 0;
    for _ in 0..2 {
        for _ in 0..12 {
            broker
                .produce_stored(&mut connection, "table", 0, &keyed(9, filler, "f"))
                .await
                .unwrap();
            filler += 1;
        }
        broker.compact_now("table", 0).unwrap();
    }
    let records = committed_records(&broker, "table");
    let last = |key: &str| {
        records
            .iter()
            .rev()
            .find(|(_, k, _)| k == key)
            .map(|(_, _, value)| value.clone())
    };
    let keys: Vec<(i64, &str, Option<usize>)> = records
        .iter()
        .map(|(offset, key, value)| (*offset, key.as_str(), value.as_ref().map(String::len)))
        .collect();
    assert!(
        matches!(last("K"), None | Some(None)),
        "K was deleted, and read back as {:?}: {keys:?}",
        last("K")
    );
    assert_eq!(last("J"), Some(Some("v".repeat(500))), "{keys:?}");
}
