//! The coordinator over the transaction log on a crashing storage: every change is durable
//! before it applies, a failed write changes nothing, and a restart finds each id where it was.

use minibroker_broker::StorageBudget;
use minibroker_storage::sim::SimStorage;
use minibroker_transactions::{
    CoordinatorError, FILE_NAME, InitOutcome, Limits, MAX_GROUPS_PER_TRANSACTION,
    MAX_TRANSACTIONAL_ID_BYTES, TransactionCoordinator, TxnError, TxnState,
};
use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn open(storage: &SimStorage) -> TransactionCoordinator {
    TransactionCoordinator::open(
        Limits::default(),
        Arc::new(storage.clone()),
        Path::new("/data"),
    )
    .expect("opens")
}

fn issue(id: i64) -> impl FnOnce() -> Result<i64, Infallible> {
    move || Ok(id)
}

fn never() -> Result<i64, Infallible> {
    panic!("no producer id was to be issued")
}

fn out(partition: u32) -> Vec<(String, u32)> {
    vec![("out".to_owned(), partition)]
}

#[tokio::test]
async fn a_new_id_gets_a_producer_id_and_each_init_the_next_epoch_across_restarts() {
    let storage = SimStorage::new();
    let coordinator = open(&storage);
    assert_eq!(
        coordinator
            .init_producer("app", None, 60_000, issue(1000), 1)
            .await
            .unwrap(),
        InitOutcome::Ready {
            producer_id: 1000,
            epoch: 0
        }
    );
    drop(coordinator);
    let restarted = open(&storage.crash(1));
    assert_eq!(
        restarted
            .init_producer("app", None, 60_000, never, 2)
            .await
            .unwrap(),
        InitOutcome::Ready {
            producer_id: 1000,
            epoch: 1
        },
        "the epoch is kept across a restart, so the older instance stays fenced"
    );
}

#[tokio::test]
async fn a_commit_is_durable_at_each_step() {
    let storage = SimStorage::new();
    let coordinator = open(&storage);
    coordinator
        .init_producer("app", None, 60_000, issue(1000), 1)
        .await
        .unwrap();
    coordinator
        .add_partitions("app", 1000, 0, &out(0), 2)
        .await
        .unwrap();
    coordinator
        .add_group("app", 1000, 0, "readers", 3)
        .await
        .unwrap();
    let prepared = coordinator
        .end("app", (1000, 0), (true, false), never, 4)
        .await
        .unwrap()
        .expect("the commit was prepared");
    assert_eq!(
        prepared.partitions().collect::<Vec<_>>(),
        [&("out".to_owned(), 0)]
    );
    assert_eq!(prepared.groups().collect::<Vec<_>>(), ["readers"]);
    // A crash before the markers: the restart finds PrepareCommit, to complete.
    let crashed = open(&storage.crash(2));
    assert_eq!(
        crashed.describe("app").unwrap().state(),
        TxnState::PrepareCommit
    );
    coordinator.complete("app", 5).await.unwrap();
    assert_eq!(
        coordinator
            .end("app", (1000, 0), (true, false), never, 6)
            .await
            .unwrap(),
        None,
        "a retry of the finished commit"
    );
    let restarted = open(&storage.crash(3));
    assert_eq!(
        restarted.describe("app").unwrap().state(),
        TxnState::CompleteCommit
    );
}

#[tokio::test]
async fn a_failed_write_changes_nothing() {
    let storage = SimStorage::new();
    let coordinator = open(&storage);
    coordinator
        .init_producer("app", None, 60_000, issue(1000), 1)
        .await
        .unwrap();
    storage.faults.full.store(true, Ordering::Relaxed);
    assert!(matches!(
        coordinator.add_partitions("app", 1000, 0, &out(0), 2).await,
        Err(CoordinatorError::Log(_))
    ));
    assert_eq!(
        coordinator.describe("app").unwrap().state(),
        TxnState::Empty
    );
    storage.faults.full.store(false, Ordering::Relaxed);
    coordinator
        .add_partitions("app", 1000, 0, &out(0), 3)
        .await
        .unwrap();
    assert_eq!(
        open(&storage.crash(4)).describe("app").unwrap().state(),
        TxnState::Ongoing
    );
}

#[tokio::test]
async fn timed_out_transactions_are_fenced_and_idle_ids_expire() {
    let storage = SimStorage::new();
    let limits = Limits {
        max_timeout_ms: 10_000,
        expiration_ms: 1_000,
    };
    let coordinator =
        TransactionCoordinator::open(limits, Arc::new(storage.clone()), Path::new("/data"))
            .unwrap();
    coordinator
        .init_producer("slow", None, 5_000, issue(1000), 0)
        .await
        .unwrap();
    coordinator
        .init_producer("idle", None, 5_000, issue(1001), 0)
        .await
        .unwrap();
    coordinator
        .add_partitions("slow", 1000, 0, &out(1), 100)
        .await
        .unwrap();
    assert!(coordinator.fence_timed_out(5_000).await.unwrap().is_empty());
    let fenced = coordinator.fence_timed_out(5_101).await.unwrap();
    assert_eq!(fenced.len(), 1);
    assert_eq!(
        (fenced[0].epoch(), fenced[0].state()),
        (1, TxnState::PrepareAbort)
    );
    assert!(matches!(
        coordinator
            .add_partitions("slow", 1000, 0, &out(1), 5_102)
            .await,
        Err(CoordinatorError::Refused(TxnError::ProducerFenced))
    ));
    coordinator.complete("slow", 5_103).await.unwrap();
    assert_eq!(
        coordinator.expire(5_200).await.unwrap(),
        1,
        "only the idle one"
    );
    assert!(coordinator.describe("idle").is_none());
    let restarted = open(&storage.crash(5));
    assert!(
        restarted.describe("idle").is_none(),
        "its tombstone was durable"
    );
    assert_eq!(
        restarted.describe("slow").unwrap().state(),
        TxnState::CompleteAbort
    );
}

#[tokio::test]
async fn bad_requests_are_refused_before_anything_changes() {
    let coordinator = TransactionCoordinator::in_memory(Limits::default());
    assert!(matches!(
        coordinator.init_producer("", None, 1_000, never, 0).await,
        Err(CoordinatorError::EmptyTransactionalId)
    ));
    assert!(matches!(
        coordinator
            .init_producer("app", None, 900_001, never, 0)
            .await,
        Err(CoordinatorError::Refused(
            TxnError::InvalidTransactionTimeout { .. }
        ))
    ));
    assert!(matches!(
        coordinator.add_partitions("app", 1000, 0, &out(0), 0).await,
        Err(CoordinatorError::UnknownTransactionalId(_))
    ));
    let exhausted = || Err::<i64, _>(std::io::Error::other("every producer id was issued"));
    assert!(matches!(
        coordinator
            .init_producer("app", None, 1_000, exhausted, 0)
            .await,
        Err(CoordinatorError::ProducerId(_))
    ));
    assert!(coordinator.is_empty());
}

#[tokio::test]
async fn a_new_id_is_kept_for_the_expiration_time_from_its_init_not_from_1970() {
    let storage = SimStorage::new();
    let limits = Limits {
        max_timeout_ms: 10_000,
        expiration_ms: 60_000,
    };
    let coordinator =
        TransactionCoordinator::open(limits, Arc::new(storage.clone()), Path::new("/data"))
            .unwrap();
    // Inited a long way from the epoch, as a real clock is, and waiting for its assignment.
    let inited = 1_700_000_000_000;
    coordinator
        .init_producer("app", None, 5_000, issue(1000), inited)
        .await
        .unwrap();
    assert_eq!(coordinator.expire(inited + 1_000).await.unwrap(), 0);
    coordinator
        .add_partitions("app", 1000, 0, &out(0), inited + 2_000)
        .await
        .expect("its first transaction starts");
    // A second id idle for longer than the expiration time is forgotten.
    coordinator
        .init_producer("idle", None, 5_000, issue(1001), inited)
        .await
        .unwrap();
    assert_eq!(coordinator.expire(inited + 60_001).await.unwrap(), 1);
    assert!(coordinator.describe("idle").is_none());
    assert!(coordinator.describe("app").is_some());
}

#[tokio::test]
async fn transactional_ids_are_bounded_in_length_and_charged_to_the_storage_budget() {
    // 2,097 ids of 32 KB each were accepted, 4 times a 16 MiB budget: RSS went from 10 to
    // 268 MiB and transactions.log grew to 64 MiB.
    const BUDGET: u64 = 16 << 20;
    let storage = SimStorage::new();
    let budget = Arc::new(StorageBudget::new(BUDGET));
    let coordinator = open(&storage).charged_to(Arc::clone(&budget));
    for n in 0..2097 {
        let id = format!("{n:05}{}", "x".repeat(32 * 1024));
        assert!(matches!(
            coordinator.init_producer(&id, None, 60_000, never, 0).await,
            Err(CoordinatorError::TransactionalIdTooLong(_))
        ));
    }
    assert!(coordinator.is_empty());
    // Ids at the longest accepted: taken until the budget is full, then refused.
    let mut accepted = 0;
    let refused = loop {
        let id = format!(
            "{accepted:05}{}",
            "x".repeat(MAX_TRANSACTIONAL_ID_BYTES - 5)
        );
        match coordinator
            .init_producer(&id, None, 60_000, issue(accepted), 0)
            .await
        {
            Ok(_) => accepted += 1,
            Err(error) => break error,
        }
    };
    assert!(
        matches!(refused, CoordinatorError::StorageFull(BUDGET)),
        "{refused}"
    );
    assert!(budget.charged() <= BUDGET);
    let log = storage
        .contents(&Path::new("/data").join(FILE_NAME))
        .unwrap();
    assert!((log.len() as u64) < BUDGET, "{} bytes of log", log.len());
    // Forgetting them gives the room back.
    let expiration = i64::try_from(Limits::default().expiration_ms).unwrap();
    assert_eq!(
        coordinator.expire(expiration + 1).await.unwrap(),
        usize::try_from(accepted).unwrap()
    );
    assert_eq!(budget.charged(), 0);
}

#[tokio::test]
async fn a_transaction_commits_offsets_of_a_bounded_number_of_groups() {
    let coordinator = TransactionCoordinator::in_memory(Limits::default());
    coordinator
        .init_producer("app", None, 60_000, issue(1000), 0)
        .await
        .unwrap();
    for n in 0..MAX_GROUPS_PER_TRANSACTION {
        coordinator
            .add_group("app", 1000, 0, &format!("group-{n}"), 1)
            .await
            .unwrap();
    }
    // A group it holds again is fine; one more is not.
    coordinator
        .add_group("app", 1000, 0, "group-0", 2)
        .await
        .unwrap();
    assert!(matches!(
        coordinator.add_group("app", 1000, 0, "one-more", 2).await,
        Err(CoordinatorError::TooManyGroups)
    ));
    assert_eq!(
        coordinator.describe("app").unwrap().group_count(),
        MAX_GROUPS_PER_TRANSACTION
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_of_many_ids_at_once_share_their_syncs_and_all_are_durable() {
    let storage = SimStorage::new();
    let coordinator = Arc::new(open(&storage));
    // A disk whose fsync takes 20 ms: while one runs, the other ids' changes queue for the next.
    storage.faults.sync_micros.store(20_000, Ordering::Relaxed);
    let (writes_before, syncs_before) = (
        coordinator.log_group_writes(),
        storage.faults.syncs.load(Ordering::Relaxed),
    );
    let ids = 32;
    let mut producers = tokio::task::JoinSet::new();
    for n in 0..ids {
        let coordinator = Arc::clone(&coordinator);
        producers.spawn(async move {
            let id = format!("app-{n}");
            coordinator
                .init_producer(&id, None, 60_000, issue(1000 + n), 1)
                .await
                .unwrap();
            coordinator
                .add_partitions(&id, 1000 + n, 0, &out(0), 2)
                .await
                .unwrap();
        });
    }
    while let Some(done) = producers.join_next().await {
        done.unwrap();
    }
    let writes = coordinator.log_group_writes() - writes_before;
    let syncs = storage.faults.syncs.load(Ordering::Relaxed) - syncs_before;
    assert!(
        writes <= (ids as u64 * 2) / 2,
        "{} changes took {writes} group writes",
        ids * 2
    );
    assert_eq!(syncs, writes, "one sync per group write");
    drop(coordinator);
    let restarted = open(&storage.crash(3));
    for n in 0..ids {
        let txn = restarted.describe(&format!("app-{n}")).expect("kept");
        assert_eq!(txn.state(), TxnState::Ongoing);
        assert_eq!(txn.partitions().count(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_caller_stopped_waiting_is_applied_once_durable() {
    let storage = SimStorage::new();
    let coordinator = open(&storage);
    coordinator
        .init_producer("app", None, 60_000, issue(1000), 1)
        .await
        .unwrap();
    storage.faults.sync_micros.store(100_000, Ordering::Relaxed);
    let gave_up = tokio::time::timeout(
        std::time::Duration::from_millis(10),
        coordinator.add_partitions("app", 1000, 0, &out(0), 2),
    )
    .await;
    assert!(gave_up.is_err(), "the add waits for its 100 ms sync");
    storage.faults.sync_micros.store(0, Ordering::Relaxed);
    // The next change of the id waits for the turn the abandoned one holds until it is applied,
    // and sees its partition.
    coordinator
        .add_partitions("app", 1000, 0, &out(1), 3)
        .await
        .unwrap();
    let partitions = |txn: minibroker_transactions::Transaction| txn.partitions().count();
    assert_eq!(partitions(coordinator.describe("app").unwrap()), 2);
    drop(coordinator);
    let restarted = open(&storage.crash(4));
    assert_eq!(
        partitions(restarted.describe("app").unwrap()),
        2,
        "the state is what the log holds"
    );
}
