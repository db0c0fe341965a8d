//! What one partition knows of transactions (KIP-98), beside its producers' entries: which
//! producers' transactions are open here and from which offset, which ended in an abort, and which
//! producers' coordinator has added the partition to their ongoing transaction.
//!
//! - The **last stable offset** (LSO) is the first offset of the oldest open transaction, or the
//!   high watermark when none is open: a `read_committed` consumer reads only below it, so it never
//!   sees a record whose transaction may still abort.
//! - The **aborted transactions** (producer, first offset, marker offset), in marker order, are
//!   what a `read_committed` fetch returns with its records so the consumer can drop the aborted
//!   ones (Kafka's per-segment `.txnindex`). Entries wholly below the log start are forgotten with
//!   the segments that held them.
//! - A producer is **expected** here once its coordinator added the partition to its transaction
//!   (AddPartitionsToTxn), until the marker that ends it: a transactional batch of any other
//!   producer, or of another epoch, is refused (KIP-890 part 1), so a late batch of an ended
//!   transaction can never reopen one that no coordinator will close.
//! - A producer whose transaction added the partition and was **aborted before any of its batches
//!   arrived** may still have one on its way (a request held in the network, a batch the client
//!   gave up on). A client that does not bump its epoch at every end (KIP-890 part 2) writes its
//!   next transaction at the same epoch, where that late batch would be taken for the next
//!   transaction's. So the (producer, epoch) is remembered, and a transactional batch of it is
//!   refused here until the producer moves to a newer epoch (KAFKA-17754).
//!
//! Kept under the partition's lock, and only changed there: by an append of a transactional batch,
//! by a marker, by the coordinator's add. Snapshots carry the open and aborted transactions; the
//! expectations are the coordinator's to restore.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A transaction that ended in an abort: its records, from `first_offset` up to the marker at
/// `last_offset`, are never shown to a `read_committed` consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AbortedTransaction {
    /// The producer whose transaction it was.
    pub producer_id: i64,
    /// The offset of its first batch on the partition.
    pub first_offset: i64,
    /// The offset of its ABORT marker.
    pub last_offset: i64,
}

/// One partition's open and aborted transactions, and the producers expected to write in one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionTransactions {
    /// Producer id → first offset of its open transaction.
    open: BTreeMap<i64, i64>,
    /// The same, by (first offset, producer id): the first is the LSO.
    open_by_offset: BTreeSet<(i64, i64)>,
    /// Ended in an abort, in marker (so `last_offset`) order.
    aborted: VecDeque<AbortedTransaction>,
    /// Producer id → the epoch its coordinator added this partition at.
    expected: BTreeMap<i64, i16>,
    /// Producer id → the epoch of an abort that ended its transaction here before any of its
    /// batches arrived: a batch of that epoch may still be on its way, so none is taken.
    aborted_unwritten: BTreeMap<i64, i16>,
}

impl PartitionTransactions {
    /// Open and aborted transactions as a snapshot saved them (nothing expected: the coordinator
    /// says that again after a restart). `None` unless they could have been made by appends:
    /// aborted ones in marker order, each ending at or after its start.
    #[must_use]
    pub fn from_parts(open: &[(i64, i64)], aborted: &[AbortedTransaction]) -> Option<Self> {
        let ordered = aborted
            .windows(2)
            .all(|w| w[0].last_offset < w[1].last_offset);
        let sane = aborted.iter().all(|a| a.first_offset <= a.last_offset);
        if !ordered || !sane {
            return None;
        }
        let mut transactions = Self::default();
        for &(producer_id, first_offset) in open {
            if transactions
                .open
                .insert(producer_id, first_offset)
                .is_some()
            {
                return None;
            }
            transactions
                .open_by_offset
                .insert((first_offset, producer_id));
        }
        transactions.aborted = aborted.iter().copied().collect();
        Some(transactions)
    }

    /// The producer's coordinator added this partition to its transaction at `epoch`.
    pub fn expect(&mut self, producer_id: i64, epoch: i16) {
        self.expected.insert(producer_id, epoch);
        self.forget_unwritten_before(producer_id, epoch);
    }

    /// Whether a transactional batch of `producer_id` at `epoch` may be appended.
    #[must_use]
    pub fn is_expected(&self, producer_id: i64, epoch: i16) -> bool {
        self.expected.get(&producer_id) == Some(&epoch)
    }

    /// Whether an abort at `epoch` ended a transaction of `producer_id` here before any of its
    /// batches arrived, and the producer has not moved past that epoch since: a batch of that
    /// epoch may be the late one of the aborted transaction.
    #[must_use]
    pub fn was_aborted_unwritten(&self, producer_id: i64, epoch: i16) -> bool {
        self.aborted_unwritten.get(&producer_id) == Some(&epoch)
    }

    /// The producer moved to `epoch`: an abort remembered at an older one no longer matters
    /// (every batch of that epoch is fenced now).
    fn forget_unwritten_before(&mut self, producer_id: i64, epoch: i16) {
        if self
            .aborted_unwritten
            .get(&producer_id)
            .is_some_and(|&aborted| aborted < epoch)
        {
            self.aborted_unwritten.remove(&producer_id);
        }
    }

    /// Whether `producer_id` has a transaction open here.
    #[must_use]
    pub fn is_open(&self, producer_id: i64) -> bool {
        self.open.contains_key(&producer_id)
    }

    /// A transactional batch of `producer_id` was appended at `base_offset`: the producer's first
    /// one opens its transaction here.
    pub fn record_batch(&mut self, producer_id: i64, base_offset: i64) {
        if let std::collections::btree_map::Entry::Vacant(slot) = self.open.entry(producer_id) {
            slot.insert(base_offset);
            self.open_by_offset.insert((base_offset, producer_id));
        }
    }

    /// Replaces the open transactions with `open` (producer id, first offset): what a copy of a
    /// cluster's partition holds open once it starts again at a new offset, as the cluster
    /// says (the markers of those it held may lie in what it skipped).
    pub fn replace_open(&mut self, open: impl IntoIterator<Item = (i64, i64)>) {
        self.open.clear();
        self.open_by_offset.clear();
        for (producer_id, first_offset) in open {
            self.record_batch(producer_id, first_offset);
        }
    }

    /// A COMMIT or ABORT marker of `producer_id` at `epoch` was appended at `marker_offset`: its
    /// transaction here ends and it is no longer expected. Returns the aborted transaction an
    /// ABORT closed. An ABORT at the epoch the partition was added at, with none of the
    /// transaction's batches here, is remembered (see [`Self::was_aborted_unwritten`]); one at a
    /// newer epoch (a fence) needs nothing more, as that epoch fences every older batch.
    pub fn record_marker(
        &mut self,
        (producer_id, epoch): (i64, i16),
        marker_offset: i64,
        commit: bool,
    ) -> Option<AbortedTransaction> {
        let added_at = self.expected.remove(&producer_id);
        self.forget_unwritten_before(producer_id, epoch);
        let Some(first_offset) = self.open.remove(&producer_id) else {
            if !commit && added_at == Some(epoch) {
                self.aborted_unwritten.insert(producer_id, epoch);
            }
            return None;
        };
        self.open_by_offset.remove(&(first_offset, producer_id));
        if commit {
            return None;
        }
        let aborted = AbortedTransaction {
            producer_id,
            first_offset,
            last_offset: marker_offset,
        };
        self.aborted.push_back(aborted);
        Some(aborted)
    }

    /// The offset a `read_committed` consumer may read up to: the first offset of the oldest open
    /// transaction, or `high_watermark` when none is open.
    #[must_use]
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.open_by_offset
            .first()
            .map_or(high_watermark, |&(first, _)| first.min(high_watermark))
    }

    /// The aborted transactions with records in `from..to`, oldest marker first.
    pub fn aborted_between(
        &self,
        from: i64,
        to: i64,
    ) -> impl Iterator<Item = AbortedTransaction> + '_ {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        self.aborted
            .range(start..)
            .filter(move |a| a.first_offset < to)
            .copied()
    }

    /// Forgets the aborted transactions wholly below `log_start` (retention dropped their
    /// records); returns how many.
    pub fn forget_before(&mut self, log_start: i64) -> usize {
        let gone = self.aborted.partition_point(|a| a.last_offset < log_start);
        self.aborted.drain(..gone);
        gone
    }

    /// The open transactions: (producer id, first offset), by producer id.
    pub fn open(&self) -> impl ExactSizeIterator<Item = (i64, i64)> + '_ {
        self.open.iter().map(|(&id, &first)| (id, first))
    }

    /// The aborted transactions kept, oldest marker first.
    pub fn aborted(&self) -> impl ExactSizeIterator<Item = AbortedTransaction> + '_ {
        self.aborted.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_open_transaction_holds_back_the_lso() {
        let mut txns = PartitionTransactions::default();
        assert_eq!(txns.last_stable_offset(10), 10);
        txns.record_batch(7, 10);
        txns.record_batch(8, 12);
        txns.record_batch(7, 14); // still open from 10
        assert_eq!(txns.last_stable_offset(20), 10);
        assert_eq!(txns.record_marker((7, 0), 20, true), None);
        assert_eq!(txns.last_stable_offset(21), 12);
        let aborted = txns.record_marker((8, 0), 21, false).unwrap();
        assert_eq!(
            aborted,
            AbortedTransaction {
                producer_id: 8,
                first_offset: 12,
                last_offset: 21
            }
        );
        assert_eq!(txns.last_stable_offset(22), 22);
    }

    #[test]
    fn a_marker_without_an_open_transaction_closes_nothing() {
        let mut txns = PartitionTransactions::default();
        txns.expect(3, 1);
        assert!(txns.is_expected(3, 1));
        assert!(!txns.is_expected(3, 0));
        assert_eq!(txns.record_marker((3, 1), 5, false), None);
        assert!(!txns.is_expected(3, 1), "the marker ends the expectation");
        assert_eq!(txns.aborted().len(), 0);
    }

    #[test]
    fn an_abort_before_any_batch_arrived_refuses_that_epoch_until_the_producer_moves_on() {
        let mut txns = PartitionTransactions::default();
        txns.expect(3, 4);
        assert_eq!(txns.record_marker((3, 4), 5, false), None);
        assert!(txns.was_aborted_unwritten(3, 4));
        // The next transaction adds the partition at the same epoch: still refused.
        txns.expect(3, 4);
        assert!(txns.is_expected(3, 4));
        assert!(txns.was_aborted_unwritten(3, 4));
        assert!(!txns.was_aborted_unwritten(3, 5));
        assert!(!txns.was_aborted_unwritten(9, 4));
        // A newer epoch moves it on.
        txns.expect(3, 5);
        assert!(!txns.was_aborted_unwritten(3, 4));
    }

    #[test]
    fn only_an_abort_at_the_added_epoch_with_nothing_written_is_remembered() {
        let mut txns = PartitionTransactions::default();
        // A commit with nothing written.
        txns.expect(1, 0);
        txns.record_marker((1, 0), 0, true);
        assert!(!txns.was_aborted_unwritten(1, 0));
        // An abort of a transaction that wrote here.
        txns.expect(2, 0);
        txns.record_batch(2, 1);
        txns.record_marker((2, 0), 2, false);
        assert!(!txns.was_aborted_unwritten(2, 0));
        // A fence: the marker's epoch is above the one added, and fences every older batch.
        txns.expect(3, 0);
        txns.record_marker((3, 1), 3, false);
        assert!(!txns.was_aborted_unwritten(3, 0));
        assert!(!txns.was_aborted_unwritten(3, 1));
        // A marker replayed at start, no add before it.
        txns.record_marker((4, 0), 4, false);
        assert!(!txns.was_aborted_unwritten(4, 0));
        // A newer marker forgets an older abort.
        txns.expect(5, 0);
        txns.record_marker((5, 0), 5, false);
        txns.record_marker((5, 1), 6, false);
        assert!(!txns.was_aborted_unwritten(5, 0));
    }

    #[test]
    fn aborted_transactions_are_found_by_the_range_they_touch() {
        let mut txns = PartitionTransactions::default();
        for (producer, first, marker) in [(1, 0, 4), (2, 2, 9), (3, 10, 12)] {
            txns.record_batch(producer, first);
            txns.record_marker((producer, 0), marker, false);
        }
        fn found(txns: &PartitionTransactions, from: i64, to: i64) -> Vec<i64> {
            txns.aborted_between(from, to)
                .map(|a| a.producer_id)
                .collect()
        }
        assert_eq!(found(&txns, 0, 100), [1, 2, 3]);
        assert_eq!(found(&txns, 5, 10), [2]);
        assert_eq!(found(&txns, 0, 2), [1]);
        assert_eq!(found(&txns, 13, 20), Vec::<i64>::new());
        assert_eq!(txns.forget_before(5), 1);
        assert_eq!(found(&txns, 0, 100), [2, 3]);
    }

    #[test]
    fn parts_round_trip_and_impossible_ones_are_refused() {
        let mut txns = PartitionTransactions::default();
        txns.record_batch(1, 0);
        txns.record_marker((1, 0), 3, false);
        txns.record_batch(2, 4);
        let open: Vec<_> = txns.open().collect();
        let aborted: Vec<_> = txns.aborted().collect();
        assert_eq!(
            PartitionTransactions::from_parts(&open, &aborted),
            Some(txns)
        );
        let backwards = AbortedTransaction {
            producer_id: 1,
            first_offset: 5,
            last_offset: 4,
        };
        assert_eq!(PartitionTransactions::from_parts(&[], &[backwards]), None);
        assert_eq!(
            PartitionTransactions::from_parts(&[(1, 0), (1, 2)], &[]),
            None
        );
    }
}
