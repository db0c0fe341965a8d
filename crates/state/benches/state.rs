//! Benchmarks of the state engine: the ACCEPTED and DUPLICATE paths on one thread, throughput on
//! 1 and 2 threads over 64 partitions compared with the same engine behind one global lock (a
//! manager with a single shard is exactly one global `Mutex` over one map), and memory per entry.
//!
//! Two access patterns are measured with threads: `affine`, where each thread writes its own
//! share of the 64 partitions (one producer thread per partition, the usual layout), and `mixed`,
//! where every thread writes to all 64 partitions at random; there every lock acquisition finds
//! the shard's cache lines last written by the other core.
//!
//! Run with `cargo bench -p minibroker-state`. Figures are printed, never asserted.

use criterion::{BenchmarkId, Criterion, Throughput};
use minibroker_state::{BatchHeader, ProducerStateManager, SequenceRange, default_shard_count};
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

const PARTITIONS: u32 = 64;

fn header(producer_id: i64, partition: u32, sequence: i32) -> BatchHeader {
    BatchHeader::new(
        producer_id,
        partition,
        0,
        SequenceRange::single(sequence).expect("seq"),
    )
    .expect("header")
}

/// Appends `count` in-order batches as one producer spreading them over `partitions` in a
/// pseudo-random order seeded by `seed`; returns how many were accepted (so the work cannot be
/// optimised away).
fn append_run(
    mgr: &ProducerStateManager,
    producer_id: i64,
    partitions: &[u32],
    seed: u64,
    count: u64,
) -> u64 {
    let mut next_seq = [0i32; PARTITIONS as usize];
    let mut accepted = 0;
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in 0..count {
        // xorshift64: cheap, and each thread gets its own order of partitions.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let partition = partitions[(rng % partitions.len() as u64) as usize];
        let seq = &mut next_seq[partition as usize];
        let verdict = mgr
            .append_batch(&header(producer_id, partition, *seq), |_| {
                Ok::<_, Infallible>(i as i64)
            })
            .expect("infallible");
        *seq += 1;
        accepted += u64::from(verdict.base_offset.is_some());
    }
    accepted
}

fn single_thread(c: &mut Criterion) {
    let mut group = c.benchmark_group("single_thread");
    group.throughput(Throughput::Elements(1));
    group.bench_function("accepted", |b| {
        let mgr = ProducerStateManager::new();
        let mut seq = 0i32;
        b.iter(|| {
            let verdict = mgr.append_batch(&header(1, 3, seq), |_| Ok::<_, Infallible>(0));
            seq = seq.wrapping_add(1).max(0);
            black_box(verdict)
        });
    });
    group.bench_function("duplicate", |b| {
        let mgr = ProducerStateManager::new();
        for seq in 0..5 {
            let _ = mgr.append_batch(&header(1, 3, seq), |_| Ok::<_, Infallible>(0));
        }
        let retry = header(1, 3, 2);
        b.iter(|| black_box(mgr.append_batch(&retry, |_| Ok::<_, Infallible>(0))));
    });
    group.finish();
}

fn threaded(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads_over_64_partitions");
    group.throughput(Throughput::Elements(1));
    for (name, shards) in [("sharded", default_shard_count()), ("global_lock", 1)] {
        for pattern in [Pattern::Affine, Pattern::Mixed] {
            for threads in [1u32, 2] {
                let id = BenchmarkId::new(format!("{name}/{}", pattern.name()), threads);
                group.bench_with_input(id, &threads, |b, &threads| {
                    b.iter_custom(|iters| run_threads(shards, pattern, threads, iters));
                });
            }
        }
    }
    group.finish();
}

/// Which partitions each thread writes to.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    /// Thread `t` of `n` writes the partitions `p` with `p % n == t`.
    Affine,
    /// Every thread writes all partitions.
    Mixed,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Self::Affine => "affine",
            Self::Mixed => "mixed",
        }
    }

    fn partitions(self, thread: u32, threads: u32) -> Vec<u32> {
        match self {
            Self::Affine => (0..PARTITIONS).filter(|p| p % threads == thread).collect(),
            Self::Mixed => (0..PARTITIONS).collect(),
        }
    }
}

/// `threads` threads share `iters` appends; returns the wall time of the whole run.
fn run_threads(shards: usize, pattern: Pattern, threads: u32, iters: u64) -> Duration {
    let mgr = ProducerStateManager::with_shards(shards);
    let barrier = Barrier::new(threads as usize + 1);
    let per_thread = iters / u64::from(threads);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (mgr, barrier) = (&mgr, &barrier);
            let partitions = pattern.partitions(t, threads);
            scope.spawn(move || {
                barrier.wait();
                black_box(append_run(
                    mgr,
                    i64::from(t),
                    &partitions,
                    u64::from(t) + 1,
                    per_thread,
                ));
            });
        }
        barrier.wait();
        let start = Instant::now();
        // Joining happens when the scope ends; time it from here.
        start
    })
    .elapsed()
}

/// Resident memory of this process in bytes, from /proc (Linux only).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn memory_per_entry() {
    const ENTRIES: u32 = 1_000_000;
    let before = resident_bytes();
    let mgr = ProducerStateManager::new();
    for i in 0..ENTRIES {
        let _ = mgr.append_batch(&header(i64::from(i / 64), i % 64, 0), |_| {
            Ok::<_, Infallible>(0)
        });
    }
    let after = resident_bytes();
    assert_eq!(mgr.len(), ENTRIES as usize);
    match (before, after) {
        (Some(before), Some(after)) => println!(
            "memory: {ENTRIES} (partition, producer) entries use {} bytes resident, {:.1} bytes per entry",
            after - before,
            (after - before) as f64 / f64::from(ENTRIES)
        ),
        _ => println!("memory: /proc/self/statm unavailable, not measured"),
    }
    drop(black_box(mgr));
}

fn main() {
    memory_per_entry();
    let mut criterion = Criterion::default().configure_from_args();
    single_thread(&mut criterion);
    threaded(&mut criterion);
    criterion.final_summary();
}
