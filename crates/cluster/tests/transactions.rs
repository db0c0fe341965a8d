//! Transactions on a real PostgreSQL: a transactional batch is stored only in a partition its
//! ongoing transaction added at its epoch; an end writes the markers, closes the producer's
//! rows, lets its partitions go and settles its groups' pending offsets, in one transaction;
//! every change is a compare-and-set under the id's lease, so a broker that lost the lease (or
//! read a state that moved on) changes nothing.

mod support;

use bytes::Bytes;
use minibroker_cluster::coordinators::{self, KeyType, Leases};
use minibroker_cluster::groups::{self, StoredOffset, Tenure};
use minibroker_cluster::transactions::{
    self, Ending, TransactionRow, TransactionWriteError, commit_pending_offsets,
};
use minibroker_cluster::{
    Append, AppendError, AppendRefused, Committer, Member, Registration, WindowSettings, connect,
    create_topic, migrate,
};
use minibroker_records::{Marker, NewRecord, Writer};
use minibroker_state::{BatchHeader, Outcome, SequenceRange};
use std::time::Duration;
use support::Postgres;

const PRODUCER: i64 = 70;

fn run(node_id: i32) -> Registration {
    Registration::new(Member {
        node_id,
        kafka_host: "127.0.0.1".to_owned(),
        kafka_port: 9000,
    })
}

/// A one-record batch of the producer at `epoch` with `sequence`, for `partition` of topic
/// `topic_id`.
fn append(topic_id: i64, partition: i32, (epoch, sequence): (i16, i32), txn: bool) -> Append {
    let writer = Writer {
        producer_id: PRODUCER,
        epoch,
        base_sequence: sequence,
    };
    let records = [NewRecord::value("v")];
    let bytes = if txn {
        minibroker_records::encode_transactional(writer, &records, 0).unwrap()
    } else {
        minibroker_records::encode(writer, &records, 0).unwrap()
    };
    let header = BatchHeader::new(
        PRODUCER,
        u32::try_from(partition).unwrap(),
        epoch,
        SequenceRange::single(sequence).unwrap(),
    )
    .unwrap()
    .transactional(txn);
    Append {
        topic_id,
        partition,
        header: Some(header),
        offsets: 1,
        bytes,
    }
}

fn row(id: &str, epoch: i16, state: &str, groups: &[&str]) -> TransactionRow {
    TransactionRow {
        transactional_id: id.to_owned(),
        producer_id: PRODUCER,
        epoch,
        state: state.to_owned(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        timeout_ms: 60_000,
        started_ms: (state == "Ongoing").then_some(1),
        record: state.as_bytes().to_vec(),
    }
}

fn marker(epoch: i16, commit: bool) -> Bytes {
    let marker = Marker {
        commit,
        coordinator_epoch: 0,
    };
    minibroker_records::encode_marker(PRODUCER, epoch, marker, 0).unwrap()
}

fn offset(value: i64) -> StoredOffset {
    StoredOffset {
        topic: "in".to_owned(),
        partition: 0,
        offset: value,
        metadata: None,
        commit_ms: 5,
    }
}

/// (base offset, is a control batch, is transactional) of every batch of partition 0.
async fn stored(client: &tokio_postgres::Client, topic_id: i64) -> Vec<(i64, bool, bool)> {
    let rows = client
        .query(
            "SELECT base_offset, bytes FROM minibroker.batches
             WHERE topic_id = $1 AND partition = 0 ORDER BY base_offset",
            &[&topic_id],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|row| {
            let bytes: Vec<u8> = row.get(1);
            let info = minibroker_records::inspect(&bytes).unwrap();
            assert_eq!(
                minibroker_records::base_offset(&bytes),
                row.get::<_, i64>(0)
            );
            (row.get(0), info.control, info.transactional)
        })
        .collect()
}

/// A database with topic "out", a committer, and broker run 1 holding transactional id "pipe"'s
/// lease.
struct Setup {
    _postgres: Postgres,
    client: tokio_postgres::Client,
    topic_id: i64,
    committer: Committer,
    coordinator: Registration,
    leases: Leases,
    epoch: i64,
    lease: Duration,
}

impl Setup {
    /// With `partitions` partitions, leases of `lease`.
    async fn start(partitions: i32, lease: Duration) -> Self {
        let postgres = Postgres::start();
        let mut client = connect(&postgres.url).await.unwrap();
        migrate(&mut client).await.unwrap();
        let topic_id = create_topic(&client, "out", partitions)
            .await
            .unwrap()
            .unwrap()
            .id;
        let committer = Committer::start(&postgres.url, WindowSettings::default());
        let (coordinator, leases) = (run(1), Leases::default());
        let key = (KeyType::Transaction, "pipe");
        let epoch = coordinators::claim(&client, &leases, &coordinator, key, lease)
            .await
            .unwrap()
            .unwrap();
        Self {
            _postgres: postgres,
            client,
            topic_id,
            committer,
            coordinator,
            leases,
            epoch,
            lease,
        }
    }

    /// Run 1's tenure of "pipe".
    fn tenure(&self) -> Tenure<'_> {
        Tenure {
            run_id: &self.coordinator.run_id,
            epoch: self.epoch,
        }
    }

    /// Run 1's tenure of group `group`, taken now.
    async fn group_tenure(&self, group: &str) -> Tenure<'_> {
        let claimed = coordinators::claim_group(
            &self.client,
            &self.leases,
            &self.coordinator,
            group,
            self.lease,
        )
        .await
        .unwrap()
        .unwrap();
        Tenure {
            run_id: &self.coordinator.run_id,
            epoch: claimed.0,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_is_written_where_it_added_and_ended_whole_by_its_leaseholder() {
    let setup = Setup::start(2, Duration::from_millis(500)).await;
    let (client, committer, topic_id) = (&setup.client, &setup.committer, setup.topic_id);
    let (lease, tenure) = (setup.lease, setup.tenure());

    // Not added yet: refused, and so is a partition the transaction did not add.
    let refused = committer.append(append(topic_id, 0, (1, 0), true)).await;
    assert!(
        matches!(
            refused,
            Err(AppendError::Refused(AppendRefused::NotAddedToTransaction {
                epoch: 1,
                ..
            }))
        ),
        "{refused:?}"
    );
    let ongoing = row("pipe", 1, "Ongoing", &["readers"]);
    transactions::save_transaction(client, tenure, None, &ongoing, &[("out".to_owned(), 0)])
        .await
        .unwrap();
    // A second insert of a new id is a conflict: somebody else made it first.
    let again = transactions::save_transaction(client, tenure, None, &ongoing, &[])
        .await
        .unwrap_err();
    assert!(matches!(again, TransactionWriteError::Changed), "{again}");
    for sequence in 0..2 {
        let taken = committer
            .append(append(topic_id, 0, (1, sequence), true))
            .await
            .unwrap();
        assert_eq!(taken.verdict.outcome, Outcome::Accepted);
    }
    let other_partition = committer.append(append(topic_id, 1, (1, 0), true)).await;
    assert!(
        matches!(
            other_partition,
            Err(AppendError::Refused(
                AppendRefused::NotAddedToTransaction { .. }
            ))
        ),
        "{other_partition:?}"
    );
    let plain = committer.append(append(topic_id, 0, (1, 2), false)).await;
    assert!(
        matches!(
            plain,
            Err(AppendError::Refused(AppendRefused::InTransaction { .. }))
        ),
        "{plain:?}"
    );
    // A retry is still the rule's: a duplicate with its original offset.
    let retried = committer
        .append(append(topic_id, 0, (1, 0), true))
        .await
        .unwrap();
    assert_eq!(
        (retried.verdict.outcome, retried.verdict.base_offset),
        (Outcome::Duplicate, Some(0))
    );

    // Offsets for the group wait in the transaction, under the group's lease.
    let group_tenure = setup.group_tenure("readers").await;
    commit_pending_offsets(
        client,
        group_tenure,
        "readers",
        None,
        ("pipe", PRODUCER, 1),
        &[offset(42)],
    )
    .await
    .unwrap();
    // A group the transaction did not add, or an epoch that is not the producer's, is refused.
    let others_tenure = setup.group_tenure("others").await;
    for (group, group_tenure, producer_epoch, fenced) in [
        ("others", others_tenure, 1, false),
        ("readers", group_tenure, 0, true),
    ] {
        let refused = commit_pending_offsets(
            client,
            group_tenure,
            group,
            None,
            ("pipe", PRODUCER, producer_epoch),
            &[offset(1)],
        )
        .await;
        match refused {
            Err(TransactionWriteError::Fenced) if fenced => {}
            Err(TransactionWriteError::NotInTransaction) if !fenced => {}
            other => panic!("{group} at epoch {producer_epoch}: {other:?}"),
        }
    }
    assert!(
        groups::group_offsets(client, "readers")
            .await
            .unwrap()
            .is_empty()
    );
    // Retention leaves a group alone while a transaction holds offsets of it, however idle.
    assert_eq!(groups::expire_idle_groups(client, 0).await.unwrap(), 0);
    assert!(
        groups::find_group(client, "readers")
            .await
            .unwrap()
            .is_some()
    );

    // An end compared against a state that is not the database's changes nothing.
    let completed = row("pipe", 1, "CompleteCommit", &[]);
    let markers = [("out".to_owned(), 0, marker(1, true))];
    let ending = Ending {
        producer_id: PRODUCER,
        epoch: 1,
        commit: true,
        markers: &markers,
        timestamp: 9,
    };
    let stale = row("pipe", 0, "Ongoing", &["readers"]);
    let refused = transactions::end_transaction(client, tenure, &stale, &completed, &ending).await;
    assert!(
        matches!(refused, Err(TransactionWriteError::Changed)),
        "{refused:?}"
    );
    assert_eq!(stored(client, topic_id).await.len(), 2);

    // The end: the marker after the batches, the offsets the group's, the partition let go.
    let written = transactions::end_transaction(client, tenure, &ongoing, &completed, &ending)
        .await
        .unwrap();
    assert_eq!(written, 1);
    assert_eq!(
        stored(client, topic_id).await,
        [(0, false, true), (1, false, true), (2, true, true)]
    );
    assert_eq!(
        groups::group_offsets(client, "readers").await.unwrap(),
        [offset(42)]
    );
    let late = committer.append(append(topic_id, 0, (1, 2), true)).await;
    assert!(
        matches!(
            late,
            Err(AppendError::Refused(
                AppendRefused::NotAddedToTransaction { .. }
            ))
        ),
        "a late batch of the ended transaction: {late:?}"
    );
    let found = transactions::find_transaction(client, "pipe")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found, completed);

    // Once the lease has run out and another broker took the id, the first changes nothing.
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    let (successor, successor_leases) = (run(2), Leases::default());
    assert!(
        coordinators::claim(
            client,
            &successor_leases,
            &successor,
            (KeyType::Transaction, "pipe"),
            lease
        )
        .await
        .unwrap()
        .is_some()
    );
    let next = row("pipe", 2, "Ongoing", &[]);
    let zombie = transactions::save_transaction(client, tenure, Some(&completed), &next, &[]).await;
    assert!(
        matches!(zombie, Err(TransactionWriteError::NotCoordinator)),
        "{zombie:?}"
    );
    assert_eq!(
        transactions::find_transaction(client, "pipe")
            .await
            .unwrap(),
        Some(completed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_drops_the_pending_offsets_and_a_newer_epoch_takes_no_older_marker() {
    let setup = Setup::start(1, Duration::from_secs(30)).await;
    let (client, committer, topic_id) = (&setup.client, &setup.committer, setup.topic_id);
    let tenure = setup.tenure();
    let group_tenure = setup.group_tenure("readers").await;
    let ongoing = row("pipe", 3, "Ongoing", &["readers"]);
    transactions::save_transaction(client, tenure, None, &ongoing, &[("out".to_owned(), 0)])
        .await
        .unwrap();
    committer
        .append(append(topic_id, 0, (3, 0), true))
        .await
        .unwrap();
    commit_pending_offsets(
        client,
        group_tenure,
        "readers",
        None,
        ("pipe", PRODUCER, 3),
        &[offset(7)],
    )
    .await
    .unwrap();
    // The producer moved on to epoch 4 on the partition (a newer instance wrote there): the
    // abort of epoch 3 writes no marker there, and still drops the offsets.
    client
        .execute(
            "UPDATE minibroker.producer_states SET epoch = 4, in_transaction = false",
            &[],
        )
        .await
        .unwrap();
    let markers = [("out".to_owned(), 0, marker(3, false))];
    let ending = Ending {
        producer_id: PRODUCER,
        epoch: 3,
        commit: false,
        markers: &markers,
        timestamp: 9,
    };
    let aborted = row("pipe", 3, "CompleteAbort", &[]);
    let written = transactions::end_transaction(client, tenure, &ongoing, &aborted, &ending)
        .await
        .unwrap();
    assert_eq!(written, 0);
    assert_eq!(stored(client, topic_id).await, [(0, false, true)]);
    assert!(
        groups::group_offsets(client, "readers")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        transactions::pending_partitions(client, "readers")
            .await
            .unwrap()
            .is_empty()
    );
}

/// KAFKA-17754 on the cluster: an abort that reaches a partition before any batch of its
/// transaction leaves that epoch refused there (a late batch of it would otherwise be taken into
/// the next transaction at the same epoch), until the producer moves to a newer epoch; a
/// partition where the transaction wrote keeps nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_before_any_batch_refuses_the_epoch_until_the_producer_moves_on() {
    let setup = Setup::start(2, Duration::from_secs(30)).await;
    let (client, committer, topic_id) = (&setup.client, &setup.committer, setup.topic_id);
    let tenure = setup.tenure();
    let both = [("out".to_owned(), 0), ("out".to_owned(), 1)];
    let end = |epoch, commit, from: &TransactionRow, to: TransactionRow| {
        let markers = [
            ("out".to_owned(), 0, marker(epoch, commit)),
            ("out".to_owned(), 1, marker(epoch, commit)),
        ];
        let from = from.clone();
        async move {
            let ending = Ending {
                producer_id: PRODUCER,
                epoch,
                commit,
                markers: &markers,
                timestamp: 9,
            };
            transactions::end_transaction(client, tenure, &from, &to, &ending)
                .await
                .unwrap()
        }
    };
    // Transaction N at epoch 3 adds both partitions; only partition 0 gets its batch.
    let ongoing = row("pipe", 3, "Ongoing", &[]);
    transactions::save_transaction(client, tenure, None, &ongoing, &both)
        .await
        .unwrap();
    committer
        .append(append(topic_id, 0, (3, 0), true))
        .await
        .unwrap();
    let aborted = row("pipe", 3, "CompleteAbort", &[]);
    assert_eq!(end(3, false, &ongoing, aborted.clone()).await, 2);
    // Transaction N+1, same epoch, adds both again: partition 1 refuses epoch 3 (the late
    // batch, or the next transaction's own), partition 0 takes it.
    let next = row("pipe", 3, "Ongoing", &[]);
    transactions::save_transaction(client, tenure, Some(&aborted), &next, &both)
        .await
        .unwrap();
    let late = committer.append(append(topic_id, 1, (3, 0), true)).await;
    assert!(
        matches!(
            late,
            Err(AppendError::Refused(AppendRefused::AbortedEpoch {
                producer_id: PRODUCER,
                epoch: 3
            }))
        ),
        "{late:?}"
    );
    let written = committer
        .append(append(topic_id, 0, (3, 1), true))
        .await
        .unwrap();
    assert_eq!(written.verdict.outcome, Outcome::Accepted);
    // The producer moves to epoch 4 (its InitProducerId aborts N+1 there): partition 1 takes it.
    let fenced = row("pipe", 4, "CompleteAbort", &[]);
    end(4, false, &next, fenced.clone()).await;
    let moved = row("pipe", 4, "Ongoing", &[]);
    transactions::save_transaction(client, tenure, Some(&fenced), &moved, &both)
        .await
        .unwrap();
    let written = committer
        .append(append(topic_id, 1, (4, 0), true))
        .await
        .unwrap();
    assert_eq!(written.verdict.outcome, Outcome::Accepted);
    let left: i64 = client
        .query_one("SELECT count(*) FROM minibroker.aborted_epochs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        left, 0,
        "the producer moved on: nothing is refused any more"
    );
}
