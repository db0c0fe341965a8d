//! `check`'s report: what the network did, what the producers were told, what the broker kept
//! and what the consumers were shown, the verdict, and — when exactly-once was violated — each
//! anomaly with its witnesses and the command that replays the run with the same fault
//! schedule. As text for a person, or with `--json` as one JSON document for a script.

use anyhow::{Result, bail};
use minibroker_faults::FaultCounts;
use minibroker_kafka_client::KafkaProducerStats;
use minibroker_verify::{AckedBatch, Report};
use serde_json::json;
use std::time::Duration;

use crate::check_readers::ReadersRun;
use crate::late_produce_scenario::LateProduce;

/// What `--during`'s command did.
#[derive(Debug)]
pub(crate) struct During {
    pub(crate) command: String,
    /// Records sent when it was due.
    pub(crate) due_after: usize,
    /// When it ran (since the producers began), how many records had been sent then, and its
    /// exit status; `None` when the run ended first.
    pub(crate) ran: Option<(Duration, usize, String)>,
}

/// What the producers did together.
#[derive(Default)]
pub(crate) struct Produced {
    pub(crate) acked: Vec<AckedBatch>,
    pub(crate) stats: KafkaProducerStats,
    pub(crate) failures: Vec<String>,
    pub(crate) elapsed: Duration,
    pub(crate) committed: usize,
    pub(crate) aborted: usize,
    /// `--during`'s command, if given.
    pub(crate) during: Option<During>,
    /// Producers whose every transaction end bumped the epoch (KIP-890 part 2).
    pub(crate) part_2: usize,
    /// Times a producer was fenced and started again.
    pub(crate) restarts: usize,
    /// The client that wrote the records, when not the project's own producer.
    pub(crate) client: Option<String>,
}

/// The report for a person.
fn print_text(run: &Run<'_>, verdict: &Verdict) {
    let Run {
        produced,
        faults,
        late,
        consumed,
        report,
        ..
    } = *run;
    let (sent, acked) = (run.sent, run.acked());
    crate::faults::print_injected(faults);
    println!();
    println!("  producers ({:.1} s)", produced.elapsed.as_secs_f64());
    println!("    records sent         {sent:>8}");
    println!("    acknowledged         {acked:>8}");
    match &produced.client {
        Some(client) => println!("    client               {client}: its retries are its own"),
        None => println!(
            "    batch resends        {:>8}   the same bytes, after a lost answer or a retriable error",
            produced.stats.retries
        ),
    }
    if run.transactional {
        println!(
            "    transactions         {:>8}   committed; {} aborted and written again",
            produced.committed, produced.aborted
        );
        if produced.part_2 > 0 {
            println!(
                "    KIP-890 part 2       {:>8}   producers whose every end moved to a new epoch",
                produced.part_2
            );
        }
        if produced.restarts > 0 {
            println!(
                "    restarted            {:>8}   fenced (by a late copy of its own InitProducerId, say) and started again",
                produced.restarts
            );
        }
    }
    if produced.stats.duplicates > 0 {
        println!(
            "    answered DUPLICATE   {:>8}   resends the broker recognised as stored",
            produced.stats.duplicates
        );
    }
    if let Some(during) = &produced.during {
        match &during.ran {
            Some((at, sent_then, status)) => println!(
                "    during: `{}` ran at {:.2} s, {sent_then} records sent, and ended with {status}",
                during.command,
                at.as_secs_f64()
            ),
            None => println!(
                "    during: `{}` never ran: the run ended before {} records were sent",
                during.command, during.due_after
            ),
        }
    }
    if let Some(late) = late {
        print_late_produce(late);
    } else if run.transactional {
        println!();
        println!(
            "  scenario: a Produce delayed past its transaction's abort (KAFKA-17754): skipped, it needs two partitions"
        );
    }
    println!();
    println!("  broker (read back directly)");
    if report.transactions.is_some() {
        println!(
            "    records stored       {:>8}   aborted transactions' too",
            report.records
        );
    } else {
        println!("    records stored       {:>8}", report.records);
    }
    println!("    batches stored       {:>8}", report.batches);
    println!(
        "    records checked      {:>8}   by payload id: each stored once, every acknowledged one present",
        report.payloads
    );
    if let Some(transactions) = &report.transactions {
        println!(
            "    read_committed       {:>8}   batches shown; {} committed, {} aborted, {} open",
            transactions.visible, transactions.committed, transactions.aborted, transactions.open
        );
    }
    if let (Some(summary), Some(run)) = (&report.consumed, consumed) {
        println!();
        print_consumed(summary, report.processed, run);
    }
    println!();
    for failure in &produced.failures {
        println!("  producer stopped: {failure}");
    }
    println!("  verdict: {}", verdict.says());
    if let Verdict::Violated = verdict {
        println!("{report}");
        println!("  replay: {}", run.replay);
    }
}

/// What the late-Produce scenario saw; the verdict on it is the verifier's, with the rest.
fn print_late_produce(late: &LateProduce) {
    println!();
    println!("  scenario: a Produce delayed past its transaction's abort (KAFKA-17754)");
    println!("    held batch           released once the next transaction had added its partition");
    println!("    next batch           {}", late.next_batch);
    match late.moved_to_epoch {
        Some(epoch) => println!(
            "    producer             moved to epoch {epoch} (KIP-360), fencing the late batch, and wrote its batch again"
        ),
        None => println!("    producer             kept its epoch"),
    }
}

/// What the consumers were shown, for the report.
fn print_consumed(
    summary: &minibroker_verify::ConsumedSummary,
    processed: Option<usize>,
    run: &ReadersRun,
) {
    println!("  consumers (in groups, while the producers wrote)");
    for group in &run.groups {
        println!(
            "    {:<20} {:>4} members of {}: {}",
            if group.read_committed {
                "read_committed"
            } else {
                "read_uncommitted"
            },
            group.consumers.len(),
            group.group,
            if group.caught_up {
                "read every partition to its end"
            } else {
                "did NOT read every partition to its end"
            }
        );
    }
    println!(
        "    assignments          {:>8}   each member's, through the rebalances of its restarts",
        summary.assignments
    );
    println!(
        "    records shown        {:>8}   each judged: no skip, no offset going back, no aborted record",
        summary.records
    );
    if let Some(processed) = processed {
        println!(
            "    records processed    {processed:>8}   written by the read_committed members with their offsets, in transactions: each once, in order"
        );
    }
    for failure in &run.failures {
        println!("    consumer stopped: {failure}");
    }
}

/// What one producer did.
#[derive(Default)]
pub(crate) struct JobRun {
    pub(crate) acked: Vec<AckedBatch>,
    pub(crate) stats: KafkaProducerStats,
    pub(crate) failure: Option<String>,
    pub(crate) committed: usize,
    pub(crate) aborted: usize,
    pub(crate) part_2: bool,
    /// Times it was fenced and started again.
    pub(crate) restarts: usize,
}

/// Everything a check found, for its report.
pub(crate) struct Run<'a> {
    /// The broker checked, as given.
    pub(crate) kafka: &'a str,
    pub(crate) topic: &'a str,
    /// Records the producers were to send.
    pub(crate) sent: u64,
    pub(crate) transactional: bool,
    pub(crate) seed: u64,
    /// The command that runs the check again with the same fault schedule.
    pub(crate) replay: String,
    pub(crate) produced: &'a Produced,
    pub(crate) faults: &'a FaultCounts,
    pub(crate) late: Option<&'a LateProduce>,
    pub(crate) consumed: Option<&'a ReadersRun>,
    pub(crate) report: &'a Report,
}

impl Run<'_> {
    /// Records acknowledged.
    fn acked(&self) -> u64 {
        self.produced.acked.iter().map(|a| a.records as u64).sum()
    }

    /// Whether a consumer stopped early or a group did not read to the end.
    fn readers_short(&self) -> bool {
        self.consumed.is_some_and(|run| {
            !run.failures.is_empty() || run.groups.iter().any(|group| !group.caught_up)
        })
    }

    fn verdict(&self) -> Verdict {
        if !self.report.passed() {
            Verdict::Violated
        } else if self.readers_short() {
            Verdict::Unread
        } else if !self.produced.failures.is_empty() || self.acked() != self.sent {
            Verdict::Undelivered {
                acked: self.acked(),
                sent: self.sent,
            }
        } else {
            Verdict::Held(self.acked())
        }
    }
}

/// How a check ended.
enum Verdict {
    /// Every acknowledged record stored once, every reader shown what it should be.
    Held(u64),
    /// An anomaly was found.
    Violated,
    /// Nothing wrong in what was acknowledged, but not every record was.
    Undelivered { acked: u64, sent: u64 },
    /// Nothing wrong in what was read, but the consumers did not read everything.
    Unread,
}

impl Verdict {
    fn says(&self) -> String {
        match self {
            Self::Held(acked) => format!(
                "EXACTLY-ONCE HELD - all {acked} acknowledged records stored exactly once, in order, no gaps"
            ),
            Self::Violated => "FAILED - exactly-once was violated".to_owned(),
            Self::Undelivered { acked, sent } => format!(
                "INCOMPLETE - no violation in what was acknowledged, but only {acked} of {sent} records were"
            ),
            Self::Unread => "INCOMPLETE - no violation found, but the consumers did not read every partition to its end".to_owned(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Held(_) => "held",
            Self::Violated => "violated",
            Self::Undelivered { .. } | Self::Unread => "incomplete",
        }
    }
}

/// Prints the report (as JSON with `json`); fails unless exactly-once held and every record
/// was acknowledged and read.
pub(crate) fn print(run: &Run<'_>, json: bool) -> Result<()> {
    let verdict = run.verdict();
    if json {
        println!("{}", serde_json::to_string_pretty(&as_json(run, &verdict))?);
    } else {
        print_text(run, &verdict);
    }
    match verdict {
        Verdict::Held(_) => Ok(()),
        Verdict::Violated => bail!("exactly-once violated on {}", run.kafka),
        Verdict::Undelivered { .. } => bail!("the check could not deliver every record"),
        Verdict::Unread => bail!("the check's consumers could not read every record"),
    }
}

/// The whole report as one JSON document.
fn as_json(run: &Run<'_>, verdict: &Verdict) -> serde_json::Value {
    let report = run.report;
    let anomalies: Vec<serde_json::Value> = report
        .violations
        .iter()
        .map(|violation| {
            json!({
                "anomaly": violation.anomaly(),
                "says": violation.to_string(),
                "witness": violation,
            })
        })
        .collect();
    json!({
        "verdict": verdict.name(),
        "says": verdict.says(),
        "kafka": run.kafka,
        "topic": run.topic,
        "seed": run.seed,
        "replay": run.replay,
        "network": {
            "requests_lost": run.faults.requests_dropped,
            "acks_lost": run.faults.responses_dropped,
            "frames_delayed": run.faults.delayed,
            "connection_resets": run.faults.resets,
            "requests_held": run.faults.held,
        },
        "producers": {
            "client": run.produced.client.as_deref().unwrap_or("minibroker"),
            "records_sent": run.sent,
            "acknowledged": run.acked(),
            "resends": run.produced.stats.retries,
            "answered_duplicate": run.produced.stats.duplicates,
            "transactions_committed": run.produced.committed,
            "transactions_aborted": run.produced.aborted,
            "restarts": run.produced.restarts,
            "failures": run.produced.failures,
            "during": run.produced.during.as_ref().map(|during| json!({
                "command": during.command,
                "due_after_records": during.due_after,
                "ran": during.ran.as_ref().map(|(at, sent, status)| json!({
                    "at_seconds": at.as_secs_f64(),
                    "records_sent": sent,
                    "status": status,
                })),
            })),
        },
        "late_produce": run.late.map(|late| json!({
            "next_batch": late.next_batch,
            "moved_to_epoch": late.moved_to_epoch,
        })),
        "broker": {
            "records_stored": report.records,
            "batches_stored": report.batches,
            "records_checked": report.payloads,
            "transactions": report.transactions,
        },
        "consumers": run.consumed.map(|consumed| json!({
            "summary": report.consumed,
            "records_processed": report.processed,
            "groups": consumed.groups.iter().map(|group| json!({
                "group": group.group,
                "read_committed": group.read_committed,
                "members": group.consumers.len(),
                "read_to_the_end": group.caught_up,
            })).collect::<Vec<_>>(),
            "failures": consumed.failures,
        })),
        "anomalies": anomalies,
    })
}

/// The command that runs this check again with the same fault schedule: the one given, on a
/// new topic, with `seed` named.
pub(crate) fn replay_command(seed: u64) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut given = std::env::args();
    words.extend(given.next());
    while let Some(word) = given.next() {
        match word.as_str() {
            "--seed" | "--topic" => {
                given.next();
            }
            _ if word.starts_with("--seed=") || word.starts_with("--topic=") => {}
            _ => words.push(word),
        }
    }
    words.push("--seed".to_owned());
    words.push(seed.to_string());
    words
        .iter()
        .map(|word| shell_quoted(word))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as a POSIX shell reads it back.
fn shell_quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:,=@%+".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
