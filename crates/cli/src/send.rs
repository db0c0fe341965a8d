//! `minibroker send`: one raw produce request, exactly as given — the way to try the rule by hand.

use anyhow::{Context, Result};
use minibroker_client::{Client, NewRecord};
use minibroker_records::Writer;

use crate::target::PartitionArgs;

/// Flags of `send`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: PartitionArgs,
    /// Producer id (-1 for a producer that is not idempotent).
    #[arg(long, allow_negative_numbers = true)]
    producer_id: i64,
    /// Producer epoch.
    #[arg(long, allow_negative_numbers = true)]
    epoch: i16,
    /// Sequence of the batch's first record; each further record takes the next one.
    #[arg(long, allow_negative_numbers = true)]
    sequence: i32,
    /// A record to send; repeat for several. Defaults to one record naming the fields.
    #[arg(long = "value")]
    values: Vec<String>,
    /// The key of every record sent.
    #[arg(long)]
    key: Option<String>,
    /// A header `NAME=VALUE` on every record sent; repeat for several.
    #[arg(long = "header", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// JSON lines instead of text: one line, the outcome.
    #[arg(long)]
    json: bool,
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .ok_or_else(|| format!("a header is NAME=VALUE, got {text:?}"))
}

pub async fn run(args: Args) -> Result<()> {
    let values = if args.values.is_empty() {
        vec![format!(
            "p{}-e{}-s{}",
            args.producer_id, args.epoch, args.sequence
        )]
    } else {
        args.values
    };
    let records: Vec<NewRecord> = values
        .into_iter()
        .map(|value| {
            let mut record = NewRecord::value(value);
            if let Some(key) = &args.key {
                record = record.with_key(key.clone());
            }
            for (name, value) in &args.headers {
                record = record.with_header(name.clone(), value.clone());
            }
            record
        })
        .collect();
    let writer = Writer {
        producer_id: args.producer_id,
        epoch: args.epoch,
        base_sequence: args.sequence,
    };
    let batch = minibroker_records::encode(writer, &records, minibroker_records::now_millis())
        .context("building the record batch")?;
    let client = Client::connect(
        &args.target.topic.broker,
        crate::connect::client_config(&args.target.topic.broker)?,
    )
    .await?;
    let response = client
        .produce(&args.target.topic.topic, args.target.partition, &batch)
        .await?;
    if args.json {
        let line = serde_json::json!({
            "outcome": response.outcome.as_str(),
            "offset": response.base_offset,
        });
        println!("{line}");
    } else {
        match response.base_offset {
            Some(offset) => println!("{} offset={offset}", response.outcome),
            None => println!("{}", response.outcome),
        }
    }
    Ok(())
}
