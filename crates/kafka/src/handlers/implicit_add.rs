//! Produce v12 (KIP-890 part 2): a transactional batch adds its own partition to its
//! transaction, so the client sends no AddPartitionsToTxn. The partitions of a request that
//! their transaction has not added yet (at the batch's producer id and epoch) are added in one
//! durable change of the coordinator before the batches are taken, as AddPartitionsToTxn adds
//! them; the partition then takes the batch as it takes any transactional one.
//!
//! The connection remembers the partitions it added for its producer's current id and epoch
//! ([`ImplicitlyAdded`]), so a transaction's later batches skip the look at the partition. A
//! stale memory can only cost a refusal, never a wrong append: the partition checks every
//! transactional batch itself (and with KIP-890 part 2 each end moves the epoch, which empties
//! it).

use kafka_protocol::ResponseError;
use minibroker_security::{Operation, ResourceType};
use std::collections::{HashMap, HashSet};

use crate::errors::produce_add_code;
use crate::front_end::KafkaFrontEnd;
use crate::produce_wire::ProduceView;

/// The partitions this connection added implicitly for one producer id and epoch, by topic (a
/// batch's look-up borrows its topic name, allocating nothing).
#[derive(Debug, Default)]
pub(crate) struct ImplicitlyAdded {
    producer: Option<(i64, i16)>,
    partitions: HashMap<String, HashSet<u32>>,
}

impl ImplicitlyAdded {
    fn contains(&self, producer: (i64, i16), topic: &str, partition: u32) -> bool {
        self.producer == Some(producer)
            && self
                .partitions
                .get(topic)
                .is_some_and(|added| added.contains(&partition))
    }

    fn remember(&mut self, producer: (i64, i16), added: Vec<(String, u32)>) {
        if self.producer != Some(producer) {
            self.producer = Some(producer);
            self.partitions.clear();
        }
        for (topic, partition) in added {
            self.partitions.entry(topic).or_default().insert(partition);
        }
    }
}

/// The first Produce version whose transactional batches add their partitions themselves.
pub(crate) const IMPLICIT_ADD_VERSION: i16 = 12;

/// The first Produce version that knows TRANSACTION_ABORTABLE: a batch its transaction cannot
/// take is answered with it (the client aborts and goes on), not INVALID_TXN_STATE (fatal).
pub(crate) const ABORTABLE_VERSION: i16 = 11;

impl KafkaFrontEnd {
    /// Adds to transaction `id` the partitions of `request` whose transactional batch it has not
    /// added; on a refusal, the code every transactional batch of the request is answered with.
    pub(crate) fn add_partitions_implicitly(
        &mut self,
        request: &ProduceView<'_>,
        id: &str,
    ) -> Result<(), ResponseError> {
        let mut producer = None;
        let mut wanted = Vec::new();
        for data in &request.partitions {
            let topic = request.topics[data.topic];
            // Anything not taken here is refused by the produce that follows, as it would be.
            let Some(info) = data
                .records
                .and_then(|records| minibroker_records::inspect(records).ok())
            else {
                continue;
            };
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
        let Some((producer_id, epoch)) = producer else {
            return Ok(());
        };
        self.transactions
            .add_partitions((id, producer_id, epoch), &wanted, self.connection)
            .map_err(|error| {
                tracing::debug!(transactional_id = id, %error, "Produce's implicit add refused");
                produce_add_code(&error)
            })?;
        self.implicitly_added.remember((producer_id, epoch), wanted);
        Ok(())
    }
}
