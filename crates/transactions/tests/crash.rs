//! Transactions through crashes of a simulated disk: a broker, its group coordinator and its
//! transaction service on `SimStorage`, three transactional ids running transactions over two
//! partitions and a group's offsets, and the disk crashed at a seed-chosen point — between
//! requests, after an end's Prepare* is durable but before any marker, with only some of its
//! markers written, or in the middle of the transaction log's append of an end (any part of the
//! record kept: a torn tail, cut at the start as the segments' is). Each id's ends keep its
//! epoch or bump it (KIP-890 part 2), as the seed chooses. After the restart (its clock run past
//! every timeout) it must hold:
//! - every transaction acknowledged as committed is read by a `read_committed` consumer, each
//!   record once; none acknowledged as aborted is;
//! - every other transaction is all or nothing: its records are read on every partition or on
//!   none, and its group offsets go with them;
//! - no last stable offset is stuck (each is the log's end), and nothing is left pending.
//!
//! Each seed is a different run; the test goes through 2000.

mod support;

use bytes::Bytes;
use minibroker_broker::{Broker, Isolation, Unacknowledged};
use minibroker_records::{NewRecord, Writer};
use minibroker_storage::sim::SimStorage;
use minibroker_transactions::TransactionLog;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use support::{Node, open};

const TOPIC: &str = "out";
const PARTITIONS: u32 = 2;
const IDS: [&str; 3] = ["a", "b", "c"];
const GROUP: &str = "g";
const SEEDS: u64 = 2000;

/// A small deterministic generator: the run of each seed is the same every time.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// What the test knows of one transaction.
#[derive(Debug, Default, Clone)]
struct Expected {
    values: Vec<String>,
    /// The group offset it committed, if any.
    group_offset: Option<i64>,
    /// `Some(commit)` once its end was acknowledged.
    acknowledged: Option<bool>,
    /// Its place among the acknowledged ends (their offsets apply in that order; an end finished
    /// by the restarted broker applies after all of them).
    ended_at: usize,
}

/// One transactional id's producer, as a client keeps it.
struct Producer {
    id: &'static str,
    producer_id: i64,
    epoch: i16,
    /// Whether its ends bump the epoch (EndTxn v5, KIP-890 part 2).
    bumps: bool,
    sequences: BTreeMap<u32, i32>,
    open: Option<usize>,
}

impl Producer {
    fn pair(&self) -> (i64, i16) {
        (self.producer_id, self.epoch)
    }
}

/// No end here runs its epoch out, so none needs a new producer id.
fn never() -> Result<i64, std::convert::Infallible> {
    panic!("no producer id was to be issued")
}

/// How the run stops.
enum Crash {
    /// Between two requests.
    Between,
    /// Right after an end's Prepare* is durable, before its markers.
    Prepared,
    /// After one of an end's markers.
    OneMarker,
    /// In the middle of the append of an end's Prepare* to the transaction log: written, its
    /// sync failed (so never answered), and the crash keeps any part of it.
    TornAppend,
}

async fn run_until_crash(
    node: &Node,
    storage: &SimStorage,
    rng: &mut Rng,
) -> (Vec<Expected>, Crash) {
    let mut producers = Vec::new();
    for id in IDS {
        let (producer_id, epoch) = node.service.init_producer(id, None, 60_000).await.unwrap();
        producers.push(Producer {
            id,
            producer_id,
            epoch,
            bumps: rng.below(2) == 0,
            sequences: BTreeMap::new(),
            open: None,
        });
    }
    let mut transactions: Vec<Expected> = Vec::new();
    let mut ends = 0;
    let steps = 1 + rng.below(40);
    for _ in 0..steps {
        let producer = &mut producers[rng.below(IDS.len() as u64) as usize];
        let Some(index) = producer.open else {
            // Begin: add partitions, write a batch to each.
            let count = 1 + rng.below(u64::from(PARTITIONS)) as u32;
            let first = rng.below(u64::from(PARTITIONS)) as u32;
            let partitions: Vec<(String, u32)> = (0..count)
                .map(|i| (TOPIC.to_owned(), (first + i) % PARTITIONS))
                .collect();
            let via = node.service.open_connection();
            node.service
                .add_partitions(
                    (producer.id, producer.producer_id, producer.epoch),
                    &partitions,
                    via,
                )
                .await
                .unwrap();
            let index = transactions.len();
            let mut expected = Expected::default();
            for (_, partition) in &partitions {
                let value = format!("{}-{index}-{partition}", producer.id);
                write(node, producer, *partition, &value).await;
                expected.values.push(value);
            }
            if rng.below(2) == 0 {
                let transaction = (producer.id, producer.producer_id, producer.epoch);
                node.service
                    .add_offsets(transaction, GROUP, via)
                    .await
                    .unwrap();
                let offset = index as i64;
                let offsets = vec![("in".to_owned(), 0, offset, None)];
                let transaction = (producer.id, producer.producer_id, producer.epoch);
                node.service
                    .commit_offsets(transaction, GROUP, (-1, ""), offsets)
                    .await
                    .unwrap();
                expected.group_offset = Some(offset);
            }
            transactions.push(expected);
            producer.open = Some(index);
            continue;
        };
        let commit = rng.below(3) != 0;
        match rng.below(9) {
            8 => {
                storage
                    .faults
                    .failing_sync
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                let coordinator = node.service.coordinator();
                let ended = coordinator.end(
                    producer.id,
                    producer.pair(),
                    (commit, producer.bumps),
                    never,
                    0,
                );
                assert!(ended.await.is_err(), "the sync failed");
                return (transactions, Crash::TornAppend);
            }
            0 => {
                let coordinator = node.service.coordinator();
                let id = producer.id;
                coordinator
                    .end(id, producer.pair(), (commit, producer.bumps), never, 0)
                    .await
                    .unwrap();
                return (transactions, Crash::Prepared);
            }
            1 => {
                let txn = node.service.coordinator();
                let ended = txn
                    .end(
                        producer.id,
                        producer.pair(),
                        (commit, producer.bumps),
                        never,
                        0,
                    )
                    .await
                    .unwrap()
                    .unwrap();
                let (topic, partition) = ended.partitions().next().unwrap().clone();
                let mut unacknowledged = Unacknowledged::default();
                node.broker
                    .write_marker(
                        &mut unacknowledged,
                        &topic,
                        partition,
                        ended.producer_id(),
                        ended.epoch(),
                        commit,
                    )
                    .unwrap();
                unacknowledged.commit().await.unwrap();
                return (transactions, Crash::OneMarker);
            }
            _ => {
                let transaction = (producer.id, producer.producer_id, producer.epoch);
                let via = node.service.open_connection();
                let (producer_id, epoch) = node
                    .service
                    .end(transaction, (commit, producer.bumps), via)
                    .await
                    .unwrap();
                if (producer_id, epoch) != producer.pair() {
                    // A new epoch: each partition's sequence starts again.
                    assert!(producer.bumps, "only a bumping end moves the epoch");
                    producer.producer_id = producer_id;
                    producer.epoch = epoch;
                    producer.sequences.clear();
                }
                ends += 1;
                transactions[index].acknowledged = Some(commit);
                transactions[index].ended_at = ends;
                producer.open = None;
            }
        }
    }
    (transactions, Crash::Between)
}

async fn write(node: &Node, producer: &mut Producer, partition: u32, value: &str) {
    let sequence = producer.sequences.entry(partition).or_insert(0);
    let writer = Writer {
        producer_id: producer.producer_id,
        epoch: producer.epoch,
        base_sequence: *sequence,
    };
    let batch =
        minibroker_records::encode_transactional(writer, &[NewRecord::value(value.to_owned())], 0)
            .unwrap();
    *sequence += 1;
    let mut unacknowledged = Unacknowledged::default();
    node.broker
        .produce_stored(&mut unacknowledged, TOPIC, partition, &batch)
        .await
        .unwrap();
}

/// What a `read_committed` consumer reads from `partition`: the batches below the last stable
/// offset, without the aborted transactions' records and the markers (Kafka's client rule).
fn read_committed(broker: &Broker, partition: u32) -> Vec<String> {
    let fetched = broker
        .fetch(TOPIC, partition, 0, usize::MAX, 0, Isolation::ReadCommitted)
        .unwrap();
    let mut aborted: Vec<(i64, i64)> = fetched
        .aborted
        .iter()
        .map(|a| (a.first_offset, a.producer_id))
        .collect();
    aborted.sort_unstable();
    let mut aborted = aborted.into_iter().peekable();
    let mut in_aborted: HashSet<i64> = HashSet::new();
    let mut values = Vec::new();
    for batch in &fetched.batches {
        let base = minibroker_records::base_offset(batch);
        let info = minibroker_records::inspect_stored(batch, base).unwrap();
        while let Some(&(first, producer_id)) = aborted.peek()
            && first <= base
        {
            in_aborted.insert(producer_id);
            aborted.next();
        }
        if info.control {
            let marker = minibroker_records::marker(batch).unwrap().unwrap();
            if !marker.commit {
                in_aborted.remove(&info.producer_id);
            }
            continue;
        }
        if info.transactional && in_aborted.contains(&info.producer_id) {
            continue;
        }
        let decoded = minibroker_records::decode(&Bytes::clone(batch)).unwrap();
        values.extend(
            decoded
                .records
                .iter()
                .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap()),
        );
    }
    values
}

fn check(node: &Node, transactions: &[Expected], seed: u64) {
    let mut read = Vec::new();
    for partition in 0..PARTITIONS {
        let (_, end) = node.broker.offsets(TOPIC, partition).unwrap();
        let stable = node.broker.last_stable_offset(TOPIC, partition).unwrap();
        assert_eq!(
            stable, end,
            "seed {seed}: partition {partition}'s LSO is stuck"
        );
        read.extend(read_committed(&node.broker, partition));
    }
    let distinct: BTreeSet<&String> = read.iter().collect();
    assert_eq!(
        distinct.len(),
        read.len(),
        "seed {seed}: a record read twice"
    );
    // (order applied, offset) of every committed transaction with offsets.
    let mut applied = Vec::new();
    for (index, txn) in transactions.iter().enumerate() {
        let visible = txn.values.iter().filter(|v| distinct.contains(v)).count();
        let committed = match txn.acknowledged {
            Some(true) => {
                assert_eq!(visible, txn.values.len(), "seed {seed}: txn {index} lost");
                true
            }
            Some(false) => {
                assert_eq!(visible, 0, "seed {seed}: aborted txn {index} visible");
                false
            }
            None => {
                assert!(
                    visible == 0 || visible == txn.values.len(),
                    "seed {seed}: txn {index} half visible"
                );
                visible > 0
            }
        };
        if let (true, Some(offset)) = (committed, txn.group_offset) {
            let order = match txn.acknowledged {
                Some(_) => txn.ended_at,
                None => usize::MAX,
            };
            applied.push((order, offset));
        }
    }
    let last_group_offset = applied.iter().max().map(|&(_, offset)| offset);
    let key = ("in".to_owned(), 0);
    assert!(
        !node.groups.has_pending(GROUP, &key),
        "seed {seed}: pending offsets left"
    );
    let offset = node
        .groups
        .committed(GROUP, Some(std::slice::from_ref(&key)))
        .first()
        .map(|(_, c)| c.offset);
    assert_eq!(offset, last_group_offset, "seed {seed}: group offsets");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_keep_their_outcomes_through_crashes_at_every_point() {
    let mut crashes = [0u32; 4];
    let mut torn_tails = 0;
    for seed in 0..SEEDS {
        let storage = SimStorage::new();
        let node = open(&storage);
        node.broker.create_topic(TOPIC, PARTITIONS).unwrap();
        let mut rng = Rng(seed);
        let (transactions, crash) = run_until_crash(&node, &storage, &mut rng).await;
        crashes[match crash {
            Crash::Between => 0,
            Crash::Prepared => 1,
            Crash::OneMarker => 2,
            Crash::TornAppend => 3,
        }] += 1;
        drop(node);
        let crashed = storage.crash(seed);
        let problem = TransactionLog::check(&crashed, std::path::Path::new("/data"))
            .and_then(|(_, problem)| problem);
        if problem.is_some() {
            // Only an append that was never answered may be torn: every other was synced.
            assert!(
                matches!(crash, Crash::TornAppend),
                "seed {seed}: a synced record was cut: {problem:?}"
            );
            torn_tails += 1;
        }
        let restarted = open(&crashed);
        // Past every timeout: the open transactions are aborted, the prepared ones finished.
        let later = minibroker_records::now_millis() + 3_600_000;
        restarted.service.tick(later).await;
        restarted.service.tick(later).await;
        check(&restarted, &transactions, seed);
        // And it goes on: each id starts a new transaction and commits it.
        for id in IDS {
            let (producer_id, epoch) = restarted
                .service
                .init_producer(id, None, 60_000)
                .await
                .unwrap();
            let partitions = [(TOPIC.to_owned(), 0)];
            let via = restarted.service.open_connection();
            restarted
                .service
                .add_partitions((id, producer_id, epoch), &partitions, via)
                .await
                .unwrap();
            restarted
                .service
                .end((id, producer_id, epoch), (true, false), via)
                .await
                .unwrap();
        }
    }
    // Every kind of crash point was reached, many times, and crashes left torn tails.
    assert!(crashes.iter().all(|&n| n > 100), "{crashes:?}");
    assert!(torn_tails > 20, "{torn_tails} torn tails in {crashes:?}");
}
