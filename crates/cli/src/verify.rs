//! `minibroker verify`: read a topic back and check exactly-once.

use anyhow::{Context, Result, bail};
use minibroker_client::Client;
use std::path::PathBuf;

/// Flags of `verify`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["broker", "kafka"]))]
pub struct Args {
    /// The broker itself (not a faulty proxy), over the native protocol.
    #[arg(long)]
    broker: Option<String>,
    /// A Kafka-compatible broker (this one's Kafka listener, Apache Kafka, Redpanda), read over
    /// the Kafka protocol.
    #[arg(long)]
    kafka: Option<String>,
    /// The topic to check.
    #[arg(long)]
    topic: String,
    /// Acknowledged batches (JSON lines, as written by `produce --acks`); repeat for several files.
    #[arg(long = "expect")]
    expect: Vec<PathBuf>,
    /// With --kafka, `read-committed` also reads the topic as a read_committed consumer and
    /// checks it sees exactly the committed transactions (and no aborted or open one).
    #[arg(long, value_enum, default_value_t = Isolation::ReadUncommitted, requires = "kafka")]
    isolation: Isolation,
}

/// Which view of a transactional topic is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Isolation {
    /// Every batch (the exactly-once rules only).
    ReadUncommitted,
    /// Every batch, and what a read_committed consumer sees.
    ReadCommitted,
}

pub async fn run(args: Args) -> Result<()> {
    let mut acknowledged = Vec::new();
    for path in &args.expect {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut acks = minibroker_verify::parse_acks(&text)
            .with_context(|| format!("{} is not a file of acknowledged batches", path.display()))?;
        acknowledged.append(&mut acks);
    }
    let expected = (!args.expect.is_empty()).then_some(acknowledged.as_slice());
    let report = match (&args.broker, &args.kafka) {
        (_, Some(kafka)) if args.isolation == Isolation::ReadCommitted => {
            minibroker_verify::verify_kafka_read_committed(kafka, &args.topic, expected, &[])
                .await?
        }
        (_, Some(kafka)) => minibroker_verify::verify_kafka(kafka, &args.topic, expected).await?,
        (Some(broker), None) => {
            let client = Client::connect(broker, crate::connect::client_config(broker)?).await?;
            let total = client.describe_topic(&args.topic).await.ok().map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (p.log_end_offset - p.log_start_offset).max(0) as u64)
                    .sum()
            });
            let mut progress = crate::progress::Progress::new("verify", "records", total);
            let report = minibroker_verify::verify_reporting(
                &client,
                &args.topic,
                expected,
                &mut |records| progress.inc(records),
            )
            .await?;
            progress.finish();
            report
        }
        (None, None) => bail!("give --broker or --kafka"),
    };
    println!("{report}");
    if !report.passed() {
        bail!("exactly-once violated");
    }
    Ok(())
}
