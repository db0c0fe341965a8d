//! `minibroker consume`: every record of a partition from an offset to the current end.

use anyhow::Result;
use minibroker_client::{Client, ClientConfig};
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

/// Bytes asked for per fetch.
const FETCH_BYTES: u32 = 1 << 20;

pub async fn run(args: Args) -> Result<()> {
    let client = Client::connect(&args.target.topic.broker, ClientConfig::default()).await?;
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut offset = args.from;
    loop {
        let response = client
            .fetch(
                &args.target.topic.topic,
                args.target.partition,
                offset,
                FETCH_BYTES,
            )
            .await?;
        for batch in &response.batches {
            for (i, record) in batch.records.iter().enumerate() {
                let record_offset = batch.first_offset + i as i64;
                let value = String::from_utf8_lossy(record);
                if args.json {
                    let line = serde_json::json!({
                        "offset": record_offset,
                        "producer_id": batch.producer_id,
                        "epoch": batch.epoch,
                        "sequence": batch.sequence,
                        "value": value,
                    });
                    writeln!(stdout, "{line}")?;
                } else {
                    writeln!(
                        stdout,
                        "offset={record_offset} producer_id={} epoch={} sequence={} value={value}",
                        batch.producer_id, batch.epoch, batch.sequence
                    )?;
                }
                offset = record_offset + 1;
            }
        }
        if response.batches.is_empty() || offset >= response.high_watermark {
            break;
        }
    }
    stdout.flush()?;
    Ok(())
}
