//! Produce v12 (KIP-890 part 2): a transactional batch adds its own partition to its
//! transaction, so the client sends no AddPartitionsToTxn. The partitions of a request that
//! their transaction has not added yet (at the batch's producer id and epoch) are added in one
//! durable change of the coordinator before the batches are taken, as AddPartitionsToTxn adds
//! them; the partition then takes the batch as it takes any transactional one.
//!
//! The connection remembers the partitions it added for its producer's current id and epoch
//! ([`ImplicitlyAdded`](crate::implicitly_added::ImplicitlyAdded)), so a transaction's later batches skip the look at the partition. A
//! stale memory can only cost a refusal, never a wrong append: the partition checks every
//! transactional batch itself (and with KIP-890 part 2 each end moves the epoch, which empties
//! it).

use kafka_protocol::ResponseError;
use minibroker_records::{Inspected, RecordsError};
use minibroker_security::{Operation, ResourceType};

use crate::errors::produce_add_code;
use crate::front_end::KafkaFrontEnd;
use crate::produce_wire::ProduceView;

/// The first Produce version whose transactional batches add their partitions themselves.
pub(crate) const IMPLICIT_ADD_VERSION: i16 = 12;

/// A producer id and epoch.
type Producer = (i64, i16);

/// What a Produce's transactional id allows its batches, decided before they are taken.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TransactionAllowance {
    /// The principal may not write the transactional id: nothing of the request is written.
    pub(crate) denied: bool,
    /// The implicit add of the request's partitions was refused: the code every transactional
    /// batch of the request is answered with.
    pub(crate) refused_add: Option<ResponseError>,
}

impl KafkaFrontEnd {
    /// Whether `request`'s transactional id may be written and, from Produce v12, the add of
    /// the partitions its transactional batches have not added yet: a durable change of the
    /// coordinator, the one wait a Produce can have before its batches are taken. It comes once
    /// per partition and transaction, so its future is boxed, off the hot path's.
    pub(crate) async fn allow_transaction(
        &mut self,
        request: &ProduceView<'_>,
        batches: &[Result<Inspected<'_>, RecordsError>],
        version: i16,
    ) -> TransactionAllowance {
        let Some(id) = request.transactional_id else {
            return TransactionAllowance::default();
        };
        // As Kafka: a transactional request needs Write on its transactional id, or nothing of
        // it is written.
        let denied = !self.may(Operation::Write, ResourceType::TransactionalId, id);
        let refused_add = if denied || version < IMPLICIT_ADD_VERSION {
            None
        } else if let Some((producer, wanted)) = self.partitions_to_add(request, batches) {
            Box::pin(self.add_implicitly(id, producer, wanted))
                .await
                .err()
        } else {
            None
        };
        TransactionAllowance {
            denied,
            refused_add,
        }
    }

    /// The partitions of `request` whose transactional batch its transaction has not added,
    /// with the batches' producer id and epoch; `None` when there are none.
    fn partitions_to_add(
        &self,
        request: &ProduceView<'_>,
        batches: &[Result<Inspected<'_>, RecordsError>],
    ) -> Option<(Producer, Vec<(String, u32)>)> {
        let mut producer = None;
        let mut wanted = Vec::new();
        for (data, batch) in request.partitions.iter().zip(batches) {
            let topic = request.topics[data.topic];
            // Anything not taken here is refused by the produce that follows, as it would be.
            let Ok(batch) = batch else {
                continue;
            };
            let info = batch.info();
            let Ok(partition) = u32::try_from(data.index) else {
                continue;
            };
            if !info.transactional
                || self
                    .implicitly_added
                    .contains((info.producer_id, info.epoch), topic, partition)
            {
                continue;
            }
            let expected =
                self.broker
                    .expects_transactional(topic, partition, info.producer_id, info.epoch);
            if expected.unwrap_or(true) || !self.may(Operation::Write, ResourceType::Topic, topic) {
                continue;
            }
            // One producer per request: a batch of another is refused by the partition.
            let (producer_id, epoch) = *producer.get_or_insert((info.producer_id, info.epoch));
            if (producer_id, epoch) == (info.producer_id, info.epoch) {
                wanted.push((topic.to_owned(), partition));
            }
        }
        producer.map(|producer| (producer, wanted))
    }

    /// Adds `wanted` to transaction `id` of `producer`; on a refusal, the code every
    /// transactional batch of the request is answered with.
    async fn add_implicitly(
        &mut self,
        id: &str,
        producer: Producer,
        wanted: Vec<(String, u32)>,
    ) -> Result<(), ResponseError> {
        self.transactions
            .add_partitions((id, producer.0, producer.1), &wanted, self.connection)
            .await
            .map_err(|error| {
                tracing::debug!(transactional_id = id, %error, "Produce's implicit add refused");
                produce_add_code(&error)
            })?;
        self.implicitly_added.remember(producer, wanted);
        Ok(())
    }
}
