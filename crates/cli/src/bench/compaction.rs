//! `bench --compaction`: what log compaction costs, against baselines measured in the same run.
//!
//! - **Throughput.** A durable partition log of `--compaction-mib` MiB (100-record batches of
//!   100 B values over 10,000 keys, so most records are superseded) is compacted by one pass,
//!   against a raw read and write of the same sealed segments (each read whole and written to a
//!   new file, synced): the pass reads the dirty part twice (to map it, then to rewrite it), so
//!   the goal is at least half the raw rate. Each round starts from a fresh copy of the same
//!   directory; the rounds alternate, and the ratio of each pair is reported with the median.
//! - **Produce latency while the cleaner runs.** An embedded durable broker (`flush = os`) takes
//!   the workload at half of its peak, alternating between a topic the cleaner leaves alone and a
//!   compacted one it cleans all the while (small segments, `min.cleanable.dirty.ratio` 0.01,
//!   keyed records), and the p99 of each pair is compared: the goal is at most twice.
//!
//! The pass, the raw copy and the broker (its cleaner's thread with it) run on the server's
//! core, the load on the generator's (see `pairs`).

use anyhow::{Context, Result};
use bytes::Bytes;
use minibroker_log::{CleanRules, CleanStats, DurableLog, PartitionLog, SegmentConfig};
use minibroker_native::EmbeddedBroker;
use minibroker_records::{NewRecord, Writer};
use minibroker_storage::FsStorage;
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::load::{LoadResult, Workload};
use super::pairs::{Pinned, Spread};
use super::{embedded_config, measure};

/// Measured pairs of each comparison.
const PAIRS: usize = 3;

pub async fn run(workload: Workload, dir: &Path, mib: u64, json_out: bool) -> Result<()> {
    let dir = super::durable::fresh_dir(&dir.join("bench-compaction"))?;
    let cpu_at_start = super::steal::CpuTimes::now();
    let measured = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || {
            let sides = Pinned::new()?;
            // The pass and the raw copy on the server's core, as the broker's cleaner is.
            let throughput = {
                let dir = dir.clone();
                sides.blocking_on_server(move || throughput(&dir, mib))??
            };
            let latency = latency(&sides, &workload, &dir.join("broker"), json_out)?;
            anyhow::Ok((throughput, latency))
        })
        .await?
    };
    let _ = std::fs::remove_dir_all(&dir);
    let (throughput, latency) = measured?;
    let steal = super::steal::steal_percent(cpu_at_start);
    report(&throughput, &latency, steal, json_out);
    Ok(())
}

/// MB/s of each round: (raw read+write, compaction).
type Pairs = Vec<(f64, f64)>;

fn throughput(dir: &Path, mib: u64) -> Result<Pairs> {
    let pristine = dir.join("pristine");
    let segments = SegmentConfig {
        segment_bytes: 16 << 20,
        segment_ms: i64::MAX,
        write_back_bytes: None,
    };
    let open = |at: &Path| -> Result<PartitionLog> {
        Ok(PartitionLog::Durable(
            DurableLog::open(Arc::new(FsStorage), at, segments)?.log,
        ))
    };
    {
        let mut log = open(&pristine)?;
        let value = Bytes::from(vec![b'v'; 100]);
        let mut sequence = 0i32;
        let mut key = 0u64;
        while log.stored_bytes() < mib << 20 {
            let records: Vec<NewRecord> = (0..100)
                .map(|_| {
                    key = (key + 7_919) % 10_000;
                    NewRecord {
                        key: Some(Bytes::from(format!("key-{key}"))),
                        ..NewRecord::value(value.clone())
                    }
                })
                .collect();
            let writer = Writer {
                producer_id: 1,
                epoch: 0,
                base_sequence: sequence,
            };
            let batch = minibroker_records::encode(writer, &records, 0)?;
            log.append(&batch, 100, 0)?;
            sequence += 100;
        }
        log.write_pending()?;
    }
    let mut pairs = Vec::new();
    for round in 0..PAIRS {
        let raw_dir = dir.join(format!("raw-{round}"));
        copy_dir(&pristine, &raw_dir)?;
        let raw = raw_read_write(&raw_dir)?;
        let clean_dir = dir.join(format!("clean-{round}"));
        copy_dir(&pristine, &clean_dir)?;
        let mut log = open(&clean_dir)?;
        let started = Instant::now();
        let mut stats = CleanStats::default();
        let plan = log
            .clean_plan(i64::MAX, false)
            .context("nothing to compact")?;
        let cleaned = plan
            .run(64 << 20, &CleanRules::default(), None, &mut stats)?
            .context("nothing was dirty")?;
        if let (_, Some(cleaned_up)) = log.commit_clean(cleaned) {
            cleaned_up.finish()?;
        }
        let seconds = started.elapsed().as_secs_f64();
        pairs.push((raw, stats.bytes_before as f64 / seconds / 1e6));
        let _ = std::fs::remove_dir_all(&raw_dir);
        let _ = std::fs::remove_dir_all(&clean_dir);
    }
    Ok(pairs)
}

/// MB/s of reading every sealed segment of the log in `dir` whole and writing it to a new file,
/// synced: what the disk allows a pass.
fn raw_read_write(dir: &Path) -> Result<f64> {
    let mut segments: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    // The last is the active segment, which compaction never touches.
    segments.pop();
    let started = Instant::now();
    let mut bytes = 0u64;
    for segment in &segments {
        let data = std::fs::read(segment)?;
        let mut out = std::fs::File::create(segment.with_extension("copy"))?;
        out.write_all(&data)?;
        out.sync_all()?;
        bytes += data.len() as u64;
    }
    Ok(bytes as f64 / started.elapsed().as_secs_f64() / 1e6)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

/// p99 (µs) of each pair of half-load phases: (plain topic, compacted topic).
type LatencyPairs = Vec<(u64, u64)>;

/// The broker (and its cleaner's thread) on the server's core, the load on the generator's (see
/// `pairs`).
fn latency(
    sides: &Pinned,
    workload: &Workload,
    dir: &Path,
    json_out: bool,
) -> Result<LatencyPairs> {
    let mut config = embedded_config(workload.partitions, Some(16 << 30));
    config.broker.data_dir = Some(dir.to_owned());
    config.broker.flush = minibroker_broker::FlushPolicy::Os;
    config.broker.cleaner_interval_ms = 100;
    let broker = sides.on_server(EmbeddedBroker::start(config))??;
    let partitions = workload.partitions;
    broker.broker.create_topic_with(
        "plain",
        partitions,
        &[
            ("segment.bytes", "4194304"),
            ("retention.bytes", "268435456"),
        ],
    )?;
    broker.broker.create_topic_with(
        "compacted",
        partitions,
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", "4194304"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    )?;
    let addr = broker.address();
    let on = |topic: &str, rate: Option<f64>, first_producer_id: i64| Workload {
        topic: topic.to_owned(),
        rate,
        first_producer_id,
        keyed: true,
        ..workload.clone()
    };
    let pairs = sides
        .generator
        .block_on(half_load_pairs(workload, &addr, &on, json_out));
    let cleaned: u64 = broker
        .broker
        .partition_metrics()
        .iter()
        .map(|p| p.bytes_cleaned)
        .sum();
    sides.on_server(async move { broker.stop().await })??;
    let pairs = pairs?;
    anyhow::ensure!(
        cleaned > 0,
        "the cleaner never ran during the compacted phases"
    );
    Ok(pairs)
}

/// The plain topic's peak, then pairs at half of it: the plain topic, then the compacted one.
async fn half_load_pairs(
    workload: &Workload,
    addr: &str,
    on: &impl Fn(&str, Option<f64>, i64) -> Workload,
    json_out: bool,
) -> Result<LatencyPairs> {
    let step = 2 * workload.connections as i64;
    let peak = measure("plain peak", addr, &on("plain", None, 1), json_out).await?;
    let half = Some(peak.requests_per_sec() / 2.0);
    let mut pairs = Vec::new();
    let mut next_id = 1 + step;
    for _ in 0..PAIRS {
        let p99 = |result: LoadResult| result.latency_us(0.99);
        let plain = measure("plain@half", addr, &on("plain", half, next_id), json_out).await?;
        let compacted = measure(
            "compacted@half",
            addr,
            &on("compacted", half, next_id + step),
            json_out,
        )
        .await?;
        next_id += 2 * step;
        pairs.push((p99(plain), p99(compacted)));
    }
    Ok(pairs)
}

fn report(throughput: &Pairs, latency: &LatencyPairs, steal: Option<f64>, json_out: bool) {
    let throughput_ratios: Vec<f64> = throughput.iter().map(|(raw, clean)| clean / raw).collect();
    let latency_ratios: Vec<f64> = latency
        .iter()
        .map(|(plain, compacted)| *compacted as f64 / (*plain).max(1) as f64)
        .collect();
    let throughput_spread = Spread::of(throughput_ratios);
    let latency_spread = Spread::of(latency_ratios);
    if json_out {
        println!(
            "{}",
            json!({
                "compaction_mb_per_sec": throughput.iter().map(|p| p.1).collect::<Vec<_>>(),
                "raw_read_write_mb_per_sec": throughput.iter().map(|p| p.0).collect::<Vec<_>>(),
                "compaction_over_raw": throughput_spread.to_json(),
                "p99_at_half_plain_us": latency.iter().map(|p| p.0).collect::<Vec<_>>(),
                "p99_at_half_compacted_us": latency.iter().map(|p| p.1).collect::<Vec<_>>(),
                "p99_compacted_over_plain": latency_spread.to_json(),
                "steal_percent": steal,
            })
        );
        return;
    }
    for (round, (raw, clean)) in throughput.iter().enumerate() {
        println!(
            "round {round}: raw read+write {raw:.0} MB/s, compaction {clean:.0} MB/s ({:.2})",
            clean / raw
        );
    }
    println!(
        "compaction / raw read+write, median (lowest-highest): {throughput_spread} (goal >= 0.5)"
    );
    for (round, (plain, compacted)) in latency.iter().enumerate() {
        println!(
            "round {round}: p99 at half load {plain} µs plain, {compacted} µs with the cleaner"
        );
    }
    println!(
        "p99 with the cleaner / without, median (lowest-highest): {latency_spread} (goal <= 2)"
    );
    if let Some(steal) = steal {
        println!("steal time during the run: {steal:.1}% of the machine's CPU time");
    }
}
