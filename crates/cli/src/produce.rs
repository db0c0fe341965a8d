//! `minibroker produce`: stdin (one record per line) or generated records, through an idempotent
//! producer — ours over the native protocol, or over the Kafka protocol to any Kafka-compatible
//! broker — optionally writing what was acknowledged for `verify --expect`.

use anyhow::{Context, Result, bail};
use minibroker_client::{ClientConfig, NewRecord, Producer, ProducerConfig};
use minibroker_kafka_client::{KafkaProducer, KafkaProducerConfig};
use minibroker_verify::{AckedBatch, PayloadId};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use crate::acks::{PayloadCursor, acked_batches, kafka_acked};

/// Flags of `produce`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("destination").required(true).args(["broker", "kafka"]))]
pub struct Args {
    /// The broker, over the native protocol (host:port).
    #[arg(long)]
    broker: Option<String>,
    /// A Kafka-compatible broker (bootstrap host:port), over the Kafka protocol: our
    /// idempotent Kafka producer, which learns the partition's leader from Metadata.
    #[arg(long, conflicts_with = "producer_id")]
    kafka: Option<String>,
    /// With --kafka, produce in transactions as this transactional id (fencing any older
    /// producer of it): each round of 64 batches is one transaction, committed before the
    /// next, and the acks file holds committed batches only.
    #[arg(long, value_name = "ID", requires = "kafka")]
    transactional_id: Option<String>,
    /// Topic name.
    #[arg(long)]
    topic: String,
    /// Partition.
    #[arg(long, default_value_t = 0)]
    partition: u32,
    /// Records per batch (one sequence number each).
    #[arg(long, default_value_t = 1)]
    batch_size: usize,
    /// Split each input line at the first SEP into a key and a value (a line without SEP has
    /// no key).
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Resume as a new instance of this producer id (bumps its epoch, fencing older instances;
    /// native protocol only).
    #[arg(long)]
    producer_id: Option<i64>,
    /// Generate this many records instead of reading stdin; record i's value is its payload id,
    /// p<producer id>-<i> (p<producer id>.<epoch>-<i> for a resumed producer).
    #[arg(long)]
    count: Option<usize>,
    /// Write each acknowledged batch as a JSON line to this file (for `verify --expect`).
    #[arg(long)]
    acks: Option<PathBuf>,
    /// Resend a batch after this long without an answer.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
}

/// Batches handed to the producer at a time; the native one keeps up to five of them in flight.
const BATCHES_PER_ROUND: usize = 64;

/// How long a Kafka batch may take, retries included, before `produce` gives up.
const KAFKA_DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// An idempotent producer of either protocol.
enum Destination {
    Native(Box<Producer>),
    Kafka(Box<KafkaProducer>),
}

/// What a producer reports at the end.
struct Summary {
    records: u64,
    batches: u64,
    retries: u64,
    duplicates: u64,
}

impl Destination {
    async fn open(args: &Args) -> Result<Self> {
        let timeout = Duration::from_millis(args.timeout_ms);
        if let Some(kafka) = &args.kafka {
            let config = KafkaProducerConfig {
                request_timeout: timeout,
                delivery_timeout: KAFKA_DELIVERY_TIMEOUT,
                ..KafkaProducerConfig::default()
            };
            let producer = match &args.transactional_id {
                Some(id) => KafkaProducer::connect_transactional(kafka, config, id).await?,
                None => KafkaProducer::connect(kafka, config).await?,
            };
            return Ok(Self::Kafka(Box::new(producer)));
        }
        let Some(broker) = &args.broker else {
            bail!("give --broker or --kafka");
        };
        let config = ProducerConfig {
            client: ClientConfig {
                request_timeout: timeout,
                ..crate::connect::client_config(broker)?
            },
            ..ProducerConfig::default()
        };
        let producer = match args.producer_id {
            Some(id) => Producer::resume(broker, id, config).await?,
            None => Producer::connect(broker, config).await?,
        };
        Ok(Self::Native(Box::new(producer)))
    }

    fn identity(&self) -> (i64, i16) {
        match self {
            Self::Native(p) => (p.producer_id(), p.epoch()),
            Self::Kafka(p) => (p.producer_id(), p.epoch()),
        }
    }

    /// Sends `round` to `topic`/`partition` in order and returns what was acknowledged.
    async fn send(
        &mut self,
        topic: &str,
        partition: u32,
        round: Vec<Vec<NewRecord>>,
        payloads: &mut PayloadCursor,
        transactional: bool,
    ) -> Result<Vec<AckedBatch>> {
        match self {
            Self::Native(producer) => {
                let acks = producer.send_batches(topic, partition, round).await?;
                Ok(acked_batches(producer, partition, &acks, payloads))
            }
            Self::Kafka(producer) => {
                let index = i32::try_from(partition).context("partition out of range")?;
                if transactional {
                    producer.begin()?;
                }
                let mut acked = Vec::with_capacity(round.len());
                for batch in round {
                    let ack = producer.send(topic, index, &batch).await?;
                    acked.push(kafka_acked(producer, &ack, payloads));
                }
                if transactional {
                    producer.commit().await?;
                }
                Ok(acked)
            }
        }
    }

    fn summary(&self) -> Summary {
        let (records, batches, retries, duplicates) = match self {
            Self::Native(p) => {
                let s = p.stats();
                (s.records, s.batches, s.retries, s.duplicates)
            }
            Self::Kafka(p) => {
                let s = p.stats();
                (s.records, s.batches, s.retries, s.duplicates)
            }
        };
        Summary {
            records,
            batches,
            retries,
            duplicates,
        }
    }
}

pub async fn run(args: Args) -> Result<()> {
    let mut destination = Destination::open(&args).await?;
    let (producer_id, epoch) = destination.identity();
    let mut acks_file = match &args.acks {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => None,
    };
    // Generated records carry payload ids, so the acks file names each batch's first one.
    let first = first_payload(producer_id, epoch, args.producer_id.is_some());
    let mut payloads = PayloadCursor::new(args.count.map(|_| first));
    let separator = args.key_separator.clone();
    let records: Box<dyn Iterator<Item = Result<NewRecord>>> = match args.count {
        Some(count) => Box::new(
            (0..count).map(move |i| Ok(NewRecord::value(first.after(i as u64).to_string()))),
        ),
        None => Box::new(std::io::stdin().lock().lines().map(move |line| {
            let line = line.context("reading stdin")?;
            Ok(record_of(line, separator.as_deref()))
        })),
    };
    let batch_size = args.batch_size.max(1);
    let mut progress = args
        .count
        .map(|count| crate::progress::Progress::new("produce", "records", Some(count as u64)));
    let mut round: Vec<Vec<NewRecord>> = Vec::new();
    let mut batch: Vec<NewRecord> = Vec::new();
    let mut records = records.peekable();
    while let Some(record) = records.next() {
        batch.push(record?);
        let last = records.peek().is_none();
        if batch.len() == batch_size || (last && !batch.is_empty()) {
            round.push(std::mem::take(&mut batch));
        }
        if round.len() == BATCHES_PER_ROUND || (last && !round.is_empty()) {
            let acked = destination
                .send(
                    &args.topic,
                    args.partition,
                    std::mem::take(&mut round),
                    &mut payloads,
                    args.transactional_id.is_some(),
                )
                .await?;
            if let Some(file) = &mut acks_file {
                for acked in &acked {
                    writeln!(file, "{}", serde_json::to_string(acked)?)?;
                }
            }
            if let Some(progress) = &mut progress {
                progress.inc(acked.iter().map(|a| a.records as u64).sum());
            }
        }
    }
    if let Some(progress) = progress {
        progress.finish();
    }
    if let Some(mut file) = acks_file {
        file.flush()?;
    }
    let stats = destination.summary();
    println!(
        "produced records={} batches={} retries={} duplicates_acknowledged={} producer_id={producer_id} epoch={epoch}",
        stats.records, stats.batches, stats.retries, stats.duplicates,
    );
    Ok(())
}

/// The payload id of the first generated record: `p<producer id>-0`, or for a resumed producer
/// `p<producer id>.<epoch>-0` (its records must not repeat an earlier instance's).
fn first_payload(producer_id: i64, epoch: i16, resumed: bool) -> PayloadId {
    let instance = if resumed {
        epoch.unsigned_abs().into()
    } else {
        0
    };
    PayloadId::first(producer_id.unsigned_abs(), instance)
}

/// A record from one input line: all of it as the value, or split at the first `separator` into
/// a key and a value.
fn record_of(line: String, separator: Option<&str>) -> NewRecord {
    match separator.and_then(|sep| line.split_once(sep)) {
        Some((key, value)) => NewRecord::value(value.to_owned()).with_key(key.to_owned()),
        None => NewRecord::value(line),
    }
}
