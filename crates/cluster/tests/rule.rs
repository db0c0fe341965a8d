//! The rule in PostgreSQL against the rule on one broker: the same random batches, cut into
//! random windows, are answered by `commit_window` on a real PostgreSQL (started by
//! `scripts/postgres`) exactly as `minibroker_state::ProducerStateManager` answers them one at
//! a time, offsets included, and leave the same producer entries and high watermarks behind.
//! The windows are taken in turn by two brokers at random, so each broker's windows are judged
//! both against rows it read and against rows it knew from its last window, and meet rows the
//! other broker has changed since. Two committers racing with one batch store it once.

mod support;

use bytes::Bytes;
use minibroker_cluster::{
    Append, AppendRefused, Committer, KnownProducers, Statements, WindowSettings, commit_window,
    connect, create_topic, migrate,
};
use minibroker_state::{
    BatchHeader, Outcome, PartitionId, ProducerStateManager, SequenceRange, Verdict,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::cell::RefCell;
use std::convert::Infallible;
use support::Postgres;
use tokio_postgres::Client;

const PARTITIONS: i32 = 2;
const PRODUCERS: i64 = 3;

/// One batch of a case: whose, where, and how its epoch and first sequence stand to what the
/// partition holds for its producer (so every outcome comes up often).
#[derive(Debug, Clone)]
struct Op {
    producer: Option<i64>,
    partition: i32,
    epoch_step: i16,
    sequence_step: i32,
    records: u32,
}

fn op() -> impl Strategy<Value = Op> {
    (
        prop_oneof![1 => Just(None), 12 => (0..PRODUCERS).prop_map(Some)],
        0..PARTITIONS,
        prop_oneof![1 => Just(-1i16), 8 => Just(0), 1 => Just(1)],
        prop_oneof![6 => Just(0i32), 2 => -4..0i32, 1 => 1..3i32],
        1..4u32,
    )
        .prop_map(
            |(producer, partition, epoch_step, sequence_step, records)| Op {
                producer,
                partition,
                epoch_step,
                sequence_step,
                records,
            },
        )
}

/// A case: its batches, where windows end (indexes into them), and which of two brokers
/// commits each window.
fn case() -> impl Strategy<Value = (Vec<Op>, Vec<usize>, Vec<bool>)> {
    prop::collection::vec(op(), 1..40).prop_flat_map(|ops| {
        let len = ops.len();
        (
            Just(ops),
            prop::collection::vec(0..len, 0..10),
            prop::collection::vec(any::<bool>(), 11),
        )
    })
}

/// One broker's connection to the cluster's database, and the rows its windows left.
struct Broker {
    client: Client,
    statements: Statements,
    known: KnownProducers,
}

/// The batch `op` stands for, given what one broker holds now.
fn header_of(op: &Op, manager: &ProducerStateManager, at: i64) -> Option<BatchHeader> {
    let producer = op.producer?;
    let partition = PartitionId::try_from(op.partition).unwrap();
    let entry = manager.entry(partition, producer);
    let epoch = (entry.map_or(0, |entry| entry.epoch()) + op.epoch_step).max(0);
    let next = entry
        .and_then(|entry| entry.last_sequence())
        .map_or(0, |last| last + 1);
    let first = (next + op.sequence_step).max(0);
    let last = first + i32::try_from(op.records).unwrap() - 1;
    let sequences = SequenceRange::between(first, last).unwrap();
    Some(
        BatchHeader::new(producer, partition, epoch, sequences)
            .unwrap()
            .at(at),
    )
}

/// A stand-in batch: a header's worth of bytes, then its op's index (the base offset is
/// stamped over the first eight when stored).
fn bytes_of(index: usize) -> Bytes {
    let mut bytes = vec![0; minibroker_records::HEADER_LEN];
    bytes.extend_from_slice(&index.to_be_bytes());
    Bytes::from(bytes)
}

async fn check_case(
    brokers: &mut [Broker; 2],
    topic: &str,
    ops: &[Op],
    cuts: &[usize],
    takers: &[bool],
) {
    let topic_id = create_topic(&brokers[0].client, topic, PARTITIONS)
        .await
        .unwrap()
        .unwrap()
        .id;
    // One broker: each batch judged alone, offsets from a counter per partition.
    let manager = ProducerStateManager::new();
    let mut ends = [0i64; PARTITIONS as usize];
    let mut appends = Vec::new();
    let mut expected: Vec<Verdict> = Vec::new();
    for (index, op) in ops.iter().enumerate() {
        let at = i64::try_from(index).unwrap();
        let header = header_of(op, &manager, at);
        let end = &mut ends[usize::try_from(op.partition).unwrap()];
        let mut append = |_| {
            let base = *end;
            *end += i64::from(op.records);
            Ok::<_, Infallible>(base)
        };
        let verdict = match &header {
            Some(header) => {
                let Ok(verdict) = manager.append_batch(header, append);
                verdict
            }
            None => {
                let Ok(base) = append(minibroker_state::NewEntry(false));
                Verdict {
                    outcome: Outcome::Accepted,
                    base_offset: Some(base),
                    known_producer: false,
                }
            }
        };
        expected.push(verdict);
        appends.push(Append {
            topic_id,
            partition: op.partition,
            header,
            offsets: op.records,
            bytes: bytes_of(index),
        });
    }
    // The cluster: the same batches in windows.
    let mut cuts = cuts.to_vec();
    cuts.push(ops.len());
    cuts.sort_unstable();
    let mut answered = Vec::new();
    let mut start = 0;
    for (window, end) in cuts.into_iter().enumerate() {
        if end <= start {
            continue;
        }
        let broker = &mut brokers[usize::from(takers[window])];
        let window = &appends[start..end];
        let answers = commit_window(
            &mut broker.client,
            &broker.statements,
            &broker.known,
            window,
        )
        .await
        .unwrap();
        answered.extend(answers.into_iter().map(|answer| answer.unwrap().verdict));
        start = end;
    }
    for (index, (cluster, broker)) in answered.iter().zip(&expected).enumerate() {
        assert_eq!(
            cluster, broker,
            "batch {index} ({:?}) of topic {topic}",
            ops[index]
        );
    }
    // What they leave: every producer's entry, and each partition's high watermark.
    let client = &brokers[0].client;
    for partition in 0..PARTITIONS {
        let local = PartitionId::try_from(partition).unwrap();
        let high_watermark: i64 = client
            .query_one(
                "SELECT high_watermark FROM minibroker.partitions
                 WHERE topic_id = $1 AND partition = $2",
                &[&topic_id, &partition],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(high_watermark, ends[usize::try_from(partition).unwrap()]);
        for producer in 0..PRODUCERS {
            let row = client
                .query_opt(
                    "SELECT epoch, last_sequences[1], base_offsets[1], last_timestamp
                     FROM minibroker.producer_states
                     WHERE topic_id = $1 AND partition = $2 AND producer_id = $3",
                    &[&topic_id, &partition, &producer],
                )
                .await
                .unwrap();
            let stored = row.map(|row| {
                let epoch: i16 = row.get(0);
                let last: Option<i32> = row.get(1);
                let offset: Option<i64> = row.get(2);
                let at: i64 = row.get(3);
                (epoch, last, offset, at)
            });
            let entry = manager.entry(local, producer).map(|entry| {
                let newest = entry.batches().next();
                (
                    entry.epoch(),
                    entry.last_sequence(),
                    newest.and_then(|batch| batch.base_offset),
                    entry.last_timestamp(),
                )
            });
            assert_eq!(stored, entry, "producer {producer}, partition {partition}");
        }
    }
    // Every accepted batch stored once, at its offset, stamped with it.
    let stored = client
        .query(
            "SELECT base_offset, bytes FROM minibroker.batches WHERE topic_id = $1",
            &[&topic_id],
        )
        .await
        .unwrap();
    for row in &stored {
        let (base_offset, bytes): (i64, Vec<u8>) = (row.get(0), row.get(1));
        let (stamp, index) = bytes.split_at(8);
        assert_eq!(i64::from_be_bytes(stamp.try_into().unwrap()), base_offset);
        let index = usize::from_be_bytes(
            index[minibroker_records::HEADER_LEN - 8..]
                .try_into()
                .unwrap(),
        );
        assert_eq!(expected[index].outcome, Outcome::Accepted, "batch {index}");
        assert_eq!(
            expected[index].base_offset,
            Some(base_offset),
            "batch {index}"
        );
    }
    let accepted = expected
        .iter()
        .filter(|verdict| verdict.outcome == Outcome::Accepted)
        .count();
    assert_eq!(stored.len(), accepted);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn ready(url: &str) -> (Client, Statements) {
    let mut client = connect(url).await.unwrap();
    migrate(&mut client).await.unwrap();
    let statements = Statements::prepare(&client).await.unwrap();
    (client, statements)
}

async fn broker(url: &str) -> Broker {
    let (client, statements) = ready(url).await;
    Broker {
        client,
        statements,
        known: KnownProducers::new(),
    }
}

#[test]
fn windows_in_postgres_answer_every_batch_as_one_broker_does() {
    let postgres = Postgres::start();
    let runtime = runtime();
    let brokers = RefCell::new(
        runtime.block_on(async { [broker(&postgres.url).await, broker(&postgres.url).await] }),
    );
    let cases = RefCell::new(0u32);
    let mut runner = TestRunner::new(Config {
        cases: 96,
        ..Config::default()
    });
    runner
        .run(&case(), |(ops, cuts, takers)| {
            let topic = {
                let mut cases = cases.borrow_mut();
                *cases += 1;
                format!("case-{cases}")
            };
            let mut brokers = brokers.borrow_mut();
            runtime.block_on(check_case(&mut brokers, &topic, &ops, &cuts, &takers));
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_batch_for_a_partition_the_cluster_lacks_is_refused_alone() {
    let postgres = Postgres::start();
    runtime().block_on(async {
        let (mut client, statements) = ready(&postgres.url).await;
        let topic_id = create_topic(&client, "t", 1).await.unwrap().unwrap().id;
        let append = |partition| Append {
            topic_id,
            partition,
            header: None,
            offsets: 1,
            bytes: bytes_of(0),
        };
        let known = KnownProducers::new();
        let answers = commit_window(&mut client, &statements, &known, &[append(1), append(0)])
            .await
            .unwrap();
        assert_eq!(
            answers[0],
            Err(AppendRefused::UnknownPartition {
                topic_id,
                partition: 1
            })
        );
        assert_eq!(answers[1].unwrap().verdict.base_offset, Some(0));
        // A second create of the same name finds it there.
        assert!(create_topic(&client, "t", 3).await.unwrap().is_none());
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_given_one_batch_at_once_store_it_once() {
    let postgres = Postgres::start();
    let (client, _) = ready(&postgres.url).await;
    let topic_id = create_topic(&client, "race", 1).await.unwrap().unwrap().id;
    let settings = WindowSettings::default();
    let brokers = [
        Committer::start(&postgres.url, settings),
        Committer::start(&postgres.url, settings),
    ];
    for producer in 0..20 {
        let header = BatchHeader::new(producer, 0, 0, SequenceRange::single(0).unwrap()).unwrap();
        let append = Append {
            topic_id,
            partition: 0,
            header: Some(header),
            offsets: 1,
            bytes: bytes_of(0),
        };
        let (first, second) = tokio::join!(
            brokers[0].append(append.clone()),
            brokers[1].append(append.clone())
        );
        let mut outcomes = [first.unwrap().verdict, second.unwrap().verdict];
        outcomes.sort_by_key(|verdict| verdict.outcome.index());
        assert_eq!(
            outcomes[0].outcome,
            Outcome::Accepted,
            "producer {producer}"
        );
        assert_eq!(
            outcomes[1].outcome,
            Outcome::Duplicate,
            "producer {producer}"
        );
        assert_eq!(outcomes[0].base_offset, outcomes[1].base_offset);
    }
    let stored = support::stored_batches(&client).await;
    assert_eq!(stored, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producers_batches_sent_back_to_back_are_judged_in_order_across_windows() {
    // A producer's batches, submitted without waiting for any answer, span many windows (each
    // judged against the rows the one before left) and two partitions: every one must be
    // ACCEPTED, at consecutive offsets, in the order sent.
    let postgres = Postgres::start();
    let (client, _) = ready(&postgres.url).await;
    let topic_id = create_topic(&client, "ordered", 2)
        .await
        .unwrap()
        .unwrap()
        .id;
    let committer = Committer::start(
        &postgres.url,
        WindowSettings {
            flush: std::time::Duration::from_millis(1),
            ..WindowSettings::default()
        },
    );
    let mut pending = Vec::new();
    for sequence in 0..1_000 {
        for partition in 0..2 {
            let header = BatchHeader::new(
                9,
                PartitionId::try_from(partition).unwrap(),
                0,
                SequenceRange::single(sequence).unwrap(),
            )
            .unwrap();
            let append = Append {
                topic_id,
                partition,
                header: Some(header),
                offsets: 1,
                bytes: bytes_of(0),
            };
            pending.push((partition, committer.submit(append).await.unwrap()));
            if sequence % 50 == 0 {
                tokio::time::sleep(std::time::Duration::from_micros(500)).await;
            }
        }
    }
    let mut next = [0_i64; 2];
    for (partition, pending) in pending {
        let appended = pending.outcome().await.unwrap();
        let index = usize::try_from(partition).unwrap();
        assert_eq!(appended.verdict.outcome, Outcome::Accepted);
        assert_eq!(appended.verdict.base_offset, Some(next[index]));
        next[index] += 1;
    }
}
