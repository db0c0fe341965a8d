//! What the broker measures for its metrics, kept cheap enough to stay on: atomic counters and
//! fixed-bucket latency histograms. The exposition (Prometheus text) is the metrics crate's; this
//! module only counts.
//!
//! Request latencies are recorded per connection, into histograms that connection alone writes
//! (so two cores never fight over one histogram's cache line), and summed when metrics are
//! scraped; a closed connection's counts are folded into the totals of its kind.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

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

    fn add(&mut self, other: &Self) {
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

/// Which requests a histogram times: the protocol and the request kind.
pub type RequestKind = (&'static str, &'static str);

/// Every connection's request histograms, for the metrics.
#[derive(Debug, Default)]
pub struct RequestTimings {
    live: Mutex<Vec<(RequestKind, Weak<LatencyHistogram>)>>,
    retired: Mutex<BTreeMap<RequestKind, HistogramSnapshot>>,
    /// A calibrated cycle-counter clock (`quanta`): reading it costs a few nanoseconds, against
    /// tens for the system clock, which matters at millions of requests a second.
    clock: quanta::Clock,
}

impl RequestTimings {
    /// A histogram of `kind` for one connection; fold it in with [`Self::retire`] when done.
    pub fn register(&self, kind: RequestKind) -> Arc<LatencyHistogram> {
        let histogram = Arc::new(LatencyHistogram::default());
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget the histograms of connections long gone (already retired).
        live.retain(|(_, weak)| weak.strong_count() > 0);
        live.push((kind, Arc::downgrade(&histogram)));
        histogram
    }

    /// Adds a finished connection's histogram to the totals of its kind.
    pub fn retire(&self, kind: RequestKind, histogram: &LatencyHistogram) {
        self.retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(kind)
            .or_default()
            .add(&histogram.snapshot());
    }

    /// Every kind's counts so far, live connections and closed ones together.
    #[must_use]
    pub fn snapshot(&self) -> BTreeMap<RequestKind, HistogramSnapshot> {
        let mut totals = self
            .retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (kind, weak) in self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            if let Some(histogram) = weak.upgrade() {
                totals.entry(*kind).or_default().add(&histogram.snapshot());
            }
        }
        totals
    }
}

/// One connection's request histograms, created on first use of each kind and retired when the
/// connection closes.
#[derive(Debug)]
pub struct ConnectionTimings {
    timings: Arc<RequestTimings>,
    clock: quanta::Clock,
    protocol: &'static str,
    mine: Vec<(&'static str, Arc<LatencyHistogram>)>,
}

impl ConnectionTimings {
    /// Timings of a connection speaking `protocol`.
    #[must_use]
    pub fn new(timings: Arc<RequestTimings>, protocol: &'static str) -> Self {
        Self {
            clock: timings.clock.clone(),
            timings,
            protocol,
            mine: Vec::new(),
        }
    }

    /// A timestamp to pass to [`Self::record_since`] when the request is served.
    #[must_use]
    pub fn start(&self) -> u64 {
        self.clock.raw()
    }

    /// Records one request of `kind` that started at `started` (from [`Self::start`]).
    pub fn record_since(&mut self, kind: &'static str, started: u64) {
        let elapsed = self.clock.delta(started, self.clock.raw());
        self.record(kind, elapsed);
    }

    /// Records one request of `kind` that took `elapsed`.
    pub fn record(&mut self, kind: &'static str, elapsed: Duration) {
        let histogram = match self.mine.iter().find(|(k, _)| *k == kind) {
            Some((_, histogram)) => histogram,
            None => {
                let histogram = self.timings.register((self.protocol, kind));
                self.mine.push((kind, histogram));
                &self.mine[self.mine.len() - 1].1
            }
        };
        histogram.record(elapsed);
    }
}

impl Drop for ConnectionTimings {
    fn drop(&mut self) {
        for (kind, histogram) in &self.mine {
            self.timings.retire((self.protocol, kind), histogram);
        }
    }
}

/// Per-partition traffic counters.
#[derive(Debug, Default)]
pub struct PartitionStats {
    /// Produce outcomes: accepted, duplicate, out of order, fenced epoch.
    pub outcomes: [AtomicU64; 4],
    /// Records appended.
    pub records_in: AtomicU64,
    /// Batch bytes appended.
    pub bytes_in: AtomicU64,
    /// Records handed out by fetches (whole batches).
    pub records_out: AtomicU64,
    /// Batch bytes handed out by fetches.
    pub bytes_out: AtomicU64,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_their_buckets_and_closed_connections_still_count() {
        let timings = Arc::new(RequestTimings::default());
        {
            let mut connection = ConnectionTimings::new(Arc::clone(&timings), "native");
            connection.record("produce", Duration::from_micros(10));
            connection.record("produce", Duration::from_micros(300));
            connection.record("fetch", Duration::from_secs(10));
            let live = timings.snapshot();
            assert_eq!(live[&("native", "produce")].count(), 2);
        }
        let mut other = ConnectionTimings::new(Arc::clone(&timings), "native");
        other.record("produce", Duration::from_micros(30));
        let totals = timings.snapshot();
        let produce = &totals[&("native", "produce")];
        assert_eq!(produce.count(), 3);
        assert_eq!(produce.buckets[0], 1); // 10 µs ≤ 25
        assert_eq!(produce.buckets[1], 1); // 30 µs ≤ 50
        assert_eq!(produce.buckets[4], 1); // 300 µs ≤ 500
        assert_eq!(produce.sum_ns, 340_000);
        let fetch = &totals[&("native", "fetch")];
        assert_eq!(fetch.buckets[LATENCY_BUCKETS_US.len()], 1); // +Inf
    }
}
