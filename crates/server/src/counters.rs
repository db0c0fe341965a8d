//! What the broker counts: produce outcomes and connections.

use minibroker_state::{Outcome, PartitionId};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many produce requests got each outcome since the broker started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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

/// Outcome counters, split by partition over cache-line-sized slots so that cores writing
/// different partitions do not fight over one counter's cache line on every request.
#[derive(Debug, Default)]
pub(crate) struct OutcomeCounters([CounterSlot; 16]);

#[derive(Debug, Default)]
#[repr(align(128))]
struct CounterSlot([AtomicU64; 4]);

impl OutcomeCounters {
    pub(crate) fn count(&self, partition: PartitionId, outcome: Outcome) {
        let slot = match outcome {
            Outcome::Accepted => 0,
            Outcome::Duplicate => 1,
            Outcome::OutOfOrder => 2,
            Outcome::FencedEpoch => 3,
        };
        self.0[partition as usize % self.0.len()].0[slot].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> OutcomeCounts {
        let total = |slot: usize| {
            self.0
                .iter()
                .map(|s| s.0[slot].load(Ordering::Relaxed))
                .sum()
        };
        OutcomeCounts {
            accepted: total(0),
            duplicate: total(1),
            out_of_order: total(2),
            fenced_epoch: total(3),
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
