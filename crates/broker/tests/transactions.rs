//! The partition side of transactions, on the broker core: a transactional batch only where the
//! coordinator added the partition, the last stable offset held back by an open transaction and
//! released by its marker, `read_committed` fetches that stop there and name the aborted
//! transactions, a marker's epoch fencing the producer's older instance, and all of it rebuilt
//! after a crash, from the log alone and from a snapshot.

use bytes::Bytes;
use minibroker_broker::{
    Broker, BrokerConfig, BrokerError, ErrorKind, Isolation, Outcome, Unacknowledged,
};
use minibroker_records::{NewRecord, Writer};
use minibroker_state::AbortedTransaction;
use minibroker_storage::sim::SimStorage;
use std::sync::Arc;

const PRODUCER: i64 = 4000;

fn batch(epoch: i16, sequence: i32, records: usize, transactional: bool) -> Bytes {
    let writer = Writer {
        producer_id: PRODUCER,
        epoch,
        base_sequence: sequence,
    };
    let records = vec![NewRecord::value("v"); records];
    if transactional {
        minibroker_records::encode_transactional(writer, &records, 0).unwrap()
    } else {
        minibroker_records::encode(writer, &records, 0).unwrap()
    }
}

async fn produce(broker: &Broker, bytes: &Bytes) -> Result<Outcome, BrokerError> {
    let mut unacknowledged = Unacknowledged::default();
    broker
        .produce_stored(&mut unacknowledged, "t", 0, bytes)
        .await
        .map(|verdict| verdict.outcome)
}

async fn marker(broker: &Broker, epoch: i16, commit: bool) -> Result<(), BrokerError> {
    let mut unacknowledged = Unacknowledged::default();
    broker.write_marker(&mut unacknowledged, "t", 0, PRODUCER, epoch, commit)?;
    unacknowledged.commit().await
}

/// (offsets of the batches returned, aborted transactions, LSO) of a fetch from `offset`.
fn fetch(broker: &Broker, offset: i64, isolation: Isolation) -> (Vec<i64>, Vec<(i64, i64)>, i64) {
    let fetched = broker.fetch("t", 0, offset, 1 << 20, 0, isolation).unwrap();
    let bases = fetched
        .batches
        .iter()
        .map(|b| minibroker_records::base_offset(b))
        .collect();
    let aborted = fetched
        .aborted
        .iter()
        .map(|a: &AbortedTransaction| (a.producer_id, a.first_offset))
        .collect();
    (bases, aborted, fetched.last_stable_offset)
}

fn memory_broker() -> Broker {
    let broker = Broker::new(&BrokerConfig::default()).unwrap();
    broker.create_topic("t", 1).unwrap();
    broker
}

#[tokio::test]
async fn a_transactional_batch_needs_its_partition_added_at_its_epoch() {
    let broker = memory_broker();
    let refused = produce(&broker, &batch(0, 0, 1, true)).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::NotAddedToTransaction);
    broker.add_to_transaction("t", 0, PRODUCER, 1).unwrap();
    let other_epoch = produce(&broker, &batch(0, 0, 1, true)).await.unwrap_err();
    assert_eq!(other_epoch.kind(), ErrorKind::NotAddedToTransaction);
    assert_eq!(
        produce(&broker, &batch(1, 0, 1, true)).await.unwrap(),
        Outcome::Accepted
    );
    // While it is open, the producer may not write outside it.
    let plain = produce(&broker, &batch(1, 1, 1, false)).await.unwrap_err();
    assert_eq!(plain.kind(), ErrorKind::InvalidTxnState);
    // A retry is still a DUPLICATE.
    assert_eq!(
        produce(&broker, &batch(1, 0, 1, true)).await.unwrap(),
        Outcome::Duplicate
    );
    marker(&broker, 1, true).await.unwrap();
    // A late batch of the ended transaction cannot reopen it.
    let late = produce(&broker, &batch(1, 1, 1, true)).await.unwrap_err();
    assert_eq!(late.kind(), ErrorKind::NotAddedToTransaction);
    // An older epoch is the rule's to refuse.
    assert_eq!(
        produce(&broker, &batch(0, 0, 1, true)).await.unwrap(),
        Outcome::FencedEpoch
    );
    let control = minibroker_records::encode_marker(
        PRODUCER,
        1,
        minibroker_records::Marker {
            commit: true,
            coordinator_epoch: 0,
        },
        0,
    )
    .unwrap();
    let forged = produce(&broker, &control).await.unwrap_err();
    assert!(matches!(forged, BrokerError::ControlBatch));
}

#[tokio::test]
async fn an_open_transaction_holds_back_the_lso_until_its_marker() {
    let broker = memory_broker();
    let other = minibroker_records::encode(
        Writer {
            producer_id: -1,
            epoch: -1,
            base_sequence: -1,
        },
        &[NewRecord::value("plain")],
        0,
    )
    .unwrap();
    produce(&broker, &other).await.unwrap(); // offset 0
    broker.add_to_transaction("t", 0, PRODUCER, 0).unwrap();
    produce(&broker, &batch(0, 0, 2, true)).await.unwrap(); // 1..=2
    produce(&broker, &other).await.unwrap(); // 3
    assert_eq!(broker.last_stable_offset("t", 0).unwrap(), 1);
    assert_eq!(
        fetch(&broker, 0, Isolation::ReadCommitted),
        (vec![0], vec![], 1)
    );
    assert_eq!(
        fetch(&broker, 0, Isolation::ReadUncommitted),
        (vec![0, 1, 3], vec![], 1)
    );
    assert_eq!(
        fetch(&broker, 1, Isolation::ReadCommitted).0,
        Vec::<i64>::new()
    );

    marker(&broker, 0, false).await.unwrap(); // 4
    assert_eq!(broker.last_stable_offset("t", 0).unwrap(), 5);
    assert_eq!(
        fetch(&broker, 0, Isolation::ReadCommitted),
        (vec![0, 1, 3, 4], vec![(PRODUCER, 1)], 5)
    );
    // From past the aborted transaction, it is not named.
    assert_eq!(fetch(&broker, 5, Isolation::ReadCommitted).1, vec![]);
    assert_eq!(
        fetch(&broker, 4, Isolation::ReadCommitted).1,
        vec![(PRODUCER, 1)]
    );

    // A committed one is never named.
    broker.add_to_transaction("t", 0, PRODUCER, 0).unwrap();
    produce(&broker, &batch(0, 2, 1, true)).await.unwrap(); // 5
    marker(&broker, 0, true).await.unwrap(); // 6
    assert_eq!(
        fetch(&broker, 5, Isolation::ReadCommitted),
        (vec![5, 6], vec![], 7)
    );
}

#[tokio::test]
async fn an_abort_at_a_higher_epoch_fences_the_old_instance() {
    let broker = memory_broker();
    broker.add_to_transaction("t", 0, PRODUCER, 0).unwrap();
    produce(&broker, &batch(0, 0, 1, true)).await.unwrap();
    // The coordinator times the transaction out, bumping the epoch.
    marker(&broker, 1, false).await.unwrap();
    broker.add_to_transaction("t", 0, PRODUCER, 0).unwrap();
    assert_eq!(
        produce(&broker, &batch(0, 1, 1, true)).await.unwrap(),
        Outcome::FencedEpoch
    );
    // A marker older than the epoch on file is refused.
    let stale = marker(&broker, 0, true).await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::ProducerFenced);
    // The new instance starts its session at 0.
    broker.add_to_transaction("t", 0, PRODUCER, 1).unwrap();
    assert_eq!(
        produce(&broker, &batch(1, 0, 1, true)).await.unwrap(),
        Outcome::Accepted
    );
}

fn durable_config() -> BrokerConfig {
    BrokerConfig {
        data_dir: Some("/data".into()),
        ..BrokerConfig::default()
    }
}

fn open(storage: &SimStorage) -> Broker {
    Broker::with_storage(&durable_config(), Arc::new(storage.clone())).unwrap()
}

/// Writes: an aborted transaction (0..=1, marker 2), then an open one from 3.
async fn two_transactions(broker: &Broker) {
    broker.add_to_transaction("t", 0, PRODUCER, 0).unwrap();
    produce(broker, &batch(0, 0, 2, true)).await.unwrap();
    marker(broker, 0, false).await.unwrap();
    broker.add_to_transaction("t", 0, PRODUCER, 0).unwrap();
    produce(broker, &batch(0, 2, 1, true)).await.unwrap();
}

#[tokio::test]
async fn transactions_are_rebuilt_from_the_log_after_a_crash() {
    let storage = SimStorage::new();
    let broker = open(&storage);
    broker.create_topic("t", 1).unwrap();
    two_transactions(&broker).await;
    drop(broker);
    let restarted = open(&storage.crash(7));
    assert_eq!(
        fetch(&restarted, 0, Isolation::ReadCommitted),
        (vec![0, 2], vec![(PRODUCER, 0)], 3)
    );
    // The producer's state knows its transaction is open: a retry is a DUPLICATE, and a plain
    // batch is refused; the expectation is the coordinator's to give again.
    assert_eq!(
        produce(&restarted, &batch(0, 2, 1, true)).await.unwrap(),
        Outcome::Duplicate
    );
    let plain = produce(&restarted, &batch(0, 3, 1, false))
        .await
        .unwrap_err();
    assert_eq!(plain.kind(), ErrorKind::InvalidTxnState);
    marker(&restarted, 0, true).await.unwrap();
    assert_eq!(restarted.last_stable_offset("t", 0).unwrap(), 5);
}

#[tokio::test]
async fn transactions_come_back_from_a_snapshot() {
    let storage = SimStorage::new();
    let broker = open(&storage);
    broker.create_topic("t", 1).unwrap();
    two_transactions(&broker).await;
    // A clean shutdown snapshots the state: the restart replays nothing.
    broker.close();
    drop(broker);
    let restarted = open(&storage);
    assert_eq!(
        fetch(&restarted, 0, Isolation::ReadCommitted),
        (vec![0, 2], vec![(PRODUCER, 0)], 3)
    );
    let producers = restarted.producers("t", 0).unwrap();
    assert!(producers[0].entry.in_transaction());
}

/// A COMMIT or ABORT marker of the producer at `epoch`, as the cluster stores it.
fn marker_batch(epoch: i16, commit: bool) -> Bytes {
    let marker = minibroker_records::Marker {
        commit,
        coordinator_epoch: 0,
    };
    minibroker_records::encode_marker(PRODUCER, epoch, marker, 0).unwrap()
}

#[test]
fn a_copy_of_what_a_cluster_committed_holds_its_transactions_as_they_were_judged() {
    let broker = memory_broker();
    let place = |offset: i64, batch: &Bytes| {
        broker.place_committed("t", 0, offset, batch).unwrap();
    };
    // A transaction's batch, placed without the partition added here (the database judged it).
    place(0, &batch(1, 0, 2, true));
    assert_eq!(broker.last_stable_offset("t", 0).unwrap(), 0);
    assert_eq!(
        fetch(&broker, 0, Isolation::ReadCommitted).0,
        Vec::<i64>::new()
    );
    place(2, &batch(1, 2, 1, true));
    place(3, &marker_batch(1, true));
    assert_eq!(broker.last_stable_offset("t", 0).unwrap(), 4);
    assert_eq!(
        fetch(&broker, 0, Isolation::ReadCommitted),
        (vec![0, 2, 3], vec![], 4)
    );
    // An aborted one: read_committed is told to drop it.
    place(4, &batch(2, 0, 1, true));
    assert_eq!(broker.open_transactions("t", 0).unwrap(), [(PRODUCER, 4)]);
    place(5, &marker_batch(2, false));
    assert_eq!(
        fetch(&broker, 4, Isolation::ReadCommitted),
        (vec![4, 5], vec![(PRODUCER, 4)], 6)
    );
    assert!(broker.open_transactions("t", 0).unwrap().is_empty());
}
