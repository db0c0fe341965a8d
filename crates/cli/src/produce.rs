//! `minibroker produce`: stdin (one record per line) or generated records, through the idempotent
//! producer, optionally writing what was acknowledged for `verify --expect`.

use anyhow::{Context, Result};
use minibroker_client::{ClientConfig, NewRecord, Producer, ProducerConfig};
use minibroker_verify::PayloadId;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use crate::acks::acked_batches;
use crate::target::TopicArgs;

/// Flags of `produce`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: TopicArgs,
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
    /// Resume as a new instance of this producer id (bumps its epoch, fencing older instances).
    #[arg(long)]
    producer_id: Option<i64>,
    /// Generate this many records instead of reading stdin.
    #[arg(long)]
    count: Option<usize>,
    /// Write each acknowledged batch as a JSON line to this file (for `verify --expect`).
    #[arg(long)]
    acks: Option<PathBuf>,
    /// Resend a batch after this long without an answer.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
}

/// Batches handed to the producer at a time; it keeps up to five of them in flight.
const BATCHES_PER_ROUND: usize = 64;

pub async fn run(args: Args) -> Result<()> {
    let config = ProducerConfig {
        client: ClientConfig {
            request_timeout: Duration::from_millis(args.timeout_ms),
            ..crate::connect::client_config(&args.target.broker)?
        },
        ..ProducerConfig::default()
    };
    let mut producer = match args.producer_id {
        Some(id) => Producer::resume(&args.target.broker, id, config).await?,
        None => Producer::connect(&args.target.broker, config).await?,
    };
    let mut acks_file = match &args.acks {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => None,
    };
    let separator = args.key_separator.clone();
    let records: Box<dyn Iterator<Item = Result<NewRecord>>> = match args.count {
        Some(count) => {
            let first = first_payload(&producer, args.producer_id.is_some());
            Box::new(
                (0..count).map(move |i| Ok(NewRecord::value(first.after(i as u64).to_string()))),
            )
        }
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
    // Generated records carry payload ids, so the acks file names each batch's first one.
    let mut next_payload = args
        .count
        .map(|_| first_payload(&producer, args.producer_id.is_some()));
    while let Some(record) = records.next() {
        batch.push(record?);
        let last = records.peek().is_none();
        if batch.len() == batch_size || (last && !batch.is_empty()) {
            round.push(std::mem::take(&mut batch));
        }
        if round.len() == BATCHES_PER_ROUND || (last && !round.is_empty()) {
            let acks = producer
                .send_batches(
                    &args.target.topic,
                    args.partition,
                    std::mem::take(&mut round),
                )
                .await?;
            let acked = acked_batches(&producer, args.partition, &acks, next_payload);
            next_payload =
                next_payload.map(|id| id.after(acked.iter().map(|a| a.records as u64).sum()));
            if let Some(file) = &mut acks_file {
                for acked in acked {
                    writeln!(file, "{}", serde_json::to_string(&acked)?)?;
                }
            }
            if let Some(progress) = &mut progress {
                progress.inc(acks.iter().map(|ack| u64::from(ack.records)).sum());
            }
        }
    }
    if let Some(progress) = progress {
        progress.finish();
    }
    if let Some(mut file) = acks_file {
        file.flush()?;
    }
    let stats = producer.stats();
    println!(
        "produced records={} batches={} retries={} duplicates_acknowledged={} producer_id={} epoch={}",
        stats.records,
        stats.batches,
        stats.retries,
        stats.duplicates,
        producer.producer_id(),
        producer.epoch()
    );
    Ok(())
}

/// The payload id of the first generated record: `p<producer id>-0`, or for a resumed producer
/// `p<producer id>.<epoch>-0` (its records must not repeat an earlier instance's).
fn first_payload(producer: &Producer, resumed: bool) -> PayloadId {
    let instance = if resumed {
        producer.epoch().unsigned_abs().into()
    } else {
        0
    };
    PayloadId::first(producer.producer_id().unsigned_abs(), instance)
}

/// A record from one input line: all of it as the value, or split at the first `separator` into
/// a key and a value.
fn record_of(line: String, separator: Option<&str>) -> NewRecord {
    match separator.and_then(|sep| line.split_once(sep)) {
        Some((key, value)) => NewRecord::value(value.to_owned()).with_key(key.to_owned()),
        None => NewRecord::value(line),
    }
}
