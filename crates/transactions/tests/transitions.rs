//! Every transition of one transactional id, and every refusal, as Kafka's coordinator answers
//! them (the table in Kafka's `TransactionMetadata` and `TransactionCoordinator`).

use minibroker_transactions::{Change, EndEpoch, InitOutcome, Transaction, TxnError, TxnState};

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
    assert_eq!(
        txn.end((PID, 1), true, EndEpoch::Kept, 1),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        txn.end((PID + 1, 0), false, EndEpoch::Kept, 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(txn, before, "a refusal changes nothing");
}

#[test]
fn a_commit_prepares_then_completes_and_its_retry_is_answered() {
    let mut txn = ongoing();
    assert_eq!(
        txn.end((PID, 0), true, EndEpoch::Kept, 300),
        Ok(Change::Changed)
    );
    assert_eq!(txn.state(), TxnState::PrepareCommit);
    assert_eq!(
        txn.end((PID, 0), true, EndEpoch::Kept, 301),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        txn.end((PID, 0), false, EndEpoch::Kept, 301),
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
    assert_eq!(
        txn.end((PID, 0), true, EndEpoch::Kept, 303),
        Ok(Change::Unchanged)
    );
    assert_eq!(
        txn.end((PID, 0), false, EndEpoch::Kept, 303),
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
    assert_eq!(
        txn.end((PID, 0), false, EndEpoch::Kept, 300),
        Ok(Change::Changed)
    );
    assert_eq!(txn.state(), TxnState::PrepareAbort);
    assert_eq!(
        txn.end((PID, 0), false, EndEpoch::Kept, 301),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        txn.end((PID, 0), true, EndEpoch::Kept, 301),
        Err(TxnError::InvalidTxnState {
            state: TxnState::PrepareAbort
        })
    );
    txn.complete(302).unwrap();
    assert_eq!(txn.state(), TxnState::CompleteAbort);
    assert_eq!(
        txn.end((PID, 0), false, EndEpoch::Kept, 303),
        Ok(Change::Unchanged)
    );
    assert_eq!(
        txn.end((PID, 0), true, EndEpoch::Kept, 303),
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
            txn.end((PID, 0), commit, EndEpoch::Kept, 1),
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
    assert_eq!(
        txn.end((PID, 0), true, EndEpoch::Kept, 501),
        Err(TxnError::ProducerFenced)
    );
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
    open.end((PID, 0), true, EndEpoch::Kept, 200).unwrap();
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

/// An end that bumps the epoch (EndTxn v5): with no spare producer id needed.
const BUMPED: EndEpoch = EndEpoch::Bumped {
    spare_producer_id: None,
};

#[test]
fn a_bumping_end_moves_the_epoch_on_and_fences_every_request_of_the_old_one() {
    let mut txn = ongoing();
    assert_eq!(txn.end((PID, 0), true, BUMPED, 300), Ok(Change::Changed));
    // The markers carry the new epoch.
    assert_eq!((txn.state(), txn.epoch()), (TxnState::PrepareCommit, 1));
    // The end's retry while its markers are written, and the other result.
    assert_eq!(
        txn.end((PID, 0), true, BUMPED, 301),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        txn.end((PID, 0), false, BUMPED, 301),
        Err(TxnError::InvalidTxnState {
            state: TxnState::PrepareCommit
        })
    );
    txn.complete(302).unwrap();
    assert_eq!((txn.state(), txn.epoch()), (TxnState::CompleteCommit, 1));
    // Its retry, with the pair it was asked with, is answered as it was.
    assert_eq!(txn.end((PID, 0), true, BUMPED, 303), Ok(Change::Unchanged));
    assert_eq!(
        txn.end((PID, 0), false, BUMPED, 303),
        Err(TxnError::InvalidTxnState {
            state: TxnState::CompleteCommit
        })
    );
    // A commit with nothing open is no end.
    assert_eq!(
        txn.end((PID, 1), true, BUMPED, 303),
        Err(TxnError::InvalidTxnState {
            state: TxnState::CompleteCommit
        })
    );
    // The next transaction, at the new epoch: every request of the old epoch is fenced.
    txn.add_partitions(PID, 1, partition("out", 0), 304)
        .unwrap();
    assert_eq!(
        txn.add_partitions(PID, 0, partition("out", 1), 305),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        txn.end((PID, 0), true, BUMPED, 305),
        Err(TxnError::ProducerFenced),
        "a late end of the last transaction must not end this one"
    );
    assert_eq!(
        txn.end((PID, 0), true, EndEpoch::Kept, 305),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(txn.end((PID, 1), false, BUMPED, 306), Ok(Change::Changed));
    assert_eq!(txn.epoch(), 2);
}

#[test]
fn a_bumping_abort_with_nothing_open_moves_the_epoch_on() {
    let mut txn = Transaction::new("t", PID, TIMEOUT, 0);
    assert_eq!(txn.end((PID, 0), false, BUMPED, 1), Ok(Change::Changed));
    assert_eq!((txn.state(), txn.epoch()), (TxnState::PrepareAbort, 1));
    assert_eq!(txn.partitions().count(), 0, "no marker to write");
    txn.complete(2).unwrap();
    assert_eq!((txn.state(), txn.epoch()), (TxnState::CompleteAbort, 1));
    // Kept epochs (EndTxn v0-4) have no such end.
    let mut kept = Transaction::new("t", PID, TIMEOUT, 0);
    assert_eq!(
        kept.end((PID, 0), false, EndEpoch::Kept, 1),
        Err(TxnError::InvalidTxnState {
            state: TxnState::Empty
        })
    );
}

#[test]
fn a_bumping_end_at_the_last_epoch_completes_with_a_new_producer_id() {
    let mut txn = Transaction::new("t", PID, TIMEOUT, 0);
    for _ in 0..i16::MAX - 2 {
        txn.init(None, TIMEOUT, None, 1).unwrap();
    }
    let last = txn.epoch();
    assert_eq!(last, i16::MAX - 2);
    txn.add_partitions(PID, last, partition("out", 0), 2)
        .unwrap();
    txn.end((PID, last), true, BUMPED, 3).unwrap();
    txn.complete(4).unwrap();
    let ran_out = txn.epoch();
    assert!(txn.needs_spare_producer_id());
    txn.add_partitions(PID, ran_out, partition("out", 0), 5)
        .unwrap();
    let before = txn.clone();
    // Without a spare producer id the client asks again.
    assert_eq!(
        txn.end((PID, ran_out), true, BUMPED, 6),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(txn, before, "a refusal changes nothing");
    let spare = EndEpoch::Bumped {
        spare_producer_id: Some(PID + 7),
    };
    assert_eq!(txn.end((PID, ran_out), true, spare, 6), Ok(Change::Changed));
    // The markers take the last epoch; the producer goes on as the new id at epoch 0.
    assert_eq!((txn.producer_id(), txn.epoch()), (PID, i16::MAX));
    txn.complete(7).unwrap();
    assert_eq!((txn.producer_id(), txn.epoch()), (PID + 7, 0));
    assert_eq!(
        txn.end((PID, ran_out), true, BUMPED, 8),
        Ok(Change::Unchanged),
        "the end's retry, under the old id"
    );
    assert_eq!(
        txn.add_partitions(PID, ran_out, partition("out", 0), 8),
        Err(TxnError::InvalidProducerIdMapping)
    );
}

#[test]
fn after_a_fence_no_request_of_the_fenced_epoch_is_a_retry() {
    let mut txn = ongoing();
    txn.end((PID, 0), false, BUMPED, 300).unwrap();
    txn.complete(301).unwrap();
    txn.add_partitions(PID, 1, partition("out", 0), 302)
        .unwrap();
    // A newer instance (or the timeout) fences the open transaction.
    txn.fence(303).unwrap();
    txn.complete(304).unwrap();
    assert_eq!((txn.state(), txn.epoch()), (TxnState::CompleteAbort, 2));
    assert_eq!(
        txn.end((PID, 0), false, BUMPED, 305),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        txn.end((PID, 1), false, BUMPED, 305),
        Err(TxnError::ProducerFenced)
    );
}

#[test]
fn a_brokers_verification_finds_only_the_current_producers_added_partitions() {
    let txn = ongoing();
    assert_eq!(txn.check_partition(PID, 0, ("out", 0)), Ok(()));
    assert_eq!(
        txn.check_partition(PID, 0, ("out", 1)),
        Err(TxnError::InvalidTxnState {
            state: TxnState::Ongoing
        })
    );
    assert_eq!(
        txn.check_partition(PID, 1, ("out", 0)),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        txn.check_partition(PID + 1, 0, ("out", 0)),
        Err(TxnError::InvalidProducerIdMapping)
    );
    let empty = Transaction::new("t", PID, TIMEOUT, 0);
    assert_eq!(
        empty.check_partition(PID, 0, ("out", 0)),
        Err(TxnError::InvalidTxnState {
            state: TxnState::Empty
        })
    );
}
