//! `minibroker consume`: every record of a partition from an offset to the current end.

use anyhow::Result;
use minibroker_client::{Client, ConsumedRecord, DecodedBatch, PartitionReader};
use serde_json::{Map, Value, json};
use std::io::Write;

use crate::target::PartitionArgs;

/// Flags of `consume`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: PartitionArgs,
    /// First offset to print.
    #[arg(long = "from", default_value_t = 0)]
    from: i64,
    /// One JSON object per record per line.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<()> {
    let client = Client::connect(
        &args.target.topic.broker,
        crate::connect::client_config(&args.target.topic.broker)?,
    )
    .await?;
    let mut reader = PartitionReader::new(
        &client,
        &args.target.topic.topic,
        args.target.partition,
        args.from,
    );
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    while let Some(batch) = reader.next_batch().await? {
        for record in &batch.records {
            if args.json {
                writeln!(stdout, "{}", json_line(&batch, record))?;
            } else {
                writeln!(stdout, "{}", text_line(&batch, record))?;
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

/// `{"offset", "producer_id", "epoch", "sequence", "value", "key", "headers", "timestamp"}`.
fn json_line(batch: &DecodedBatch, record: &ConsumedRecord) -> Value {
    let headers: Map<String, Value> = record
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), optional_text(value.as_ref())))
        .collect();
    json!({
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
