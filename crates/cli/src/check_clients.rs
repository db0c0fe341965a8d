//! `check --client`: the check's producers as real Kafka clients, because anomalies are
//! client-specific — a delayed request does harm or not depending on what the client does next
//! (KAFKA-17754 showed with kafka-python and librdkafka, differently).
//!
//! The clients are the project's Python harness: confluent-kafka (librdkafka), kafka-python and
//! aiokafka, the three stacks the project's own tests run, each producer a `python` process
//! running `check_clients/producer.py` (compiled into the binary, given with `-c`). Python rather
//! than the `rdkafka` crate: it adds no C build to the binary, covers two stacks besides
//! librdkafka, and needs only a Python with the clients installed (`--python`;
//! `scripts/kafka-clients` makes one). Each process prints what it was told as JSON lines, which
//! become the check's acknowledgements: by payload id only, since a client keeps its producer id,
//! epoch and sequences to itself.

use minibroker_verify::AckedBatch;
use serde::Deserialize;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use crate::check_report::JobRun;

/// The producer each client process runs.
const PRODUCER: &str = include_str!("check_clients/producer.py");

/// Lines of a failed client's standard error kept for the report.
const STDERR_LINES: usize = 5;

/// Who writes the check's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// The project's own producer: every retry known, and the late-Produce scenario.
    Minibroker,
    /// confluent-kafka, on librdkafka.
    ConfluentKafka,
    /// kafka-python.
    KafkaPython,
    /// aiokafka.
    Aiokafka,
}

impl Client {
    /// The client's name, as the harness takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Minibroker => "minibroker",
            Self::ConfluentKafka => "confluent-kafka",
            Self::KafkaPython => "kafka-python",
            Self::Aiokafka => "aiokafka",
        }
    }
}

/// One client producer's share of the work.
pub struct ClientJob {
    pub client: Client,
    /// The Python that has the clients.
    pub python: String,
    pub address: String,
    pub topic: String,
    /// Its place among the producers (its records are `p<index>-<n>`).
    pub index: usize,
    pub records: usize,
    pub batch_size: usize,
    pub partitions: i32,
    pub transactional_id: Option<String>,
    /// Records acknowledged by every producer so far (for `--during` and the readers).
    pub sent: Arc<AtomicUsize>,
}

/// One line the harness prints.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Said {
    Acked(AckedBatch),
    Committed(usize),
    Aborted(usize),
    Failed(String),
}

impl ClientJob {
    /// Runs the client's process to its end: what it was told, and why it stopped if it did.
    pub async fn run(self) -> JobRun {
        let mut run = JobRun::default();
        let name = self.client.name();
        let mut command = tokio::process::Command::new(&self.python);
        command
            .arg("-c")
            .arg(PRODUCER)
            .args([name, &self.address, &self.topic])
            .args([self.index, self.records, self.batch_size].map(|n| n.to_string()))
            .arg(self.partitions.to_string())
            .args(&self.transactional_id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                run.failure = Some(format!("cannot run {}: {error}", self.python));
                return run;
            }
        };
        let mut stderr = child.stderr.take();
        if let Some(stdout) = child.stdout.take() {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str::<Said>(&line) {
                    Ok(Said::Acked(acked)) => {
                        self.sent.fetch_add(acked.records, Ordering::AcqRel);
                        run.stats.records += acked.records as u64;
                        run.acked.push(acked);
                    }
                    Ok(Said::Committed(n)) => run.committed += n,
                    Ok(Said::Aborted(n)) => run.aborted += n,
                    Ok(Said::Failed(why)) => run.failure = Some(why),
                    Err(_) => {}
                }
            }
        }
        let status = child.wait().await;
        if run.failure.is_none() && !status.as_ref().is_ok_and(std::process::ExitStatus::success) {
            let mut said = String::new();
            if let Some(stderr) = stderr.as_mut() {
                let _ = stderr.read_to_string(&mut said).await;
            }
            let tail: Vec<&str> = said.lines().rev().take(STDERR_LINES).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            run.failure = Some(format!(
                "{name} producer {} ended with {}: {}",
                self.index,
                status.map_or_else(|e| e.to_string(), |s| s.to_string()),
                tail.join(" / ")
            ));
        }
        run
    }
}
