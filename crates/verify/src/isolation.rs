//! The check of a transactional topic: what a `read_committed` consumer sees must be exactly
//! the committed data.
//!
//! The log itself says how each transaction ended: a producer's transactional batches on a
//! partition belong to its transaction until its next marker there, COMMIT or ABORT; batches
//! with no marker after them are still open. That is worked out from the `read_uncommitted`
//! read, which returns every batch and every marker. The `read_committed` read is then filtered
//! as Kafka's clients do — its batches stop at the last stable offset, and a transactional batch
//! of a producer the broker names as aborted from before it, up to that producer's ABORT marker,
//! is dropped — and what is left must be every committed and non-transactional batch below the
//! last stable offset, and nothing else: no aborted batch, no open one.

use std::collections::{HashMap, HashSet};
use std::fmt;

use minibroker_records::BatchInfo;

use crate::{Report, Violation};

/// One batch as a Kafka fetch returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedBatch {
    /// Where its first record is.
    pub base_offset: i64,
    /// Its header.
    pub info: BatchInfo,
    /// For a marker, whether it is a COMMIT; `None` for data.
    pub commit: Option<bool>,
    /// Its bytes, when the read keeps them.
    pub bytes: Option<bytes::Bytes>,
    /// Its records that carry a payload id.
    pub payloads: Vec<crate::StoredPayload>,
}

/// One partition as one kind of consumer reads it.
#[derive(Debug, Clone, Default)]
pub struct PartitionRead {
    /// The batches returned, in offset order.
    pub batches: Vec<FetchedBatch>,
    /// The aborted transactions the broker named: (producer id, first offset).
    pub aborted: Vec<(i64, i64)>,
    /// Where the read ended: the high watermark, or for `read_committed` the last stable
    /// offset.
    pub end: i64,
}

/// A partition as a `read_uncommitted` consumer reads it and, when asked, a `read_committed`
/// one.
#[derive(Debug, Clone, Default)]
pub struct PartitionReads {
    /// The partition.
    pub partition: u32,
    /// Every batch and marker, in offset order.
    pub all: Vec<FetchedBatch>,
    /// The `read_committed` read.
    pub committed: Option<PartitionRead>,
}

/// How the transactional data batches of a topic ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TransactionSummary {
    /// Batches whose transaction committed.
    pub committed: usize,
    /// Batches whose transaction aborted.
    pub aborted: usize,
    /// Batches whose transaction has no marker yet.
    pub open: usize,
    /// Data batches a `read_committed` consumer keeps.
    pub visible: usize,
}

impl fmt::Display for TransactionSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "transactional batches: {} committed, {} aborted, {} open; read_committed kept {} data batches",
            self.committed, self.aborted, self.open, self.visible
        )
    }
}

/// How a data batch's transaction ended, from the markers after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Not transactional: always visible.
    Plain,
    Committed,
    Aborted,
    Open,
}

/// Each data batch's fate, by base offset, from every batch and marker of a partition.
pub(crate) fn fates(all: &[FetchedBatch]) -> HashMap<i64, Fate> {
    let mut fates = HashMap::new();
    let mut pending: HashMap<i64, Vec<i64>> = HashMap::new();
    for batch in all {
        let producer = batch.info.producer_id;
        match batch.commit {
            Some(commit) => {
                let fate = if commit {
                    Fate::Committed
                } else {
                    Fate::Aborted
                };
                for offset in pending.remove(&producer).unwrap_or_default() {
                    fates.insert(offset, fate);
                }
            }
            None if batch.info.transactional => {
                pending.entry(producer).or_default().push(batch.base_offset);
            }
            None => {
                fates.insert(batch.base_offset, Fate::Plain);
            }
        }
    }
    for offset in pending.into_values().flatten() {
        fates.insert(offset, Fate::Open);
    }
    fates
}

/// The base offsets of the data batches a `read_committed` client keeps from `read` (Kafka's
/// client rule over the broker's aborted-transaction list).
#[must_use]
pub fn kept_by_client(read: &PartitionRead) -> HashSet<i64> {
    minibroker_kafka_client::kept_by_read_committed(
        read.batches
            .iter()
            .map(|b| (b.base_offset, &b.info, b.commit)),
        &read.aborted,
    )
}

/// Checks every partition's `read_committed` view against how its transactions ended; adds the
/// summary and any violation to `report`.
pub fn check_isolation(reads: &[PartitionReads], report: &mut Report) {
    let mut summary = TransactionSummary::default();
    for partition in reads {
        let fates = fates(&partition.all);
        for fate in fates.values() {
            match fate {
                Fate::Committed => summary.committed += 1,
                Fate::Aborted => summary.aborted += 1,
                Fate::Open => summary.open += 1,
                Fate::Plain => {}
            }
        }
        let Some(committed) = &partition.committed else {
            continue;
        };
        let kept = kept_by_client(committed);
        summary.visible += kept.len();
        let mut offsets: Vec<(&i64, &Fate)> = fates.iter().collect();
        offsets.sort_unstable_by_key(|&(offset, _)| *offset);
        for (&offset, &fate) in offsets {
            let visible = kept.contains(&offset);
            let below_lso = offset < committed.end;
            let violation = match fate {
                Fate::Aborted | Fate::Open if visible => Some(Violation::UncommittedVisible {
                    partition: partition.partition,
                    offset,
                    aborted: fate == Fate::Aborted,
                }),
                Fate::Committed | Fate::Plain if below_lso && !visible => {
                    Some(Violation::CommittedHidden {
                        partition: partition.partition,
                        offset,
                    })
                }
                _ => None,
            };
            report.violations.extend(violation);
        }
    }
    report.transactions = Some(summary);
}

/// Batches as a Fetch returns them, made by hand for the verifier's unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::FetchedBatch;
    use crate::{PayloadId, StoredPayload};
    use minibroker_records::BatchInfo;

    /// A data batch of producer `producer` at `base` with `records` records (one offset each), its
    /// records carrying the payload ids `p<producer>-<offset>`.
    pub(crate) fn data(
        base: i64,
        records: i64,
        producer: i64,
        transactional: bool,
    ) -> FetchedBatch {
        let count = u32::try_from(records).expect("a small count");
        FetchedBatch {
            base_offset: base,
            info: BatchInfo {
                producer_id: producer,
                epoch: 0,
                base_sequence: 0,
                record_count: count,
                offset_count: count,
                transactional,
                control: false,
                compressed: false,
                len: 0,
            },
            commit: None,
            bytes: None,
            payloads: (base..base + records)
                .map(|offset| StoredPayload {
                    offset,
                    id: PayloadId::first(producer.unsigned_abs(), 0).after(offset.unsigned_abs()),
                })
                .collect(),
        }
    }

    /// A COMMIT (`commit`) or ABORT marker of producer `producer` at `base`.
    pub(crate) fn marker(base: i64, producer: i64, commit: bool) -> FetchedBatch {
        let mut marker = data(base, 1, producer, true);
        marker.info.control = true;
        marker.commit = Some(commit);
        marker.payloads.clear();
        marker
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::fixtures::marker;

    /// A one-record batch.
    fn batch(base_offset: i64, producer_id: i64, transactional: bool) -> FetchedBatch {
        super::fixtures::data(base_offset, 1, producer_id, transactional)
    }

    /// Producer 1 commits offset 0, producer 2 aborts offset 1, producer 1 leaves 4 open; a
    /// plain batch at 3.
    fn log() -> Vec<FetchedBatch> {
        vec![
            batch(0, 1, true),
            batch(1, 2, true),
            marker(2, 1, true),
            batch(3, 9, false),
            marker(4, 2, false),
            batch(5, 1, true),
        ]
    }

    fn reads(kept: &[usize], aborted: Vec<(i64, i64)>) -> Vec<PartitionReads> {
        let all = log();
        let batches = kept.iter().map(|&i| all[i].clone()).collect();
        vec![PartitionReads {
            partition: 0,
            all,
            committed: Some(PartitionRead {
                batches,
                aborted,
                end: 5,
            }),
        }]
    }

    #[test]
    fn a_broker_that_names_the_aborted_transaction_passes() {
        let mut report = Report::default();
        check_isolation(&reads(&[0, 1, 2, 3, 4], vec![(2, 1)]), &mut report);
        assert!(report.passed(), "{report}");
        let summary = report.transactions.unwrap();
        assert_eq!(
            (summary.committed, summary.aborted, summary.open),
            (1, 1, 1)
        );
        assert_eq!(summary.visible, 2);
    }

    #[test]
    fn an_aborted_batch_shown_to_read_committed_is_a_violation() {
        // The broker forgot to name the aborted transaction.
        let mut report = Report::default();
        check_isolation(&reads(&[0, 1, 2, 3, 4], vec![]), &mut report);
        assert_eq!(
            report.violations,
            vec![Violation::UncommittedVisible {
                partition: 0,
                offset: 1,
                aborted: true
            }]
        );
    }

    #[test]
    fn an_open_batch_past_the_lso_and_a_hidden_committed_one_are_violations() {
        let mut report = Report::default();
        // Offset 0 (committed) missing; offset 5 (open) shown.
        check_isolation(&reads(&[1, 2, 3, 4, 5], vec![(2, 1)]), &mut report);
        assert_eq!(report.violations.len(), 2, "{report}");
    }
}
