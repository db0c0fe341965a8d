//! A consume-transform-produce pipeline's output, judged against its input: processors read the
//! input topic `read_committed` and wrote each record to the output topic (to the partition of
//! the same number), committing their group's offsets in the same transaction. If the broker
//! keeps the offsets and the output together, as one transaction, the output holds every
//! committed input record exactly once — a record written in a transaction whose offsets were
//! lost is written again (a **duplicate**), one whose offsets committed without its output is
//! never written again (a **lost write**) — and each partition in its input's order (else
//! **reordered output**: a processor's transactions committed out of the order of its offsets).

use std::collections::HashMap;

use crate::isolation::PartitionReads;
use crate::{AckedBatch, PayloadId, Report, Violation};

/// Judges `output` (read back, every batch and marker) against `input`: no committed input
/// record twice in the output and each partition in order; with `complete` (the processors read
/// every input partition to its end), every record of `committed` (the input's acknowledged
/// batches of committed transactions) there. Adds the count of output records and every
/// violation to `report`.
pub fn check_pipeline(
    input: &[PartitionReads],
    output: &[PartitionReads],
    (committed, complete): (&[AckedBatch], bool),
    report: &mut Report,
) {
    // Where each input record is: (partition, offset).
    let read_from: HashMap<PayloadId, (u32, i64)> = input
        .iter()
        .flat_map(|read| {
            let log = read.data_log();
            let partition = log.partition;
            log.payloads
                .into_iter()
                .map(move |payload| (payload.id, (partition, payload.offset)))
        })
        .collect();
    let mut written: HashMap<PayloadId, (u32, i64)> = HashMap::new();
    for read in output {
        let log = read.data_log();
        let mut last_input: Option<(PayloadId, i64)> = None;
        for payload in &log.payloads {
            let here = (log.partition, payload.offset);
            if let Some(&first) = written.get(&payload.id) {
                report.violations.push(Violation::ProcessedTwice {
                    id: payload.id,
                    first,
                    second: here,
                });
                continue;
            }
            written.insert(payload.id, here);
            let Some(&(from, input_offset)) = read_from.get(&payload.id) else {
                continue;
            };
            if from != log.partition {
                continue;
            }
            if let Some((before, before_offset)) = last_input
                && input_offset < before_offset
            {
                report.violations.push(Violation::ProcessedOutOfOrder {
                    partition: log.partition,
                    earlier: (before, before_offset),
                    later: (payload.id, input_offset),
                });
            }
            last_input = Some((payload.id, input_offset));
        }
    }
    report.processed = Some(written.len());
    if !complete {
        return;
    }
    for acked in committed {
        if let Some(id) = acked.first_missing(|id| written.contains_key(id)) {
            report
                .violations
                .push(Violation::NeverProcessed { acked: *acked, id });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition of plain batches of one record each, the record at offset `i` carrying
    /// `p<writer>-<ids[i]>`.
    fn topic(partition: u32, writer: u64, ids: &[u64]) -> PartitionReads {
        PartitionReads {
            partition,
            all: ids
                .iter()
                .zip(0..)
                .map(|(&id, offset)| {
                    let mut batch = crate::isolation::fixtures::data(offset, 1, -1, false);
                    batch.payloads[0].id = PayloadId::first(writer, 0).after(id);
                    batch
                })
                .collect(),
            committed: None,
        }
    }

    fn acked(first: u64, records: usize) -> AckedBatch {
        AckedBatch {
            partition: 0,
            producer_id: -1,
            epoch: -1,
            sequence: -1,
            offset: None,
            records,
            first_payload: Some(PayloadId::first(1, 0).after(first)),
        }
    }

    fn judged(output: &[u64], complete: bool) -> Vec<&'static str> {
        let mut report = Report::default();
        let input = [topic(0, 1, &[0, 1, 2, 3])];
        check_pipeline(
            &input,
            &[topic(0, 1, output)],
            (&[acked(0, 4)], complete),
            &mut report,
        );
        report.violations.iter().map(Violation::anomaly).collect()
    }

    #[test]
    fn the_output_holds_every_input_record_once_in_order() {
        assert!(judged(&[0, 1, 2, 3], true).is_empty());
        assert_eq!(judged(&[0, 1, 1, 2, 3], true), ["duplicate"]);
        assert_eq!(judged(&[0, 1, 3], true), ["lost-write"]);
        assert!(judged(&[0, 1, 3], false).is_empty(), "not read to the end");
        assert_eq!(judged(&[0, 2, 1, 3], true), ["reordered-output"]);
    }
}
