//! Turning a producer's acknowledgements into the verifier's expectation records.

use minibroker_client::{Ack, Producer};
use minibroker_verify::{AckedBatch, PayloadId};

/// What the producer was told about `acks`, sent to `partition` in order. When the records carry
/// payload ids, `first_payload` is the first record's; the rest follow it one per record.
pub fn acked_batches(
    producer: &Producer,
    partition: u32,
    acks: &[Ack],
    first_payload: Option<PayloadId>,
) -> Vec<AckedBatch> {
    let mut next_payload = first_payload;
    acks.iter()
        .map(|ack| {
            let first_payload = next_payload;
            next_payload = next_payload.map(|id| id.after(u64::from(ack.records)));
            AckedBatch {
                partition,
                producer_id: producer.producer_id(),
                epoch: producer.epoch(),
                sequence: ack.sequence,
                offset: ack.base_offset,
                records: ack.records as usize,
                first_payload,
            }
        })
        .collect()
}
