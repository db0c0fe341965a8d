//! The durable broker against a storage that crashes: thousands of crash points, each followed
//! by a recovery on what the "disk" kept.
//!
//! - `always`: every acknowledged batch survives at its offset, byte for byte, and a resend of
//!   it is answered DUPLICATE (with its offset while it is among the producer's last five).
//! - `os`: each partition recovers a prefix of what was written (no hole, nothing altered), and
//!   every producer carries on from where the recovered log says it was.
//! - ENOSPC and EIO fail the produce with a storage error, make that partition read-only, and
//!   leave the other partitions serving; nothing acknowledged is lost across the restart. A
//!   failed write of batches gathered from several connections answers none of them.

use bytes::Bytes;
use minibroker_broker::Isolation;
use minibroker_broker::{
    Broker, BrokerConfig, BrokerError, ErrorKind, FlushPolicy, Outcome, Unacknowledged,
};
use minibroker_records::{NewRecord, Writer};
use minibroker_storage::sim::{SimStorage, Xorshift};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

const TOPIC: &str = "crash";
const PARTITIONS: u32 = 2;
const PRODUCERS: i64 = 3;

fn config(flush: FlushPolicy) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some("/data".into()),
        flush,
        // Small segments, so runs cross rolls, sealed segments and snapshots.
        segment_bytes: 4096,
        ..BrokerConfig::default().with_default_partitions(PARTITIONS)
    }
}

fn open(storage: &SimStorage, flush: FlushPolicy) -> Broker {
    Broker::with_storage(&config(flush), Arc::new(storage.clone())).expect("recovery")
}

fn batch(producer_id: i64, sequence: i32, size: usize) -> Bytes {
    let writer = Writer {
        producer_id,
        epoch: 0,
        base_sequence: sequence,
    };
    let value = format!("{producer_id}:{sequence}:{}", "x".repeat(size));
    minibroker_records::encode(writer, &[NewRecord::value(value)], 0).expect("encode")
}

/// Every batch stored in a partition, in order.
fn stored(broker: &Broker, partition: u32) -> Vec<Bytes> {
    let mut batches = Vec::new();
    let mut offset = 0;
    loop {
        let fetched = broker
            .fetch(
                TOPIC,
                partition,
                offset,
                1 << 20,
                0,
                Isolation::ReadUncommitted,
            )
            .expect("fetch");
        let Some(last) = fetched.batches.last() else {
            return batches;
        };
        offset = minibroker_records::end_offset(last);
        batches.extend(fetched.batches);
    }
}

/// Whether two batches are the same but for the base offset and leader epoch the log stamps
/// (bytes 0..8 and 12..16, outside the CRC).
fn same_batch(stored: &[u8], sent: &[u8]) -> bool {
    stored.len() == sent.len() && stored[8..12] == sent[8..12] && stored[16..] == sent[16..]
}

#[derive(Debug, Clone)]
struct Acked {
    partition: u32,
    producer_id: i64,
    sequence: i32,
    offset: i64,
    bytes: Bytes,
}

/// Produces at random (new batches, and resends of acknowledged ones) and returns what was
/// acknowledged and every batch sent per partition in the order the log took them.
async fn run_producers(
    broker: &Broker,
    random: &mut Xorshift,
    steps: usize,
    next: &mut HashMap<(u32, i64), i32>,
) -> (Vec<Acked>, HashMap<u32, Vec<Bytes>>) {
    let mut topics = Unacknowledged::default();
    let mut acked: Vec<Acked> = Vec::new();
    let mut written: HashMap<u32, Vec<Bytes>> = HashMap::new();
    for _ in 0..steps {
        if !acked.is_empty() && random.below(5) == 0 {
            let old = acked[random.below(acked.len() as u64) as usize].clone();
            let verdict = broker
                .produce_stored(&mut topics, TOPIC, old.partition, &old.bytes)
                .await
                .expect("resend");
            assert_eq!(verdict.outcome, Outcome::Duplicate);
            continue;
        }
        let partition = random.below(u64::from(PARTITIONS)) as u32;
        let producer_id = random.below(PRODUCERS as u64) as i64 + 1;
        let sequence = next.entry((partition, producer_id)).or_insert(0);
        let bytes = batch(producer_id, *sequence, random.below(600) as usize);
        let verdict = broker
            .produce_stored(&mut topics, TOPIC, partition, &bytes)
            .await
            .expect("produce");
        assert_eq!(verdict.outcome, Outcome::Accepted);
        acked.push(Acked {
            partition,
            producer_id,
            sequence: *sequence,
            offset: verdict.base_offset.expect("offset"),
            bytes: bytes.clone(),
        });
        written.entry(partition).or_default().push(bytes);
        *sequence += 1;
    }
    (acked, written)
}

#[tokio::test]
async fn with_always_every_acknowledged_batch_survives_every_crash_and_dedup_holds() {
    let mut crash_points = 0;
    for seed in 1..=300u64 {
        let storage = SimStorage::new();
        let broker = open(&storage, FlushPolicy::Always);
        let mut random = Xorshift::new(seed * 7919);
        let mut next = HashMap::new();
        let steps = 10 + random.below(40) as usize;
        let (acked, _) = run_producers(&broker, &mut random, steps, &mut next).await;
        // One more batch whose sync may or may not finish before the crash: never acknowledged.
        let mut topics = Unacknowledged::default();
        let unacked = batch(1, next.get(&(0, 1)).copied().unwrap_or(0), 10);
        let pending = broker.produce_stored(&mut topics, TOPIC, 0, &unacked);
        let _ = futures::poll!(Box::pin(pending));

        let crashed = storage.crash(seed);
        crash_points += 1;
        drop(broker);
        let recovered = open(&crashed, FlushPolicy::Always);
        for partition in 0..PARTITIONS {
            let batches = stored(&recovered, partition);
            for ack in acked.iter().filter(|a| a.partition == partition) {
                let found = batches
                    .iter()
                    .find(|b| minibroker_records::base_offset(b) == ack.offset)
                    .unwrap_or_else(|| {
                        panic!("seed {seed}: acknowledged offset {} lost", ack.offset)
                    });
                assert!(same_batch(found, &ack.bytes), "seed {seed}: batch altered");
            }
        }
        // The in-flight batch may have survived: then it is one more newer batch of producer 1
        // on partition 0.
        let unacked_kept = stored(&recovered, 0)
            .iter()
            .any(|b| same_batch(b, &unacked)) as usize;
        // Every acknowledged batch resent after the restart is a DUPLICATE, with its offset
        // while it is one of its producer's last five there.
        let mut topics = Unacknowledged::default();
        for (index, ack) in acked.iter().enumerate() {
            let verdict = recovered
                .produce_stored(&mut topics, TOPIC, ack.partition, &ack.bytes)
                .await
                .expect("resend");
            assert_eq!(verdict.outcome, Outcome::Duplicate, "seed {seed}");
            let newer = acked[index + 1..]
                .iter()
                .filter(|a| (a.partition, a.producer_id) == (ack.partition, ack.producer_id))
                .count()
                + if (ack.partition, ack.producer_id) == (0, 1) {
                    unacked_kept
                } else {
                    0
                };
            if newer < 5 {
                assert_eq!(verdict.base_offset, Some(ack.offset), "seed {seed}");
            }
            assert!(ack.sequence >= 0);
        }
        // And the producer whose last batch was in flight carries on: that batch is either
        // stored (DUPLICATE) or not (ACCEPTED), never a gap.
        let verdict = recovered
            .produce_stored(&mut topics, TOPIC, 0, &unacked)
            .await
            .expect("unacked resend");
        assert!(
            matches!(verdict.outcome, Outcome::Accepted | Outcome::Duplicate),
            "seed {seed}: {verdict:?}"
        );
    }
    assert_eq!(crash_points, 300);
}

#[tokio::test]
async fn with_os_each_partition_recovers_a_prefix_and_producers_carry_on() {
    let mut torn = 0;
    for seed in 1..=300u64 {
        let storage = SimStorage::new();
        let broker = open(&storage, FlushPolicy::Os);
        let mut random = Xorshift::new(seed * 104_729);
        let mut next = HashMap::new();
        let steps = 10 + random.below(60) as usize;
        let (_, written) = run_producers(&broker, &mut random, steps, &mut next).await;
        let crashed = storage.crash(seed);
        drop(broker);
        let recovered = open(&crashed, FlushPolicy::Os);
        let mut topics = Unacknowledged::default();
        for partition in 0..PARTITIONS {
            let sent = written.get(&partition).cloned().unwrap_or_default();
            let batches = stored(&recovered, partition);
            assert!(batches.len() <= sent.len(), "seed {seed}");
            for (stored, sent) in batches.iter().zip(&sent) {
                assert!(same_batch(stored, sent), "seed {seed}: not a prefix");
            }
            if batches.len() < sent.len() {
                torn += 1;
            }
            // Each producer resumes right after its last recovered batch: the first batch the
            // crash lost is ACCEPTED again, and the last one kept is a DUPLICATE.
            for producer_id in 1..=PRODUCERS {
                let kept = batches
                    .iter()
                    .filter(|b| minibroker_records::inspect(b).unwrap().producer_id == producer_id)
                    .count() as i32;
                let resend = batch_like(&sent, producer_id, kept);
                if let Some(lost) = resend {
                    let verdict = recovered
                        .produce_stored(&mut topics, TOPIC, partition, &lost)
                        .await
                        .expect("resend");
                    assert_eq!(verdict.outcome, Outcome::Accepted, "seed {seed}");
                }
                if kept > 0 {
                    let last = batch_like(&sent, producer_id, kept - 1).expect("kept");
                    let verdict = recovered
                        .produce_stored(&mut topics, TOPIC, partition, &last)
                        .await
                        .expect("resend");
                    assert_eq!(verdict.outcome, Outcome::Duplicate, "seed {seed}");
                }
            }
        }
    }
    assert!(torn > 50, "only {torn} crashes tore a tail");
}

/// The batch `producer_id` sent with sequence `sequence`, among `sent`.
fn batch_like(sent: &[Bytes], producer_id: i64, sequence: i32) -> Option<Bytes> {
    sent.iter()
        .find(|b| {
            let info = minibroker_records::inspect(b).unwrap();
            info.producer_id == producer_id && info.base_sequence == sequence
        })
        .cloned()
}

fn storage_error(result: Result<minibroker_broker::Verdict, BrokerError>) -> bool {
    matches!(result, Err(error) if error.kind() == ErrorKind::Storage)
}

#[tokio::test]
async fn a_full_disk_fails_the_produce_and_that_partition_only() {
    let storage = SimStorage::new();
    let broker = open(&storage, FlushPolicy::Always);
    let mut topics = Unacknowledged::default();
    let first = broker
        .produce_stored(&mut topics, TOPIC, 0, &batch(1, 0, 10))
        .await
        .unwrap();
    assert_eq!(first.outcome, Outcome::Accepted);
    broker
        .produce_stored(&mut topics, TOPIC, 1, &batch(2, 0, 10))
        .await
        .unwrap();

    storage.faults.full.store(true, Ordering::Relaxed);
    assert!(storage_error(
        broker
            .produce_stored(&mut topics, TOPIC, 0, &batch(1, 1, 10))
            .await
    ));
    storage.faults.full.store(false, Ordering::Relaxed);
    // Read-only from now on, for new batches and retries alike.
    assert!(storage_error(
        broker
            .produce_stored(&mut topics, TOPIC, 0, &batch(1, 1, 10))
            .await
    ));
    assert!(storage_error(
        broker
            .produce_stored(&mut topics, TOPIC, 0, &batch(1, 0, 10))
            .await
    ));
    // The other partition serves on, and reads of the failed one still work.
    let other = broker
        .produce_stored(&mut topics, TOPIC, 1, &batch(2, 1, 10))
        .await
        .unwrap();
    assert_eq!(other.outcome, Outcome::Accepted);
    assert_eq!(stored(&broker, 0).len(), 1);

    // After a restart the partition takes writes again, and the refused batch is accepted.
    drop(broker);
    let restarted = resend_after_restart(&storage.crash(1), FlushPolicy::Always).await;
    assert_eq!(stored(&restarted, 1).len(), 2);
}

/// A broker restarted on `storage`, after producer 1 resent its batch of sequence 1 to
/// partition 0 and had it ACCEPTED (it was refused before the restart).
async fn resend_after_restart(storage: &SimStorage, flush: FlushPolicy) -> Broker {
    let restarted = open(storage, flush);
    let mut topics = Unacknowledged::default();
    let resent = restarted
        .produce_stored(&mut topics, TOPIC, 0, &batch(1, 1, 10))
        .await
        .unwrap();
    assert_eq!(resent.outcome, Outcome::Accepted);
    restarted
}

/// With `os`, the batches the front ends produce wait to be written together. When that write
/// fails, none of them is stored, no connection that produced one may answer it (nor a retry
/// of one answered DUPLICATE meanwhile), the partition is read-only, and after a restart the
/// producer's resend is accepted.
#[tokio::test]
async fn a_failed_write_of_gathered_batches_stores_and_answers_none_of_them() {
    let storage = SimStorage::new();
    let broker = open(&storage, FlushPolicy::Os);
    let (mut first, mut second) = (Unacknowledged::default(), Unacknowledged::default());
    let written = broker
        .produce_stored(&mut first, TOPIC, 0, &batch(1, 0, 10))
        .await
        .unwrap();
    assert_eq!(written.outcome, Outcome::Accepted);
    broker.flush_all();
    for sequence in 1..4 {
        let verdict = broker
            .produce(&mut first, TOPIC, 0, &batch(1, sequence, 10))
            .unwrap();
        assert_eq!(verdict.outcome, Outcome::Accepted);
    }
    let retry = broker
        .produce(&mut second, TOPIC, 0, &batch(1, 3, 10))
        .unwrap();
    assert_eq!(retry.outcome, Outcome::Duplicate);

    storage.faults.full.store(true, Ordering::Relaxed);
    let failed = second.commit().await;
    storage.faults.full.store(false, Ordering::Relaxed);
    assert!(matches!(failed, Err(error) if error.kind() == ErrorKind::Storage));
    assert!(
        matches!(first.commit().await, Err(error) if error.kind() == ErrorKind::Storage),
        "the first connection's batches went with the failed write"
    );
    assert_eq!(stored(&broker, 0).len(), 1);
    assert!(storage_error(
        broker
            .produce_stored(&mut first, TOPIC, 0, &batch(1, 1, 10))
            .await
    ));

    drop(broker);
    let restarted = resend_after_restart(&storage.crash(2), FlushPolicy::Os).await;
    assert_eq!(stored(&restarted, 0).len(), 2);
}

/// A clean shutdown after a failed write snapshots nothing of the read-only partition: its
/// producer state still holds the batches the failed write forgot, and a snapshot claiming them
/// would make the producer's resend a DUPLICATE of a batch that is not stored.
#[tokio::test]
async fn a_clean_shutdown_after_a_failed_write_claims_no_forgotten_batch() {
    let storage = SimStorage::new();
    let broker = open(&storage, FlushPolicy::Always);
    let mut connection = Unacknowledged::default();
    let first = broker
        .produce_stored(&mut connection, TOPIC, 0, &batch(1, 0, 10))
        .await
        .unwrap();
    assert_eq!(first.outcome, Outcome::Accepted);
    let unstored = broker
        .produce(&mut connection, TOPIC, 0, &batch(1, 1, 10))
        .unwrap();
    assert_eq!(unstored.outcome, Outcome::Accepted);
    storage.faults.full.store(true, Ordering::Relaxed);
    assert!(
        matches!(connection.commit().await, Err(error) if error.kind() == ErrorKind::Storage),
        "the write of the second batch fails, so its verdict is never sent"
    );
    // The disk takes writes again by the time the broker stops cleanly.
    storage.faults.full.store(false, Ordering::Relaxed);
    broker.close();
    drop(broker);
    let crashed = storage.crash(3);
    let restarted = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        resend_after_restart(&crashed, FlushPolicy::Always),
    )
    .await
    .expect("the resend is answered");
    assert_eq!(stored(&restarted, 0).len(), 2);
}

/// The files of partition 0 whose name ends in `.{extension}`.
fn partition_files(storage: &SimStorage, extension: &str) -> Vec<std::path::PathBuf> {
    storage
        .paths()
        .into_iter()
        .filter(|p| {
            p.starts_with("/data/logs/crash/0") && p.extension().is_some_and(|e| e == extension)
        })
        .collect()
}

#[tokio::test]
async fn the_snapshot_a_roll_takes_is_written_before_the_answers_leave() {
    let storage = SimStorage::new();
    let broker = open(&storage, FlushPolicy::Os);
    let mut topics = Unacknowledged::default();
    // 4 KiB segments: 40 batches of about 180 B roll the first one.
    let produced = 40;
    for sequence in 0..produced {
        let verdict = broker
            .produce(&mut topics, TOPIC, 0, &batch(1, sequence, 100))
            .unwrap();
        assert_eq!(verdict.outcome, Outcome::Accepted);
    }
    let segments = partition_files(&storage, "log").len();
    assert!(segments >= 2, "no roll: {segments} segment");
    // Taken under the roll's locks, but its write (and fsyncs) waits for the connection's
    // answers: a produce never waits for it.
    assert!(partition_files(&storage, "snapshot").is_empty());
    topics.commit().await.unwrap();
    assert!(!partition_files(&storage, "snapshot").is_empty());
    drop(broker);
    let reopened = open(&storage, FlushPolicy::Os);
    assert_eq!(stored(&reopened, 0).len(), produced as usize);
}

#[tokio::test]
async fn a_failed_fsync_is_never_acknowledged_nor_retried() {
    let storage = SimStorage::new();
    let broker = open(&storage, FlushPolicy::Always);
    let mut topics = Unacknowledged::default();
    broker
        .produce_stored(&mut topics, TOPIC, 0, &batch(1, 0, 10))
        .await
        .unwrap();
    storage.faults.failing_sync.store(true, Ordering::Relaxed);
    assert!(storage_error(
        broker
            .produce_stored(&mut topics, TOPIC, 0, &batch(1, 1, 10))
            .await
    ));
    storage.faults.failing_sync.store(false, Ordering::Relaxed);
    // The sync would succeed now, but the partition does not pretend: it stays read-only.
    assert!(storage_error(
        broker
            .produce_stored(&mut topics, TOPIC, 0, &batch(1, 1, 10))
            .await
    ));
    // The crash keeps what was synced; the batch that failed may be gone, and the producer's
    // resend of it is accepted (or a duplicate if the kernel had written it back).
    drop(broker);
    let restarted = open(&storage.crash(2), FlushPolicy::Always);
    let mut topics = Unacknowledged::default();
    let verdict = restarted
        .produce_stored(&mut topics, TOPIC, 0, &batch(1, 1, 10))
        .await
        .unwrap();
    assert!(matches!(
        verdict.outcome,
        Outcome::Accepted | Outcome::Duplicate
    ));
    assert_eq!(stored(&restarted, 0).len(), 2);
}

#[tokio::test]
async fn concurrent_produces_share_fsyncs() {
    let storage = SimStorage::new();
    let broker = Arc::new(open(&storage, FlushPolicy::Always));
    // A fsync as slow as a fast disk's, so produces arriving meanwhile have to queue for it.
    storage.faults.sync_micros.store(2_000, Ordering::Relaxed);
    let before = storage.faults.syncs.load(Ordering::Relaxed);
    let mut tasks = Vec::new();
    for producer_id in 1..=32 {
        let broker = Arc::clone(&broker);
        tasks.push(tokio::spawn(async move {
            let mut topics = Unacknowledged::default();
            for sequence in 0..20 {
                let verdict = broker
                    .produce_stored(&mut topics, TOPIC, 0, &batch(producer_id, sequence, 50))
                    .await
                    .unwrap();
                assert_eq!(verdict.outcome, Outcome::Accepted);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let syncs = storage.faults.syncs.load(Ordering::Relaxed) - before;
    // 640 acknowledged produces; at most a quarter as many syncs, those of segment rolls and
    // snapshots included.
    assert!(syncs < 160, "{syncs} syncs for 640 produces");
    assert_eq!(stored(&broker, 0).len(), 640);
}

#[tokio::test]
async fn damaged_snapshots_are_skipped_and_state_still_matches_the_log() {
    let storage = SimStorage::new();
    let broker = open(&storage, FlushPolicy::Os);
    let mut topics = Unacknowledged::default();
    let mut sent = Vec::new();
    for sequence in 0..200 {
        let bytes = batch(1, sequence, 100);
        broker
            .produce_stored(&mut topics, TOPIC, 0, &bytes)
            .await
            .unwrap();
        sent.push(bytes);
    }
    broker.close();
    drop(broker);
    let snapshots = partition_files(&storage, "snapshot");
    assert_eq!(snapshots.len(), 2, "{snapshots:?}");
    // Damage every snapshot in turn (and then all): recovery falls back to an older one, or to
    // replaying the whole log, and the state is the same each time.
    for damaged in 0..=snapshots.len() {
        let copy = storage.crash(0);
        for (index, path) in snapshots.iter().enumerate() {
            if index == damaged || damaged == snapshots.len() {
                let mut bytes = copy.contents(path).unwrap();
                let middle = bytes.len() / 2;
                bytes[middle] ^= 1;
                copy.set_contents(path, bytes);
            }
        }
        let recovered = open(&copy, FlushPolicy::Os);
        let mut topics = Unacknowledged::default();
        for (sequence, bytes) in sent.iter().enumerate().rev().take(5) {
            let verdict = recovered
                .produce_stored(&mut topics, TOPIC, 0, bytes)
                .await
                .unwrap();
            assert_eq!(verdict.outcome, Outcome::Duplicate);
            assert_eq!(verdict.base_offset, Some(sequence as i64));
        }
        let next = recovered
            .produce_stored(&mut topics, TOPIC, 0, &batch(1, 200, 1))
            .await
            .unwrap();
        assert_eq!(next.outcome, Outcome::Accepted);
    }
}
