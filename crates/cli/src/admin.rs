//! `minibroker init-producer`, `describe-producers` and `producers`.

use anyhow::Result;
use minibroker_client::Client;

use minibroker_protocol::ProducerState;

use crate::target::{PartitionArgs, TopicArgs};

/// Flags of `init-producer`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Broker address.
    #[arg(long)]
    broker: String,
    /// Bump the epoch of this issued producer id instead of getting a new one.
    #[arg(long, allow_negative_numbers = true)]
    producer_id: Option<i64>,
    /// JSON lines instead of text: one line, {"producer_id", "epoch"}.
    #[arg(long)]
    json: bool,
}

/// Flags of `describe-producers`.
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    target: PartitionArgs,
    /// JSON lines instead of text: one object per producer.
    #[arg(long)]
    json: bool,
}

pub async fn init_producer(args: InitArgs) -> Result<()> {
    let client =
        Client::connect(&args.broker, crate::connect::client_config(&args.broker)?).await?;
    let identity = client.init_producer(args.producer_id).await?;
    if args.json {
        let line =
            serde_json::json!({"producer_id": identity.producer_id, "epoch": identity.epoch});
        println!("{line}");
    } else {
        println!(
            "producer_id={} epoch={}",
            identity.producer_id, identity.epoch
        );
    }
    Ok(())
}

pub async fn describe_producers(args: DescribeArgs) -> Result<()> {
    let client = Client::connect(
        &args.target.topic.broker,
        crate::connect::client_config(&args.target.topic.broker)?,
    )
    .await?;
    let producers = client
        .describe_producers(&args.target.topic.topic, args.target.partition)
        .await?;
    print_producers(None, &producers, args.json);
    Ok(())
}

/// Flags of `producers`.
#[derive(Debug, clap::Args)]
pub struct ProducersArgs {
    #[command(flatten)]
    target: TopicArgs,
    /// JSON lines instead of text: one object per producer per partition.
    #[arg(long)]
    json: bool,
}

/// `producers --topic T`: the producer state of every partition of a topic, a page at a time.
pub async fn producers(args: ProducersArgs) -> Result<()> {
    let client = Client::connect(
        &args.target.broker,
        crate::connect::client_config(&args.target.broker)?,
    )
    .await?;
    let topic = client.describe_topic(&args.target.topic).await?;
    for partition in &topic.partitions {
        let producers = client
            .describe_producers(&args.target.topic, partition.partition)
            .await?;
        print_producers(Some(partition.partition), &producers, args.json);
    }
    Ok(())
}

/// One line per producer, naming the partition when there is more than one to show.
fn print_producers(partition: Option<u32>, producers: &[ProducerState], json: bool) {
    for p in producers {
        if json {
            let mut line = serde_json::json!({
                "producer_id": p.producer_id,
                "epoch": p.epoch,
                "last_sequence": p.last_sequence,
                "last_offset": p.last_base_offset,
                "cached_batches": p.cached_batches,
            });
            if let Some(partition) = partition {
                line["partition"] = partition.into();
            }
            println!("{line}");
        } else {
            let offset = p
                .last_base_offset
                .map_or_else(|| "-".to_owned(), |o| o.to_string());
            let prefix = partition.map_or_else(String::new, |p| format!("partition={p} "));
            println!(
                "{prefix}producer_id={} epoch={} last_sequence={} last_offset={offset} cached_batches={}",
                p.producer_id, p.epoch, p.last_sequence, p.cached_batches
            );
        }
    }
}
