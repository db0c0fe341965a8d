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
//!
//! With `--during COMMAND`, the check runs COMMAND (`sh -c`) once a share of the records
//! (`--during-at`, half by default) has been sent, to break something of the user's own in the
//! middle of the run, such as killing a broker; the report says when it ran and how it ended.
//!
//! With `--transactional` each producer is a transactional one: its batches go in transactions
//! of [`BATCHES_PER_TRANSACTION`], every fourth of which it aborts and then writes again in the
//! next, and the topic is also read as a `read_committed` consumer reads it, which must see
//! exactly the committed batches: every record once, none of an aborted transaction.

use anyhow::{Context, Result, bail};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use minibroker_client::NewRecord;
use minibroker_faults::{EmbeddedProxy, FaultConfig};
use minibroker_kafka_client::{
    KafkaConnection, KafkaProducer, KafkaProducerConfig, agree_versions,
};
use minibroker_verify::{AckedBatch, PayloadId};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::acks::PayloadCursor;
use crate::check_clients::{Client, ClientJob};
use crate::check_report::{During, JobRun, Produced, Run};
use crate::faults::{DefaultRates, FaultArgs};
use crate::proxy::KafkaProxyArgs;

/// Flags of `check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Kafka-compatible broker to check (bootstrap host:port), or several brokers of a
    /// cluster, comma-separated: the first that answers is the bootstrap, and its Metadata
    /// leads to the others.
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
    /// Transactional producers: transactions of 10 batches, every fourth aborted and written
    /// again, and the read_committed view checked too.
    #[arg(long)]
    transactional: bool,
    /// Consumers in each reading group (one group reads read_committed; with --transactional
    /// another reads read_uncommitted), reading while the producers write; 0 for none.
    #[arg(long, default_value_t = 2)]
    consumers: usize,
    /// A command of your own (run with `sh -c`) to run once `--during-at` of the records
    /// have been sent: killing or stopping a broker, cutting a link.
    #[arg(long, value_name = "COMMAND")]
    during: Option<String>,
    /// With --during: the share of the records sent when it runs.
    #[arg(long, default_value_t = 0.5, requires = "during", value_name = "SHARE")]
    during_at: f64,
    /// Who writes the records: the project's own producer (every retry known), or a real
    /// client through the project's Python harness (needs --python with it installed).
    #[arg(long, value_enum, default_value_t = Client::Minibroker)]
    client: Client,
    /// With --client: the Python interpreter that has the client (scripts/kafka-clients makes
    /// one).
    #[arg(long, default_value = "python3", value_name = "PATH")]
    python: String,
    /// Print the report as one JSON document (the anomalies with their witnesses, and the
    /// command that replays the run).
    #[arg(long)]
    json: bool,
    /// Fault rates default to 2% lost requests and acks, 1% delays, 0.5% resets, 1% held, 1%
    /// duplicated.
    #[command(flatten)]
    faults: FaultArgs,
}

/// Batches per transaction, with `--transactional`.
const BATCHES_PER_TRANSACTION: usize = 10;

/// Every this many transactions, one is aborted (and its records written again).
const ABORT_EVERY: usize = 4;

/// How many times one transactional producer may be fenced and start again before the check
/// gives up on it: a broker that fences a producer every time it starts is not one to ride out.
const MAX_RESTARTS: usize = 3;

/// How long a freshly created topic may take to show leaders for all its partitions.
const TOPIC_READY_WITHIN: Duration = Duration::from_secs(30);

/// How long one batch may take, retries included, before its producer gives up.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn run(args: Args) -> Result<()> {
    if args.producers == 0 || args.partitions < 1 || args.records == 0 || args.batch_size == 0 {
        bail!("--producers, --partitions, --records and --batch-size must be at least 1");
    }
    if !(0.0..=1.0).contains(&args.during_at) {
        bail!("--during-at is a share of the records, from 0 to 1");
    }
    let topic = args
        .topic
        .clone()
        .unwrap_or_else(|| format!("minibroker-check-{}", minibroker_records::now_millis()));
    let faults = proxy_config(&args)?;
    let aimed = describe_aim(&faults);
    let kafka = first_answering(&args.kafka).await?;
    create_topic(&kafka, &topic, args.partitions).await?;
    let proxy = EmbeddedProxy::start(&kafka, faults.clone()).await?;
    if !args.json {
        println!(
            "minibroker check: {kafka} (topic {topic}, {} partitions), {} producers x {} records, through a faulty network (seed {}, faults aimed at {aimed})",
            args.partitions, args.producers, args.records, faults.seed
        );
        println!("  faults: {faults}");
        println!();
    }
    let sent = Arc::new(AtomicUsize::new(0));
    // With transactions, the read_committed consumers process into a topic of their own.
    let processed = format!("{topic}-processed");
    let processing = args.transactional && args.consumers > 0;
    if processing {
        create_topic(&kafka, &processed, args.partitions).await?;
    }
    let readers = (args.consumers > 0).then(|| {
        let total = args.producers * args.records;
        crate::check_readers::Readers::start(
            &kafka,
            (&topic, processing.then_some(processed.as_str())),
            args.consumers,
            (Arc::clone(&sent), total),
        )
    });
    let produced = run_producers(&args, &proxy.address(), &topic, sent).await;
    let counts = proxy.stop().await?;
    let late = if args.transactional && args.partitions >= 2 {
        let scenario = crate::late_produce_scenario::run(
            &kafka,
            &topic,
            (&format!("{topic}-late-produce"), args.producers as u64),
            producer_config(&args),
        )
        .await
        .context("the scenario of a Produce delayed past its transaction's end")?;
        Some(scenario)
    } else {
        None
    };
    let (committed, aborted) = late.as_ref().map_or((&[][..], &[][..]), |late| {
        (late.committed.as_slice(), late.aborted.as_slice())
    });
    let expected = [produced.acked.as_slice(), committed].concat();
    // Read back from the broker itself, not through the faulty network.
    let reads = minibroker_verify::read_topic_isolated(&kafka, &topic, args.transactional)
        .await
        .with_context(|| format!("reading {topic} back from {kafka}"))?;
    let mut report = minibroker_verify::judge_reads(&topic, &reads, Some(&expected), aborted);
    let consumed = match readers {
        Some(readers) => {
            let run = readers
                .finish(minibroker_verify::partition_ends(&reads))
                .await;
            minibroker_verify::check_consumers(&reads, &run.groups, &expected, &mut report);
            if processing {
                let output = minibroker_verify::read_topic_isolated(&kafka, &processed, true)
                    .await
                    .with_context(|| format!("reading {processed} back from {kafka}"))?;
                let complete = run.groups.first().is_some_and(|group| group.caught_up);
                minibroker_verify::check_pipeline(
                    &reads,
                    &output,
                    (&expected, complete),
                    &mut report,
                );
            }
            Some(run)
        }
        None => None,
    };
    crate::check_report::print(
        &Run {
            kafka: &args.kafka,
            topic: &topic,
            sent: (args.producers * args.records) as u64,
            transactional: args.transactional,
            seed: faults.seed,
            replay: crate::check_report::replay_command(faults.seed),
            produced: &produced,
            faults: &counts,
            late: late.as_ref(),
            consumed: consumed.as_ref(),
            report: &report,
        },
        args.json,
    )
}

/// The producers' settings, from the flags.
fn producer_config(args: &Args) -> KafkaProducerConfig {
    KafkaProducerConfig {
        request_timeout: Duration::from_millis(args.timeout_ms),
        delivery_timeout: DELIVERY_TIMEOUT,
        ..KafkaProducerConfig::default()
    }
}

/// The first of the comma-separated `bootstrap` addresses that takes a connection.
async fn first_answering(bootstrap: &str) -> Result<String> {
    let mut last = None;
    for address in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        match tokio::net::TcpStream::connect(address).await {
            Ok(_) => return Ok(address.to_owned()),
            Err(error) => last = Some(format!("{address}: {error}")),
        }
    }
    bail!(
        "cannot reach any Kafka broker of {bootstrap:?}{}",
        last.map(|why| format!(" (last: {why})"))
            .unwrap_or_default()
    )
}

/// The proxy's settings: the fault flags (with `check`'s default rates), Kafka-aware, aimed.
fn proxy_config(args: &Args) -> Result<FaultConfig> {
    let faults = args.faults.config(DefaultRates::CHECK)?;
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
async fn run_producers(args: &Args, proxy: &str, topic: &str, sent: Arc<AtomicUsize>) -> Produced {
    let started = Instant::now();
    let total = args.producers * args.records;
    let hook = args.during.clone().map(|command| {
        // Rounded down, so a share of 1 is every record.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let due_after = (total as f64 * args.during_at) as usize;
        let task = tokio::spawn(run_during(
            command.clone(),
            due_after,
            Arc::clone(&sent),
            started,
        ));
        (command, due_after, task)
    });
    let mut producers = tokio::task::JoinSet::new();
    for index in 0..args.producers {
        let transactional_id = args
            .transactional
            .then(|| format!("{topic}-producer-{index}"));
        if args.client == Client::Minibroker {
            let job = Job {
                transactional_id,
                address: proxy.to_owned(),
                topic: topic.to_owned(),
                records: args.records,
                batch_size: args.batch_size,
                partitions: args.partitions,
                index,
                sent: Arc::clone(&sent),
                config: producer_config(args),
            };
            producers.spawn(job.run());
        } else {
            let job = ClientJob {
                client: args.client,
                python: args.python.clone(),
                address: proxy.to_owned(),
                topic: topic.to_owned(),
                index,
                records: args.records,
                batch_size: args.batch_size,
                partitions: args.partitions,
                transactional_id,
                sent: Arc::clone(&sent),
            };
            producers.spawn(job.run());
        }
    }
    let mut produced = Produced {
        client: (args.client != Client::Minibroker).then(|| args.client.name().to_owned()),
        ..Produced::default()
    };
    while let Some(joined) = producers.join_next().await {
        let mut run = joined.unwrap_or_else(|error| JobRun {
            failure: Some(error.to_string()),
            ..JobRun::default()
        });
        produced.acked.append(&mut run.acked);
        produced.stats += run.stats;
        produced.failures.extend(run.failure);
        produced.committed += run.committed;
        produced.aborted += run.aborted;
        produced.part_2 += usize::from(run.part_2);
        produced.restarts += run.restarts;
    }
    produced.elapsed = started.elapsed();
    if let Some((command, due_after, task)) = hook {
        // Due at the very end, it still runs; due past it, it never does.
        let ran = if sent.load(Ordering::Acquire) >= due_after {
            task.await.ok()
        } else {
            task.abort();
            None
        };
        produced.during = Some(During {
            command,
            due_after,
            ran,
        });
    }
    produced
}

/// `--during`'s command: run with `sh -c` once `due_after` records have been `sent`; when it
/// ran, the records sent then, and how it ended.
async fn run_during(
    command: String,
    due_after: usize,
    sent: Arc<AtomicUsize>,
    started: Instant,
) -> (Duration, usize, String) {
    while sent.load(Ordering::Acquire) < due_after {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let at = started.elapsed();
    let sent_then = sent.load(Ordering::Acquire);
    let status = tokio::task::spawn_blocking(move || {
        std::process::Command::new("sh")
            .args(["-c", &command])
            .status()
    })
    .await;
    let status = match status {
        Ok(Ok(status)) => status.to_string(),
        Ok(Err(error)) => format!("did not start: {error}"),
        Err(error) => format!("did not finish: {error}"),
    };
    (at, sent_then, status)
}

/// One producer's share of the work.
struct Job {
    /// For a transactional producer, its id.
    transactional_id: Option<String>,
    address: String,
    topic: String,
    records: usize,
    batch_size: usize,
    partitions: i32,
    /// Its place among the producers, from 0: it starts on that partition (so producers meet
    /// on each), and its records are named by it.
    index: usize,
    /// Records sent by every producer so far (for `--during`).
    sent: Arc<AtomicUsize>,
    config: KafkaProducerConfig,
}

impl Job {
    /// Sends the records, batch after batch, round-robin over the partitions (in transactions,
    /// for a transactional producer); returns what was acknowledged — of committed
    /// transactions only — and, if it stopped early, why.
    async fn run(self) -> JobRun {
        let mut run = JobRun::default();
        let mut producer = match self.start().await {
            Ok(producer) => producer,
            Err(error) => {
                run.failure = Some(format!("cannot start a producer: {error}"));
                return run;
            }
        };
        // Named by the producer's place, not its producer id, so a replay names the same
        // records.
        let first = PayloadId::first(self.index as u64, 0);
        let mut progress = Progress {
            sent: 0,
            batch_number: self.index,
            payloads: PayloadCursor::new(Some(first)),
        };
        while progress.sent < self.records {
            let before = progress;
            let transactional = self.transactional_id.is_some();
            let abort =
                transactional && (run.committed + run.aborted) % ABORT_EVERY == ABORT_EVERY - 1;
            // An idempotent producer's acknowledgements count at once; a transaction's only once
            // it has committed.
            let mut transaction = Vec::new();
            let acked = if transactional {
                &mut transaction
            } else {
                &mut run.acked
            };
            let round = self.round(&mut producer, &mut progress, abort, acked).await;
            self.sent
                .fetch_add(progress.sent.saturating_sub(before.sent), Ordering::AcqRel);
            match round {
                Ok(()) if abort => {
                    // Nothing of it is shown to a read_committed consumer: write it again.
                    run.aborted += 1;
                    progress = Progress {
                        batch_number: progress.batch_number,
                        ..before
                    };
                }
                Ok(()) => {
                    run.committed += usize::from(transactional);
                    run.acked.append(&mut transaction);
                }
                // A delayed InitProducerId of this very producer reached the broker after the
                // one it answered, and fenced it, as it must: a broker cannot tell a late copy
                // from a new instance. The application starts again, as one does when fenced;
                // the new instance's InitProducerId aborts the open transaction, whose records
                // are written again.
                Err(error) if transactional && error.is_fenced() && run.restarts < MAX_RESTARTS => {
                    run.restarts += 1;
                    run.stats += producer.stats();
                    producer = match self.start().await {
                        Ok(producer) => producer,
                        Err(error) => {
                            run.failure = Some(format!("cannot start a producer again: {error}"));
                            return run;
                        }
                    };
                    progress = Progress {
                        batch_number: progress.batch_number,
                        ..before
                    };
                }
                Err(error) => {
                    run.failure = Some(format!("producer {}: {error}", producer.producer_id()));
                    break;
                }
            }
        }
        run.stats += producer.stats();
        run.part_2 = producer.uses_part_2();
        run
    }

    /// A producer, transactional if the job is.
    async fn start(&self) -> Result<KafkaProducer, minibroker_kafka_client::KafkaProduceError> {
        match &self.transactional_id {
            Some(id) => KafkaProducer::connect_transactional(&self.address, self.config, id).await,
            None => KafkaProducer::connect(&self.address, self.config).await,
        }
    }

    /// The next batches: for a transactional producer one transaction of them, ended by a
    /// commit or, if `abort`, an abort; otherwise all that are left. Each acknowledgement is
    /// added to `acked` as it comes.
    async fn round(
        &self,
        producer: &mut KafkaProducer,
        progress: &mut Progress,
        abort: bool,
        acked: &mut Vec<AckedBatch>,
    ) -> Result<(), minibroker_kafka_client::KafkaProduceError> {
        let transactional = self.transactional_id.is_some();
        let batches = if transactional {
            producer.begin()?;
            BATCHES_PER_TRANSACTION
        } else {
            usize::MAX
        };
        for _ in 0..batches {
            if progress.sent >= self.records {
                break;
            }
            let size = self.batch_size.min(self.records - progress.sent);
            let first = progress
                .payloads
                .next_id()
                .expect("the check's records carry payload ids");
            let batch: Vec<NewRecord> = (0..size)
                .map(|i| NewRecord::value(first.after(i as u64).to_string()))
                .collect();
            let partition = (progress.batch_number % self.partitions as usize) as i32;
            let ack = producer.send(&self.topic, partition, &batch).await?;
            acked.push(crate::acks::kafka_acked(
                producer,
                &ack,
                &mut progress.payloads,
            ));
            progress.sent += size;
            progress.batch_number += 1;
        }
        match (transactional, abort) {
            (true, true) => producer.abort().await?,
            (true, false) => producer.commit().await?,
            (false, _) => {}
        }
        Ok(())
    }
}

/// Where a producer is in its records.
#[derive(Debug, Clone, Copy)]
struct Progress {
    /// Records acknowledged (of committed transactions, for a transactional producer).
    sent: usize,
    /// Batches sent: batch `n` goes to partition `n % partitions`.
    batch_number: usize,
    /// The next batch's payload ids.
    payloads: PayloadCursor,
}
