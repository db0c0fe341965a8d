//! The manager's named guarantees: each non-ACCEPTED outcome and each failed append leaves the
//! whole state exactly as it was; bad input is refused before anything is looked at.

use minibroker_state::{
    BatchHeader, MarkerVerdict, Outcome, ProducerStateManager, SequenceRange, StateError, Verdict,
};
use std::convert::Infallible;

fn header(producer_id: i64, partition: u32, epoch: i16, seq: i32) -> BatchHeader {
    BatchHeader::new(
        producer_id,
        partition,
        epoch,
        SequenceRange::single(seq).unwrap(),
    )
    .unwrap()
}

/// A manager where producer 1 has written sequences 0..=2 at epoch 1 on partition 0 (offsets
/// 10, 11, 12), and producer 2 has one batch on partition 1.
fn populated() -> ProducerStateManager {
    let mgr = ProducerStateManager::with_shards(2);
    for seq in 0..3 {
        let v = mgr.append_batch(&header(1, 0, 1, seq), |_| Ok::<_, ()>(10 + i64::from(seq)));
        assert_eq!(v.unwrap().outcome, Outcome::Accepted);
    }
    mgr.append_batch(&header(2, 1, 0, 0), |_| Ok::<_, ()>(0))
        .unwrap();
    mgr
}

fn assert_untouched(request: BatchHeader, expected: Outcome) {
    let mgr = populated();
    let before = mgr.snapshot();
    let mut appended = false;
    let verdict = mgr
        .append_batch(&request, |_| {
            appended = true;
            Ok::<_, ()>(99)
        })
        .unwrap();
    assert_eq!(verdict.outcome, expected);
    assert!(!appended, "{expected} must not append");
    assert_eq!(mgr.snapshot(), before, "{expected} changed the state");
}

#[test]
fn duplicate_leaves_state_untouched() {
    assert_untouched(header(1, 0, 1, 1), Outcome::Duplicate);
}

#[test]
fn out_of_order_gap_leaves_state_untouched() {
    assert_untouched(header(1, 0, 1, 5), Outcome::OutOfOrder);
}

#[test]
fn out_of_order_new_session_not_at_zero_leaves_state_untouched() {
    assert_untouched(header(1, 0, 2, 1), Outcome::OutOfOrder);
}

#[test]
fn out_of_order_first_write_not_at_zero_leaves_state_untouched() {
    assert_untouched(header(3, 0, 0, 1), Outcome::OutOfOrder);
}

#[test]
fn fenced_epoch_leaves_state_untouched() {
    assert_untouched(header(1, 0, 0, 3), Outcome::FencedEpoch);
}

#[test]
fn failed_append_leaves_state_untouched_and_returns_the_error() {
    let mgr = populated();
    let before = mgr.snapshot();
    let result = mgr.append_batch(&header(1, 0, 1, 3), |_| Err::<i64, _>("log full"));
    assert_eq!(result, Err("log full"));
    assert_eq!(mgr.snapshot(), before);
    // The same batch is accepted once the log can take it.
    let verdict = mgr.append_batch(&header(1, 0, 1, 3), |_| Ok::<_, ()>(13));
    assert_eq!(
        verdict,
        Ok(Verdict {
            outcome: Outcome::Accepted,
            base_offset: Some(13),
            known_producer: true
        })
    );
}

#[test]
fn duplicate_answers_with_the_original_offset() {
    let mgr = populated();
    let verdict = mgr.append_batch(&header(1, 0, 1, 1), |_| Ok::<_, ()>(99));
    assert_eq!(
        verdict,
        Ok(Verdict {
            outcome: Outcome::Duplicate,
            base_offset: Some(11),
            known_producer: true
        })
    );
}

#[test]
fn producers_are_tracked_independently_per_partition() {
    let mgr = populated();
    // Producer 1 has never written to partition 1: its first write there must start at 0.
    assert_eq!(mgr.append(1, 1, 1, 3), Ok(Outcome::OutOfOrder));
    assert_eq!(mgr.append(1, 1, 0, 0), Ok(Outcome::Accepted));
    assert_eq!(mgr.entry(0, 1).unwrap().last_sequence(), Some(2));
    assert_eq!(mgr.entry(1, 1).unwrap().last_sequence(), Some(0));
}

#[test]
fn negative_input_is_rejected_and_never_stored() {
    let mgr = ProducerStateManager::new();
    assert_eq!(
        mgr.append(-1, 0, 0, 0),
        Err(StateError::NegativeProducerId(-1))
    );
    assert_eq!(mgr.append(1, 0, -1, 0), Err(StateError::NegativeEpoch(-1)));
    assert_eq!(
        mgr.append(1, 0, 0, -1),
        Err(StateError::NegativeSequence(-1))
    );
    assert!(mgr.is_empty());
}

#[test]
fn producers_view_lists_a_partitions_entries_in_id_order() {
    let mgr = ProducerStateManager::with_shards(1);
    for producer in [5, 3, 9] {
        mgr.append(producer, 7, 0, 0).unwrap();
    }
    mgr.append(4, 8, 0, 0).unwrap();
    let ids: Vec<i64> = mgr.producers(7).iter().map(|v| v.producer_id).collect();
    assert_eq!(ids, vec![3, 5, 9]);
    let view = &mgr.producers(7)[0];
    assert_eq!(
        (view.entry.epoch(), view.entry.last_sequence()),
        (0, Some(0))
    );
    assert!(mgr.producers(99).is_empty());
}

#[test]
fn seed_append_reports_no_offsets() {
    let mgr = ProducerStateManager::new();
    mgr.append(1, 0, 0, 0).unwrap();
    let entry = mgr.entry(0, 1).unwrap();
    assert_eq!(entry.batches().next().unwrap().base_offset, None);
}

#[test]
fn producers_are_listed_a_page_at_a_time_with_a_continuation() {
    let mgr = ProducerStateManager::with_shards(1);
    for producer in (0..25).rev() {
        mgr.append(producer, 7, 0, 0).unwrap();
    }
    // Another partition on the same shard never leaks into the pages.
    mgr.append(100, 8, 0, 0).unwrap();
    let mut seen = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = mgr.producers_page(7, after, 10);
        assert!(page.producers.len() <= 10);
        seen.extend(page.producers.iter().map(|v| v.producer_id));
        pages += 1;
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, (0..25).collect::<Vec<_>>());
    assert_eq!(pages, 3);
    // A page that ends exactly at the last producer has no continuation.
    let exact = mgr.producers_page(7, Some(14), 10);
    assert_eq!(exact.producers.len(), 10);
    assert_eq!(exact.next_after, None);
}

#[test]
fn the_append_closure_is_told_when_a_producer_is_new_on_the_partition() {
    let mgr = ProducerStateManager::with_shards(1);
    let mut seen = Vec::new();
    for seq in 0..2 {
        mgr.append_batch(&header(1, 0, 0, seq), |new| {
            seen.push(new.0);
            Ok::<_, ()>(i64::from(seq))
        })
        .unwrap();
    }
    mgr.append_batch(&header(1, 1, 0, 0), |new| {
        seen.push(new.0);
        Ok::<_, ()>(0)
    })
    .unwrap();
    assert_eq!(seen, vec![true, false, true]);
}

/// Recovery's view: a snapshot taken part-way, restored into a fresh manager, plus a replay of
/// the batches accepted after it, is the state the live manager ended with — and it answers a
/// retry of the last batch DUPLICATE with its offset, as the live one does.
#[test]
fn restore_plus_replay_rebuilds_the_live_state() {
    let live = ProducerStateManager::with_shards(2);
    let mut accepted = Vec::new();
    for (i, (producer, epoch, seq)) in [(1, 0, 0), (2, 0, 0), (1, 0, 1), (1, 1, 0), (2, 0, 1)]
        .into_iter()
        .enumerate()
    {
        let request = header(producer, 0, epoch, seq).at(100 + i as i64);
        let verdict = live
            .append_batch(&request, |_| Ok::<_, ()>(i as i64))
            .unwrap();
        assert_eq!(verdict.outcome, Outcome::Accepted);
        accepted.push((request, i as i64));
    }
    for split in 0..=accepted.len() {
        let early = ProducerStateManager::with_shards(2);
        for (request, offset) in &accepted[..split] {
            early.replay(request, *offset);
        }
        let (saved, ()) = early.partition_snapshot(0, || ());
        let recovered = ProducerStateManager::with_shards(3);
        recovered.restore(0, saved);
        for (request, offset) in &accepted[split..] {
            recovered.replay(request, *offset);
        }
        assert_eq!(recovered.snapshot(), live.snapshot(), "split at {split}");
        let retry = recovered
            .append_batch(&header(2, 0, 0, 1), |_| Ok::<_, ()>(99))
            .unwrap();
        assert_eq!(
            retry,
            Verdict {
                outcome: Outcome::Duplicate,
                base_offset: Some(4),
                known_producer: true
            }
        );
    }
}

#[test]
fn idle_producers_expire_and_start_over() {
    let mgr = ProducerStateManager::with_shards(2);
    mgr.append_batch(&header(1, 0, 0, 0).at(1_000), |_| Ok::<_, ()>(0))
        .unwrap();
    mgr.append_batch(&header(2, 1, 0, 0).at(5_000), |_| Ok::<_, ()>(0))
        .unwrap();
    assert_eq!((mgr.partition_len(0), mgr.partition_len(1)), (1, 1));
    assert_eq!(mgr.expire(6_000, 5_000), 0);
    assert_eq!(mgr.expire(6_001, 5_000), 1);
    assert!(mgr.entry(0, 1).is_none());
    assert!(mgr.entry(1, 2).is_some());
    // Forgotten: its next batch is judged as a new producer's.
    let again = mgr
        .append_batch(&header(1, 0, 0, 1), |_| Ok::<_, ()>(1))
        .unwrap();
    assert_eq!(again.outcome, Outcome::OutOfOrder);
    assert_eq!(mgr.forget_partition(1), 1);
    assert!(mgr.is_empty());
}

#[test]
fn a_marker_ends_the_transaction_and_a_higher_epoch_fences_the_old_one() {
    let mgr = ProducerStateManager::new();
    let header = |epoch, first| {
        BatchHeader::new(5, 0, epoch, SequenceRange::single(first).unwrap())
            .unwrap()
            .transactional(true)
    };
    let append = |_| Ok::<_, Infallible>(0);
    mgr.append_batch(&header(1, 0), append).unwrap();
    assert!(mgr.entry(0, 5).unwrap().in_transaction());
    // Idle far beyond expiry, but its transaction is open: kept.
    assert_eq!(mgr.expire(1_000_000, 10), 0);

    let written = mgr.end_transaction(0, 5, 2, 0, || Ok::<_, Infallible>("abort"));
    assert_eq!(written.unwrap(), MarkerVerdict::Written("abort"));
    let entry = mgr.entry(0, 5).unwrap();
    assert_eq!((entry.epoch(), entry.in_transaction()), (2, false));
    // The old instance is fenced; the new one starts at 0.
    let old = mgr.append_batch(&header(1, 1), append).unwrap();
    assert_eq!(old.outcome, Outcome::FencedEpoch);
    assert_eq!(
        mgr.append_batch(&header(2, 0), append).unwrap().outcome,
        Outcome::Accepted
    );

    // A marker of an older epoch is refused and writes nothing.
    let stale = mgr.end_transaction(0, 5, 1, 0, || -> Result<(), Infallible> {
        panic!("a stale marker must not be written")
    });
    assert_eq!(stale.unwrap(), MarkerVerdict::Fenced { current: 2 });
    assert!(mgr.entry(0, 5).unwrap().in_transaction());
    // No entry is made for a producer that never wrote here.
    mgr.replay_marker(0, 77, 3, 0);
    assert_eq!(mgr.entry(0, 77), None);
}
