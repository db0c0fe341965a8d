//! Turning a producer's acknowledgements into the verifier's expectation records.

use minibroker_verify::{AckedBatch, PayloadId};

/// Assigns payload ids to acknowledged batches in the order they were sent: when the records
/// carry ids, each batch's first is the one after the previous batch's last.
#[derive(Debug, Clone, Copy)]
pub struct PayloadCursor(Option<PayloadId>);

impl PayloadCursor {
    /// From `first` (the first record's id), or without ids.
    pub fn new(first: Option<PayloadId>) -> Self {
        Self(first)
    }

    /// The payload id the next acknowledged batch starts at.
    pub fn next_id(&self) -> Option<PayloadId> {
        self.0
    }

    /// The acknowledged batch of `records` records; `identity` is (partition, producer id,
    /// epoch, sequence, offset).
    pub fn acked(
        &mut self,
        (partition, producer_id, epoch, sequence, offset): (u32, i64, i16, i32, Option<i64>),
        records: u32,
    ) -> AckedBatch {
        let first_payload = self.0;
        self.0 = self.0.map(|id| id.after(u64::from(records)));
        AckedBatch {
            partition,
            producer_id,
            epoch,
            sequence,
            offset,
            records: records as usize,
            first_payload,
        }
    }
}

/// What the Kafka producer was told about `ack`.
pub fn kafka_acked(
    producer: &minibroker_kafka_client::KafkaProducer,
    ack: &minibroker_kafka_client::KafkaAck,
    payloads: &mut PayloadCursor,
) -> AckedBatch {
    let identity = (
        ack.partition.unsigned_abs(),
        producer.producer_id(),
        producer.epoch(),
        ack.sequence,
        ack.base_offset,
    );
    payloads.acked(identity, ack.records)
}

/// What the native producer was told about `acks`, sent to `partition` in order.
pub fn acked_batches(
    producer: &minibroker_client::Producer,
    partition: u32,
    acks: &[minibroker_client::Ack],
    payloads: &mut PayloadCursor,
) -> Vec<AckedBatch> {
    acks.iter()
        .map(|ack| {
            let identity = (
                partition,
                producer.producer_id(),
                producer.epoch(),
                ack.sequence,
                ack.base_offset,
            );
            payloads.acked(identity, ack.records)
        })
        .collect()
}
