//! `minibroker check --kafka BOOTSTRAP`: whether any Kafka-compatible broker keeps exactly-once
//! under a bad network, in one command.
//!
//! It creates a fresh topic, starts a Kafka-aware fault proxy in this process in front of the
//! broker (so every broker address the cluster hands out leads back through it), runs idempotent
//! Kafka producers through the proxy — each record's value its payload id — then reads the topic
//! back from the broker directly, not through the proxy, and checks it with the verifier against
//! every acknowledgement: no record stored twice, none acknowledged and missing, no sequence
//! gaps. It prints what the network did and what the broker kept, and exits non-zero unless
//! exactly-once held.

use anyhow::{Context, Result, bail};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use minibroker_client::NewRecord;
use minibroker_faults::{EmbeddedProxy, FaultConfig, FaultCounts};
use minibroker_kafka_client::{
    KafkaConnection, KafkaProducer, KafkaProducerConfig, KafkaProducerStats, agree_versions,
};
use minibroker_verify::{AckedBatch, PayloadId, Report};
use std::time::{Duration, Instant};

use crate::acks::PayloadCursor;
use crate::faults::{DefaultRates, FaultArgs};
use crate::proxy::KafkaProxyArgs;

/// Flags of `check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Kafka-compatible broker to check (bootstrap host:port); any broker of a cluster.
    #[arg(long)]
    kafka: String,
    /// Concurrent idempotent producers.
    #[arg(long, default_value_t = 4)]
    producers: usize,
    /// Records each producer sends.
    #[arg(long, default_value_t = 500)]
    records: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 5)]
    batch_size: usize,
    /// Partitions of the topic created for the check; each producer writes to all of them.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// The topic to create (default: minibroker-check-<milliseconds since the epoch>).
    #[arg(long)]
    topic: Option<String>,
    /// The longest a producer waits for an answer before resending (it waits less once it
    /// knows the round trip: four times it, at least 100 ms).
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
    /// The Kafka APIs faults are aimed at: produce (the default) or a list such as
    /// produce,metadata; `all` for every API.
    #[arg(
        long,
        value_name = "API,...",
        value_delimiter = ',',
        default_value = "produce"
    )]
    api: Vec<String>,
    /// Fault rates default to 2% lost requests and acks, 1% delays, 0.5% resets, 1% held.
    #[command(flatten)]
    faults: FaultArgs,
}

/// How long a freshly created topic may take to show leaders for all its partitions.
const TOPIC_READY_WITHIN: Duration = Duration::from_secs(30);

/// How long one batch may take, retries included, before its producer gives up.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// What the producers did together.
#[derive(Default)]
struct Produced {
    acked: Vec<AckedBatch>,
    stats: KafkaProducerStats,
    failures: Vec<String>,
    elapsed: Duration,
}

pub async fn run(args: Args) -> Result<()> {
    if args.producers == 0 || args.partitions < 1 || args.records == 0 || args.batch_size == 0 {
        bail!("--producers, --partitions, --records and --batch-size must be at least 1");
    }
    let topic = args
        .topic
        .clone()
        .unwrap_or_else(|| format!("minibroker-check-{}", minibroker_records::now_millis()));
    let faults = proxy_config(&args)?;
    let aimed = describe_aim(&faults);
    create_topic(&args.kafka, &topic, args.partitions).await?;
    let proxy = EmbeddedProxy::start(&args.kafka, faults.clone()).await?;
    println!(
        "minibroker check: {} (topic {topic}, {} partitions), {} producers x {} records, through a faulty network (seed {}, faults aimed at {aimed})",
        args.kafka, args.partitions, args.producers, args.records, faults.seed
    );
    println!("  faults: {faults}");
    println!();
    let produced = run_producers(&args, &proxy.address(), &topic).await;
    let counts = proxy.stop().await?;
    // Read back from the broker itself, not through the faulty network.
    let report = minibroker_verify::verify_kafka(&args.kafka, &topic, Some(&produced.acked))
        .await
        .with_context(|| format!("reading {topic} back from {}", args.kafka))?;
    print_report(&args, &produced, &counts, &report)
}

/// The proxy's settings: the fault flags (with `check`'s default rates), Kafka-aware, aimed.
fn proxy_config(args: &Args) -> Result<FaultConfig> {
    let faults = args.faults.config(DefaultRates {
        drop: 0.02,
        delay: 0.01,
        reset: 0.005,
        hold: 0.01,
    })?;
    let apis: Vec<String> = if args.api.iter().any(|a| a.eq_ignore_ascii_case("all")) {
        Vec::new()
    } else {
        args.api.clone()
    };
    KafkaProxyArgs::new(apis).config(faults)
}

fn describe_aim(faults: &FaultConfig) -> String {
    match &faults.kafka {
        Some(kafka) if !kafka.apis.is_empty() => kafka
            .apis
            .iter()
            .map(|&api| minibroker_faults::kafka::api_name(api))
            .collect::<Vec<_>>()
            .join(","),
        _ => "every API".to_owned(),
    }
}

/// Creates `topic` with `partitions` partitions on the broker at `bootstrap` (the cluster's
/// default replication where the broker lets it be asked for) and waits for its leaders.
async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<()> {
    let mut conn = KafkaConnection::connect(bootstrap)
        .await
        .with_context(|| format!("cannot reach the Kafka broker at {bootstrap}"))?
        .with_client_id("minibroker-check");
    let versions = agree_versions(&mut conn, &[(ApiKey::CreateTopics, 2, 7)]).await?;
    let version = versions[&ApiKey::CreateTopics];
    // From version 4 the broker's default replication factor can be asked for.
    let replication = if version >= 4 { -1 } else { 1 };
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_num_partitions(partitions)
                .with_replication_factor(replication),
        ]);
    let answer: CreateTopicsResponse = conn.call(ApiKey::CreateTopics, version, &request).await?;
    let code = answer.topics.first().map_or(0, |t| t.error_code);
    if code != 0 {
        bail!(
            "cannot create topic {topic}: the broker answered {}",
            minibroker_kafka_client::error_name(code)
        );
    }
    // A producer that knows the partitions' leaders before the faults start.
    let mut producer = KafkaProducer::connect(bootstrap, KafkaProducerConfig::default()).await?;
    let started = Instant::now();
    loop {
        match producer.partitions(topic).await {
            Ok(found) if found.len() == partitions as usize => return Ok(()),
            Ok(_) | Err(_) if started.elapsed() < TOPIC_READY_WITHIN => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(found) => bail!(
                "topic {topic} shows {} of its {partitions} partitions after {TOPIC_READY_WITHIN:?}",
                found.len()
            ),
            Err(error) => return Err(error).context(format!("topic {topic} never became ready")),
        }
    }
}

/// Runs every producer through `proxy` at once.
async fn run_producers(args: &Args, proxy: &str, topic: &str) -> Produced {
    let started = Instant::now();
    let mut producers = tokio::task::JoinSet::new();
    for index in 0..args.producers {
        let job = Job {
            address: proxy.to_owned(),
            topic: topic.to_owned(),
            records: args.records,
            batch_size: args.batch_size,
            partitions: args.partitions,
            first_partition: index,
            config: KafkaProducerConfig {
                request_timeout: Duration::from_millis(args.timeout_ms),
                delivery_timeout: DELIVERY_TIMEOUT,
            },
        };
        producers.spawn(job.run());
    }
    let mut produced = Produced::default();
    while let Some(joined) = producers.join_next().await {
        let (mut acked, stats, failure) = match joined {
            Ok(run) => run,
            Err(error) => (
                Vec::new(),
                KafkaProducerStats::default(),
                Some(error.to_string()),
            ),
        };
        produced.acked.append(&mut acked);
        produced.stats.batches += stats.batches;
        produced.stats.records += stats.records;
        produced.stats.retries += stats.retries;
        produced.stats.duplicates += stats.duplicates;
        produced.failures.extend(failure);
    }
    produced.elapsed = started.elapsed();
    produced
}

/// One producer's share of the work.
struct Job {
    address: String,
    topic: String,
    records: usize,
    batch_size: usize,
    partitions: i32,
    /// Producers start on different partitions, so they meet on each.
    first_partition: usize,
    config: KafkaProducerConfig,
}

impl Job {
    /// Sends the records, batch after batch, round-robin over the partitions; returns what was
    /// acknowledged, the producer's counters and, if it stopped early, why.
    async fn run(self) -> (Vec<AckedBatch>, KafkaProducerStats, Option<String>) {
        let mut producer = match KafkaProducer::connect(&self.address, self.config).await {
            Ok(producer) => producer,
            Err(error) => {
                let why = format!("cannot start a producer: {error}");
                return (Vec::new(), KafkaProducerStats::default(), Some(why));
            }
        };
        let first = PayloadId::first(producer.producer_id().unsigned_abs(), 0);
        let mut payloads = PayloadCursor::new(Some(first));
        let mut acked = Vec::new();
        let mut sent = 0;
        let mut batch_number = self.first_partition;
        while sent < self.records {
            let size = self.batch_size.min(self.records - sent);
            let batch: Vec<NewRecord> = (sent..sent + size)
                .map(|i| NewRecord::value(first.after(i as u64).to_string()))
                .collect();
            let partition = (batch_number % self.partitions as usize) as i32;
            match producer.send(&self.topic, partition, &batch).await {
                Ok(ack) => {
                    let identity = (
                        partition.unsigned_abs(),
                        producer.producer_id(),
                        producer.epoch(),
                        ack.sequence,
                        ack.base_offset,
                    );
                    acked.push(payloads.acked(identity, ack.records));
                }
                Err(error) => {
                    let why = format!("producer {}: {error}", producer.producer_id());
                    return (acked, producer.stats(), Some(why));
                }
            }
            sent += size;
            batch_number += 1;
        }
        (acked, producer.stats(), None)
    }
}

/// Prints the report; fails unless exactly-once held and every record was acknowledged.
fn print_report(
    args: &Args,
    produced: &Produced,
    faults: &FaultCounts,
    report: &Report,
) -> Result<()> {
    let sent = (args.producers * args.records) as u64;
    let acked: usize = produced.acked.iter().map(|a| a.records).sum();
    crate::faults::print_injected(faults);
    println!();
    println!("  producers ({:.1} s)", produced.elapsed.as_secs_f64());
    println!("    records sent         {sent:>8}");
    println!("    acknowledged         {acked:>8}");
    println!(
        "    batch resends        {:>8}   the same bytes, after a lost answer or a retriable error",
        produced.stats.retries
    );
    if produced.stats.duplicates > 0 {
        println!(
            "    answered DUPLICATE   {:>8}   resends the broker recognised as stored",
            produced.stats.duplicates
        );
    }
    println!();
    println!("  broker (read back directly)");
    println!("    records stored       {:>8}", report.records);
    println!("    batches stored       {:>8}", report.batches);
    println!(
        "    records checked      {:>8}   by payload id: each stored once, every acknowledged one present",
        report.payloads
    );
    println!();
    for failure in &produced.failures {
        println!("  producer stopped: {failure}");
    }
    if !report.passed() {
        println!("  verdict: FAILED - exactly-once was violated");
        println!("{report}");
        bail!("exactly-once violated on {}", args.kafka);
    }
    if !produced.failures.is_empty() || acked as u64 != sent {
        println!(
            "  verdict: INCOMPLETE - no violation in what was acknowledged, but only {acked} of {sent} records were"
        );
        bail!("the check could not deliver every record");
    }
    println!(
        "  verdict: EXACTLY-ONCE HELD - all {acked} acknowledged records stored exactly once, in order, no gaps"
    );
    Ok(())
}
