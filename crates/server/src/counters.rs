//! What the broker counts: produce outcomes and connections.

use minibroker_state::{Outcome, PartitionId};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

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
        let count = match outcome {
            Outcome::Accepted => &mut self.accepted,
            Outcome::Duplicate => &mut self.duplicate,
            Outcome::OutOfOrder => &mut self.out_of_order,
            Outcome::FencedEpoch => &mut self.fenced_epoch,
        };
        *count += 1;
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

/// Outcome counters, split by partition over cache-line-sized slots so that cores writing
/// different partitions do not fight over one counter's cache line on every request.
#[derive(Debug, Default)]
pub(crate) struct OutcomeCounters([CounterSlot; 16]);

#[derive(Debug, Default)]
#[repr(align(128))]
struct CounterSlot([AtomicU64; 4]);

impl OutcomeCounters {
    pub(crate) fn count(&self, partition: PartitionId, outcome: Outcome) {
        self.0[partition as usize % self.0.len()].0[outcome.index()]
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> OutcomeCounts {
        let total = |slot: usize| {
            self.0
                .iter()
                .map(|s| s.0[slot].load(Ordering::Relaxed))
                .sum()
        };
        OutcomeCounts {
            accepted: total(Outcome::Accepted.index()),
            duplicate: total(Outcome::Duplicate.index()),
            out_of_order: total(Outcome::OutOfOrder.index()),
            fenced_epoch: total(Outcome::FencedEpoch.index()),
        }
    }
}

/// How many connections the listeners have accepted, refused and hold open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Connections served since the broker started.
    pub accepted: u64,
    /// Connections closed at once because `max_connections` were already served.
    pub refused: u64,
    /// Connections being served now.
    pub open: u64,
}

/// Updated by the listener, read through [`crate::Broker::connection_counts`].
#[derive(Debug, Default)]
pub(crate) struct ConnectionCounters {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub closed: AtomicU64,
}

impl ConnectionCounters {
    pub(crate) fn get(&self) -> ConnectionCounts {
        let accepted = self.accepted.load(Ordering::Relaxed);
        ConnectionCounts {
            accepted,
            refused: self.refused.load(Ordering::Relaxed),
            open: accepted.saturating_sub(self.closed.load(Ordering::Relaxed)),
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
        let counters = OutcomeCounters::default();
        counters.count(3, Outcome::Duplicate);
        counters.count(40, Outcome::Duplicate);
        let two = OutcomeCounts {
            duplicate: 2,
            ..OutcomeCounts::default()
        };
        assert_eq!(counters.get(), two);
        assert_eq!(
            one + two,
            OutcomeCounts {
                duplicate: 3,
                ..expected
            }
        );
    }
}
