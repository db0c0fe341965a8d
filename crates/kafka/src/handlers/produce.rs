//! Produce: each partition's batch through the broker core's exactly-once rule, answered once
//! its batches are written (and, with the `always` flush policy, synced). The request is read
//! in place and the answer written directly (`produce_wire`), not through `kafka-protocol`'s
//! messages: see that module for why.

use bytes::BytesMut;
use kafka_protocol::ResponseError;
use minibroker_broker::{BrokerError, Outcome, Verdict};
use minibroker_records::{BatchInfo, Inspected, NO_PRODUCER_ID, RecordsError};

use minibroker_security::{Operation, ResourceType};

use super::implicit_add::TransactionAllowance;
use super::{NONE, code, partition_index};
use crate::errors::{produce_answer, produce_code};
use crate::front_end::KafkaFrontEnd;
use crate::produce_wire::{self, PartitionAnswer, PartitionData, ProduceView};

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
        frame: &bytes::Bytes,
        version: i16,
        out: &mut BytesMut,
    ) {
        if let Some(cluster) = self.cluster.clone() {
            return self
                .produce_shared(&cluster, request, frame, version, out)
                .await;
        }
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
        let mut gate = Gate::new(request, transaction);
        let mut answers = Vec::with_capacity(request.partitions.len());
        for (data, batch) in request.partitions.iter().zip(batches) {
            let topic = request.topics[data.topic];
            let info = batch.as_ref().ok().map(Inspected::info);
            let answer = match gate.refusal(self, data, topic, info) {
                Some(refused) => refused,
                None => match self.produce_one(topic, data.index, batch) {
                    Ok((error, base_offset, log_start_offset)) => PartitionAnswer {
                        index: data.index,
                        error_code: code(error),
                        base_offset,
                        log_start_offset,
                        error_message: None,
                    },
                    Err(error) => {
                        refused(data.index, produce_code(&error, version), error.to_string())
                    }
                },
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
        let (error, base_offset) = verdict_answer(topic, partition, produced.verdict, batch.info());
        // Reported from v5 on.
        Ok((error, base_offset, produced.log_start_offset))
    }
}

/// The error and base offset a partition's answer carries for `verdict` on a batch `info`
/// describes.
pub(super) fn verdict_answer(
    topic: &str,
    partition: u32,
    verdict: Verdict,
    info: &BatchInfo,
) -> (Option<ResponseError>, i64) {
    match (verdict.outcome, verdict.base_offset) {
        // The usual answers need nothing more.
        (Outcome::Accepted | Outcome::Duplicate, Some(offset)) => (None, offset),
        // A refusal: Kafka tells an unknown producer from a gap, which the verdict records.
        _ => {
            let had_state = info.producer_id == NO_PRODUCER_ID || verdict.known_producer;
            tracing::debug!(topic, partition, producer_id = info.producer_id,
                sequence = info.base_sequence, outcome = %verdict.outcome, "Kafka produce refused");
            produce_answer(verdict, info.base_sequence, had_state)
        }
    }
}

/// A partition's answer refusing its batch with `error`.
pub(super) fn refused(index: i32, error: ResponseError, message: String) -> PartitionAnswer {
    PartitionAnswer {
        index,
        error_code: error.code(),
        base_offset: NONE,
        log_start_offset: NONE,
        error_message: Some(message),
    }
}

/// What refuses a partition's batch before the rule sees it, asked once per topic where it
/// can: the transactional id's and the topic's authorisation, the producer id's owner, a
/// refused implicit add, and the acks.
pub(super) struct Gate {
    transaction_denied: bool,
    implicit_add: Option<ResponseError>,
    valid_acks: bool,
    /// The last topic asked about (its ordinal in the request) and its answer.
    denied_topic: Option<(usize, Option<ResponseError>)>,
}

impl Gate {
    pub(super) fn new(request: &ProduceView<'_>, transaction: TransactionAllowance) -> Self {
        Self {
            transaction_denied: transaction.denied,
            implicit_add: transaction.refused_add,
            valid_acks: matches!(request.acks, -1..=1),
            denied_topic: None,
        }
    }

    /// The refusal of the batch `data` carries (`info` read of it, when it reads), if any.
    pub(super) fn refusal(
        &mut self,
        front_end: &KafkaFrontEnd,
        data: &PartitionData<'_>,
        topic: &str,
        info: Option<&BatchInfo>,
    ) -> Option<PartitionAnswer> {
        let denied = match self.denied_topic {
            Some((ordinal, denied)) if ordinal == data.topic => denied,
            _ => {
                // As Kafka: each topic needs Write (the transactional id's was asked in
                // `allow_transaction`).
                let denied = if self.transaction_denied {
                    Some(ResponseError::TransactionalIdAuthorizationFailed)
                } else if !front_end.may(Operation::Write, ResourceType::Topic, topic) {
                    Some(ResponseError::TopicAuthorizationFailed)
                } else {
                    front_end.unknown_to_creator(topic)
                };
                self.denied_topic = Some((data.topic, denied));
                denied
            }
        };
        let refused_add = self
            .implicit_add
            .filter(|_| info.is_some_and(|info| info.transactional));
        if let Some(denied) = denied
            .or_else(|| front_end.foreign_producer(info))
            .or(refused_add)
        {
            return Some(refused(data.index, denied, denied.to_string()));
        }
        (!self.valid_acks).then(|| {
            refused(
                data.index,
                ResponseError::InvalidRequiredAcks,
                "acks must be -1, 0 or 1".to_owned(),
            )
        })
    }
}
