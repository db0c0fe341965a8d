//! `minibroker demo`: exactly-once under a bad network, in one command.
//!
//! Starts a broker and a fault-injecting proxy in this process, runs several idempotent producers
//! through the proxy, then reads everything back from the broker and checks it with the verifier.
//! With `--transactions`, the end-to-end demo instead: a transactional pipeline through the
//! proxy and two crashes (`crate::demo_transactions`).

use anyhow::{Context, Result, bail};
use minibroker_client::{Client, ClientConfig, NewRecord, Producer, ProducerConfig, ProducerStats};
use minibroker_native::EmbeddedBroker;
use minibroker_verify::AckedBatch;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::acks::{PayloadCursor, acked_batches};
use crate::bench::embedded_config;
use crate::faults::{DefaultRates, FaultArgs};

/// Flags of `demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Concurrent idempotent producers.
    #[arg(long, default_value_t = 8)]
    producers: usize,
    /// Partitions of the demo topic; each producer writes to all of them.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Records each producer sends.
    #[arg(long, default_value_t = 2000)]
    records: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 5)]
    batch_size: usize,
    /// A producer resends a batch after this long without an answer.
    #[arg(long, default_value_t = 250)]
    timeout_ms: u64,
    /// Fault rates default to 2% lost requests and acks, 1% delays, 0.5% resets, 1% held (none
    /// held with --transactions).
    #[command(flatten)]
    faults: FaultArgs,
    /// Exactly-once end to end instead: a transactional consume-transform-produce pipeline over
    /// the Kafka protocol reads --records input records and writes them transformed, through the
    /// faulty network, while the processor and then the broker are killed mid-transaction.
    #[arg(long)]
    transactions: bool,
    /// With --transactions: input records per transaction.
    #[arg(long, default_value_t = 50)]
    per_transaction: usize,
}

const TOPIC: &str = "demo";
/// Batches per partition handed to a producer at a time (its in-flight window).
const WINDOW: usize = 5;

/// Everything one producer task reports.
struct ProducerRun {
    acked: Vec<AckedBatch>,
    stats: ProducerStats,
}

/// What all producers did together.
struct Produced {
    acked: Vec<AckedBatch>,
    stats: ProducerStats,
    failures: Vec<String>,
    elapsed: Duration,
}

/// What the demo measured, for its report.
struct Outcome {
    total_records: u64,
    produced: Produced,
    faults: minibroker_faults::FaultCounts,
    outcomes: minibroker_broker::OutcomeCounts,
    report: minibroker_verify::Report,
}

pub async fn run(args: Args) -> Result<()> {
    if args.transactions {
        let settings = crate::demo_transactions::Settings {
            partitions: args.partitions,
            records: args.records,
            per_transaction: args.per_transaction,
            timeout_ms: args.timeout_ms.max(500),
        };
        return crate::demo_transactions::run(settings, &args.faults).await;
    }
    if args.producers == 0 || args.partitions == 0 || args.records == 0 || args.batch_size == 0 {
        bail!("--producers, --partitions, --records and --batch-size must be at least 1");
    }
    let faults = args.faults.config(DefaultRates::DEMO)?;
    let seed = faults.seed;

    // The broker, in this process, on a free loopback port, and the flaky network in front.
    let broker = EmbeddedBroker::start(embedded_config(args.partitions, None)).await?;
    let broker_addr = broker.address();
    let proxy = minibroker_faults::EmbeddedProxy::start(&broker_addr, faults).await?;
    println!(
        "minibroker demo: {} producers x {} partitions, {} records each, through a faulty network (seed {seed})",
        args.producers, args.partitions, args.records
    );
    println!("  broker on {broker_addr}, flaky network on {}", proxy.addr);
    println!();

    let produced = run_producers(&args, &proxy.address()).await?;
    eprintln!();
    // Read back from the broker itself, not through the faulty network.
    let client = Client::connect(&broker_addr, ClientConfig::default()).await?;
    let report = minibroker_verify::verify(&client, TOPIC, Some(&produced.acked)).await?;
    let faults = proxy.stop().await?;
    let outcomes = broker.broker.outcome_counts();
    broker.stop().await?;
    print_report(&Outcome {
        total_records: (args.producers * args.records) as u64,
        produced,
        faults,
        outcomes,
        report,
    })
}

/// Runs every producer through `address` at once, with a progress line.
async fn run_producers(args: &Args, address: &str) -> Result<Produced> {
    let total_records = (args.producers * args.records) as u64;
    let acked_records = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let progress = tokio::spawn(show_progress(Arc::clone(&acked_records), total_records));
    let mut producers = tokio::task::JoinSet::new();
    for index in 0..args.producers {
        let (address, acked_records) = (address.to_owned(), Arc::clone(&acked_records));
        let (records, batch_size, partitions) = (args.records, args.batch_size, args.partitions);
        let config = ProducerConfig {
            client: ClientConfig {
                request_timeout: Duration::from_millis(args.timeout_ms),
                ..ClientConfig::default()
            },
            ..ProducerConfig::default()
        };
        producers.spawn(async move {
            produce(
                index,
                &address,
                config,
                records,
                batch_size,
                partitions,
                &acked_records,
            )
            .await
        });
    }
    let mut produced = Produced {
        acked: Vec::new(),
        stats: ProducerStats::default(),
        failures: Vec::new(),
        elapsed: Duration::ZERO,
    };
    while let Some(joined) = producers.join_next().await {
        match joined.context("producer task")? {
            Ok(mut run) => {
                produced.acked.append(&mut run.acked);
                add_stats(&mut produced.stats, run.stats);
            }
            Err(error) => produced.failures.push(format!("{error:#}")),
        }
    }
    progress.abort();
    produced.elapsed = started.elapsed();
    Ok(produced)
}

/// Prints the report and fails unless exactly-once held.
fn print_report(outcome: &Outcome) -> Result<()> {
    let Outcome {
        total_records,
        produced,
        faults,
        outcomes,
        report,
    } = outcome;
    let acked_count: usize = produced.acked.iter().map(|a| a.records).sum();
    crate::faults::print_injected(faults);
    println!();
    println!("  producers ({:.1} s)", produced.elapsed.as_secs_f64());
    println!("    records sent         {total_records:>8}");
    println!("    acknowledged         {acked_count:>8}");
    println!("    batch resends        {:>8}", produced.stats.retries);
    println!("    reconnects           {:>8}", produced.stats.reconnects);
    println!();
    println!("  broker");
    println!("    records stored       {:>8}", report.records);
    println!("    batches accepted     {:>8}", outcomes.accepted);
    println!(
        "    duplicates caught    {:>8}   retries recognised and not stored again",
        outcomes.duplicate
    );
    println!(
        "    out of order         {:>8}   refused after a lost request; resent in order",
        outcomes.out_of_order
    );
    println!("    fenced               {:>8}", outcomes.fenced_epoch);
    println!();
    for failure in &produced.failures {
        println!("  producer failed: {failure}");
    }
    let held =
        report.passed() && produced.failures.is_empty() && acked_count as u64 == *total_records;
    if held {
        println!(
            "  verdict: EXACTLY-ONCE HELD - all {acked_count} acknowledged records stored exactly once, in order, no gaps"
        );
        Ok(())
    } else {
        println!("  verdict: FAILED");
        println!("{report}");
        bail!("the demo did not show exactly-once delivery")
    }
}

/// One producer's workload: its records in batches, spread over all partitions, five batches
/// per partition at a time.
async fn produce(
    index: usize,
    address: &str,
    config: ProducerConfig,
    records: usize,
    batch_size: usize,
    partitions: u32,
    acked_records: &AtomicU64,
) -> Result<ProducerRun> {
    let mut producer = Producer::connect(address, config).await?;
    let mut acked = Vec::new();
    let all: Vec<NewRecord> = (0..records)
        .map(|i| {
            NewRecord::value(format!("demo-producer{index}-record{i}"))
                .with_key(format!("producer{index}"))
        })
        .collect();
    let batches: Vec<Vec<NewRecord>> = all.chunks(batch_size).map(<[NewRecord]>::to_vec).collect();
    for (round, window) in batches.chunks(WINDOW).enumerate() {
        let partition = (round as u32 + index as u32) % partitions;
        let acks = producer
            .send_batches(TOPIC, partition, window.to_vec())
            .await?;
        let sent: u64 = acks.iter().map(|ack| u64::from(ack.records)).sum();
        acked_records.fetch_add(sent, Ordering::Relaxed);
        acked.extend(acked_batches(
            &producer,
            partition,
            &acks,
            &mut PayloadCursor::new(None),
        ));
    }
    Ok(ProducerRun {
        acked,
        stats: producer.stats(),
    })
}

fn add_stats(total: &mut ProducerStats, run: ProducerStats) {
    total.batches += run.batches;
    total.records += run.records;
    total.retries += run.retries;
    total.duplicates += run.duplicates;
    total.reconnects += run.reconnects;
    total.out_of_order_resent += run.out_of_order_resent;
}

/// A progress line on stderr: redrawn in place on a terminal, a line a second otherwise.
async fn show_progress(acked: Arc<AtomicU64>, total: u64) {
    let terminal = std::io::stderr().is_terminal();
    let period = if terminal {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(1)
    };
    let mut ticker = tokio::time::interval(period);
    loop {
        ticker.tick().await;
        let done = acked.load(Ordering::Relaxed);
        let width = 30;
        let filled = (done * width / total.max(1)) as usize;
        let bar = format!(
            "{}{}",
            "#".repeat(filled),
            ".".repeat(width as usize - filled)
        );
        let line = format!("  producing [{bar}] {done}/{total} records acknowledged");
        let mut stderr = std::io::stderr().lock();
        if terminal {
            let _ = write!(stderr, "\r{line}");
        } else {
            let _ = writeln!(stderr, "{line}");
        }
        let _ = stderr.flush();
    }
}
