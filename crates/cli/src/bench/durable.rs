//! `bench --data-dir DIR --flush POLICY`: the durable broker against two baselines measured in
//! the same run, so the ratios survive a noisy machine:
//!
//! - the in-memory broker under the identical workload (what durability costs in records/s);
//! - raw file writes of the same bytes, in requests of the same size, with the same fsync
//!   cadence as the broker did (what the disk allows; with `os`, plain writes with no fsync).
//!
//! It also reports the broker's resident memory growth against the bytes it stored (a durable
//! broker keeps batches on disk, so it should not grow with them), and the time to recover the
//! data directory after an unclean stop: the broker is dropped with no final sync or snapshot,
//! which leaves the directory as a SIGKILL leaves it, and a new broker opens it.

use anyhow::{Context, Result, bail};
use minibroker_broker::{Broker, FlushPolicy};
use minibroker_host::Config;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::load::{LoadResult, Workload};
use super::memory::resident_bytes;
use super::{embedded_config, measure};
use minibroker_native::EmbeddedBroker;

/// What the durable phase left behind, for the baselines and the report.
struct Durable {
    result: LoadResult,
    stored_bytes: u64,
    fsyncs: u64,
    resident_growth: i64,
    recovery: Duration,
}

/// `dir`, emptied of what an earlier run left there.
pub fn fresh_dir(dir: &Path) -> Result<PathBuf> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    Ok(dir.to_owned())
}

pub async fn run(workload: Workload, dir: &Path, flush: FlushPolicy, json_out: bool) -> Result<()> {
    let broker_dir = fresh_dir(&dir.join("bench-broker"))?;
    let raw_dir = fresh_dir(&dir.join("bench-raw"))?;
    let mut config = embedded_config(workload.partitions, None);
    config.broker.data_dir = Some(broker_dir.clone());
    config.broker.flush = flush;
    let durable = durable_phase(&config, &workload, json_out).await?;
    let raw = {
        let (requests, bytes, fsyncs) = (
            durable.result.requests,
            durable.stored_bytes,
            durable.fsyncs,
        );
        let partitions = workload.partitions;
        let raw_dir = raw_dir.clone();
        tokio::task::spawn_blocking(move || {
            raw_writes(&raw_dir, partitions, requests, bytes, fsyncs)
        })
        .await??
    };
    let memory = {
        let embedded =
            EmbeddedBroker::start(embedded_config(workload.partitions, Some(16 << 30))).await?;
        let fresh_ids = Workload {
            first_producer_id: 1 + workload.connections as i64,
            ..workload.clone()
        };
        let result = measure("memory", &embedded.address(), &fresh_ids, json_out).await?;
        embedded.stop().await?;
        result
    };
    let _ = std::fs::remove_dir_all(&broker_dir);
    let _ = std::fs::remove_dir_all(&raw_dir);
    report(&workload, flush, &durable, &memory, raw, json_out);
    Ok(())
}

/// Runs the workload on a durable broker, stops it uncleanly and times its recovery.
async fn durable_phase(config: &Config, workload: &Workload, json_out: bool) -> Result<Durable> {
    let resident_before = resident_bytes()?;
    let embedded = EmbeddedBroker::start(config.clone()).await?;
    let broker = Arc::clone(&embedded.broker);
    let result = measure("durable", &embedded.address(), workload, json_out).await?;
    let stored_bytes = broker.stored_bytes();
    let fsyncs = broker.fsyncs();
    let resident_growth = resident_bytes()? as i64 - resident_before as i64;
    // No final sync, no snapshot: the directory as a SIGKILL leaves it.
    embedded.host.halt().await?;
    let Ok(broker) = Arc::try_unwrap(broker) else {
        bail!("the durable broker is still in use after its server stopped");
    };
    drop(broker);
    let started = Instant::now();
    let recovered = Broker::new(&config.broker)?;
    let recovery = started.elapsed();
    if recovered.stored_bytes() != stored_bytes {
        bail!(
            "recovery found {} bytes, {stored_bytes} were stored",
            recovered.stored_bytes()
        );
    }
    Ok(Durable {
        result,
        stored_bytes,
        fsyncs,
        resident_growth,
        recovery,
    })
}

/// Writes `bytes` to `partitions` plain files in `requests` writes of equal size, round robin,
/// syncing each file as often as the broker synced its partitions (every `requests / fsyncs`
/// writes; never when it never did). Returns how long it took.
fn raw_writes(
    dir: &Path,
    partitions: u32,
    requests: u64,
    bytes: u64,
    fsyncs: u64,
) -> Result<Duration> {
    std::fs::create_dir_all(dir)?;
    let size = (bytes / requests.max(1)).max(1) as usize;
    let block = vec![0x5Au8; size];
    let every = (fsyncs > 0).then(|| (requests / fsyncs).max(1));
    let mut files: Vec<(std::fs::File, u64)> = (0..partitions)
        .map(|p| {
            let path: PathBuf = dir.join(format!("{p}.log"));
            Ok((std::fs::File::create(path)?, 0))
        })
        .collect::<Result<_>>()?;
    let started = Instant::now();
    for request in 0..requests {
        let (file, unsynced) = &mut files[(request % u64::from(partitions)) as usize];
        file.write_all(&block)?;
        *unsynced += 1;
        if every.is_some_and(|every| *unsynced >= every) {
            file.sync_data()?;
            *unsynced = 0;
        }
    }
    Ok(started.elapsed())
}

fn report(
    workload: &Workload,
    flush: FlushPolicy,
    durable: &Durable,
    memory: &LoadResult,
    raw: Duration,
    json_out: bool,
) {
    let d = &durable.result;
    let raw_mb_per_sec = d.record_bytes as f64 / 1e6 / raw.as_secs_f64().max(1e-9);
    let gib = durable.stored_bytes as f64 / f64::from(1u32 << 30);
    let recovery_s_per_gib = durable.recovery.as_secs_f64() / gib.max(1e-9);
    // Requests acknowledged per fsync; none when the policy never syncs.
    let per_fsync = (durable.fsyncs > 0).then(|| d.requests as f64 / durable.fsyncs as f64);
    let growth_per_gib = durable.resident_growth as f64 / gib.max(1e-9);
    if json_out {
        let phase = |r: &LoadResult| {
            json!({
                "requests_per_sec": r.requests_per_sec(),
                "records_per_sec": r.records_per_sec(),
                "mb_per_sec": r.mb_per_sec(),
                "p50_us": r.latency_us(0.5),
                "p99_us": r.latency_us(0.99),
            })
        };
        let out = json!({
            "flush": flush.to_string(),
            "connections": workload.connections,
            "records_per_batch": workload.records_per_batch,
            "record_size": workload.record_size,
            "partitions": workload.partitions,
            "durable": phase(d),
            "memory": phase(memory),
            "raw_mb_per_sec": raw_mb_per_sec,
            "durable_over_memory_records_per_sec": d.records_per_sec() / memory.records_per_sec(),
            "durable_over_raw_mb_per_sec": d.mb_per_sec() / raw_mb_per_sec,
            "stored_bytes": durable.stored_bytes,
            "fsyncs": durable.fsyncs,
            "requests_per_fsync": per_fsync,
            "recovery_ms": durable.recovery.as_secs_f64() * 1e3,
            "recovery_s_per_gib": recovery_s_per_gib,
            "resident_growth_bytes": durable.resident_growth,
        });
        println!("{out}");
        return;
    }
    println!(
        "{:<10} {:>12} {:>12} {:>9} {:>9} {:>9}",
        "phase", "requests/s", "records/s", "MB/s", "p50 µs", "p99 µs"
    );
    for (name, r) in [("durable", d), ("memory", memory)] {
        println!(
            "{:<10} {:>12.0} {:>12.0} {:>9.1} {:>9} {:>9}",
            name,
            r.requests_per_sec(),
            r.records_per_sec(),
            r.mb_per_sec(),
            r.latency_us(0.5),
            r.latency_us(0.99)
        );
    }
    println!(
        "{:<10} {:>12} {:>12} {:>9.1}",
        "raw files", "", "", raw_mb_per_sec
    );
    match per_fsync {
        Some(per_fsync) => println!(
            "flush {flush}: {} fsyncs for {} requests ({per_fsync:.1} requests per fsync)",
            durable.fsyncs, d.requests
        ),
        None => println!("flush {flush}: no fsync for {} requests", d.requests),
    }
    println!(
        "durable/memory: records/s {:.2}; durable/raw files: MB/s {:.2}",
        d.records_per_sec() / memory.records_per_sec(),
        d.mb_per_sec() / raw_mb_per_sec
    );
    println!(
        "recovery after an unclean stop: {:.0} ms for {:.0} MiB stored ({recovery_s_per_gib:.2} s per GiB)",
        durable.recovery.as_secs_f64() * 1e3,
        durable.stored_bytes as f64 / f64::from(1u32 << 20)
    );
    println!(
        "resident memory grew {:.1} MiB while storing {:.0} MiB ({:.1} MiB per GiB stored)",
        durable.resident_growth as f64 / f64::from(1u32 << 20),
        durable.stored_bytes as f64 / f64::from(1u32 << 20),
        growth_per_gib / f64::from(1u32 << 20)
    );
}
