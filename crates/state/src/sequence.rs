//! Sequence numbers and the ranges a batch occupies.
//!
//! Sequences are `i32` and never negative, as in Kafka; after `i32::MAX` the next sequence is `0`.
//! A batch occupies one contiguous range of sequences, which may wrap past `i32::MAX`.

use crate::StateError;

/// The sequence that follows `sequence`, wrapping from `i32::MAX` to `0`.
#[must_use]
pub const fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

/// The inclusive range of sequence numbers one batch occupies.
///
/// A native produce request occupies exactly one sequence however many records it holds; a Kafka
/// batch of `n` records occupies `n`. Both ends are non-negative by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SequenceRange {
    first: i32,
    last: i32,
}

impl SequenceRange {
    /// A range holding the single sequence `sequence`.
    ///
    /// # Errors
    /// [`StateError::NegativeSequence`] when `sequence < 0`.
    pub fn single(sequence: i32) -> Result<Self, StateError> {
        Self::spanning(sequence, 1)
    }

    /// The `count` sequences starting at `first`, wrapping past `i32::MAX` to `0`.
    ///
    /// # Errors
    /// [`StateError::NegativeSequence`] when `first < 0`; [`StateError::BadSequenceCount`] when
    /// `count` is zero or more than there are sequence numbers.
    pub fn spanning(first: i32, count: u32) -> Result<Self, StateError> {
        if first < 0 {
            return Err(StateError::NegativeSequence(first));
        }
        // There are 2^31 distinct sequences; a batch may use each of them at most once.
        if count == 0 || count > 1 << 31 {
            return Err(StateError::BadSequenceCount(count));
        }
        let modulus = i64::from(i32::MAX) + 1;
        let last = (i64::from(first) + i64::from(count) - 1) % modulus;
        let last = i32::try_from(last).map_err(|_| StateError::BadSequenceCount(count))?;
        Ok(Self { first, last })
    }

    /// The range from `first` to `last` inclusive (wrapping past `i32::MAX` when `last` is
    /// smaller), or `None` if either is negative.
    #[must_use]
    pub const fn between(first: i32, last: i32) -> Option<Self> {
        if first < 0 || last < 0 {
            return None;
        }
        Some(Self { first, last })
    }

    /// The first sequence of the batch.
    #[must_use]
    pub const fn first(self) -> i32 {
        self.first
    }

    /// The last sequence of the batch (equal to `first` for a one-sequence batch).
    #[must_use]
    pub const fn last(self) -> i32 {
        self.last
    }

    /// How many sequences the range holds (at least one).
    #[must_use]
    pub const fn count(self) -> u32 {
        let span = self.last as i64 - self.first as i64;
        let modulus = i32::MAX as i64 + 1;
        // Between 1 and 2^31, which fits a u32.
        ((span + modulus) % modulus + 1) as u32
    }

    /// The sequence right after the range: where the next batch starts.
    #[must_use]
    pub const fn following(self) -> i32 {
        next_sequence(self.last)
    }

    /// Whether the range runs past `i32::MAX` and continues from `0`.
    #[must_use]
    pub const fn wraps(self) -> bool {
        self.last < self.first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_sequence_wraps_after_max() {
        assert_eq!(next_sequence(0), 1);
        assert_eq!(next_sequence(i32::MAX - 1), i32::MAX);
        assert_eq!(next_sequence(i32::MAX), 0);
    }

    #[test]
    fn spanning_computes_last_and_wraps() {
        let r = SequenceRange::spanning(10, 5).unwrap();
        assert_eq!((r.first(), r.last(), r.wraps()), (10, 14, false));
        let r = SequenceRange::spanning(i32::MAX - 1, 4).unwrap();
        assert_eq!((r.first(), r.last(), r.wraps()), (i32::MAX - 1, 1, true));
        assert_eq!(r.following(), 2);
        assert_eq!(r.count(), 4);
        assert_eq!(
            SequenceRange::spanning(3, 1 << 31).unwrap().count(),
            1 << 31
        );
        assert_eq!(SequenceRange::spanning(3, 7).unwrap().count(), 7);
        assert_eq!(SequenceRange::single(i32::MAX).unwrap().following(), 0);
        assert_eq!(SequenceRange::single(7).unwrap().last(), 7);
    }

    #[test]
    fn negative_or_empty_ranges_are_rejected() {
        assert_eq!(
            SequenceRange::single(-1),
            Err(StateError::NegativeSequence(-1))
        );
        assert_eq!(
            SequenceRange::spanning(0, 0),
            Err(StateError::BadSequenceCount(0))
        );
        assert_eq!(
            SequenceRange::spanning(0, (1 << 31) + 1),
            Err(StateError::BadSequenceCount((1 << 31) + 1))
        );
        assert!(SequenceRange::spanning(0, 1 << 31).is_ok());
    }
}
