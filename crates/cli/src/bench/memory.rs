//! Resident memory of the broker: per producer-state entry, and per stored byte.
//!
//! Each case runs in a child process of its own (this binary, re-executed), so memory freed by one
//! case cannot be reused by the next and hide its cost. A case drives the broker core directly —
//! no sockets — and reports resident memory before and after from `/proc/self/statm`.
//!
//! Producing creates an entry only by storing a batch, so the per-entry figure is isolated with a
//! control run: the same number of one-record batches written by just one producer per
//! partition. The difference between the two is the producer state alone.

use anyhow::{Context, Result, bail};
use minibroker_broker::{Broker, BrokerConfig, Outcome, Unacknowledged};
use minibroker_records::{NewRecord, Writer};
use serde_json::json;
use std::process::Command;

const PARTITIONS: u32 = 64;
const TOPIC: &str = "memory";
/// The environment variable that makes a re-executed `bench --memory` run one case.
const CASE_VAR: &str = "MINIBROKER_MEMORY_CASE";

/// One measurement, run in a child process.
#[derive(Debug, Clone, Copy)]
enum Case {
    /// `n` batches from `n` distinct (producer, partition) pairs.
    Entries(u64),
    /// `n` batches from one producer per partition.
    Control(u64),
    /// `bytes` of records in batches of 100 records of 1,000 bytes.
    Bytes(u64),
}

impl Case {
    fn encode(self) -> String {
        match self {
            Self::Entries(n) => format!("entries:{n}"),
            Self::Control(n) => format!("control:{n}"),
            Self::Bytes(n) => format!("bytes:{n}"),
        }
    }

    fn decode(text: &str) -> Result<Self> {
        let (kind, n) = text.split_once(':').context("case")?;
        let n: u64 = n.parse()?;
        Ok(match kind {
            "entries" => Self::Entries(n),
            "control" => Self::Control(n),
            "bytes" => Self::Bytes(n),
            _ => bail!("unknown memory case {text:?}"),
        })
    }
}

pub fn run(json_output: bool) -> Result<()> {
    if let Ok(case) = std::env::var(CASE_VAR) {
        return run_case(Case::decode(&case)?);
    }
    let mut rows = Vec::new();
    for n in [100_000u64, 1_000_000] {
        let entries = child(Case::Entries(n))?;
        let control = child(Case::Control(n))?;
        let per_entry = (entries as f64 - control as f64) / n as f64;
        let with_batch = entries as f64 / n as f64;
        rows.push(json!({"entries": n, "state_bytes_per_entry": per_entry, "bytes_per_entry_with_its_batch": with_batch}));
        if !json_output {
            println!(
                "{n:>9} entries: {per_entry:.0} bytes of producer state per entry ({with_batch:.0} bytes with its one-record batch in the log)"
            );
        }
    }
    let gib = 1u64 << 30;
    let grown = child(Case::Bytes(gib))?;
    let overhead = (grown as f64 - gib as f64) / gib as f64;
    if json_output {
        println!(
            "{}",
            json!({"entries": rows, "stored_bytes": gib, "resident_growth": grown, "overhead_per_stored_byte": overhead})
        );
    } else {
        println!(
            "1 GiB of records (100 x 1000 B per batch): resident memory grew {:.3} GiB, {:.3} bytes of overhead per stored byte",
            grown as f64 / gib as f64,
            overhead
        );
    }
    Ok(())
}

/// Runs `case` in a child process and returns its resident-memory growth in bytes.
fn child(case: Case) -> Result<u64> {
    let output = Command::new(std::env::current_exe()?)
        .args(["bench", "--memory"])
        .env(CASE_VAR, case.encode())
        .output()
        .context("running a memory case")?;
    if !output.status.success() {
        bail!(
            "memory case {case:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8(output.stdout)?;
    text.trim()
        .parse()
        .with_context(|| format!("memory case output {text:?}"))
}

fn run_case(case: Case) -> Result<()> {
    let config = BrokerConfig {
        default_partitions: PARTITIONS,
        max_stored_bytes: 8 << 30,
        ..BrokerConfig::default()
    };
    let broker = Broker::new(&config)?;
    let small = [NewRecord::value("x")];
    let large: Vec<NewRecord> = (0..100)
        .map(|_| NewRecord::value(vec![b'y'; 1000]))
        .collect();
    // In memory, nothing waits to be stored: no commit is needed before an answer.
    let mut topics = Unacknowledged::default();
    let before = resident_bytes()?;
    match case {
        Case::Entries(n) => {
            for i in 0..n {
                let partition = (i % u64::from(PARTITIONS)) as u32;
                let producer_id = (i / u64::from(PARTITIONS)) as i64;
                produce(&broker, &mut topics, partition, producer_id, 0, &small)?;
            }
        }
        Case::Control(n) => {
            for i in 0..n {
                let partition = (i % u64::from(PARTITIONS)) as u32;
                let sequence = (i / u64::from(PARTITIONS)) as i32;
                produce(&broker, &mut topics, partition, 0, sequence, &small)?;
            }
        }
        Case::Bytes(total) => {
            let batches = total / (100 * 1000);
            for i in 0..batches {
                let partition = (i % u64::from(PARTITIONS)) as u32;
                // Each record takes a sequence.
                let sequence = (i / u64::from(PARTITIONS) * 100) as i32;
                produce(&broker, &mut topics, partition, 0, sequence, &large)?;
            }
        }
    }
    let after = resident_bytes()?;
    println!("{}", after.saturating_sub(before));
    drop(std::hint::black_box(broker));
    Ok(())
}

fn produce(
    broker: &Broker,
    topics: &mut Unacknowledged,
    partition: u32,
    producer_id: i64,
    sequence: i32,
    records: &[NewRecord],
) -> Result<()> {
    let writer = Writer {
        producer_id,
        epoch: 0,
        base_sequence: sequence,
    };
    let batch = minibroker_records::encode(writer, records, 0)?;
    let verdict = broker.produce(topics, TOPIC, partition, &batch)?;
    if verdict.outcome != Outcome::Accepted {
        bail!("memory case write was {}", verdict.outcome);
    }
    Ok(())
}

/// Resident memory of this process, from /proc/self/statm (Linux).
pub(super) fn resident_bytes() -> Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")
        .context("reading /proc/self/statm (Linux only)")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .context("statm format")?
        .parse()?;
    Ok(pages * 4096)
}
