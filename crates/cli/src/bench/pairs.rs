//! How `bench` compares two servers on a small shared machine so that its ratios can be trusted.
//!
//! - **Pinned sides.** The load generator and the server under test (the broker, or a baseline)
//!   each run on a one-worker runtime pinned to a core of its own, so neither's work is counted
//!   as the other's and the scheduler does not move them onto one core mid-phase.
//! - **Alternating pairs.** The two servers' phases alternate, A B A B ..., at least five pairs
//!   in a run, so a slow minute of a shared machine lands on both sides of a pair instead of on
//!   one server's only phase. Each ratio is the median of the pairs' ratios, reported with its
//!   spread (lowest and highest pair), so a noisy run shows it.

use anyhow::Result;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use super::load::{self, LoadResult, Workload};
use super::measure;

/// The core the server under test runs on; the generator gets core 0.
const SERVER_CORE: usize = 1;
const GENERATOR_CORE: usize = 0;

/// The two runtimes of a measurement: the server's and the generator's.
pub struct Pinned {
    pub server: tokio::runtime::Runtime,
    pub generator: tokio::runtime::Runtime,
}

impl Pinned {
    pub fn new() -> Result<Self> {
        Ok(Self {
            server: runtime_on(SERVER_CORE)?,
            generator: runtime_on(GENERATOR_CORE)?,
        })
    }

    /// Runs `work` as a task of the server's runtime, so that it and every thread it starts (a
    /// broker's cleaner) run on the server's core.
    pub fn on_server<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T> {
        Ok(self.server.block_on(self.server.spawn(work))?)
    }

    /// Runs `work` on a blocking thread of the server's runtime (pinned to the server's core).
    pub fn blocking_on_server<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        Ok(self.server.block_on(self.server.spawn_blocking(work))?)
    }
}

/// A runtime of one worker, its threads (blocking ones too) pinned to `cpu` when the machine
/// has it; on a one-core machine nothing is pinned.
pub fn runtime_on(cpu: usize) -> Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .on_thread_start(move || {
            if cores > cpu {
                let mut set = rustix::thread::CpuSet::new();
                set.set(cpu);
                if let Err(error) = rustix::thread::sched_setaffinity(None, &set) {
                    tracing::debug!(%error, cpu, "could not pin a bench thread");
                }
            }
        })
        .build()?)
}

/// A median with the lowest and highest value it was taken from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; NaN when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let mut values: Vec<f64> = values.into_iter().filter(|v| !v.is_nan()).collect();
        values.sort_by(f64::total_cmp);
        let Some((&min, &max)) = values.first().zip(values.last()) else {
            return Self {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        };
        let middle = values.len() / 2;
        let median = if values.len().is_multiple_of(2) {
            f64::midpoint(values[middle - 1], values[middle])
        } else {
            values[middle]
        };
        Self { median, min, max }
    }

    /// `{"median": .., "min": .., "max": ..}`.
    pub fn to_json(self) -> serde_json::Value {
        json!({ "median": self.median, "min": self.min, "max": self.max })
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} ({:.2}-{:.2})", self.median, self.min, self.max)
    }
}

/// One side of a comparison: a phase name, the server's address and what to send it.
#[derive(Clone)]
pub struct Side {
    pub name: &'static str,
    pub addr: String,
    pub workload: Workload,
}

impl Side {
    /// The same side, paced at `rate` requests/s and named `name`.
    pub fn paced(&self, name: &'static str, rate: f64) -> Self {
        Self {
            name,
            addr: self.addr.clone(),
            workload: Workload {
                rate: Some(rate),
                ..self.workload.clone()
            },
        }
    }
}

/// The pairs of one comparison, in the order they ran.
pub struct Pairs {
    pub first: &'static str,
    pub second: &'static str,
    pub results: Vec<(LoadResult, LoadResult)>,
}

impl Pairs {
    /// Per pair, `of(second) / of(first)`.
    pub fn second_over_first(&self, of: impl Fn(&LoadResult) -> f64) -> Spread {
        Spread::of(self.results.iter().map(|(a, b)| of(b) / of(a)))
    }

    /// Per pair, `of(first) / of(second)`.
    pub fn first_over_second(&self, of: impl Fn(&LoadResult) -> f64) -> Spread {
        Spread::of(self.results.iter().map(|(a, b)| of(a) / of(b)))
    }

    /// The first side's figure over its phases.
    pub fn first(&self, of: impl Fn(&LoadResult) -> f64) -> Spread {
        Spread::of(self.results.iter().map(|(a, _)| of(a)))
    }

    /// Every phase, named, in the order they ran.
    pub fn phases(&self) -> impl Iterator<Item = (&'static str, &LoadResult)> {
        self.results
            .iter()
            .flat_map(|(a, b)| [(self.first, a), (self.second, b)])
    }
}

/// Runs comparisons: fresh producer ids for every phase (sequences start at 0 each time), an
/// unmeasured warm-up of each side before its first peak phase, then `pairs` alternating pairs.
pub struct Alternation {
    pub pairs: usize,
    pub warm_up: Duration,
    pub quiet: bool,
    next_producer_id: i64,
}

impl Alternation {
    pub fn new(pairs: usize, warm_up: Duration, quiet: bool) -> Self {
        Self {
            pairs: pairs.max(1),
            warm_up,
            quiet,
            next_producer_id: 1,
        }
    }

    /// The workload with producer ids no earlier phase used.
    fn fresh_ids(&mut self, workload: &Workload) -> Workload {
        let first_producer_id = self.next_producer_id;
        self.next_producer_id += workload.connections as i64;
        Workload {
            first_producer_id,
            ..workload.clone()
        }
    }

    /// One measured phase of `side`.
    pub async fn phase(&mut self, side: &Side) -> Result<LoadResult> {
        let workload = self.fresh_ids(&side.workload);
        measure(side.name, &side.addr, &workload, self.quiet).await
    }

    /// The unmeasured warm-up of `side` (peak phases only): memory faulted in, retention
    /// recycling it, caches warm, as on a broker that has been running.
    pub async fn warm(&mut self, side: &Side) -> Result<()> {
        if side.workload.rate.is_some() || self.warm_up.is_zero() {
            return Ok(());
        }
        let warm = Workload {
            duration: self.warm_up,
            count: None,
            ..self.fresh_ids(&side.workload)
        };
        load::run(&side.addr, &warm, Arc::new(AtomicU64::new(0))).await?;
        Ok(())
    }

    /// `pairs` pairs of `first` then `second`, after each side's warm-up.
    pub async fn compare(&mut self, first: &Side, second: &Side) -> Result<Pairs> {
        self.warm(first).await?;
        self.warm(second).await?;
        let mut results = Vec::with_capacity(self.pairs);
        for _ in 0..self.pairs {
            let a = self.phase(first).await?;
            let b = self.phase(second).await?;
            results.push((a, b));
        }
        Ok(Pairs {
            first: first.name,
            second: second.name,
            results,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn the_spread_is_the_median_and_the_extremes() {
        let spread = Spread::of([0.7, 0.5, 0.9, 0.6, 0.8]);
        assert_eq!(
            spread,
            Spread {
                median: 0.7,
                min: 0.5,
                max: 0.9
            }
        );
        assert_eq!(Spread::of([1.0, 3.0]).median, 2.0);
        assert!(Spread::of([f64::NAN]).median.is_nan());
        assert_eq!(Spread::of([f64::NAN, 2.0]).median, 2.0);
    }
}
