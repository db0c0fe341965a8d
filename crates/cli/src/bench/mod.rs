//! `minibroker bench`: throughput and latency of produce requests, against a broker and — in the
//! same run, with the identical workload — against a baseline server that does no work, so the
//! headline is a ratio that survives a noisy machine: the generator and the server under test
//! are pinned to cores of their own and the two servers' phases alternate (`pairs`).
//! `--memory` measures resident memory instead;
//! `--data-dir` measures the durable broker (see `durable`).

mod baseline;
mod cluster;
mod compaction;
mod durable;
mod durable_baseline;
mod load;
mod memory;
mod metrics;
mod pairs;
mod raw_inserts;
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
use minibroker_host::Config;
use minibroker_native::EmbeddedBroker;
use pairs::{Alternation, Pairs, Pinned, Side, Spread};
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
    /// on the native and the Kafka front end of one broker, in turns; with --broker, against any Kafka-compatible
    /// broker (whose topic `bench` must have --partitions partitions).
    /// With --baseline, the broker's Kafka front end against a do-nothing server answering
    /// Kafka produce answers.
    #[arg(long)]
    kafka: bool,
    /// Measure a durable broker storing in DIR (its `bench-broker` and `bench-raw` folders are
    /// cleared first and deleted after), against the in-memory broker and raw file writes with
    /// the same fsync cadence, in one run; also recovery time and resident memory.
    /// With --baseline: the durable broker (storing in DIR/bench-broker) against the do-nothing
    /// server writing every frame to one file per partition in DIR/bench-baseline with the
    /// same fsync cadence as --flush, instead.
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
    /// Seconds of unmeasured load before the first peak phase of each side (broker and baseline
    /// alike); the broker's outcome counts include the warm-up's requests.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    warm_up: f64,
    /// Pairs of phases compared (broker then baseline, or native then Kafka, in turns); each
    /// ratio is the median of the pairs', with the lowest and highest.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// With --data-dir: always, interval:<ms> or os.
    #[arg(long, default_value = "always", requires = "data_dir")]
    flush: minibroker_broker::FlushPolicy,
    /// What transactions cost, on an embedded broker's Kafka listener (with --cluster, through
    /// three brokers of a cluster): transactional producers committing every
    /// --commit-interval-ms against idempotent ones (records/s), and read_committed reads of a
    /// topic of transactions against read_uncommitted ones.
    #[arg(long, conflicts_with_all = ["broker", "baseline", "memory", "compare_metrics"])]
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
    /// Idempotent Kafka produce through one and through three brokers of a cluster on this
    /// PostgreSQL database (postgresql://USER@HOST:PORT/DB), started in this process, each
    /// against the same batches inserted into the database with the same transaction cadence
    /// and no rule.
    #[arg(long, value_name = "URL", conflicts_with_all = ["broker", "baseline", "memory", "data_dir", "compare_metrics", "tls", "compaction"])]
    cluster: Option<String>,
    /// With --cluster: how long the brokers (and the baseline) gather batches per transaction.
    #[arg(long, default_value_t = 2, requires = "cluster")]
    cluster_flush_ms: u64,
    /// With --compaction: MiB of the log compacted in each round.
    #[arg(long, default_value_t = 256, requires = "compaction")]
    compaction_mib: u64,
    /// With --transactional: how often a transactional producer commits.
    #[arg(long, default_value_t = 100, requires = "transactional")]
    commit_interval_ms: u64,
    /// With --transactional: the transaction protocol, 2 (KIP-890 part 2: Produce v12 adds a
    /// transaction's partitions, every EndTxn bumps the epoch) or 1 (AddPartitionsToTxn, an
    /// epoch kept from one transaction to the next).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(i16).range(1..=2), requires = "transactional")]
    transaction_version: i16,
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
            // A cluster finalizes the older protocol (Produce v12's add needs the coordinator).
            transaction_version: if args.cluster.is_some() {
                1
            } else {
                args.transaction_version
            },
            pairs: args.pairs,
            durable: args.data_dir.map(|dir| (dir, args.flush)),
            cluster: args
                .cluster
                .map(|url| (url, Duration::from_millis(args.cluster_flush_ms.max(1)))),
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
    if let Some(url) = args.cluster.clone() {
        let settings = cluster::Settings {
            url,
            workload: Workload {
                wire: Wire::Kafka,
                ..workload
            },
            retention_bytes: (args.retention_mib > 0).then_some(args.retention_mib << 20),
            flush: Duration::from_millis(args.cluster_flush_ms.max(1)),
            pairs: args.pairs,
            warm_up: Duration::from_secs_f64(args.warm_up.max(0.0)),
            json: args.json,
        };
        return tokio::task::spawn_blocking(move || cluster::run(&settings)).await?;
    }
    if args.compare_metrics {
        return metrics::run(workload, args.json).await;
    }
    if args.tls {
        let alternation = Alternation::new(
            args.pairs,
            Duration::from_secs_f64(args.warm_up.max(0.0)),
            args.json,
        );
        return tls::run(workload, alternation).await;
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
    let baseline_dir = match &args.data_dir {
        Some(dir) => Some(durable::fresh_dir(&dir.join("bench-baseline"))?),
        None => None,
    };
    // Without retention batched phases store several GiB; the default 4 GiB limit would refuse
    // them.
    let mut config = embedded_config(args.partitions, Some(16 << 30));
    config.broker.retention_bytes = (args.retention_mib > 0).then_some(args.retention_mib << 20);
    config.broker.data_dir.clone_from(&broker_dir);
    config.broker.flush = args.flush;
    let measured = tokio::task::spawn_blocking(move || {
        let measured = measure_pinned(&args, &workload, &config, baseline_dir.as_deref());
        for dir in [broker_dir, baseline_dir].into_iter().flatten() {
            let _ = std::fs::remove_dir_all(dir);
        }
        measured
    });
    measured.await?
}

/// What the main path measured.
enum Measured {
    /// The broker alone (no `--baseline`).
    Alone(LoadResult),
    /// The native front end against the Kafka one, on one broker (`--embedded --kafka`).
    FrontEnds(Pairs),
    /// The broker against the baseline at peak, then both at half of the broker's peak.
    Baseline { peak: Pairs, half: Pairs },
}

/// The main path on pinned runtimes (see `pairs`): the broker and the baseline on one core, the
/// load generator on the other.
fn measure_pinned(
    args: &Args,
    workload: &Workload,
    config: &Config,
    baseline_dir: Option<&std::path::Path>,
) -> Result<()> {
    let sides = Pinned::new()?;
    let target = match &args.broker {
        Some(addr) => Target::Remote(addr.clone()),
        None => sides.server.block_on(Target::embedded(
            config,
            args.kafka || workload.wire == Wire::Kafka,
        ))?,
    };
    let baseline = if args.baseline {
        // Standing in for a durable broker, the baseline writes what it is sent as the broker
        // would: rolling where the broker rolls when retention drops old segments.
        let store = match baseline_dir {
            Some(dir) => Some(sides.server.block_on(async {
                durable_baseline::Store::create(
                    dir,
                    workload.partitions,
                    workload.connections,
                    config.broker.flush,
                    config
                        .broker
                        .retention_bytes
                        .map(|_| config.broker.segment_bytes),
                )
            })?),
            None => None,
        };
        let keep = match store {
            Some(store) => baseline::Keep::Files(store),
            None => baseline::Keep::Nothing,
        };
        Some(sides.server.block_on(start_baseline(workload.wire, keep))?)
    } else {
        None
    };
    if !args.json {
        println!(
            "workload: {} connection(s) x {} in flight, {} record(s) of {} B per request, {} partition(s)",
            workload.connections,
            workload.in_flight,
            workload.records_per_batch,
            workload.record_size,
            workload.partitions
        );
        if args.broker.is_none() {
            match config.broker.retention_bytes {
                Some(bytes) => println!("embedded broker keeps {} MiB per partition", bytes >> 20),
                None => println!("embedded broker keeps everything"),
            }
        }
    }
    let cpu_at_start = steal::CpuTimes::now();
    let mut alternation = Alternation::new(
        args.pairs,
        Duration::from_secs_f64(args.warm_up.max(0.0)),
        args.json,
    );
    let broker = Side {
        name: "broker",
        addr: target.addr(workload.wire),
        workload: workload.clone(),
    };
    let measured = sides.generator.block_on(async {
        if let Some((addr, _)) = &baseline {
            let baseline = Side {
                name: "baseline",
                addr: addr.clone(),
                workload: workload.clone(),
            };
            let peak = alternation.compare(&broker, &baseline).await?;
            // Latency at half of the broker's peak, for both.
            let rate = peak.first(LoadResult::requests_per_sec).median / 2.0;
            let half = alternation
                .compare(
                    &broker.paced("broker@half", rate),
                    &baseline.paced("baseline@half", rate),
                )
                .await?;
            return anyhow::Ok(Measured::Baseline { peak, half });
        }
        if args.kafka && workload.wire == Wire::Native {
            // Both front ends of one broker, in turns.
            let kafka = Side {
                name: "kafka",
                addr: target.addr(Wire::Kafka),
                workload: Workload {
                    wire: Wire::Kafka,
                    ..workload.clone()
                },
            };
            return Ok(Measured::FrontEnds(
                alternation.compare(&broker, &kafka).await?,
            ));
        }
        alternation.warm(&broker).await?;
        Ok(Measured::Alone(alternation.phase(&broker).await?))
    });
    let steal = steal::steal_percent(cpu_at_start);
    let outcomes = target.outcomes();
    if let Some((_, stop)) = baseline {
        let _ = stop.send(());
    }
    sides.server.block_on(target.stop())?;
    let measured = measured?;
    if args.json {
        let mut report = json_report(workload, &measured, outcomes);
        report["pairs"] = json!(alternation.pairs);
        report["steal_percent"] = json!(steal);
        println!("{report}");
    } else {
        text_report(&measured, outcomes);
        if let Some(steal) = steal {
            println!("steal time during the run: {steal:.1}% of the machine's CPU time");
        }
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
    /// In this process, with its Kafka front end when that is started.
    Embedded {
        broker: EmbeddedBroker,
        kafka: Option<std::net::SocketAddr>,
    },
}

impl Target {
    /// A broker in this process with `config`, and its Kafka front end when `kafka` says so.
    async fn embedded(config: &Config, kafka: bool) -> Result<Self> {
        let broker = EmbeddedBroker::start(config.clone()).await?;
        let kafka = match kafka {
            true => Some(minibroker_kafka::serve_on_loopback(&broker.host).await?),
            false => None,
        };
        Ok(Self::Embedded { broker, kafka })
    }

    /// Where to send `wire`'s requests.
    fn addr(&self, wire: Wire) -> String {
        match self {
            Self::Remote(addr) => addr.clone(),
            Self::Embedded {
                kafka: Some(kafka), ..
            } if wire == Wire::Kafka => kafka.to_string(),
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

async fn start_baseline(wire: Wire, keep: baseline::Keep) -> Result<(String, oneshot::Sender<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(baseline::serve(listener, wire, keep, async move {
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

fn phase_json(name: &str, r: &LoadResult) -> serde_json::Value {
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
}

/// Each ratio as `{name: median, name_spread: {median, min, max}}`.
fn ratios_json(ratios: &[(&str, Spread)]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (name, spread) in ratios {
        out.insert((*name).to_owned(), json!(spread.median));
        out.insert(format!("{name}_spread"), spread.to_json());
    }
    serde_json::Value::Object(out)
}

fn p99(result: &LoadResult) -> f64 {
    result.latency_us(0.99) as f64
}

impl Measured {
    /// Every phase, named, in the order they ran.
    fn phases(&self) -> Vec<(&'static str, &LoadResult)> {
        match self {
            Self::Alone(result) => vec![("broker", result)],
            Self::FrontEnds(pairs) => pairs.phases().collect(),
            Self::Baseline { peak, half } => peak.phases().chain(half.phases()).collect(),
        }
    }
}

fn json_report(
    workload: &Workload,
    measured: &Measured,
    outcomes: Option<minibroker_broker::OutcomeCounts>,
) -> serde_json::Value {
    let phases: Vec<_> = measured
        .phases()
        .into_iter()
        .map(|(name, r)| phase_json(name, r))
        .collect();
    let mut out = json!({
        "connections": workload.connections,
        "in_flight": workload.in_flight,
        "records_per_batch": workload.records_per_batch,
        "record_size": workload.record_size,
        "partitions": workload.partitions,
        "phases": phases,
    });
    match measured {
        Measured::Alone(_) => {}
        Measured::FrontEnds(pairs) => {
            out["kafka_over_native"] = ratios_json(&[
                (
                    "records_per_sec",
                    pairs.second_over_first(LoadResult::records_per_sec),
                ),
                (
                    "requests_per_sec",
                    pairs.second_over_first(LoadResult::requests_per_sec),
                ),
            ]);
        }
        Measured::Baseline { peak, half } => {
            out["broker_over_baseline"] = ratios_json(&[
                (
                    "requests_per_sec",
                    peak.first_over_second(LoadResult::requests_per_sec),
                ),
                ("mb_per_sec", peak.first_over_second(LoadResult::mb_per_sec)),
            ]);
            out["broker_requests_per_sec"] = peak.first(LoadResult::requests_per_sec).to_json();
            out["broker_mb_per_sec"] = peak.first(LoadResult::mb_per_sec).to_json();
            let tail = half.first_over_second(p99);
            out["p99_at_half_load_broker_over_baseline"] = json!(tail.median);
            out["p99_at_half_load_spread"] = tail.to_json();
        }
    }
    if let Some(o) = outcomes {
        out["broker_outcomes"] = json!(o);
    }
    out
}

fn text_report(measured: &Measured, outcomes: Option<minibroker_broker::OutcomeCounts>) {
    println!(
        "{:<14} {:>12} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "phase", "requests/s", "records/s", "MB/s", "p50 µs", "p99 µs", "p99.9 µs"
    );
    for (name, r) in measured.phases() {
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
    match measured {
        Measured::Alone(_) => {}
        Measured::FrontEnds(pairs) => println!(
            "kafka/native, median (lowest-highest) of {} pairs: records/s {}",
            pairs.results.len(),
            pairs.second_over_first(LoadResult::records_per_sec)
        ),
        Measured::Baseline { peak, half } => {
            println!(
                "broker/baseline, median (lowest-highest) of {} pairs: requests/s {}, MB/s {}",
                peak.results.len(),
                peak.first_over_second(LoadResult::requests_per_sec),
                peak.first_over_second(LoadResult::mb_per_sec)
            );
            println!(
                "p99 at half of the broker's peak ({:.0} requests/s): broker/baseline {}",
                peak.first(LoadResult::requests_per_sec).median / 2.0,
                half.first_over_second(p99)
            );
        }
    }
    if let Some(o) = outcomes {
        println!(
            "broker outcomes: accepted={} duplicate={} out_of_order={} fenced_epoch={}",
            o.accepted, o.duplicate, o.out_of_order, o.fenced_epoch
        );
    }
}
