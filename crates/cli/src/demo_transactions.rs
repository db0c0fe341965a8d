//! `minibroker demo --transactions`: exactly-once end to end, through a consume-transform-produce
//! pipeline, a faulty network and two crashes.
//!
//! A durable broker runs as a child process (so it can be killed for real), an idempotent
//! producer fills the input topic, and a transactional processor (`crate::pipeline`) reads it
//! through the fault proxy, writing each record transformed to the output topic with its input
//! offsets committed in the same transaction. Part way, the processor is killed in the middle of a
//! transaction and a new one takes over with the same transactional id; later the broker is
//! SIGKILLed in the middle of another transaction and restarted on its data directory. At the end
//! the output is read as a `read_committed` consumer reads it: every input record must be there
//! exactly once, the group's offsets at the input's end, and the verifier must find the output's
//! `read_committed` view to be exactly its committed transactions.

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use minibroker_client::{Client, ClientConfig, NewRecord, Producer, ProducerConfig};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::faults::{DefaultRates, FaultArgs};
use crate::pipeline::{MidTransaction, PipelineConfig, PipelineStats, Processor};

const INPUT: &str = "pipeline-in";
const OUTPUT: &str = "pipeline-out";
const GROUP: &str = "pipeline";
const TRANSACTIONAL_ID: &str = "pipeline-processor";

/// What `demo --transactions` is given.
pub struct Settings {
    /// Partitions of the input and output topics.
    pub partitions: u32,
    /// Input records.
    pub records: usize,
    /// Input records per transaction.
    pub per_transaction: usize,
    /// A request is sent again after this long without an answer.
    pub timeout_ms: u64,
}

/// A `minibroker serve` child process on fixed addresses and a data directory.
struct BrokerProcess {
    child: Child,
    native: String,
    kafka: String,
    data_dir: PathBuf,
}

impl BrokerProcess {
    fn start(native: &str, kafka: &str, data_dir: &Path, partitions: u32) -> Result<Self> {
        let exe = std::env::current_exe().context("cannot find this program to run the broker")?;
        let mut child = Command::new(exe)
            .args(["serve", "--listen", native, "--kafka-listen", kafka])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--flush", "always", "--partitions", &partitions.to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start the broker")?;
        let stdout = child.stdout.take().context("the broker's output")?;
        let mut lines = BufReader::new(stdout).lines();
        // It prints one line per listener once it is bound.
        for _ in 0..2 {
            match lines.next() {
                Some(Ok(_)) => {}
                _ => bail!("the broker did not start (is {native} or {kafka} in use?)"),
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Self {
            child,
            native: native.to_owned(),
            kafka: kafka.to_owned(),
            data_dir: data_dir.to_owned(),
        })
    }

    /// SIGKILL: no drain, no sync, no snapshot.
    fn kill(mut self) -> Result<()> {
        self.child.kill().context("killing the broker")?;
        self.child.wait().context("reaping the broker")?;
        Ok(())
    }

    fn restart(self, partitions: u32) -> Result<Self> {
        let (native, kafka, data_dir) = (
            self.native.clone(),
            self.kafka.clone(),
            self.data_dir.clone(),
        );
        self.kill()?;
        Self::start(&native, &kafka, &data_dir, partitions)
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback address nothing listens on right now.
fn free_address() -> Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

fn input_value(index: usize) -> Bytes {
    Bytes::from(format!("record-{index}"))
}

/// Fills the input: `records` values over every partition, idempotently, over the native
/// protocol; creates the output. Returns each input partition's end offset.
async fn fill_input(broker: &BrokerProcess, settings: &Settings) -> Result<Vec<i64>> {
    let client = Client::connect(&broker.native, ClientConfig::default()).await?;
    client.create_topic(INPUT, settings.partitions).await?;
    client.create_topic(OUTPUT, settings.partitions).await?;
    let mut producer = Producer::connect(&broker.native, ProducerConfig::default()).await?;
    let mut by_partition = vec![Vec::new(); settings.partitions as usize];
    for index in 0..settings.records {
        by_partition[index % settings.partitions as usize]
            .push(NewRecord::value(input_value(index)));
    }
    for (partition, records) in by_partition.into_iter().enumerate() {
        let batches: Vec<Vec<NewRecord>> = records.chunks(20).map(<[NewRecord]>::to_vec).collect();
        for window in batches.chunks(5) {
            producer
                .send_batches(INPUT, partition as u32, window.to_vec())
                .await?;
        }
    }
    let described = client.describe_topic(INPUT).await?;
    Ok(described
        .partitions
        .iter()
        .map(|p| p.log_end_offset)
        .collect())
}

/// How the run went, for the report.
struct Crashes {
    processor_killed_with: u64,
    broker_killed_with: u64,
}

pub async fn run(settings: Settings, faults: &FaultArgs) -> Result<()> {
    if settings.partitions == 0 || settings.records == 0 || settings.per_transaction == 0 {
        bail!("--partitions, --records and --per-transaction must be at least 1");
    }
    // Held requests are left out: a request held past its connection's life is a retry no TCP
    // connection could deliver, and it would replay an older transaction's offsets.
    let faults = faults.config(DefaultRates {
        drop: 0.02,
        delay: 0.01,
        reset: 0.005,
        hold: 0.0,
        duplicate: 0.0,
    })?;
    let seed = faults.seed;
    let data_dir = std::env::temp_dir().join(format!("minibroker-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let broker = BrokerProcess::start(
        &free_address()?,
        &free_address()?,
        &data_dir,
        settings.partitions,
    )?;
    let result = run_with(broker, &settings, faults, seed).await;
    let _ = std::fs::remove_dir_all(&data_dir);
    result
}

async fn run_with(
    broker: BrokerProcess,
    settings: &Settings,
    faults: minibroker_faults::FaultConfig,
    seed: u64,
) -> Result<()> {
    let started = Instant::now();
    let ends = fill_input(&broker, settings).await?;
    let proxy = minibroker_faults::EmbeddedProxy::start(&broker.kafka, faults).await?;
    println!(
        "minibroker demo --transactions: {} records over {} partitions, {} per transaction, through a faulty network (seed {seed})",
        settings.records, settings.partitions, settings.per_transaction
    );
    println!(
        "  broker (a child process, data in {}) on {}, flaky network on {}",
        broker.data_dir.display(),
        broker.kafka,
        proxy.addr
    );
    println!();
    let config = PipelineConfig {
        addr: proxy.address(),
        transactional_id: TRANSACTIONAL_ID.into(),
        group: GROUP.into(),
        input: INPUT.into(),
        output: OUTPUT.into(),
        partitions: settings.partitions,
        per_transaction: settings.per_transaction,
        answer_timeout: Duration::from_millis(settings.timeout_ms),
    };
    let stats = Arc::new(PipelineStats::default());
    let total_transactions = settings.records.div_ceil(settings.per_transaction) as u64;
    let (broker, crashes) =
        crash_twice(broker, settings, &config, &stats, &ends, total_transactions).await?;
    let faults = proxy.stop().await?;

    // Read back from the broker itself, not through the faulty network.
    let values: Vec<Bytes> = minibroker_verify::read_committed_values(&broker.kafka, OUTPUT)
        .await?
        .into_iter()
        .map(|(_, value)| value)
        .collect();
    let expected: Vec<Bytes> = (0..settings.records)
        .map(|i| Bytes::from(input_value(i).to_ascii_uppercase()))
        .collect();
    let content = crate::pipeline::exactly_once(&values, &expected);
    let committed = committed_offsets(&broker, settings.partitions).await?;
    let report =
        minibroker_verify::verify_kafka_read_committed(&broker.kafka, OUTPUT, None, &[]).await?;
    let summary = report.transactions.unwrap_or_default();

    println!("  network faults injected");
    println!("    requests lost        {:>8}", faults.requests_dropped);
    println!("    answers lost         {:>8}", faults.responses_dropped);
    println!("    frames delayed       {:>8}", faults.delayed);
    println!("    connection resets    {:>8}", faults.resets);
    println!();
    println!("  crashes");
    println!(
        "    processor killed mid-transaction, {} records written in it; a new instance took over",
        crashes.processor_killed_with
    );
    println!(
        "    broker SIGKILLed mid-transaction, {} records written in it; restarted on its data",
        crashes.broker_killed_with
    );
    println!();
    println!("  pipeline ({:.1} s)", started.elapsed().as_secs_f64());
    println!(
        "    transactions committed {:>6}",
        stats.transactions.load(Ordering::Relaxed)
    );
    println!(
        "    requests sent again    {:>6}",
        stats.retries.load(Ordering::Relaxed)
    );
    println!(
        "    instances restarted    {:>6}",
        stats.restarts.load(Ordering::Relaxed)
    );
    println!(
        "    output batches         {:>6}   committed {}, aborted {} (the crashed transactions), open {}",
        summary.committed + summary.aborted + summary.open,
        summary.committed,
        summary.aborted,
        summary.open
    );
    println!("    input offsets committed {committed:?}, input ends {ends:?}");
    println!();
    let held = content.is_ok() && committed == ends && report.passed() && summary.open == 0;
    if held {
        println!(
            "  verdict: EXACTLY-ONCE HELD - each of the {} input records is in the output once, read_committed, and the input offsets are at the end",
            settings.records
        );
        return Ok(());
    }
    println!("  verdict: FAILED");
    if let Err(problem) = content {
        println!("    output: {problem}");
    }
    println!("{report}");
    bail!("the demo did not show exactly-once processing")
}

/// Runs the processor through both crashes and on to the end; returns the broker running then.
async fn crash_twice(
    broker: BrokerProcess,
    settings: &Settings,
    config: &PipelineConfig,
    stats: &Arc<PipelineStats>,
    ends: &[i64],
    total_transactions: u64,
) -> Result<(BrokerProcess, Crashes)> {
    let (stop, mut reached) = MidTransaction::new();
    let spawn = |stop: Arc<MidTransaction>| {
        let (config, stats, ends) = (config.clone(), Arc::clone(stats), ends.to_vec());
        tokio::spawn(async move { Processor::new(config, stats).run(&ends, &stop).await })
    };
    let wait_for = |count: u64| async move {
        while stats.transactions.load(Ordering::Relaxed) < count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let deadline = Duration::from_secs(120);

    // First crash: the processor, in the middle of a transaction.
    let first = spawn(Arc::clone(&stop));
    tokio::time::timeout(deadline, wait_for(total_transactions / 4))
        .await
        .context("the processor made no progress")?;
    stop.ask();
    let processor_killed_with = reached.recv().await.context("the processor stopped")?;
    first.abort();
    let _ = first.await;
    // The takeover: a new instance in its place.
    stats.restarts.fetch_add(1, Ordering::Relaxed);

    // Second crash: the broker, while the new instance is in the middle of a transaction.
    let (stop, mut reached) = MidTransaction::new();
    let second = spawn(Arc::clone(&stop));
    tokio::time::timeout(deadline, wait_for(total_transactions / 2))
        .await
        .context("the new processor made no progress")?;
    stop.ask();
    let broker_killed_with = reached.recv().await.context("the processor stopped")?;
    let broker = broker.restart(settings.partitions)?;
    stop.release();
    tokio::time::timeout(deadline, second)
        .await
        .context("the processor did not finish")?
        .context("the processor task")??;
    Ok((
        broker,
        Crashes {
            processor_killed_with,
            broker_killed_with,
        },
    ))
}

/// The group's committed input offsets, read stable from the broker.
async fn committed_offsets(broker: &BrokerProcess, partitions: u32) -> Result<Vec<i64>> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{
        ApiKey, GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let mut conn = minibroker_kafka_client::KafkaConnection::connect(&broker.kafka).await?;
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
        .with_require_stable(true)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(INPUT)))
                .with_partition_indexes((0..partitions as i32).collect()),
        ]));
    let answer: OffsetFetchResponse = conn.call(ApiKey::OffsetFetch, 7, &request).await?;
    Ok(answer
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.committed_offset)
        .collect())
}
