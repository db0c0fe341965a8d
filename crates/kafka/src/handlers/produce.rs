//! Produce: each partition's batch through the broker core's exactly-once rule, answered once
//! its batches are written (and, with the `always` flush policy, synced). The request is read
//! in place and the answer written directly (`produce_wire`), not through `kafka-protocol`'s
//! messages: see that module for why.

use bytes::BytesMut;
use kafka_protocol::ResponseError;
use minibroker_broker::{BrokerError, Outcome};
use minibroker_records::{Inspected, NO_PRODUCER_ID, RecordsError};
use minibroker_security::{Operation, ResourceType};

use super::implicit_add::TransactionAllowance;
use super::{NONE, code, partition_index};
use crate::errors::{produce_answer, produce_code};
use crate::front_end::KafkaFrontEnd;
use crate::produce_wire::{self, PartitionAnswer, ProduceView};

impl KafkaFrontEnd {
    /// Serves a Produce read in place (`produce_wire`) and appends its answer to `out`, except
    /// for acks=0, which gets none.
    ///
    /// Each batch's header and checksum are read once for everything that follows: up front for
    /// a transactional request, whose implicit adds need them all before any is taken;
    /// otherwise as each partition is served, so an idempotent produce allocates no list of
    /// them.
    pub(crate) async fn produce(
        &mut self,
        request: &ProduceView<'_>,
        version: i16,
        out: &mut BytesMut,
    ) {
        let inspected = request
            .partitions
            .iter()
            .map(|data| Inspected::new(data.records.unwrap_or_default()));
        if request.transactional_id.is_some() {
            let batches: Vec<_> = inspected.collect();
            let transaction = self.allow_transaction(request, &batches, version).await;
            self.produce_inspected(request, batches, version, transaction, out);
        } else {
            let transaction = TransactionAllowance::default();
            self.produce_inspected(request, inspected, version, transaction, out);
        }
    }

    /// Serves the inspected `batches` of a Produce, whose transactional id allows what
    /// `transaction` says. Partitions are served one after another; the answer is sent
    /// once their batches are written (and, with the `always` flush policy, synced) — see
    /// `FrontEnd::store_answered`.
    fn produce_inspected<'a>(
        &mut self,
        request: &ProduceView<'a>,
        batches: impl IntoIterator<Item = Result<Inspected<'a>, RecordsError>>,
        version: i16,
        transaction: TransactionAllowance,
        out: &mut BytesMut,
    ) {
        let valid_acks = matches!(request.acks, -1..=1);
        // As Kafka: each topic needs Write (the transactional id's was asked in
        // `allow_transaction`).
        let (transaction_denied, implicit_add) = (transaction.denied, transaction.refused_add);
        let mut denied_topic = None;
        let mut answers = Vec::with_capacity(request.partitions.len());
        for (data, batch) in request.partitions.iter().zip(batches) {
            let topic = request.topics[data.topic];
            let denied = match denied_topic {
                Some((ordinal, denied)) if ordinal == data.topic => denied,
                _ => {
                    let denied = if transaction_denied {
                        Some(ResponseError::TransactionalIdAuthorizationFailed)
                    } else if !self.may(Operation::Write, ResourceType::Topic, topic) {
                        Some(ResponseError::TopicAuthorizationFailed)
                    } else {
                        self.unknown_to_creator(topic)
                    };
                    denied_topic = Some((data.topic, denied));
                    denied
                }
            };
            let refused = |error: ResponseError, message: String| PartitionAnswer {
                index: data.index,
                error_code: error.code(),
                base_offset: NONE,
                log_start_offset: NONE,
                error_message: Some(message),
            };
            let info = batch.as_ref().ok().map(Inspected::info);
            let refused_add = implicit_add.filter(|_| info.is_some_and(|info| info.transactional));
            let answer = if let Some(denied) = denied
                .or_else(|| self.foreign_producer(info))
                .or(refused_add)
            {
                refused(denied, denied.to_string())
            } else if !valid_acks {
                refused(
                    ResponseError::InvalidRequiredAcks,
                    "acks must be -1, 0 or 1".to_owned(),
                )
            } else {
                match self.produce_one(topic, data.index, batch) {
                    Ok((error, base_offset, log_start_offset)) => PartitionAnswer {
                        index: data.index,
                        error_code: code(error),
                        base_offset,
                        log_start_offset,
                        error_message: None,
                    },
                    Err(error) => refused(produce_code(&error, version), error.to_string()),
                }
            };
            answers.push(answer);
        }
        if request.acks != 0 {
            produce_wire::write_answer(out, request, &answers, version);
        }
    }

    /// Runs the rule on one partition's batch: (error, base offset, log start offset).
    fn produce_one(
        &mut self,
        topic: &str,
        index: i32,
        batch: Result<Inspected<'_>, RecordsError>,
    ) -> Result<(Option<ResponseError>, i64, i64), BrokerError> {
        let partition = partition_index(topic, index)?;
        let batch = batch?;
        let produced =
            self.broker
                .produce_inspected(&mut self.unacknowledged, topic, partition, batch)?;
        let verdict = produced.verdict;
        let (error, base_offset) = match (verdict.outcome, verdict.base_offset) {
            // The usual answers need nothing more.
            (Outcome::Accepted | Outcome::Duplicate, Some(offset)) => (None, offset),
            // A refusal: Kafka tells an unknown producer from a gap, which the verdict records.
            _ => {
                let info = batch.info();
                let had_state = info.producer_id == NO_PRODUCER_ID || verdict.known_producer;
                tracing::debug!(topic, partition, producer_id = info.producer_id,
                    sequence = info.base_sequence, outcome = %verdict.outcome, "Kafka produce refused");
                produce_answer(verdict, info.base_sequence, had_state)
            }
        };
        // Reported from v5 on.
        Ok((error, base_offset, produced.log_start_offset))
    }
}
