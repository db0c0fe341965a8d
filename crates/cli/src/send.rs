//! `minibroker send`: one raw produce request, exactly as given — the way to try the rule by hand.

use anyhow::Result;
use minibroker_client::protocol::{ProduceRequest, serde_bytes};
use minibroker_client::{Client, ClientConfig};

use crate::target::PartitionArgs;

/// Flags of `send`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: PartitionArgs,
    /// Producer id.
    #[arg(long, allow_negative_numbers = true)]
    producer_id: i64,
    /// Producer epoch.
    #[arg(long, allow_negative_numbers = true)]
    epoch: i16,
    /// Sequence number of the batch.
    #[arg(long, allow_negative_numbers = true)]
    sequence: i32,
    /// A record to send; repeat for several. Defaults to one record naming the fields.
    #[arg(long = "value")]
    values: Vec<String>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
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
    let client = Client::connect(&args.target.topic.broker, ClientConfig::default()).await?;
    let response = client
        .produce(ProduceRequest {
            topic: &args.target.topic.topic,
            partition: args.target.partition,
            producer_id: args.producer_id,
            epoch: args.epoch,
            sequence: args.sequence,
            records: values
                .iter()
                .map(|v| serde_bytes::Bytes::new(v.as_bytes()))
                .collect(),
        })
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
