//! The coordinator over the transaction log on a crashing storage: every change is durable
//! before it applies, a failed write changes nothing, and a restart finds each id where it was.

use minibroker_broker::StorageBudget;
use minibroker_log::sim::SimStorage;
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

#[test]
fn a_new_id_gets_a_producer_id_and_each_init_the_next_epoch_across_restarts() {
    let storage = SimStorage::new();
    let coordinator = open(&storage);
    assert_eq!(
        coordinator
            .init_producer("app", None, 60_000, issue(1000), 1)
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
            .unwrap(),
        InitOutcome::Ready {
            producer_id: 1000,
            epoch: 1
        },
        "the epoch is kept across a restart, so the older instance stays fenced"
    );
}

#[test]
fn a_commit_is_durable_at_each_step() {
    let storage = SimStorage::new();
    let coordinator = open(&storage);
    coordinator
        .init_producer("app", None, 60_000, issue(1000), 1)
        .unwrap();
    coordinator
        .add_partitions("app", 1000, 0, &out(0), 2)
        .unwrap();
    coordinator.add_group("app", 1000, 0, "readers", 3).unwrap();
    let prepared = coordinator
        .end("app", (1000, 0), (true, false), never, 4)
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
    coordinator.complete("app", 5).unwrap();
    assert_eq!(
        coordinator
            .end("app", (1000, 0), (true, false), never, 6)
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

#[test]
fn a_failed_write_changes_nothing() {
    let storage = SimStorage::new();
    let coordinator = open(&storage);
    coordinator
        .init_producer("app", None, 60_000, issue(1000), 1)
        .unwrap();
    storage.faults.full.store(true, Ordering::Relaxed);
    assert!(matches!(
        coordinator.add_partitions("app", 1000, 0, &out(0), 2),
        Err(CoordinatorError::Log(_))
    ));
    assert_eq!(
        coordinator.describe("app").unwrap().state(),
        TxnState::Empty
    );
    storage.faults.full.store(false, Ordering::Relaxed);
    coordinator
        .add_partitions("app", 1000, 0, &out(0), 3)
        .unwrap();
    assert_eq!(
        open(&storage.crash(4)).describe("app").unwrap().state(),
        TxnState::Ongoing
    );
}

#[test]
fn timed_out_transactions_are_fenced_and_idle_ids_expire() {
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
        .unwrap();
    coordinator
        .init_producer("idle", None, 5_000, issue(1001), 0)
        .unwrap();
    coordinator
        .add_partitions("slow", 1000, 0, &out(1), 100)
        .unwrap();
    assert!(coordinator.fence_timed_out(5_000).unwrap().is_empty());
    let fenced = coordinator.fence_timed_out(5_101).unwrap();
    assert_eq!(fenced.len(), 1);
    assert_eq!(
        (fenced[0].epoch(), fenced[0].state()),
        (1, TxnState::PrepareAbort)
    );
    assert!(matches!(
        coordinator.add_partitions("slow", 1000, 0, &out(1), 5_102),
        Err(CoordinatorError::Refused(TxnError::ProducerFenced))
    ));
    coordinator.complete("slow", 5_103).unwrap();
    assert_eq!(coordinator.expire(5_200).unwrap(), 1, "only the idle one");
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

#[test]
fn bad_requests_are_refused_before_anything_changes() {
    let coordinator = TransactionCoordinator::in_memory(Limits::default());
    assert!(matches!(
        coordinator.init_producer("", None, 1_000, never, 0),
        Err(CoordinatorError::EmptyTransactionalId)
    ));
    assert!(matches!(
        coordinator.init_producer("app", None, 900_001, never, 0),
        Err(CoordinatorError::Refused(
            TxnError::InvalidTransactionTimeout { .. }
        ))
    ));
    assert!(matches!(
        coordinator.add_partitions("app", 1000, 0, &out(0), 0),
        Err(CoordinatorError::UnknownTransactionalId(_))
    ));
    let exhausted = || Err::<i64, _>(std::io::Error::other("every producer id was issued"));
    assert!(matches!(
        coordinator.init_producer("app", None, 1_000, exhausted, 0),
        Err(CoordinatorError::ProducerId(_))
    ));
    assert!(coordinator.is_empty());
}

#[test]
fn a_new_id_is_kept_for_the_expiration_time_from_its_init_not_from_1970() {
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
        .unwrap();
    assert_eq!(coordinator.expire(inited + 1_000).unwrap(), 0);
    coordinator
        .add_partitions("app", 1000, 0, &out(0), inited + 2_000)
        .expect("its first transaction starts");
    // A second id idle for longer than the expiration time is forgotten.
    coordinator
        .init_producer("idle", None, 5_000, issue(1001), inited)
        .unwrap();
    assert_eq!(coordinator.expire(inited + 60_001).unwrap(), 1);
    assert!(coordinator.describe("idle").is_none());
    assert!(coordinator.describe("app").is_some());
}

#[test]
fn transactional_ids_are_bounded_in_length_and_charged_to_the_storage_budget() {
    // 2,097 ids of 32 KB each were accepted, 4 times a 16 MiB budget: RSS went from 10 to
    // 268 MiB and transactions.log grew to 64 MiB.
    const BUDGET: u64 = 16 << 20;
    let storage = SimStorage::new();
    let budget = Arc::new(StorageBudget::new(BUDGET));
    let coordinator = open(&storage).charged_to(Arc::clone(&budget));
    for n in 0..2097 {
        let id = format!("{n:05}{}", "x".repeat(32 * 1024));
        assert!(matches!(
            coordinator.init_producer(&id, None, 60_000, never, 0),
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
        match coordinator.init_producer(&id, None, 60_000, issue(accepted), 0) {
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
        coordinator.expire(expiration + 1).unwrap(),
        usize::try_from(accepted).unwrap()
    );
    assert_eq!(budget.charged(), 0);
}

#[test]
fn a_transaction_commits_offsets_of_a_bounded_number_of_groups() {
    let coordinator = TransactionCoordinator::in_memory(Limits::default());
    coordinator
        .init_producer("app", None, 60_000, issue(1000), 0)
        .unwrap();
    for n in 0..MAX_GROUPS_PER_TRANSACTION {
        coordinator
            .add_group("app", 1000, 0, &format!("group-{n}"), 1)
            .unwrap();
    }
    // A group it holds again is fine; one more is not.
    coordinator.add_group("app", 1000, 0, "group-0", 2).unwrap();
    assert!(matches!(
        coordinator.add_group("app", 1000, 0, "one-more", 2),
        Err(CoordinatorError::TooManyGroups)
    ));
    assert_eq!(
        coordinator.describe("app").unwrap().group_count(),
        MAX_GROUPS_PER_TRANSACTION
    );
}
