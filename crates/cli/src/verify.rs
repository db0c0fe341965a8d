//! `minibroker verify`: read a topic back and check exactly-once.

use anyhow::{Context, Result, bail};
use minibroker_client::{Client, ClientConfig};
use std::path::PathBuf;

use crate::target::TopicArgs;

/// Flags of `verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The broker itself (not a faulty proxy) and the topic to check.
    #[command(flatten)]
    target: TopicArgs,
    /// Acknowledged batches (JSON lines, as written by `produce --acks`); repeat for several files.
    #[arg(long = "expect")]
    expect: Vec<PathBuf>,
}

pub async fn run(args: Args) -> Result<()> {
    let mut acknowledged = Vec::new();
    for path in &args.expect {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut acks = minibroker_verify::parse_acks(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        acknowledged.append(&mut acks);
    }
    let client = Client::connect(&args.target.broker, ClientConfig::default()).await?;
    let expected = (!args.expect.is_empty()).then_some(acknowledged.as_slice());
    let report = minibroker_verify::verify(&client, &args.target.topic, expected).await?;
    println!("{report}");
    if !report.passed() {
        bail!("exactly-once violated");
    }
    Ok(())
}
