//! Turning a producer's acknowledgements into the verifier's expectation records.

use minibroker_client::{Ack, Producer};
use minibroker_verify::AckedBatch;

/// What the producer was told about `acks`, sent to `partition`.
pub fn acked_batches(producer: &Producer, partition: u32, acks: &[Ack]) -> Vec<AckedBatch> {
    acks.iter()
        .map(|ack| AckedBatch {
            partition,
            producer_id: producer.producer_id(),
            epoch: producer.epoch(),
            sequence: ack.sequence,
            offset: ack.base_offset,
            records: ack.records as usize,
        })
        .collect()
}
