//! What the broker measures for its metrics, kept cheap enough to stay on: atomic counters and
//! fixed-bucket latency histograms. The exposition (Prometheus text) is the metrics crate's; this
//! module only counts. Request latencies are the host's (`minibroker_host::timings`), in these
//! histograms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::counters::OutcomeCounts;

/// Upper bounds of the latency buckets, in microseconds (and +Inf).
pub const LATENCY_BUCKETS_US: [u64; 16] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 5_000_000,
];

/// A latency histogram with [`LATENCY_BUCKETS_US`] buckets.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Observations per bucket (not cumulative); the last is +Inf.
    buckets: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    sum_ns: AtomicU64,
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Observations per bucket (not cumulative), the last one +Inf.
    pub buckets: Vec<u64>,
    /// Sum of the observations, in nanoseconds.
    pub sum_ns: u64,
}

impl HistogramSnapshot {
    /// How many observations.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Self) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; other.buckets.len()];
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
        self.sum_ns += other.sum_ns;
    }
}

impl LatencyHistogram {
    /// Records one observation.
    pub fn record(&self, elapsed: Duration) {
        let micros = elapsed.as_micros();
        let bucket = LATENCY_BUCKETS_US
            .iter()
            .position(|bound| micros <= u128::from(*bound))
            .unwrap_or(LATENCY_BUCKETS_US.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The counts now.
    #[must_use]
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// Per-partition traffic counters.
#[derive(Debug, Default)]
pub struct PartitionStats {
    /// Produce outcomes, by `minibroker_state::Outcome::index`.
    pub outcomes: [AtomicU64; 4],
    /// Records appended.
    pub records_in: AtomicU64,
    /// Batch bytes appended.
    pub bytes_in: AtomicU64,
    /// Records handed out by fetches (whole batches).
    pub records_out: AtomicU64,
    /// Batch bytes handed out by fetches.
    pub bytes_out: AtomicU64,
    /// Bytes of segments (chunks) compaction rewrote, as they were before.
    pub bytes_cleaned: AtomicU64,
}

impl PartitionStats {
    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A counter's value.
    #[must_use]
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// The produce outcomes counted.
    #[must_use]
    pub fn outcome_counts(&self) -> OutcomeCounts {
        OutcomeCounts::from_fn(|outcome| Self::get(&self.outcomes[outcome.index()]))
    }
}
