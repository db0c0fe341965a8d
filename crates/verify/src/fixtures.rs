//! Batches as a Fetch returns them, made by hand for the verifier's unit tests.

use crate::isolation::FetchedBatch;
use crate::{PayloadId, StoredPayload};
use minibroker_records::BatchInfo;

/// A data batch of producer `producer` at `base` with `records` records (one offset each), its
/// records carrying the payload ids `p<producer>-<offset>`.
pub(crate) fn data(base: i64, records: i64, producer: i64, transactional: bool) -> FetchedBatch {
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
