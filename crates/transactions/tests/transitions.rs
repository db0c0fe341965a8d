//! Every transition of one transactional id, and every refusal, as Kafka's coordinator answers
//! them (the table in Kafka's `TransactionMetadata` and `TransactionCoordinator`).

use minibroker_transactions::{Change, InitOutcome, Transaction, TxnError, TxnState};

const PID: i64 = 1000;
const TIMEOUT: u64 = 60_000;

fn partition(topic: &str, index: u32) -> [(String, u32); 1] {
    [(topic.to_owned(), index)]
}

/// A transaction with one partition added at `now` 100: Ongoing at epoch 0.
fn ongoing() -> Transaction {
    let mut txn = Transaction::new("t", PID, TIMEOUT, 0);
    assert_eq!(
        txn.add_partitions(PID, 0, partition("out", 0), 100),
        Ok(Change::Changed)
    );
    assert_eq!(txn.state(), TxnState::Ongoing);
    txn
}

#[test]
fn init_bumps_the_epoch_and_moves_to_a_new_producer_id_when_it_runs_out() {
    let mut txn = Transaction::new("t", PID, TIMEOUT, 0);
    assert_eq!((txn.producer_id(), txn.epoch()), (PID, 0));
    assert_eq!(
        txn.init(None, TIMEOUT, None, 1),
        Ok(InitOutcome::Ready {
            producer_id: PID,
            epoch: 1
        })
    );
    for _ in 1..i16::MAX - 1 {
        txn.init(None, TIMEOUT, None, 1).unwrap();
    }
    assert_eq!(txn.epoch(), i16::MAX - 1);
    assert_eq!(
        txn.init(None, TIMEOUT, Some(PID + 1), 2),
        Ok(InitOutcome::Ready {
            producer_id: PID + 1,
            epoch: 0
        })
    );
}

#[test]
fn a_recovering_client_must_name_the_current_producer_and_epoch() {
    let mut txn = Transaction::new("t", PID, TIMEOUT, 0);
    assert_eq!(
        txn.init(Some((PID, 1)), TIMEOUT, None, 1),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        txn.init(Some((PID + 7, 0)), TIMEOUT, None, 1),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        txn.init(Some((PID, 0)), TIMEOUT, None, 1),
        Ok(InitOutcome::Ready {
            producer_id: PID,
            epoch: 1
        })
    );
}

#[test]
fn adds_open_the_transaction_and_only_new_members_change_it() {
    let mut txn = ongoing();
    assert_eq!(
        txn.add_partitions(PID, 0, partition("out", 0), 200),
        Ok(Change::Unchanged)
    );
    assert_eq!(
        txn.add_partitions(PID, 0, partition("out", 1), 200),
        Ok(Change::Changed)
    );
    assert_eq!(txn.add_group(PID, 0, "g", 200), Ok(Change::Changed));
    assert_eq!(txn.add_group(PID, 0, "g", 200), Ok(Change::Unchanged));
    assert_eq!(txn.partitions().count(), 2);
    assert_eq!(txn.groups().collect::<Vec<_>>(), ["g"]);
}

#[test]
fn another_producer_id_or_epoch_is_refused_by_every_request() {
    let mut txn = ongoing();
    let before = txn.clone();
    assert_eq!(
        txn.add_partitions(PID + 1, 0, partition("out", 1), 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(txn.add_group(PID, 1, "g", 1), Err(TxnError::ProducerFenced));
    assert_eq!(txn.end(PID, 1, true, 1), Err(TxnError::ProducerFenced));
    assert_eq!(
        txn.end(PID + 1, 0, false, 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(txn, before, "a refusal changes nothing");
}

#[test]
fn a_commit_prepares_then_completes_and_its_retry_is_answered() {
    let mut txn = ongoing();
    assert_eq!(txn.end(PID, 0, true, 300), Ok(Change::Changed));
    assert_eq!(txn.state(), TxnState::PrepareCommit);
    assert_eq!(
        txn.end(PID, 0, true, 301),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        txn.end(PID, 0, false, 301),
        Err(TxnError::InvalidTxnState {
            state: TxnState::PrepareCommit
        })
    );
    assert_eq!(
        txn.add_partitions(PID, 0, partition("out", 2), 301),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        txn.init(None, TIMEOUT, None, 301),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        txn.partitions().count(),
        1,
        "the markers go to these partitions"
    );
    txn.complete(302).unwrap();
    assert_eq!(txn.state(), TxnState::CompleteCommit);
    assert_eq!(txn.partitions().count(), 0);
    assert_eq!(txn.end(PID, 0, true, 303), Ok(Change::Unchanged));
    assert_eq!(
        txn.end(PID, 0, false, 303),
        Err(TxnError::InvalidTxnState {
            state: TxnState::CompleteCommit
        })
    );
    // The next transaction opens from CompleteCommit.
    assert_eq!(
        txn.add_partitions(PID, 0, partition("out", 1), 400),
        Ok(Change::Changed)
    );
    assert_eq!(txn.partitions().count(), 1);
}

#[test]
fn an_abort_prepares_then_completes_and_its_retry_is_answered() {
    let mut txn = ongoing();
    assert_eq!(txn.end(PID, 0, false, 300), Ok(Change::Changed));
    assert_eq!(txn.state(), TxnState::PrepareAbort);
    assert_eq!(
        txn.end(PID, 0, false, 301),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        txn.end(PID, 0, true, 301),
        Err(TxnError::InvalidTxnState {
            state: TxnState::PrepareAbort
        })
    );
    txn.complete(302).unwrap();
    assert_eq!(txn.state(), TxnState::CompleteAbort);
    assert_eq!(txn.end(PID, 0, false, 303), Ok(Change::Unchanged));
    assert_eq!(
        txn.end(PID, 0, true, 303),
        Err(TxnError::InvalidTxnState {
            state: TxnState::CompleteAbort
        })
    );
}

#[test]
fn nothing_to_end_or_complete_without_an_open_transaction() {
    let mut txn = Transaction::new("t", PID, TIMEOUT, 0);
    for commit in [true, false] {
        assert_eq!(
            txn.end(PID, 0, commit, 1),
            Err(TxnError::InvalidTxnState {
                state: TxnState::Empty
            })
        );
    }
    assert_eq!(
        txn.complete(1),
        Err(TxnError::InvalidTxnState {
            state: TxnState::Empty
        })
    );
    assert_eq!(
        txn.fence(1),
        Err(TxnError::InvalidTxnState {
            state: TxnState::Empty
        })
    );
}

#[test]
fn a_newer_instance_fences_the_open_transaction_and_gets_the_epoch_after() {
    let mut txn = ongoing();
    assert_eq!(
        txn.init(None, TIMEOUT, None, 500),
        Ok(InitOutcome::Fenced { epoch: 1 })
    );
    assert_eq!(txn.state(), TxnState::PrepareAbort);
    assert_eq!(
        txn.partitions().count(),
        1,
        "the abort markers go to the fenced transaction's partitions"
    );
    // The zombie, at epoch 0, is refused from now on.
    assert_eq!(
        txn.add_partitions(PID, 0, partition("out", 0), 501),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(txn.end(PID, 0, true, 501), Err(TxnError::ProducerFenced));
    // The new instance's retry waits for the markers, then gets the next epoch.
    assert_eq!(
        txn.init(None, TIMEOUT, None, 501),
        Err(TxnError::ConcurrentTransactions)
    );
    txn.complete(502).unwrap();
    assert_eq!(txn.state(), TxnState::CompleteAbort);
    assert_eq!(
        txn.init(None, TIMEOUT, None, 503),
        Ok(InitOutcome::Ready {
            producer_id: PID,
            epoch: 2
        })
    );
    assert_eq!(txn.state(), TxnState::Empty);
}

#[test]
fn an_open_transaction_times_out_from_its_first_add_and_is_fenced() {
    let mut txn = Transaction::new("t", PID, 1_000, 0);
    assert!(!txn.is_timed_out(10_000), "no transaction is open");
    txn.add_partitions(PID, 0, partition("out", 0), 5_000)
        .unwrap();
    txn.add_partitions(PID, 0, partition("out", 1), 5_900)
        .unwrap();
    assert!(!txn.is_timed_out(6_000));
    assert!(txn.is_timed_out(6_001), "counted from the first add");
    assert_eq!(txn.fence(6_001), Ok(1));
    assert_eq!(txn.state(), TxnState::PrepareAbort);
    assert!(
        !txn.is_timed_out(100_000),
        "an ending transaction is not timed out again"
    );
}

#[test]
fn only_an_id_with_nothing_open_expires_and_a_dead_id_starts_over() {
    let mut txn = Transaction::new("t", PID, TIMEOUT, 0);
    txn.init(None, TIMEOUT, None, 1_000).unwrap();
    assert!(!txn.is_expired(1_500, 1_000));
    assert!(txn.is_expired(2_001, 1_000));
    let mut open = ongoing();
    assert!(
        !open.is_expired(i64::MAX, 1_000),
        "an open transaction never expires"
    );
    open.end(PID, 0, true, 200).unwrap();
    assert!(
        !open.is_expired(i64::MAX, 1_000),
        "nor one whose markers are being written"
    );

    assert_eq!(
        open.forget(300),
        Err(TxnError::InvalidTxnState {
            state: TxnState::PrepareCommit
        })
    );

    // A forgotten id refuses its old producer, and comes back as a new one.
    txn.forget(2_001).unwrap();
    assert_eq!(txn.state(), TxnState::Dead);
    assert_eq!(
        txn.add_partitions(PID, 1, partition("out", 0), 2_002),
        Err(TxnError::InvalidTxnState {
            state: TxnState::Dead
        })
    );
    assert_eq!(
        txn.init(None, TIMEOUT, Some(PID + 9), 2_003),
        Ok(InitOutcome::Ready {
            producer_id: PID + 9,
            epoch: 0
        })
    );
    assert_eq!(txn.state(), TxnState::Empty);
}
