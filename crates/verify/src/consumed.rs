//! The read side: what consumers in groups were shown while the topic was written, judged
//! against the topic as it ended up (every batch and marker, read back afterwards).
//!
//! A consumer's reads of one partition from one start form a *session*: a start is each
//! assignment (a generation of its group) and each rewind to the committed offsets (after a
//! transaction that carried them aborted). It starts at the offset the group had committed (the
//! log's start without one) and must then be shown every record it may see, in order. What it may see is, at
//! `read_uncommitted`, every data record; at `read_committed`, the records of committed
//! transactions and of no transaction. So, in a session:
//! - a record shown at or below the one before it is a **nonmonotonic offset**;
//! - a record it may see, not shown although a later one was, is a **poll skip** — a **torn
//!   transaction** when the session was shown other records of the transaction it skipped;
//! - at `read_committed`, a record of an aborted transaction is an **aborted read**, and one of a
//!   transaction still open an **uncommitted read**.
//!
//! And for a group whose consumers read every partition to its end, an acknowledged record of a
//! committed transaction (or of no transaction) that none of them was shown is a **lost
//! write**. A session ends when its partition is taken away; the next owner starts again from
//! the committed offset, so records shown twice across sessions are redelivery, not a fault.

use std::collections::{HashMap, HashSet};

use minibroker_kafka_client::{Assigned, Polled};

use crate::isolation::{Fate, PartitionReads, fates};
use crate::{AckedBatch, PayloadId, Report, Violation};

/// What one consumer — one member of a group, from its join to its leaving — was shown.
#[derive(Debug, Clone, Default)]
pub struct ConsumerLog {
    /// Its name in the report (such as `committed-1.2`).
    pub name: String,
    /// The assignments it was given, in order.
    pub assignments: Vec<Assigned>,
    /// Every poll's answer per partition, in order.
    pub polls: Vec<Polled>,
}

/// One group's consumers.
#[derive(Debug, Clone, Default)]
pub struct GroupRead {
    /// The group.
    pub group: String,
    /// Whether its consumers read `read_committed`.
    pub read_committed: bool,
    /// Its consumers, each member apart.
    pub consumers: Vec<ConsumerLog>,
    /// Whether, between them, they read every partition to its end: only then is a record none
    /// was shown lost.
    pub caught_up: bool,
}

/// What the consumers did, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConsumedSummary {
    /// Groups.
    pub groups: usize,
    /// Members, each restart a new one.
    pub consumers: usize,
    /// Assignments given (a rebalance gives each member one).
    pub assignments: usize,
    /// Records shown, redeliveries included.
    pub records: usize,
    /// Groups that read every partition to its end.
    pub caught_up: usize,
}

/// One partition's records as the topic ended up: which of them a consumer may see.
struct Partition {
    /// Every data record's offset, in order, with its batch's fate and, for a committed
    /// transaction's, the offset of the marker that ended it.
    records: Vec<(i64, Fate, Option<i64>)>,
    /// Each data record's payload id.
    payloads: HashMap<i64, PayloadId>,
}

impl Partition {
    fn of(read: &PartitionReads) -> Self {
        let fates = fates(&read.all);
        let ends = transaction_ends(read);
        let mut records = Vec::new();
        let mut payloads = HashMap::new();
        for batch in read.all.iter().filter(|b| !b.info.control) {
            let fate = fates
                .get(&batch.base_offset)
                .copied()
                .unwrap_or(Fate::Plain);
            let end = ends.get(&batch.base_offset).copied();
            for payload in &batch.payloads {
                records.push((payload.offset, fate, end));
                payloads.insert(payload.offset, payload.id);
            }
        }
        records.sort_unstable_by_key(|&(offset, _, _)| offset);
        Self { records, payloads }
    }

    /// Whether a consumer may be shown the record at this place.
    fn visible(read_committed: bool, fate: Fate) -> bool {
        !read_committed || matches!(fate, Fate::Committed | Fate::Plain)
    }

    /// The first record at or after `offset` a consumer may see: (offset, its transaction's end).
    fn next_visible(&self, offset: i64, read_committed: bool) -> Option<(i64, Option<i64>)> {
        let from = self.records.partition_point(|&(o, _, _)| o < offset);
        self.records[from..]
            .iter()
            .find(|&&(_, fate, _)| Self::visible(read_committed, fate))
            .map(|&(o, _, end)| (o, end))
    }

    fn record(&self, offset: i64) -> Option<(Fate, Option<i64>)> {
        let at = self
            .records
            .binary_search_by_key(&offset, |&(o, _, _)| o)
            .ok()?;
        let (_, fate, end) = self.records[at];
        Some((fate, end))
    }
}

/// For each transactional data batch whose transaction ended, the offset of its marker.
fn transaction_ends(read: &PartitionReads) -> HashMap<i64, i64> {
    let mut pending: HashMap<i64, Vec<i64>> = HashMap::new();
    let mut ends = HashMap::new();
    for batch in &read.all {
        let producer = batch.info.producer_id;
        if batch.commit.is_some() {
            for offset in pending.remove(&producer).unwrap_or_default() {
                ends.insert(offset, batch.base_offset);
            }
        } else if batch.info.transactional {
            pending.entry(producer).or_default().push(batch.base_offset);
        }
    }
    ends
}

/// Judges every group's reads against `reads` (the topic read back, every batch and marker),
/// and, for groups that read to the end, against `committed` (acknowledged batches of
/// committed transactions, or of none); adds the summary and every violation to `report`.
pub fn check_consumers(
    reads: &[PartitionReads],
    groups: &[GroupRead],
    committed: &[AckedBatch],
    report: &mut Report,
) {
    let partitions: HashMap<u32, Partition> = reads
        .iter()
        .map(|read| (read.partition, Partition::of(read)))
        .collect();
    let mut summary = ConsumedSummary {
        groups: groups.len(),
        ..ConsumedSummary::default()
    };
    for group in groups {
        summary.consumers += group.consumers.len();
        summary.caught_up += usize::from(group.caught_up);
        let mut shown: HashSet<PayloadId> = HashSet::new();
        for consumer in &group.consumers {
            summary.assignments += consumer.assignments.len();
            for assigned in &consumer.assignments {
                for (&partition, &start) in &assigned.partitions {
                    let Some(log) = u32::try_from(partition)
                        .ok()
                        .and_then(|p| partitions.get(&p))
                    else {
                        continue;
                    };
                    let session = Session {
                        consumer: &consumer.name,
                        partition,
                        generation: assigned.generation,
                        read_committed: group.read_committed,
                    };
                    let offsets: Vec<i64> = consumer
                        .polls
                        .iter()
                        .filter(|p| p.session == assigned.session && p.partition == partition)
                        .flat_map(|p| p.records.iter().map(|r| r.offset))
                        .collect();
                    summary.records += offsets.len();
                    shown.extend(offsets.iter().filter_map(|o| log.payloads.get(o)));
                    session.judge(log, start.unwrap_or(0), &offsets, report);
                }
            }
        }
        if group.caught_up {
            never_shown(&group.group, committed, &shown, report);
        }
    }
    report.consumed = Some(summary);
}

/// One consumer's reads of one partition under one assignment.
struct Session<'a> {
    consumer: &'a str,
    partition: i32,
    generation: i32,
    read_committed: bool,
}

impl Session<'_> {
    /// Judges `offsets`, the records shown in order, from `start`.
    fn judge(&self, log: &Partition, start: i64, offsets: &[i64], report: &mut Report) {
        let partition = self.partition.unsigned_abs();
        let mut previous: Option<i64> = None;
        // Skips found, and the transactions whose records the session was shown.
        let mut skips: Vec<(Option<i64>, i64, i64, Option<i64>)> = Vec::new();
        let mut transactions_shown: HashSet<i64> = HashSet::new();
        for &offset in offsets {
            if let Some(before) = previous
                && offset <= before
            {
                report.violations.push(Violation::NonMonotonic {
                    consumer: self.consumer.to_owned(),
                    partition,
                    generation: self.generation,
                    previous: before,
                    then: offset,
                });
                continue;
            }
            let Some((fate, end)) = log.record(offset) else {
                // Not a data record of the topic as read back: judged by the store's checks.
                previous = Some(offset);
                continue;
            };
            if !Partition::visible(self.read_committed, fate) {
                report.violations.push(Violation::ConsumerShownUncommitted {
                    consumer: self.consumer.to_owned(),
                    partition,
                    offset,
                    aborted: fate == Fate::Aborted,
                });
            }
            transactions_shown.extend(end);
            let expected = previous.map_or(start, |before| before + 1);
            if let Some((missed, missed_end)) = log.next_visible(expected, self.read_committed)
                && missed < offset
            {
                skips.push((previous, missed, offset, missed_end));
            }
            previous = Some(offset);
        }
        for (after, missed, read, missed_end) in skips {
            report.violations.push(Violation::PollSkip {
                consumer: self.consumer.to_owned(),
                partition,
                generation: self.generation,
                after,
                missed,
                read,
                torn: missed_end.is_some_and(|end| transactions_shown.contains(&end)),
            });
        }
    }
}

/// Adds a lost write for each record of `committed` that `group` was never shown.
fn never_shown(
    group: &str,
    committed: &[AckedBatch],
    shown: &HashSet<PayloadId>,
    report: &mut Report,
) {
    for acked in committed {
        if let Some(id) = acked.first_missing(|id| shown.contains(id)) {
            report.violations.push(Violation::NeverConsumed {
                group: group.to_owned(),
                acked: *acked,
                id,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PartitionReads;
    use minibroker_kafka_client::PolledRecord;
    use std::collections::BTreeMap;

    use crate::isolation::fixtures::{data as batch, marker};

    /// Partition 0: producer 1 commits 0-2 (marker 3), producer 2 aborts 4-5 (marker 6), a plain
    /// batch 7-8.
    fn topic() -> Vec<PartitionReads> {
        vec![PartitionReads {
            partition: 0,
            all: vec![
                batch(0, 3, 1, true),
                marker(3, 1, true),
                batch(4, 2, 2, true),
                marker(6, 2, false),
                batch(7, 2, 3, false),
            ],
            committed: None,
        }]
    }

    /// One consumer shown `offsets` of partition 0 in one poll, from `start`.
    fn group(read_committed: bool, start: Option<i64>, offsets: &[i64]) -> GroupRead {
        GroupRead {
            group: "g".into(),
            read_committed,
            consumers: vec![ConsumerLog {
                name: "c".into(),
                assignments: vec![Assigned {
                    session: 1,
                    generation: 1,
                    partitions: BTreeMap::from([(0, start)]),
                }],
                polls: vec![Polled {
                    session: 1,
                    generation: 1,
                    partition: 0,
                    from: start.unwrap_or(0),
                    records: offsets
                        .iter()
                        .map(|&offset| PolledRecord {
                            offset,
                            value: bytes::Bytes::new(),
                        })
                        .collect(),
                }],
            }],
            caught_up: true,
        }
    }

    fn judged(group: &GroupRead, committed: &[AckedBatch]) -> Report {
        let mut report = Report::default();
        check_consumers(
            &topic(),
            std::slice::from_ref(group),
            committed,
            &mut report,
        );
        report
    }

    fn anomalies(report: &Report) -> Vec<&'static str> {
        report.violations.iter().map(Violation::anomaly).collect()
    }

    #[test]
    fn a_faithful_read_passes_at_either_isolation() {
        assert!(judged(&group(true, None, &[0, 1, 2, 7, 8]), &[]).passed());
        assert!(judged(&group(false, None, &[0, 1, 2, 4, 5, 7, 8]), &[]).passed());
        // From a committed offset in the middle.
        assert!(judged(&group(true, Some(2), &[2, 7, 8]), &[]).passed());
    }

    #[test]
    fn each_anomaly_is_named() {
        let read = |offsets: &[i64]| anomalies(&judged(&group(true, None, offsets), &[]));
        assert_eq!(read(&[0, 1, 2, 4, 7, 8]), ["aborted-read"]);
        assert_eq!(read(&[0, 1, 2, 8]), ["poll-skip"]);
        // Offsets 0 and 2 of one transaction shown, 1 skipped.
        assert_eq!(read(&[0, 2, 7, 8]), ["torn-transaction"]);
        assert_eq!(read(&[0, 1, 2, 1, 7, 8]), ["nonmonotonic-offsets"]);
        // Started past the committed offset.
        assert_eq!(
            anomalies(&judged(&group(true, Some(1), &[2, 7, 8]), &[])),
            ["torn-transaction"]
        );
    }

    #[test]
    fn an_acknowledged_record_no_consumer_was_shown_is_lost() {
        let acked = AckedBatch {
            partition: 0,
            producer_id: 3,
            epoch: 0,
            sequence: 0,
            offset: Some(7),
            records: 2,
            first_payload: Some(PayloadId::first(3, 0).after(7)),
        };
        assert!(judged(&group(true, None, &[0, 1, 2, 7, 8]), &[acked]).passed());
        let report = judged(&group(true, None, &[0, 1, 2, 7]), &[acked]);
        assert_eq!(anomalies(&report), ["lost-write"]);
        let mut unfinished = group(true, None, &[0, 1, 2, 7]);
        unfinished.caught_up = false;
        assert!(
            judged(&unfinished, &[acked]).passed(),
            "not read to the end"
        );
    }
}
