//! [`OutcomeCounts`]: how many produce requests got each outcome.

use minibroker_state::Outcome;
use serde::Serialize;

/// How many produce requests got each outcome (since the broker started, for the broker's own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OutcomeCounts {
    /// Appended.
    pub accepted: u64,
    /// Retries recognised and not appended.
    pub duplicate: u64,
    /// Gaps and bad session starts refused.
    pub out_of_order: u64,
    /// Zombie writes refused.
    pub fenced_epoch: u64,
}

impl OutcomeCounts {
    /// Counts one more answer of `outcome`.
    pub fn add(&mut self, outcome: Outcome) {
        *self.of(outcome) += 1;
    }

    /// The counts that `count` gives for each outcome.
    #[must_use]
    pub fn from_fn(mut count: impl FnMut(Outcome) -> u64) -> Self {
        let mut counts = Self::default();
        for outcome in Outcome::ALL {
            *counts.of(outcome) = count(outcome);
        }
        counts
    }

    /// How many answers of `outcome`.
    #[must_use]
    pub fn get(self, outcome: Outcome) -> u64 {
        let mut counts = self;
        *counts.of(outcome)
    }

    fn of(&mut self, outcome: Outcome) -> &mut u64 {
        match outcome {
            Outcome::Accepted => &mut self.accepted,
            Outcome::Duplicate => &mut self.duplicate,
            Outcome::OutOfOrder => &mut self.out_of_order,
            Outcome::FencedEpoch => &mut self.fenced_epoch,
        }
    }
}

impl std::ops::Add for OutcomeCounts {
    type Output = Self;
    fn add(self, other: Self) -> Self {
        Self {
            accepted: self.accepted + other.accepted,
            duplicate: self.duplicate + other.duplicate,
            out_of_order: self.out_of_order + other.out_of_order,
            fenced_epoch: self.fenced_epoch + other.fenced_epoch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_counts_add_up_by_outcome() {
        let mut one = OutcomeCounts::default();
        for outcome in [
            Outcome::Accepted,
            Outcome::Accepted,
            Outcome::Duplicate,
            Outcome::OutOfOrder,
            Outcome::FencedEpoch,
        ] {
            one.add(outcome);
        }
        let expected = OutcomeCounts {
            accepted: 2,
            duplicate: 1,
            out_of_order: 1,
            fenced_epoch: 1,
        };
        assert_eq!(one, expected);
        let two = OutcomeCounts::from_fn(|outcome| u64::from(outcome == Outcome::Duplicate) * 2);
        assert_eq!(
            two,
            OutcomeCounts {
                duplicate: 2,
                ..OutcomeCounts::default()
            }
        );
        assert_eq!(
            one + two,
            OutcomeCounts {
                duplicate: 3,
                ..expected
            }
        );
    }
}
