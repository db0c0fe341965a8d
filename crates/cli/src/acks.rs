//! Turning a producer's acknowledgements into the verifier's expectation records.

use minibroker_client::{Ack, Producer};
use minibroker_verify::AckedBatch;

/// What the producer was told about `acks`, sent to `partition`, with `records` per batch in
/// order (`records[i]` belongs to `acks[i]`).
pub fn acked_batches(
    producer: &Producer,
    partition: u32,
    acks: &[Ack],
    records: impl IntoIterator<Item = usize>,
) -> Vec<AckedBatch> {
    acks.iter()
        .zip(records)
        .map(|(ack, records)| AckedBatch {
            partition,
            producer_id: producer.producer_id(),
            epoch: producer.epoch(),
            sequence: ack.sequence,
            offset: ack.base_offset,
            records,
        })
        .collect()
}
