//! Request latencies, per protocol and request kind, for the metrics.
//!
//! Recorded per connection, into histograms that connection alone writes (so two cores never
//! fight over one histogram's cache line), and summed when metrics are scraped; a closed
//! connection's counts are folded into the totals of its kind.

use minibroker_broker::stats::{HistogramSnapshot, LatencyHistogram};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;
    use minibroker_broker::stats::LATENCY_BUCKETS_US;

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
