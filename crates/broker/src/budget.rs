//! The storage budget: the broker-wide limit on bytes kept in memory, and what each thing costs.
//!
//! Everything a client can make the broker keep is charged here before it is kept: each batch's
//! bytes with a per-batch overhead, a producer's state entry on its first batch to a partition,
//! and every partition and topic when it is created. When the budget is spent, produce
//! requests and topic creation get STORAGE_FULL; nothing else is refused.
//!
//! Partitions take their share in reservations, so most appends touch only their own partition's
//! counter and not this broker-wide atomic. A reservation is proportional to what the partition
//! already holds (at most [`MAX_RESERVATION`], and at most 1/64 of what is still free), so a
//! million tiny partitions reserve about what they store rather than a megabyte each, and the
//! unused reservations can never stop the broker from filling most of its budget.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes charged for each batch besides its bytes: its place in the log's index. (Each record
/// already costs at least 7 bytes inside its batch, so empty records are not free.)
pub const BATCH_OVERHEAD_BYTES: u64 = 128;

/// Bytes charged when a producer writes a partition for the first time: its state entry and its
/// share of the map around it (163-167 bytes measured at 100k and 1M entries with
/// `minibroker bench --memory`, rounded up; see the README).
pub const PRODUCER_ENTRY_BYTES: u64 = 192;

/// Bytes charged for each partition a topic is created with (its lock, log header and state
/// slot), and once per topic for its name and registry entry.
pub const PARTITION_BYTES: u64 = 128;

/// See [`PARTITION_BYTES`].
pub const TOPIC_BYTES: u64 = 512;

/// The largest reservation a partition takes at a time.
pub const MAX_RESERVATION: u64 = 1 << 20;

/// What a batch of `len` bytes counts against the storage limit.
#[must_use]
pub fn accounted_bytes(len: usize) -> u64 {
    BATCH_OVERHEAD_BYTES + len as u64
}

/// What the batches retention dropped from an in-memory log were charged.
#[must_use]
pub fn released_charge(released: minibroker_log::Released) -> u64 {
    released.bytes + released.batches * BATCH_OVERHEAD_BYTES
}

/// What creating a topic with `partitions` partitions charges.
#[must_use]
pub fn topic_bytes(partitions: u32) -> u64 {
    TOPIC_BYTES + u64::from(partitions) * PARTITION_BYTES
}

/// The broker-wide count of bytes charged (kept, or reserved by partitions for their next
/// appends) against the limit.
#[derive(Debug)]
pub struct StorageBudget {
    charged: AtomicU64,
    max: u64,
}

impl StorageBudget {
    /// A budget of `max` bytes, none charged.
    #[must_use]
    pub fn new(max: u64) -> Self {
        Self {
            charged: AtomicU64::new(0),
            max,
        }
    }

    /// The limit.
    #[must_use]
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Bytes charged so far (kept or reserved).
    #[must_use]
    pub fn charged(&self) -> u64 {
        self.charged.load(Ordering::Relaxed)
    }

    /// Whether `amount` more bytes would fit now (a check, not a reservation).
    #[must_use]
    pub fn has_room(&self, amount: u64) -> bool {
        self.charged()
            .checked_add(amount)
            .is_some_and(|total| total <= self.max)
    }

    /// Charges exactly `amount` if it fits.
    #[must_use]
    pub fn try_charge(&self, amount: u64) -> bool {
        self.charged
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |charged| {
                charged
                    .checked_add(amount)
                    .filter(|total| *total <= self.max)
            })
            .is_ok()
    }

    /// Charges `amount` whether it fits or not: for what was checked with [`Self::has_room`]
    /// first, or must be kept anyway (what a restarted broker finds on disk).
    pub fn charge(&self, amount: u64) {
        let _ = self
            .charged
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |charged| {
                Some(charged.saturating_add(amount))
            });
    }

    /// Gives back `amount` charged earlier (a deleted topic's).
    pub fn release(&self, amount: u64) {
        let _ = self
            .charged
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |charged| {
                Some(charged.saturating_sub(amount))
            });
    }

    /// Reserves room for a partition that needs `wanted` more bytes than it has reserved and
    /// already holds `held` bytes: `wanted`, rounded up to a reservation proportional to `held`
    /// (see the module doc). Returns how much was granted, or `None` if `wanted` does not fit.
    #[must_use]
    pub fn reserve_for_partition(&self, wanted: u64, held: u64) -> Option<u64> {
        let mut granted = 0;
        self.charged
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |charged| {
                let free = self.max.checked_sub(charged)?;
                if wanted > free {
                    return None;
                }
                let extra = held.min(MAX_RESERVATION).min(free / 64);
                granted = wanted.max(extra).min(free);
                Some(charged + granted)
            })
            .ok()
            .map(|_| granted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_partition_reserves_about_what_it_holds() {
        let budget = StorageBudget::new(1 << 30);
        // A first append to an empty partition reserves only what it needs.
        assert_eq!(budget.reserve_for_partition(200, 0), Some(200));
        // Later reservations grow with what the partition holds, up to the cap.
        assert_eq!(budget.reserve_for_partition(200, 1000), Some(1000));
        assert_eq!(
            budget.reserve_for_partition(200, 1 << 28),
            Some(MAX_RESERVATION)
        );
    }

    #[test]
    fn reservations_shrink_as_the_budget_fills_and_never_exceed_it() {
        let budget = StorageBudget::new(64_000);
        assert!(budget.try_charge(63_000));
        // 1,000 bytes free: a large partition gets no more than 1/64 of them beyond its need.
        assert_eq!(budget.reserve_for_partition(10, 1 << 20), Some(15));
        assert_eq!(budget.reserve_for_partition(2_000, 0), None);
        assert_eq!(budget.reserve_for_partition(975, 0), Some(975));
        assert_eq!(budget.charged(), 63_990);
        assert!(budget.has_room(10) && !budget.has_room(11));
        assert!(!budget.try_charge(11));
    }

    #[test]
    fn topic_charges_grow_with_partitions() {
        assert_eq!(topic_bytes(0), TOPIC_BYTES);
        assert_eq!(topic_bytes(4), TOPIC_BYTES + 4 * PARTITION_BYTES);
    }
}
