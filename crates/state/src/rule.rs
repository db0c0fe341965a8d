//! The exactly-once rule as a pure function: no locks, no I/O, no mutation.
//!
//! Keeping the decision apart from the bookkeeping means every outcome can be table-tested and
//! read in one place; [`crate::ProducerStateManager`] is only a locking wrapper around it.

use crate::{ProducerEntry, SequenceRange, next_sequence};
use std::fmt;

/// The answer to one produce request, as in the mission text.
///
/// With the `serde` feature it serializes as its variant's position, so variants are only ever
/// added at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Outcome {
    /// In-order new data: appended, and its sequence recorded.
    Accepted,
    /// A retry of data already accepted in this epoch: acknowledged, not appended.
    Duplicate,
    /// A gap, a partial overlap, or a new session not starting at 0: rejected.
    OutOfOrder,
    /// An epoch older than the one on file (a zombie producer): rejected.
    FencedEpoch,
}

impl Outcome {
    /// Every outcome, in [`Self::index`] order.
    pub const ALL: [Self; 4] = [
        Self::Accepted,
        Self::Duplicate,
        Self::OutOfOrder,
        Self::FencedEpoch,
    ];

    /// Its place in [`Self::ALL`], for arrays of one counter per outcome.
    #[must_use]
    pub const fn index(self) -> usize {
        match self {
            Self::Accepted => 0,
            Self::Duplicate => 1,
            Self::OutOfOrder => 2,
            Self::FencedEpoch => 3,
        }
    }

    /// The outcome's name as the mission text writes it, e.g. `"OUT_OF_ORDER"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "ACCEPTED",
            Self::Duplicate => "DUPLICATE",
            Self::OutOfOrder => "OUT_OF_ORDER",
            Self::FencedEpoch => "FENCED_EPOCH",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`decide`] decided, with the original offset where a duplicate's is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Append the batch, then record it.
    Accept,
    /// Acknowledge without appending. `base_offset` is the original batch's offset when the
    /// request exactly matches one of the cached recent batches.
    Duplicate {
        /// Where the original batch was stored, if known.
        base_offset: Option<i64>,
    },
    /// Reject: the batch does not follow the last accepted one.
    OutOfOrder,
    /// Reject: the producer's epoch is older than the one on file.
    FencedEpoch,
}

impl Decision {
    /// The outcome reported for this decision.
    #[must_use]
    pub const fn outcome(self) -> Outcome {
        match self {
            Self::Accept => Outcome::Accepted,
            Self::Duplicate { .. } => Outcome::Duplicate,
            Self::OutOfOrder => Outcome::OutOfOrder,
            Self::FencedEpoch => Outcome::FencedEpoch,
        }
    }
}

/// Decides the outcome of a batch from `epoch` occupying `batch`, given the stored `entry` for
/// its (partition, producer id), or `None` if the producer has never written there.
///
/// The rules, in this order:
/// 1. **No entry**: a batch starting at sequence 0 is [`Decision::Accept`]; anything else is
///    [`Decision::OutOfOrder`].
/// 2. **`epoch` below the stored epoch**: [`Decision::FencedEpoch`], whatever the sequence.
/// 3. **`epoch` above the stored epoch** (a new producer session), or the stored epoch holding
///    no batch yet (a transaction marker raised it): a batch starting at 0 is
///    [`Decision::Accept`]; anything else is [`Decision::OutOfOrder`].
/// 4. **Same epoch**:
///    - the batch starts right after the last accepted sequence (`i32::MAX` is followed by 0):
///      [`Decision::Accept`];
///    - the batch exactly matches one of the cached recent batches: [`Decision::Duplicate`] with
///      that batch's original base offset (this also catches retries across the wrap-around);
///    - the whole batch lies at or below the last accepted sequence:
///      [`Decision::Duplicate`] without an offset (compared as plain numbers, as the mission
///      text says, so right after the wrap-around every old sequence still counts as below);
///    - otherwise — a gap, or a batch straddling the last accepted sequence, which cannot be
///      acknowledged without dropping its new part: [`Decision::OutOfOrder`].
///
/// With one-sequence batches this is exactly the mission text's rule.
#[must_use]
pub fn decide(entry: Option<&ProducerEntry>, epoch: i16, batch: SequenceRange) -> Decision {
    let Some(entry) = entry else {
        return starts_session(batch);
    };
    if epoch < entry.epoch() {
        return Decision::FencedEpoch;
    }
    if epoch > entry.epoch() {
        return starts_session(batch);
    }
    let Some(last) = entry.last_sequence() else {
        // A marker raised the epoch and no batch followed: the session starts now.
        return starts_session(batch);
    };
    if batch.first() == next_sequence(last) {
        return Decision::Accept;
    }
    if let Some(original) = entry.cached_batch(batch) {
        return Decision::Duplicate {
            base_offset: original.base_offset,
        };
    }
    if !batch.wraps() && batch.last() <= last {
        return Decision::Duplicate { base_offset: None };
    }
    Decision::OutOfOrder
}

/// Rules 1 and 3: a producer session on a partition must begin at sequence 0.
fn starts_session(batch: SequenceRange) -> Decision {
    if batch.first() == 0 {
        Decision::Accept
    } else {
        Decision::OutOfOrder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: i32) -> SequenceRange {
        SequenceRange::single(s).unwrap()
    }

    fn span(first: i32, count: u32) -> SequenceRange {
        SequenceRange::spanning(first, count).unwrap()
    }

    /// An entry at `epoch` whose accepted batches were the given ranges, in order, with offsets
    /// 100, 101, ...
    fn entry(epoch: i16, batches: &[SequenceRange]) -> ProducerEntry {
        let (first, rest) = batches.split_first().unwrap();
        let mut entry = ProducerEntry::new(epoch, *first, 100, 0);
        for (i, batch) in rest.iter().enumerate() {
            entry.record(epoch, *batch, 101 + i as i64, 0);
        }
        entry
    }

    #[test]
    fn rule1_no_state_accepts_sequence_zero() {
        assert_eq!(decide(None, 0, one(0)), Decision::Accept);
        assert_eq!(decide(None, 7, one(0)), Decision::Accept);
    }

    #[test]
    fn rule1_no_state_rejects_any_other_sequence() {
        assert_eq!(decide(None, 0, one(1)), Decision::OutOfOrder);
        assert_eq!(decide(None, 0, one(i32::MAX)), Decision::OutOfOrder);
    }

    #[test]
    fn rule2_older_epoch_is_fenced_whatever_the_sequence() {
        let e = entry(3, &[one(0), one(1)]);
        for s in [0, 1, 2, 99] {
            assert_eq!(decide(Some(&e), 2, one(s)), Decision::FencedEpoch);
        }
    }

    #[test]
    fn rule3_newer_epoch_must_restart_at_zero() {
        let e = entry(0, &[one(0), one(1)]);
        assert_eq!(decide(Some(&e), 1, one(0)), Decision::Accept);
        assert_eq!(decide(Some(&e), 1, one(2)), Decision::OutOfOrder);
        assert_eq!(decide(Some(&e), 1, one(1)), Decision::OutOfOrder);
    }

    #[test]
    fn rule3_an_epoch_a_marker_began_starts_at_zero_and_fences_older_ones() {
        let e = ProducerEntry::fenced_at(4, 0);
        assert_eq!(decide(Some(&e), 4, one(0)), Decision::Accept);
        assert_eq!(decide(Some(&e), 4, one(1)), Decision::OutOfOrder);
        assert_eq!(decide(Some(&e), 5, one(0)), Decision::Accept);
        assert_eq!(decide(Some(&e), 3, one(0)), Decision::FencedEpoch);
    }

    #[test]
    fn rule4_next_sequence_is_accepted() {
        let e = entry(0, &[one(0), one(1)]);
        assert_eq!(decide(Some(&e), 0, one(2)), Decision::Accept);
    }

    #[test]
    fn rule4_retry_of_a_recent_batch_is_a_duplicate_with_its_offset() {
        let e = entry(0, &[one(0), one(1), one(2)]);
        assert_eq!(
            decide(Some(&e), 0, one(1)),
            Decision::Duplicate {
                base_offset: Some(101)
            }
        );
    }

    #[test]
    fn rule4_retry_older_than_the_cache_is_a_duplicate_without_offset() {
        let ranges: Vec<_> = (0..8).map(one).collect();
        let e = entry(0, &ranges);
        assert_eq!(
            decide(Some(&e), 0, one(1)),
            Decision::Duplicate { base_offset: None }
        );
    }

    #[test]
    fn rule4_gap_is_out_of_order() {
        let e = entry(0, &[one(0), one(1)]);
        assert_eq!(decide(Some(&e), 0, one(5)), Decision::OutOfOrder);
        assert_eq!(decide(Some(&e), 0, one(3)), Decision::OutOfOrder);
    }

    #[test]
    fn batch_spanning_sequences_is_accepted_only_from_the_next_sequence() {
        let e = entry(0, &[span(0, 3)]); // 0..=2
        assert_eq!(decide(Some(&e), 0, span(3, 4)), Decision::Accept);
        assert_eq!(decide(Some(&e), 0, span(4, 4)), Decision::OutOfOrder);
    }

    #[test]
    fn partial_overlap_is_out_of_order() {
        let e = entry(0, &[span(0, 3)]); // 0..=2
        assert_eq!(decide(Some(&e), 0, span(2, 3)), Decision::OutOfOrder);
        assert_eq!(decide(Some(&e), 0, span(0, 4)), Decision::OutOfOrder);
    }

    #[test]
    fn batch_inside_accepted_range_but_not_cached_exactly_is_duplicate_without_offset() {
        let e = entry(0, &[span(0, 3)]); // 0..=2
        assert_eq!(
            decide(Some(&e), 0, span(1, 2)),
            Decision::Duplicate { base_offset: None }
        );
        assert_eq!(
            decide(Some(&e), 0, span(0, 3)),
            Decision::Duplicate {
                base_offset: Some(100)
            }
        );
    }

    #[test]
    fn sequence_wraps_from_max_to_zero() {
        let mut e2 = ProducerEntry::new(0, one(i32::MAX), 200, 0);
        assert_eq!(decide(Some(&e2), 0, one(0)), Decision::Accept);
        // The rule compares numerically: 1 <= i32::MAX, so it is an (old) duplicate, not a gap.
        assert_eq!(
            decide(Some(&e2), 0, one(1)),
            Decision::Duplicate { base_offset: None }
        );
        e2.record(0, one(0), 201, 0);
        assert_eq!(decide(Some(&e2), 0, one(1)), Decision::Accept);
        assert_eq!(decide(Some(&e2), 0, one(2)), Decision::OutOfOrder);
    }

    #[test]
    fn retry_across_the_wrap_is_recognised_from_the_cache() {
        let mut e = ProducerEntry::new(0, one(i32::MAX - 1), 10, 0);
        e.record(0, span(i32::MAX, 2), 11, 0); // MAX, 0
        assert_eq!(decide(Some(&e), 0, one(1)), Decision::Accept);
        assert_eq!(
            decide(Some(&e), 0, span(i32::MAX, 2)),
            Decision::Duplicate {
                base_offset: Some(11)
            }
        );
        assert_eq!(
            decide(Some(&e), 0, one(i32::MAX - 1)),
            Decision::Duplicate {
                base_offset: Some(10)
            }
        );
    }

    #[test]
    fn outcomes_map_to_the_mission_names() {
        assert_eq!(Decision::Accept.outcome().to_string(), "ACCEPTED");
        assert_eq!(
            Decision::Duplicate { base_offset: None }
                .outcome()
                .to_string(),
            "DUPLICATE"
        );
        assert_eq!(Decision::OutOfOrder.outcome().to_string(), "OUT_OF_ORDER");
        assert_eq!(Decision::FencedEpoch.outcome().to_string(), "FENCED_EPOCH");
    }
}
