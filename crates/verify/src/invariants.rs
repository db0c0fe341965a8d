//! The invariants, checked over logs already read.

use minibroker_state::SequenceRange;

use crate::payload::{PayloadId, StoredPayload};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// A batch as the log stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StoredBatch {
    /// Offset of its first record.
    pub base_offset: i64,
    /// Producer id that wrote it.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// Its base sequence (its first record's); record `i` has `sequence + i`.
    pub sequence: i32,
    /// Number of records (and so of sequences it spans).
    pub records: usize,
}

impl StoredBatch {
    /// The batch at `base_offset` whose header reads `info`.
    #[must_use]
    pub fn new(base_offset: i64, info: &minibroker_records::BatchInfo) -> Self {
        Self {
            base_offset,
            producer_id: info.producer_id,
            epoch: info.epoch,
            sequence: info.base_sequence,
            records: info.record_count as usize,
        }
    }

    /// The sequences the batch spans, or `None` for a record count no batch can have.
    fn sequences(&self) -> Option<SequenceRange> {
        SequenceRange::spanning(self.sequence, u32::try_from(self.records).ok()?).ok()
    }
}

/// One partition's batches in log order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionLog {
    /// The partition.
    pub partition: u32,
    /// Its batches, in offset order.
    pub batches: Vec<StoredBatch>,
    /// Its records that carry a payload id, in offset order (of aborted transactions, none).
    pub payloads: Vec<StoredPayload>,
}

/// A batch a producer reports as acknowledged (one JSON line in an `--expect` file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AckedBatch {
    /// The partition written.
    pub partition: u32,
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// The batch's base sequence.
    pub sequence: i32,
    /// The offset the acknowledgement named, if it named one.
    pub offset: Option<i64>,
    /// Records in the batch.
    pub records: usize,
    /// The payload id of its first record, if its records carry ids (record `i` then carries
    /// the id `i` after it): each must be stored, whatever the batch's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_payload: Option<PayloadId>,
}

impl AckedBatch {
    /// The payload ids of its records, if they carry them.
    pub fn payload_ids(&self) -> impl Iterator<Item = PayloadId> + use<> {
        let first = self.first_payload;
        (0..self.records as u64).filter_map(move |i| first.map(|id| id.after(i)))
    }

    /// The first of its records whose payload id is not `present`, if any.
    pub fn first_missing(&self, present: impl Fn(&PayloadId) -> bool) -> Option<PayloadId> {
        self.payload_ids().find(|id| !present(id))
    }
}

/// A broken invariant: with its fields, the witness of the anomaly it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Violation {
    /// The same (producer, epoch, sequence) is stored more than once.
    StoredTwice {
        /// Partition.
        partition: u32,
        /// The batch's identity.
        producer_id: i64,
        /// Epoch.
        epoch: i16,
        /// Sequence.
        sequence: i32,
        /// Offsets of the copies.
        offsets: (i64, i64),
    },
    /// A producer's sequence does not follow its previous one.
    NotContiguous {
        /// Partition.
        partition: u32,
        /// Producer.
        producer_id: i64,
        /// Epoch.
        epoch: i16,
        /// What was expected next.
        expected: i32,
        /// What is stored.
        found: i32,
        /// Where.
        offset: i64,
    },
    /// A batch of an older epoch was stored after one of a newer epoch.
    EpochWentBack {
        /// Partition.
        partition: u32,
        /// Producer.
        producer_id: i64,
        /// The newer epoch seen before.
        newer: i16,
        /// The older epoch stored after it.
        older: i16,
        /// Where.
        offset: i64,
    },
    /// An acknowledged batch is not stored.
    AckedButMissing(AckedBatch),
    /// An acknowledged batch is stored somewhere other than its acknowledgement said, or with a
    /// different record count.
    AckedButDifferent {
        /// What the producer was told.
        acked: AckedBatch,
        /// What is stored.
        stored: StoredBatch,
    },
    /// The same payload id is stored more than once: a duplicate, judged by content.
    PayloadStoredTwice {
        /// The id.
        id: PayloadId,
        /// Partition and offset of the first copy.
        first: (u32, i64),
        /// Partition and offset of the second.
        second: (u32, i64),
    },
    /// A record of an acknowledged batch is not stored: a loss, judged by content.
    AckedPayloadMissing {
        /// What the producer was told.
        acked: AckedBatch,
        /// The first of its records not stored.
        id: PayloadId,
    },
    /// A `read_committed` consumer is shown a batch of a transaction that aborted or is still
    /// open.
    UncommittedVisible {
        /// Partition.
        partition: u32,
        /// The batch's offset.
        offset: i64,
        /// Aborted (`true`) or still open.
        aborted: bool,
    },
    /// A `read_committed` consumer is not shown a committed (or non-transactional) batch below
    /// the last stable offset.
    CommittedHidden {
        /// Partition.
        partition: u32,
        /// The batch's offset.
        offset: i64,
    },
    /// A record its producer wrote in a transaction it then aborted is stored as committed:
    /// a `read_committed` consumer reads it (a late batch taken into the next transaction,
    /// KAFKA-17754, is one way).
    AbortedRecordCommitted {
        /// The batch the producer sent, in the transaction it aborted.
        sent: AckedBatch,
        /// The first of its records stored as committed.
        id: PayloadId,
        /// Where: partition and offset.
        at: (u32, i64),
    },
    /// A consumer was shown a record, then one a later one it may see, skipping records it may
    /// see in between (given where it started: its group's committed offset).
    PollSkip {
        /// The consumer.
        consumer: String,
        /// Partition.
        partition: u32,
        /// Its group's generation (the assignment it read under).
        generation: i32,
        /// The record shown before the jump, if any (else the jump was from its start).
        after: Option<i64>,
        /// The first record skipped.
        missed: i64,
        /// The record shown after the jump.
        read: i64,
        /// Whether the skipped record's transaction had other records shown to it: a torn
        /// transaction.
        torn: bool,
    },
    /// A consumer was shown a record at or below one it was shown before, under one assignment.
    NonMonotonic {
        /// The consumer.
        consumer: String,
        /// Partition.
        partition: u32,
        /// Its group's generation.
        generation: i32,
        /// The record shown before.
        previous: i64,
        /// The one shown after it.
        then: i64,
    },
    /// A `read_committed` consumer was shown a record of a transaction that aborted or is still
    /// open.
    ConsumerShownUncommitted {
        /// The consumer.
        consumer: String,
        /// Partition.
        partition: u32,
        /// The record.
        offset: i64,
        /// Aborted (`true`) or still open.
        aborted: bool,
    },
    /// A record of the input written twice to a pipeline's output.
    ProcessedTwice {
        /// The record.
        id: PayloadId,
        /// Partition and offset of the first copy in the output.
        first: (u32, i64),
        /// Partition and offset of the second.
        second: (u32, i64),
    },
    /// A committed input record its pipeline's processors, having read to the end, never wrote.
    NeverProcessed {
        /// The input batch, as its producer was told.
        acked: AckedBatch,
        /// The first of its records not in the output.
        id: PayloadId,
    },
    /// A pipeline's output holds two records of one input partition in the other order.
    ProcessedOutOfOrder {
        /// The partition.
        partition: u32,
        /// The record written first, and its input offset.
        earlier: (PayloadId, i64),
        /// The record written after it, from before it in the input.
        later: (PayloadId, i64),
    },
    /// An acknowledged record no consumer of a group was shown, though they read every
    /// partition to its end.
    NeverConsumed {
        /// The group.
        group: String,
        /// What the producer was told.
        acked: AckedBatch,
        /// The first of its records never shown.
        id: PayloadId,
    },
}

impl Violation {
    /// The anomaly this violation is, by the name the report and the JSON give it (Jepsen's,
    /// where Jepsen has one).
    #[must_use]
    pub fn anomaly(&self) -> &'static str {
        match self {
            Self::StoredTwice { .. }
            | Self::PayloadStoredTwice { .. }
            | Self::ProcessedTwice { .. } => "duplicate",
            Self::ProcessedOutOfOrder { .. } => "reordered-output",
            Self::AckedButMissing(_)
            | Self::AckedPayloadMissing { .. }
            | Self::NeverConsumed { .. }
            | Self::NeverProcessed { .. } => "lost-write",
            Self::AckedButDifferent { .. } => "moved-write",
            Self::NotContiguous { .. } => "sequence-gap",
            Self::EpochWentBack { .. } => "zombie-write",
            Self::UncommittedVisible { aborted: true, .. }
            | Self::ConsumerShownUncommitted { aborted: true, .. }
            | Self::AbortedRecordCommitted { .. } => "aborted-read",
            Self::UncommittedVisible { aborted: false, .. }
            | Self::ConsumerShownUncommitted { aborted: false, .. } => "uncommitted-read",
            Self::CommittedHidden { .. } => "committed-hidden",
            Self::PollSkip { torn: true, .. } => "torn-transaction",
            Self::PollSkip { torn: false, .. } => "poll-skip",
            Self::NonMonotonic { .. } => "nonmonotonic-offsets",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StoredTwice {
                partition,
                producer_id,
                epoch,
                sequence,
                offsets,
            } => write!(
                f,
                "partition {partition}: producer {producer_id} epoch {epoch} sequence {sequence} stored twice (offsets {} and {})",
                offsets.0, offsets.1
            ),
            Self::NotContiguous {
                partition,
                producer_id,
                epoch,
                expected,
                found,
                offset,
            } => write!(
                f,
                "partition {partition}: producer {producer_id} epoch {epoch} stored sequence {found} at offset {offset}, expected {expected}"
            ),
            Self::EpochWentBack {
                partition,
                producer_id,
                newer,
                older,
                offset,
            } => write!(
                f,
                "partition {partition}: producer {producer_id} wrote epoch {older} at offset {offset} after epoch {newer} (a zombie write)"
            ),
            Self::AckedButMissing(acked) => write!(
                f,
                "partition {}: acknowledged batch producer {} epoch {} sequence {} is not stored",
                acked.partition, acked.producer_id, acked.epoch, acked.sequence
            ),
            Self::AckedButDifferent { acked, stored } => write!(
                f,
                "partition {}: acknowledged batch producer {} epoch {} sequence {} was acknowledged at offset {:?} with {} records but is stored at {} with {}",
                acked.partition,
                acked.producer_id,
                acked.epoch,
                acked.sequence,
                acked.offset,
                acked.records,
                stored.base_offset,
                stored.records
            ),
            Self::PayloadStoredTwice { id, first, second } => write!(
                f,
                "record {id} stored twice (partition {} offset {}, partition {} offset {})",
                first.0, first.1, second.0, second.1
            ),
            Self::AckedPayloadMissing { acked, id } => write!(
                f,
                "partition {}: record {id} of an acknowledged batch ({} records from {}) is not stored",
                acked.partition,
                acked.records,
                acked.first_payload.unwrap_or(*id)
            ),
            Self::UncommittedVisible {
                partition,
                offset,
                aborted,
            } => write!(
                f,
                "partition {partition}: read_committed was shown the batch at offset {offset}, of a transaction {}",
                if *aborted {
                    "that aborted"
                } else {
                    "still open"
                }
            ),
            Self::CommittedHidden { partition, offset } => write!(
                f,
                "partition {partition}: read_committed was not shown the committed batch at offset {offset}"
            ),
            Self::PollSkip {
                consumer,
                partition,
                generation,
                after,
                missed,
                read,
                torn,
            } => {
                let from = after.map_or_else(
                    || "from its committed offset".to_owned(),
                    |after| format!("after offset {after}"),
                );
                write!(
                    f,
                    "partition {partition}: consumer {consumer} (generation {generation}) was shown offset {read} {from}, skipping offset {missed}{}",
                    if *torn {
                        ", of a committed transaction it was shown other records of"
                    } else {
                        ""
                    }
                )
            }
            Self::NonMonotonic {
                consumer,
                partition,
                generation,
                previous,
                then,
            } => write!(
                f,
                "partition {partition}: consumer {consumer} (generation {generation}) was shown offset {then} after offset {previous}"
            ),
            Self::ConsumerShownUncommitted {
                consumer,
                partition,
                offset,
                aborted,
            } => write!(
                f,
                "partition {partition}: read_committed consumer {consumer} was shown offset {offset}, of a transaction {}",
                if *aborted {
                    "that aborted"
                } else {
                    "still open"
                }
            ),
            Self::ProcessedTwice { id, first, second } => write!(
                f,
                "the processed topic holds record {id} twice (partition {} offset {}, partition {} offset {})",
                first.0, first.1, second.0, second.1
            ),
            Self::NeverProcessed { acked, id } => write!(
                f,
                "partition {}: committed record {id} was never written to the processed topic, though its processors read to the end",
                acked.partition
            ),
            Self::ProcessedOutOfOrder {
                partition,
                earlier,
                later,
            } => write!(
                f,
                "partition {partition}: the processed topic holds record {} (input offset {}) before record {} (input offset {})",
                earlier.0, earlier.1, later.0, later.1
            ),
            Self::NeverConsumed { group, acked, id } => write!(
                f,
                "partition {}: record {id} of an acknowledged batch was never shown to group {group}, whose consumers read to the end",
                acked.partition
            ),
            Self::AbortedRecordCommitted { sent, id, at } => write!(
                f,
                "partition {}: record {id} is stored as committed at offset {}, but its producer {} (epoch {}, sequence {}) aborted the transaction it sent it in",
                at.0, at.1, sent.producer_id, sent.epoch, sent.sequence
            ),
        }
    }
}

/// Violations of each anomaly printed in a report (the rest are counted).
const WITNESSES_SHOWN: usize = 5;

/// What the verifier found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The topic checked.
    pub topic: String,
    /// Partitions read.
    pub partitions: usize,
    /// Batches stored.
    pub batches: usize,
    /// Records stored.
    pub records: usize,
    /// Distinct producer ids seen.
    pub producers: usize,
    /// Acknowledged batches checked (0 without an expectation).
    pub acknowledged_checked: usize,
    /// Records that carry a payload id (each checked to be stored once).
    pub payloads: usize,
    /// Batches written without a producer id (-1: a producer that is not idempotent). The
    /// sequence rules do not apply to them, so they are counted, not flagged.
    pub without_producer_id: usize,
    /// How the topic's transactions ended, when it was read `read_committed` too.
    pub transactions: Option<crate::TransactionSummary>,
    /// What consumers in groups were shown, when they read the topic while it was written.
    pub consumed: Option<crate::ConsumedSummary>,
    /// Records in a pipeline's output topic, when processors wrote one.
    pub processed: Option<usize>,
    /// Everything wrong.
    pub violations: Vec<Violation>,
}

impl Report {
    /// Whether every invariant held.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "topic {}: {} partition(s), {} batches, {} records from {} producer(s)",
            self.topic, self.partitions, self.batches, self.records, self.producers
        )?;
        if self.acknowledged_checked > 0 {
            writeln!(
                f,
                "acknowledged batches checked: {}",
                self.acknowledged_checked
            )?;
        }
        if self.payloads > 0 {
            writeln!(f, "records with a payload id checked: {}", self.payloads)?;
        }
        if self.without_producer_id > 0 {
            writeln!(
                f,
                "batches without a producer id (not idempotent: judged by their payload ids only): {}",
                self.without_producer_id
            )?;
        }
        if let Some(transactions) = &self.transactions {
            writeln!(f, "{transactions}")?;
        }
        if self.passed() {
            write!(
                f,
                "PASS: exactly-once held (no duplicates, no gaps, no zombie writes"
            )?;
            if self.acknowledged_checked > 0 {
                write!(f, ", every acknowledged batch stored once")?;
            }
            if self.transactions.is_some() {
                write!(f, ", read_committed sees exactly the committed batches")?;
            }
            write!(f, ")")
        } else {
            // Each anomaly found, with how often, then the first few of each way it was seen
            // (in the store, by a consumer): the witnesses.
            let mut seen: Vec<(&str, std::mem::Discriminant<Violation>, Vec<&Violation>)> =
                Vec::new();
            for violation in &self.violations {
                let (anomaly, kind) = (violation.anomaly(), std::mem::discriminant(violation));
                match seen
                    .iter_mut()
                    .find(|(name, of, _)| *name == anomaly && *of == kind)
                {
                    Some((_, _, found)) => found.push(violation),
                    None => seen.push((anomaly, kind, vec![violation])),
                }
            }
            // How many of each anomaly, however seen, in the order first found.
            let mut counts: Vec<(&str, usize)> = Vec::new();
            for (name, _, found) in &seen {
                match counts.iter_mut().find(|(counted, _)| counted == name) {
                    Some((_, count)) => *count += found.len(),
                    None => counts.push((name, found.len())),
                }
            }
            let counts: Vec<String> = counts
                .iter()
                .map(|(name, count)| format!("{name} {count}"))
                .collect();
            writeln!(
                f,
                "FAIL: {} violation(s): {}",
                self.violations.len(),
                counts.join(", ")
            )?;
            for (name, _, found) in &seen {
                for violation in found.iter().take(WITNESSES_SHOWN) {
                    writeln!(f, "  - [{name}] {violation}")?;
                }
                if found.len() > WITNESSES_SHOWN {
                    writeln!(
                        f,
                        "  - [{name}] ... and {} more",
                        found.len() - WITNESSES_SHOWN
                    )?;
                }
            }
            Ok(())
        }
    }
}

/// Checks the invariants over `logs`, and over `acknowledged` if given.
#[must_use]
pub fn check(topic: &str, logs: &[PartitionLog], acknowledged: Option<&[AckedBatch]>) -> Report {
    let mut report = Report {
        topic: topic.to_owned(),
        partitions: logs.len(),
        ..Report::default()
    };
    let mut producers = HashSet::new();
    let mut stored = Stored::new();
    for log in logs {
        check_partition(log, &mut stored, &mut report);
        producers.extend(
            log.batches
                .iter()
                .map(|b| b.producer_id)
                .filter(|&id| id != NO_PRODUCER_ID),
        );
    }
    report.producers = producers.len();
    let payloads = stored_payloads(logs, &mut report);
    for acked in acknowledged.unwrap_or_default() {
        check_acknowledged(acked, &stored, &payloads, &mut report);
    }
    report
}

/// Payload id → where it is stored first (partition, offset); a second copy is a violation.
type Payloads = HashMap<PayloadId, (u32, i64)>;

/// Adds to `report` every record of `aborted` — batches their producer sent in transactions it
/// then aborted — that `logs` store as committed (their data of aborted transactions left out,
/// as [`PartitionLog::payloads`] says), unless `committed` (the acknowledged batches of
/// committed transactions) carries the same id: a producer may write an aborted record again.
pub fn check_aborted(
    logs: &[PartitionLog],
    aborted: &[AckedBatch],
    committed: &[AckedBatch],
    report: &mut Report,
) {
    let written_again: HashSet<PayloadId> =
        committed.iter().flat_map(AckedBatch::payload_ids).collect();
    let stored: Payloads = logs
        .iter()
        .flat_map(|log| {
            log.payloads
                .iter()
                .map(|p| (p.id, (log.partition, p.offset)))
        })
        .collect();
    for sent in aborted {
        let shown = sent
            .payload_ids()
            .filter(|id| !written_again.contains(id))
            .find_map(|id| Some((id, *stored.get(&id)?)));
        if let Some((id, at)) = shown {
            report.violations.push(Violation::AbortedRecordCommitted {
                sent: *sent,
                id,
                at,
            });
        }
    }
}

/// Every payload id of `logs`, each copy after the first reported.
fn stored_payloads(logs: &[PartitionLog], report: &mut Report) -> Payloads {
    let mut payloads = Payloads::new();
    for log in logs {
        for payload in &log.payloads {
            let here = (log.partition, payload.offset);
            match payloads.entry(payload.id) {
                std::collections::hash_map::Entry::Occupied(first) => {
                    report.violations.push(Violation::PayloadStoredTwice {
                        id: payload.id,
                        first: *first.get(),
                        second: here,
                    });
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(here);
                }
            }
        }
    }
    report.payloads = payloads.len();
    payloads
}

/// The producer id of a batch written by a producer that is not idempotent.
const NO_PRODUCER_ID: i64 = -1;

/// (partition, producer, epoch, base sequence) → the stored batch.
type Stored = HashMap<(u32, i64, i16, i32), StoredBatch>;

/// Invariants 1 to 3 over one partition's batches, in log order.
fn check_partition(log: &PartitionLog, stored: &mut Stored, report: &mut Report) {
    // producer → (epoch, the sequence its next batch must start at) in this partition.
    let mut progress: HashMap<i64, (i16, i32)> = HashMap::new();
    for batch in &log.batches {
        report.batches += 1;
        report.records += batch.records;
        if batch.producer_id == NO_PRODUCER_ID {
            report.without_producer_id += 1;
            continue;
        }
        let key = (
            log.partition,
            batch.producer_id,
            batch.epoch,
            batch.sequence,
        );
        if let Some(first) = stored.get(&key) {
            report.violations.push(Violation::StoredTwice {
                partition: log.partition,
                producer_id: batch.producer_id,
                epoch: batch.epoch,
                sequence: batch.sequence,
                offsets: (first.base_offset, batch.base_offset),
            });
        } else {
            stored.insert(key, *batch);
        }
        let expected = match progress.get(&batch.producer_id) {
            Some(&(epoch, _)) if batch.epoch < epoch => {
                report.violations.push(Violation::EpochWentBack {
                    partition: log.partition,
                    producer_id: batch.producer_id,
                    newer: epoch,
                    older: batch.epoch,
                    offset: batch.base_offset,
                });
                None
            }
            Some(&(epoch, next)) if batch.epoch == epoch => Some(next),
            // First batch of the producer here, or of a new epoch: it starts at 0.
            _ => Some(0),
        };
        if let Some(expected) = expected.filter(|e| *e != batch.sequence) {
            report.violations.push(Violation::NotContiguous {
                partition: log.partition,
                producer_id: batch.producer_id,
                epoch: batch.epoch,
                expected,
                found: batch.sequence,
                offset: batch.base_offset,
            });
        }
        let newest = progress
            .get(&batch.producer_id)
            .map_or(batch.epoch, |p| p.0.max(batch.epoch));
        if newest == batch.epoch
            && let Some(sequences) = batch.sequences()
        {
            progress.insert(batch.producer_id, (batch.epoch, sequences.following()));
        }
    }
}

/// Invariant 4 for one acknowledged batch: by its records' payload ids if it names them, and by
/// its producer metadata if it has any.
fn check_acknowledged(
    acked: &AckedBatch,
    stored: &Stored,
    payloads: &Payloads,
    report: &mut Report,
) {
    report.acknowledged_checked += 1;
    if let Some(id) = acked.first_missing(|id| payloads.contains_key(id)) {
        report
            .violations
            .push(Violation::AckedPayloadMissing { acked: *acked, id });
    }
    if acked.producer_id == NO_PRODUCER_ID {
        return;
    }
    let key = (
        acked.partition,
        acked.producer_id,
        acked.epoch,
        acked.sequence,
    );
    match stored.get(&key) {
        None => report.violations.push(Violation::AckedButMissing(*acked)),
        Some(batch) => {
            let offset_differs = acked.offset.is_some_and(|o| o != batch.base_offset);
            if offset_differs || acked.records != batch.records {
                report.violations.push(Violation::AckedButDifferent {
                    acked: *acked,
                    stored: *batch,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base_offset: i64, producer_id: i64, epoch: i16, sequence: i32) -> StoredBatch {
        StoredBatch {
            base_offset,
            producer_id,
            epoch,
            sequence,
            records: 1,
        }
    }

    fn log(batches: Vec<StoredBatch>) -> Vec<PartitionLog> {
        vec![PartitionLog {
            partition: 0,
            batches,
            payloads: Vec::new(),
        }]
    }

    #[test]
    fn batches_without_a_producer_id_are_counted_not_flagged() {
        let log = PartitionLog {
            partition: 0,
            batches: vec![
                batch(0, -1, -1, -1),
                batch(1, -1, -1, -1),
                batch(2, 7, 0, 0),
            ],
            payloads: Vec::new(),
        };
        let report = check("t", &[log], None);
        assert!(report.passed(), "{report}");
        assert_eq!(report.without_producer_id, 2);
        assert_eq!(report.producers, 1);
        assert_eq!(report.batches, 3);
    }

    fn acked(producer_id: i64, epoch: i16, sequence: i32, offset: Option<i64>) -> AckedBatch {
        AckedBatch {
            partition: 0,
            producer_id,
            epoch,
            sequence,
            offset,
            records: 1,
            first_payload: None,
        }
    }

    #[test]
    fn a_clean_log_passes() {
        let logs = log(vec![
            batch(0, 1, 0, 0),
            batch(1, 2, 0, 0),
            batch(2, 1, 0, 1),
            batch(3, 1, 1, 0),
        ]);
        let acks = [
            acked(1, 0, 0, Some(0)),
            acked(1, 0, 1, None),
            acked(1, 1, 0, Some(3)),
        ];
        let report = check("t", &logs, Some(&acks));
        assert!(report.passed(), "{report}");
        assert_eq!(
            (
                report.batches,
                report.producers,
                report.acknowledged_checked
            ),
            (4, 2, 3)
        );
    }

    #[test]
    fn a_batch_stored_twice_is_caught() {
        let report = check("t", &log(vec![batch(0, 1, 0, 0), batch(1, 1, 0, 0)]), None);
        assert!(matches!(
            report.violations[0],
            Violation::StoredTwice {
                offsets: (0, 1),
                ..
            }
        ));
    }

    #[test]
    fn a_gap_is_caught() {
        let report = check("t", &log(vec![batch(0, 1, 0, 0), batch(1, 1, 0, 2)]), None);
        assert!(matches!(
            report.violations[0],
            Violation::NotContiguous {
                expected: 1,
                found: 2,
                ..
            }
        ));
    }

    #[test]
    fn a_first_batch_not_at_zero_is_caught() {
        let report = check("t", &log(vec![batch(0, 1, 0, 3)]), None);
        assert!(matches!(
            report.violations[0],
            Violation::NotContiguous { expected: 0, .. }
        ));
    }

    #[test]
    fn batches_span_one_sequence_per_record() {
        let multi = |base_offset, sequence, records| StoredBatch {
            records,
            ..batch(base_offset, 1, 0, sequence)
        };
        // 0..=2, then 3..=3, then 4..=5: contiguous.
        let clean = log(vec![multi(0, 0, 3), multi(3, 3, 1), multi(4, 4, 2)]);
        assert!(check("t", &clean, None).passed());
        // A batch starting at 1 after one spanning 0..=2 overlaps it.
        let overlap = check("t", &log(vec![multi(0, 0, 3), multi(3, 1, 1)]), None);
        assert!(matches!(
            overlap.violations[0],
            Violation::NotContiguous {
                expected: 3,
                found: 1,
                ..
            }
        ));
    }

    #[test]
    fn a_zombie_write_is_caught() {
        let report = check("t", &log(vec![batch(0, 1, 1, 0), batch(1, 1, 0, 5)]), None);
        assert!(matches!(
            report.violations[0],
            Violation::EpochWentBack {
                newer: 1,
                older: 0,
                ..
            }
        ));
    }

    #[test]
    fn a_missing_or_misplaced_ack_is_caught() {
        let logs = log(vec![batch(0, 1, 0, 0)]);
        let report = check("t", &logs, Some(&[acked(1, 0, 1, None)]));
        assert!(matches!(
            report.violations[0],
            Violation::AckedButMissing(_)
        ));
        let report = check("t", &logs, Some(&[acked(1, 0, 0, Some(7))]));
        assert!(matches!(
            report.violations[0],
            Violation::AckedButDifferent { .. }
        ));
        assert!(report.to_string().contains("FAIL"));
    }

    fn payload(offset: i64, writer: u64, index: u64) -> StoredPayload {
        StoredPayload {
            offset,
            id: PayloadId::first(writer, 0).after(index),
        }
    }

    /// A log of batches without producer ids (a producer that is not idempotent), one record
    /// each, whose values are `payloads`.
    fn plain_log(partition: u32, payloads: &[(i64, u64)]) -> PartitionLog {
        PartitionLog {
            partition,
            batches: payloads
                .iter()
                .map(|&(offset, _)| batch(offset, -1, -1, -1))
                .collect(),
            payloads: payloads
                .iter()
                .map(|&(offset, index)| payload(offset, 9, index))
                .collect(),
        }
    }

    #[test]
    fn a_payload_stored_twice_is_caught_whatever_the_metadata() {
        let logs = [plain_log(0, &[(0, 0), (1, 1)]), plain_log(1, &[(0, 1)])];
        let report = check("t", &logs, None);
        assert_eq!(
            report.violations,
            vec![Violation::PayloadStoredTwice {
                id: PayloadId::first(9, 0).after(1),
                first: (0, 1),
                second: (1, 0),
            }]
        );
        assert_eq!(report.payloads, 2);
    }

    #[test]
    fn an_acknowledged_payload_not_stored_is_caught_whatever_the_metadata() {
        let logs = [plain_log(0, &[(0, 0), (1, 1), (2, 3)])];
        let acked_batch = |index, records| AckedBatch {
            partition: 0,
            producer_id: -1,
            epoch: -1,
            sequence: -1,
            offset: None,
            records,
            first_payload: Some(PayloadId::first(9, 0).after(index)),
        };
        let whole = check("t", &logs, Some(&[acked_batch(0, 2)]));
        assert!(whole.passed(), "{whole}");
        let report = check("t", &logs, Some(&[acked_batch(1, 2)]));
        assert_eq!(
            report.violations,
            vec![Violation::AckedPayloadMissing {
                acked: acked_batch(1, 2),
                id: PayloadId::first(9, 0).after(2),
            }]
        );
        assert!(
            report
                .to_string()
                .contains("record p9-2 of an acknowledged batch")
        );
    }

    #[test]
    fn a_record_of_an_aborted_transaction_stored_as_committed_is_an_aborted_read() {
        // p9-0 and p9-1 were sent in a transaction the producer aborted; p9-1 was written again
        // in a committed one; p9-0 is stored as committed all the same.
        let logs = [plain_log(0, &[(0, 0), (1, 1)])];
        let sent = |index, records| AckedBatch {
            partition: 0,
            producer_id: 9,
            epoch: 0,
            sequence: 0,
            offset: None,
            records,
            first_payload: Some(PayloadId::first(9, 0).after(index)),
        };
        let mut report = Report::default();
        check_aborted(&logs, &[sent(1, 1)], &[sent(1, 1)], &mut report);
        assert!(report.passed(), "written again: {report}");
        check_aborted(&logs, &[sent(0, 2)], &[sent(1, 1)], &mut report);
        assert_eq!(
            report.violations,
            vec![Violation::AbortedRecordCommitted {
                sent: sent(0, 2),
                id: PayloadId::first(9, 0),
                at: (0, 0),
            }]
        );
        assert_eq!(report.violations[0].anomaly(), "aborted-read");
        assert!(
            report
                .to_string()
                .contains("[aborted-read] partition 0: record p9-0")
        );
    }

    #[test]
    fn acks_without_payload_ids_read_as_before() {
        let line =
            r#"{"partition":0,"producer_id":1,"epoch":0,"sequence":0,"offset":0,"records":1}"#;
        let acked: AckedBatch = serde_json::from_str(line).expect("an older acks line");
        assert_eq!(acked.first_payload, None);
        assert_eq!(serde_json::to_string(&acked).expect("encodes"), line);
    }
}
