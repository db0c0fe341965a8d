//! `minibroker produce`: stdin, one record per line, through the idempotent producer.

use anyhow::{Context, Result};
use bytes::Bytes;
use minibroker_client::{Producer, ProducerConfig};
use std::io::BufRead;

/// Flags of `produce`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Broker address.
    #[arg(long)]
    broker: String,
    /// Topic name.
    #[arg(long)]
    topic: String,
    /// Partition.
    #[arg(long, default_value_t = 0)]
    partition: u32,
    /// Records per batch (one sequence number each).
    #[arg(long, default_value_t = 1)]
    batch_size: usize,
    /// Resume as a new instance of this producer id (bumps its epoch, fencing older instances).
    #[arg(long)]
    producer_id: Option<i64>,
}

/// Batches handed to the producer at a time; it keeps up to five of them in flight.
const BATCHES_PER_ROUND: usize = 64;

pub async fn run(args: Args) -> Result<()> {
    let config = ProducerConfig::default();
    let mut producer = match args.producer_id {
        Some(id) => Producer::resume(&args.broker, id, config).await?,
        None => Producer::connect(&args.broker, config).await?,
    };
    let batch_size = args.batch_size.max(1);
    let mut round: Vec<Vec<Bytes>> = Vec::new();
    let mut batch: Vec<Bytes> = Vec::new();
    for line in std::io::stdin().lock().lines() {
        batch.push(Bytes::from(line.context("reading stdin")?));
        if batch.len() == batch_size {
            round.push(std::mem::take(&mut batch));
        }
        if round.len() == BATCHES_PER_ROUND {
            producer
                .send_batches(&args.topic, args.partition, std::mem::take(&mut round))
                .await?;
        }
    }
    if !batch.is_empty() {
        round.push(batch);
    }
    if !round.is_empty() {
        producer
            .send_batches(&args.topic, args.partition, round)
            .await?;
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
