//! `minibroker bench`: throughput and latency of produce requests, against a broker and — in the
//! same run, with the identical workload — against a baseline server that does no work, so the
//! headline is a ratio that survives a noisy machine. `--memory` measures resident memory instead;
//! `--data-dir` measures the durable broker (see `durable`).

mod baseline;
mod compaction;
mod durable;
mod load;
mod memory;
mod metrics;
mod steal;
mod tls;
mod transactional;
mod wire;

use anyhow::{Result, bail};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use load::{LoadResult, Workload};
use minibroker_native::EmbeddedBroker;
use minibroker_net::Config;
use wire::Wire;

/// Flags of `bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark a running broker.
    #[arg(long, conflicts_with = "embedded")]
    broker: Option<String>,
    /// Start a broker in this process on loopback (the default when --broker is not given).
    #[arg(long)]
    embedded: bool,
    /// Also run the identical workload against a do-nothing server, and compare latency at half
    /// of the broker's peak load.
    #[arg(long)]
    baseline: bool,
    /// Connections, each one producer.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Partitions of the topic written.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Records per produce request.
    #[arg(long, default_value_t = 1)]
    records_per_batch: usize,
    /// Bytes per record.
    #[arg(long, default_value_t = 100)]
    record_size: usize,
    /// Outstanding requests per connection.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// Seconds per measured phase.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Stop each phase after this many requests instead.
    #[arg(long)]
    count: Option<u64>,
    /// Aim at this many requests per second instead of as many as possible.
    #[arg(long)]
    rate: Option<f64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Measure resident memory for 100k and 1M producer-state entries and 1 GiB of records.
    #[arg(long)]
    memory: bool,
    /// Drive Kafka Produce requests (v2 batches built once) instead: embedded, the same workload
    /// on the native and the Kafka path in one run; with --broker, against any Kafka-compatible
    /// broker (whose topic `bench` must have --partitions partitions).
    /// With --baseline, the broker's Kafka front end against a do-nothing server answering
    /// Kafka produce answers.
    #[arg(long)]
    kafka: bool,
    /// Measure a durable broker storing in DIR (its `bench-broker` and `bench-raw` folders are
    /// cleared first and deleted after), against the in-memory broker and raw file writes with
    /// the same fsync cadence, in one run; also recovery time and resident memory.
    /// With --baseline: the durable broker (storing in DIR/bench-broker) against the do-nothing
    /// server instead.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["broker", "memory"])]
    data_dir: Option<std::path::PathBuf>,
    /// Measure what metrics cost: the workload on an embedded broker with and without them,
    /// alternating three times each.
    #[arg(long, conflicts_with_all = ["broker", "kafka", "baseline", "memory", "data_dir"])]
    compare_metrics: bool,
    /// An embedded broker keeps the newest this many MiB per partition and reuses the memory of
    /// what it drops, as a long-running broker with retention does; 0 keeps everything, so
    /// every byte stored is fresh memory.
    #[arg(long, default_value_t = 16, value_name = "MIB")]
    retention_mib: u64,
    /// Seconds of unmeasured load before each peak phase (broker and baseline alike); the
    /// broker's outcome counts include the warm-up's requests.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    warm_up: f64,
    /// With --data-dir: always, interval:<ms> or os.
    #[arg(long, default_value = "always", requires = "data_dir")]
    flush: minibroker_broker::FlushPolicy,
    /// What transactions cost, on an embedded broker's Kafka listener: transactional producers
    /// committing every --commit-interval-ms against idempotent ones (records/s), and
    /// read_committed reads of a topic of transactions against read_uncommitted ones.
    #[arg(long, conflicts_with_all = ["broker", "baseline", "memory", "data_dir", "compare_metrics"])]
    transactional: bool,
    /// What TLS costs on the Kafka path: the workload on an embedded broker's plain Kafka
    /// listener and on a TLS one, alternating three times each.
    #[arg(long, conflicts_with_all = ["broker", "baseline", "memory", "data_dir", "compare_metrics", "transactional"])]
    tls: bool,
    /// What log compaction costs: a pass over a durable log against a raw read and write of the
    /// same segments, and produce latency at half load while the cleaner runs against without,
    /// in one run, under DIR (`--data-dir`, else a temporary directory).
    #[arg(long, conflicts_with_all = ["broker", "baseline", "memory", "compare_metrics", "transactional", "tls"])]
    compaction: bool,
    /// With --compaction: MiB of the log compacted in each round.
    #[arg(long, default_value_t = 256, requires = "compaction")]
    compaction_mib: u64,
    /// With --transactional: how often a transactional producer commits.
    #[arg(long, default_value_t = 100, requires = "transactional")]
    commit_interval_ms: u64,
}

const TOPIC: &str = "bench";

pub async fn run(args: Args) -> Result<()> {
    if args.memory {
        return memory::run(args.json);
    }
    if args.transactional {
        return transactional::run(transactional::Settings {
            connections: args.connections,
            partitions: args.partitions,
            records_per_batch: args.records_per_batch,
            record_size: args.record_size,
            in_flight: args.in_flight,
            duration: Duration::from_secs_f64(args.duration.max(0.1)),
            commit_interval: Duration::from_millis(args.commit_interval_ms.max(1)),
            json: args.json,
        })
        .await;
    }
    if args.connections == 0
        || args.in_flight == 0
        || args.records_per_batch == 0
        || args.partitions == 0
    {
        bail!(
            "--connections, --in-flight, --records-per-batch and --partitions must be at least 1"
        );
    }
    let workload = Workload {
        connections: args.connections,
        partitions: args.partitions,
        records_per_batch: args.records_per_batch,
        record_size: args.record_size,
        in_flight: args.in_flight,
        duration: Duration::from_secs_f64(args.duration.max(0.1)),
        count: args.count,
        rate: args.rate,
        topic: TOPIC.to_owned(),
        // Embedded and without a baseline, --kafka compares the two front ends instead.
        wire: if args.kafka && (args.broker.is_some() || args.baseline) {
            Wire::Kafka
        } else {
            Wire::Native
        },
        first_producer_id: 1,
        tls: None,
        keyed: false,
    };
    if args.compare_metrics {
        return metrics::run(workload, args.json).await;
    }
    if args.tls {
        return tls::run(workload, args.json).await;
    }
    if args.compaction {
        let dir = match &args.data_dir {
            Some(dir) => dir.clone(),
            None => std::env::temp_dir(),
        };
        return compaction::run(workload, &dir, args.compaction_mib, args.json).await;
    }
    let broker_dir = match &args.data_dir {
        Some(dir) if !args.baseline => {
            return durable::run(workload, dir, args.flush, args.json).await;
        }
        Some(dir) => Some(durable::fresh_dir(&dir.join("bench-broker"))?),
        None => None,
    };
    // Without retention batched phases store several GiB; the default 4 GiB limit would refuse
    // them.
    let mut config = embedded_config(args.partitions, Some(16 << 30));
    config.broker.retention_bytes = (args.retention_mib > 0).then_some(args.retention_mib << 20);
    config.broker.data_dir.clone_from(&broker_dir);
    config.broker.flush = args.flush;
    let target = match &args.broker {
        Some(addr) => Target::Remote(addr.clone()),
        None => Target::embedded(&config, workload.wire).await?,
    };
    if !args.json {
        println!(
            "workload: {} connection(s) x {} in flight, {} record(s) of {} B per request, {} partition(s)",
            args.connections,
            args.in_flight,
            args.records_per_batch,
            args.record_size,
            args.partitions
        );
        if args.broker.is_none() {
            match config.broker.retention_bytes {
                Some(bytes) => println!("embedded broker keeps {} MiB per partition", bytes >> 20),
                None => println!("embedded broker keeps everything"),
            }
        }
    }
    let cpu_at_start = steal::CpuTimes::now();
    let mut phases = Vec::new();
    // Each phase writes with fresh producer ids, so sequences start at 0 every time.
    let mut next_ids = 1i64;
    let warm_up = Duration::from_secs_f64(args.warm_up.max(0.0));
    let mut phase = |name: &'static str, addr: String, workload: Workload| {
        let first_producer_id = next_ids;
        // Room for the warm-up's producers too.
        next_ids += 2 * workload.connections as i64;
        let workload = Workload {
            first_producer_id,
            ..workload
        };
        async move {
            // Peak phases start with the same workload unmeasured, as a running broker would
            // have been: memory faulted in, retention recycling it, caches warm.
            if workload.rate.is_none() && !warm_up.is_zero() {
                let warm = Workload {
                    duration: warm_up,
                    count: None,
                    first_producer_id: first_producer_id + workload.connections as i64,
                    ..workload.clone()
                };
                load::run(&addr, &warm, Arc::new(AtomicU64::new(0))).await?;
            }
            let result = measure(name, &addr, &workload, args.json).await?;
            anyhow::Ok((name, result))
        }
    };
    let broker_peak = phase("broker", target.addr(), workload.clone()).await?;
    phases.push(broker_peak.clone());
    if args.kafka && workload.wire == Wire::Native {
        // The same workload through the Kafka front end, on a fresh broker: the first one holds
        // gigabytes by now, and a phase writing into a grown broker pays for its page faults.
        let native_outcomes = target.outcomes();
        target.stop().await?;
        let fresh = Target::embedded(&config, Wire::Kafka).await?;
        let over_kafka = Workload {
            wire: Wire::Kafka,
            ..workload.clone()
        };
        phases.push(phase("kafka", fresh.addr(), over_kafka).await?);
        let kafka_outcomes = fresh.outcomes();
        fresh.stop().await?;
        report(
            &args,
            &workload,
            &phases,
            Some(native_outcomes.unwrap_or_default() + kafka_outcomes.unwrap_or_default()),
            steal::steal_percent(cpu_at_start),
        );
        return Ok(());
    }
    let mut baseline_server = None;
    if args.baseline {
        let (addr, stop) = start_baseline(workload.wire).await?;
        baseline_server = Some(stop);
        let baseline_peak = phase("baseline", addr.clone(), workload.clone()).await?;
        phases.push(baseline_peak);
        // Latency at half of the broker's peak, for both.
        let half = Workload {
            rate: Some(broker_peak.1.requests_per_sec() / 2.0),
            ..workload.clone()
        };
        phases.push(phase("broker@half", target.addr(), half.clone()).await?);
        phases.push(phase("baseline@half", addr, half).await?);
    }
    let outcomes = target.outcomes();
    report(
        &args,
        &workload,
        &phases,
        outcomes,
        steal::steal_percent(cpu_at_start),
    );
    if let Some(stop) = baseline_server {
        let _ = stop.send(());
    }
    target.stop().await?;
    if let Some(dir) = broker_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}

/// The configuration of an in-process broker whose auto-created topics get `partitions`
/// partitions, storing up to `max_stored_bytes` (the default limit when `None`).
pub fn embedded_config(partitions: u32, max_stored_bytes: Option<u64>) -> Config {
    let mut config = Config::default().with_default_partitions(partitions);
    if let Some(max) = max_stored_bytes {
        config.broker.max_stored_bytes = max;
    }
    config
}

/// Where the broker under test runs.
enum Target {
    Remote(String),
    /// In this process; measured through its Kafka front end when that is started.
    Embedded {
        broker: EmbeddedBroker,
        kafka: Option<std::net::SocketAddr>,
    },
}

impl Target {
    /// A broker in this process with `config`, and its Kafka front end when `wire` is Kafka.
    async fn embedded(config: &Config, wire: Wire) -> Result<Self> {
        let broker = EmbeddedBroker::start(config.clone()).await?;
        let kafka = match wire {
            Wire::Kafka => Some(minibroker_kafka::serve_on_loopback(&broker.host).await?),
            Wire::Native => None,
        };
        Ok(Self::Embedded { broker, kafka })
    }

    fn addr(&self) -> String {
        match self {
            Self::Remote(addr) => addr.clone(),
            Self::Embedded {
                kafka: Some(kafka), ..
            } => kafka.to_string(),
            Self::Embedded { broker, .. } => broker.address(),
        }
    }

    fn outcomes(&self) -> Option<minibroker_broker::OutcomeCounts> {
        match self {
            Self::Remote(_) => None,
            Self::Embedded { broker, .. } => Some(broker.broker.outcome_counts()),
        }
    }

    async fn stop(self) -> Result<()> {
        match self {
            Self::Remote(_) => Ok(()),
            Self::Embedded { broker, .. } => Ok(broker.stop().await?),
        }
    }
}

async fn start_baseline(wire: Wire) -> Result<(String, oneshot::Sender<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(baseline::serve(listener, wire, async move {
        let _ = stopped.await;
    }));
    Ok((addr, stop))
}

/// Runs one phase, with its progress on stderr (a bar on a terminal, lines otherwise).
async fn measure(name: &str, addr: &str, workload: &Workload, quiet: bool) -> Result<LoadResult> {
    let answered = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(tokio::sync::Notify::new());
    let progress = (!quiet).then(|| {
        let answered = Arc::clone(&answered);
        let finished = Arc::clone(&finished);
        let mut progress =
            crate::progress::Progress::new(format!("  {name}"), "requests", workload.count);
        tokio::spawn(async move {
            let mut shown = 0;
            loop {
                let stop = tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(200)) => false,
                    () = finished.notified() => true,
                };
                let now = answered.load(Ordering::Relaxed);
                progress.inc(now - shown);
                shown = now;
                if stop {
                    progress.finish();
                    return;
                }
            }
        })
    });
    let result = load::run(addr, workload, answered).await;
    if let Some(progress) = progress {
        finished.notify_one();
        let _ = progress.await;
    }
    let result = result?;
    if result.errors > 0 {
        bail!("{name}: {} requests got error responses", result.errors);
    }
    Ok(result)
}

fn report(
    args: &Args,
    workload: &Workload,
    phases: &[(&str, LoadResult)],
    outcomes: Option<minibroker_broker::OutcomeCounts>,
    steal_percent: Option<f64>,
) {
    if args.json {
        let mut report = json_report(workload, phases, outcomes);
        report["steal_percent"] = json!(steal_percent);
        println!("{report}");
    } else {
        text_report(phases, outcomes);
        if let Some(steal) = steal_percent {
            println!("steal time during the run: {steal:.1}% of the machine's CPU time");
        }
    }
}

/// The result of the phase called `name`.
fn find<'a>(phases: &'a [(&str, LoadResult)], name: &str) -> Option<&'a LoadResult> {
    phases.iter().find(|(n, _)| *n == name).map(|(_, r)| r)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

fn json_report(
    workload: &Workload,
    phases: &[(&str, LoadResult)],
    outcomes: Option<minibroker_broker::OutcomeCounts>,
) -> serde_json::Value {
    let phase_json: Vec<_> = phases
        .iter()
        .map(|(name, r)| {
            json!({
                "phase": name,
                "requests": r.requests,
                "seconds": r.elapsed.as_secs_f64(),
                "requests_per_sec": r.requests_per_sec(),
                "records_per_sec": r.records_per_sec(),
                "mb_per_sec": r.mb_per_sec(),
                "p50_us": r.latency_us(0.5),
                "p99_us": r.latency_us(0.99),
                "p999_us": r.latency_us(0.999),
                "outcomes": r.outcomes,
            })
        })
        .collect();
    let mut out = json!({
        "connections": workload.connections,
        "in_flight": workload.in_flight,
        "records_per_batch": workload.records_per_batch,
        "record_size": workload.record_size,
        "partitions": workload.partitions,
        "phases": phase_json,
    });
    if let (Some(native), Some(kafka)) = (find(phases, "broker"), find(phases, "kafka")) {
        out["kafka_over_native"] = json!({
            "records_per_sec": ratio(kafka.records_per_sec(), native.records_per_sec()),
        });
    }
    if let (Some(broker), Some(baseline)) = (find(phases, "broker"), find(phases, "baseline")) {
        out["broker_over_baseline"] = json!({
            "requests_per_sec": ratio(broker.requests_per_sec(), baseline.requests_per_sec()),
            "mb_per_sec": ratio(broker.mb_per_sec(), baseline.mb_per_sec()),
        });
    }
    if let (Some(broker), Some(baseline)) =
        (find(phases, "broker@half"), find(phases, "baseline@half"))
    {
        out["p99_at_half_load_broker_over_baseline"] = json!(ratio(
            broker.latency_us(0.99) as f64,
            baseline.latency_us(0.99) as f64
        ));
    }
    if let Some(o) = outcomes {
        out["broker_outcomes"] = json!(o);
    }
    out
}

fn text_report(phases: &[(&str, LoadResult)], outcomes: Option<minibroker_broker::OutcomeCounts>) {
    let find = |name: &str| find(phases, name);
    println!(
        "{:<14} {:>12} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "phase", "requests/s", "records/s", "MB/s", "p50 µs", "p99 µs", "p99.9 µs"
    );
    for (name, r) in phases {
        println!(
            "{:<14} {:>12.0} {:>12.0} {:>9.1} {:>9} {:>9} {:>9}",
            name,
            r.requests_per_sec(),
            r.records_per_sec(),
            r.mb_per_sec(),
            r.latency_us(0.5),
            r.latency_us(0.99),
            r.latency_us(0.999)
        );
    }
    if let (Some(native), Some(kafka)) = (find("broker"), find("kafka")) {
        println!(
            "kafka/native: records/s {:.2}",
            ratio(kafka.records_per_sec(), native.records_per_sec())
        );
    }
    if let (Some(broker), Some(baseline)) = (find("broker"), find("baseline")) {
        println!(
            "broker/baseline: requests/s {:.2}, MB/s {:.2}",
            ratio(broker.requests_per_sec(), baseline.requests_per_sec()),
            ratio(broker.mb_per_sec(), baseline.mb_per_sec())
        );
    }
    if let (Some(broker), Some(baseline)) = (find("broker@half"), find("baseline@half")) {
        println!(
            "p99 at half of the broker's peak ({:.0} requests/s): broker/baseline {:.2}",
            find("broker").map_or(0.0, |peak| peak.requests_per_sec() / 2.0),
            ratio(
                broker.latency_us(0.99) as f64,
                baseline.latency_us(0.99) as f64
            )
        );
    }
    if let Some(o) = outcomes {
        println!(
            "broker outcomes: accepted={} duplicate={} out_of_order={} fenced_epoch={}",
            o.accepted, o.duplicate, o.out_of_order, o.fenced_epoch
        );
    }
}
