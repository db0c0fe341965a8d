//! `minibroker consume`: every record of a partition — or of every partition, one after the
//! other — from an offset to the current end.

use anyhow::{Context, Result};
use minibroker_client::{Client, ConsumedRecord, DecodedBatch, PartitionReader};
use serde_json::{Map, Value, json};
use std::io::Write;

use crate::target::TopicArgs;

/// Flags of `consume`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: TopicArgs,
    /// The partition to read (default: every partition, one after the other, each line saying
    /// its partition).
    #[arg(long)]
    partition: Option<u32>,
    /// First offset to print (in each partition read).
    #[arg(long = "from", default_value_t = 0)]
    from: i64,
    /// JSON lines: one JSON object per record, one per line.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<()> {
    let (broker, topic) = (&args.target.broker, &args.target.topic);
    let client = Client::connect(broker, crate::connect::client_config(broker)?).await?;
    let partitions: Vec<u32> = match args.partition {
        Some(partition) => vec![partition],
        None => {
            let described = client.describe_topic(topic).await?;
            (0..u32::try_from(described.partitions.len()).context("too many partitions")?).collect()
        }
    };
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    for &partition in &partitions {
        let mut reader = PartitionReader::new(&client, topic, partition, args.from);
        while let Some(batch) = reader.next_batch().await? {
            for record in &batch.records {
                if args.json {
                    writeln!(stdout, "{}", json_line(partition, &batch, record))?;
                } else if args.partition.is_none() {
                    writeln!(
                        stdout,
                        "partition={partition} {}",
                        text_line(&batch, record)
                    )?;
                } else {
                    writeln!(stdout, "{}", text_line(&batch, record))?;
                }
            }
        }
    }
    stdout.flush()?;
    Ok(())
}

/// Bytes as text for people: UTF-8 where they are, with replacement characters where not.
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn optional_text(bytes: Option<&bytes::Bytes>) -> Value {
    bytes.map_or(Value::Null, |b| Value::String(text(b)))
}

/// `{"partition", "offset", "producer_id", "epoch", "sequence", "value", "key", "headers",
/// "timestamp"}`.
fn json_line(partition: u32, batch: &DecodedBatch, record: &ConsumedRecord) -> Value {
    let headers: Map<String, Value> = record
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), optional_text(value.as_ref())))
        .collect();
    json!({
        "partition": partition,
        "offset": record.offset,
        "producer_id": batch.info.producer_id,
        "epoch": batch.info.epoch,
        "sequence": record.sequence,
        "value": optional_text(record.value.as_ref()),
        "key": optional_text(record.key.as_ref()),
        "headers": headers,
        "timestamp": record.timestamp,
    })
}

/// `offset=… producer_id=… epoch=… sequence=… value=…`, then ` key=…` and ` header.NAME=…` when
/// the record has them.
fn text_line(batch: &DecodedBatch, record: &ConsumedRecord) -> String {
    let mut line = format!(
        "offset={} producer_id={} epoch={} sequence={} value={}",
        record.offset,
        batch.info.producer_id,
        batch.info.epoch,
        record.sequence,
        record.value.as_deref().map_or_else(|| "-".to_owned(), text),
    );
    if let Some(key) = &record.key {
        line.push_str(&format!(" key={}", text(key)));
    }
    for (name, value) in &record.headers {
        let value = value.as_deref().map_or_else(|| "-".to_owned(), text);
        line.push_str(&format!(" header.{name}={value}"));
    }
    line
}
