//! Produce: each partition's batch through the broker core's exactly-once rule, answered once
//! its batches are written (and, with the `always` flush policy, synced).

use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use minibroker_broker::{BrokerError, Outcome};
use minibroker_records::NO_PRODUCER_ID;
use minibroker_security::{Operation, ResourceType};

use super::{NONE, code, partition_index};
use crate::errors::{code_of, produce_answer};
use crate::front_end::KafkaFrontEnd;

impl KafkaFrontEnd {
    /// `None` for acks=0, which gets no answer. Partitions are served one after another; the
    /// answer is sent once their batches are written (and, with the `always` flush policy,
    /// synced) — see `FrontEnd::store_answered`.
    pub(crate) fn produce(
        &mut self,
        request: ProduceRequest,
        version: i16,
    ) -> Option<ProduceResponse> {
        let valid_acks = matches!(request.acks, -1..=1);
        // As Kafka: a transactional request needs Write on its transactional id, or nothing of
        // it is written; then each topic needs Write.
        let transaction_denied = request
            .transactional_id
            .as_ref()
            .is_some_and(|id| !self.may(Operation::Write, ResourceType::TransactionalId, id));
        let mut responses = Vec::with_capacity(request.topic_data.len());
        for topic in request.topic_data {
            let mut partitions = Vec::with_capacity(topic.partition_data.len());
            let denied = if transaction_denied {
                Some(ResponseError::TransactionalIdAuthorizationFailed)
            } else if !self.may(Operation::Write, ResourceType::Topic, &topic.name) {
                Some(ResponseError::TopicAuthorizationFailed)
            } else {
                self.unknown_to_creator(&topic.name)
            };
            for data in topic.partition_data {
                let index = data.index;
                let refused = |error: ResponseError, message: &str| {
                    let refused = PartitionProduceResponse::default()
                        .with_index(index)
                        .with_error_code(error.code())
                        .with_base_offset(NONE);
                    if version >= 8 {
                        refused.with_error_message(Some(StrBytes::from_string(message.into())))
                    } else {
                        refused
                    }
                };
                let records = data.records.unwrap_or_default();
                let response =
                    if let Some(denied) = denied.or_else(|| self.foreign_producer(&records)) {
                        refused(denied, &denied.to_string())
                    } else if !valid_acks {
                        refused(
                            ResponseError::InvalidRequiredAcks,
                            "acks must be -1, 0 or 1",
                        )
                    } else {
                        match self.produce_one(&topic.name, index, &records) {
                            Ok((error, base_offset, log_start)) => {
                                let response = PartitionProduceResponse::default()
                                    .with_index(index)
                                    .with_error_code(code(error))
                                    .with_base_offset(base_offset);
                                if version >= 5 {
                                    response.with_log_start_offset(log_start)
                                } else {
                                    response
                                }
                            }
                            Err(error) => refused(code_of(&error), &error.to_string()),
                        }
                    };
                partitions.push(response);
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(topic.name)
                    .with_partition_responses(partitions),
            );
        }
        (request.acks != 0).then(|| ProduceResponse::default().with_responses(responses))
    }

    /// Runs the rule on one partition's batch: (error, base offset, log start offset).
    fn produce_one(
        &mut self,
        topic: &TopicName,
        index: i32,
        batch: &[u8],
    ) -> Result<(Option<ResponseError>, i64, i64), BrokerError> {
        let partition = partition_index(topic, index)?;
        let verdict = self
            .broker
            .produce(&mut self.unacknowledged, topic, partition, batch)?;
        let (error, base_offset) = match (verdict.outcome, verdict.base_offset) {
            // The usual answers need nothing more.
            (Outcome::Accepted | Outcome::Duplicate, Some(offset)) => (None, offset),
            // A refusal: Kafka tells an unknown producer from a gap, which the verdict records.
            _ => {
                let info = minibroker_records::inspect(batch)?;
                let had_state = info.producer_id == NO_PRODUCER_ID || verdict.known_producer;
                tracing::debug!(topic = %topic.as_str(), partition, producer_id = info.producer_id,
                    sequence = info.base_sequence, outcome = %verdict.outcome, "Kafka produce refused");
                produce_answer(verdict, info.base_sequence, had_state)
            }
        };
        // Reported from v5 on.
        let log_start = self
            .broker
            .log_start_offset(&mut self.unacknowledged, topic, partition)?;
        Ok((error, base_offset, log_start))
    }
}
