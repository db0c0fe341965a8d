//! The transactional APIs (KIP-98): InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn, TxnOffsetCommit and EndTxn, answered by the transaction coordinator
//! (`minibroker_transactions::TransactionService`). This broker is every coordinator, so
//! FindCoordinator answers itself for a transactional id as for a group.
//!
//! The refusals are named by the coordinator; the code depends on the request's version, as in
//! Kafka: a fenced epoch is PRODUCER_FENCED (90) where the version has it and
//! INVALID_PRODUCER_EPOCH (47) before (InitProducerId v0-3, the adds and EndTxn v0-1).

use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use minibroker_records::NO_PRODUCER_ID;
use minibroker_security::acl::CLUSTER_NAME;
use minibroker_security::{Operation, ResourceType};
use minibroker_transactions::{AddPartitionsError, CoordinatorError};
use std::collections::HashSet;

use crate::errors::{code_of_result, coordinator_code, implicit_add_code, txn_offset_commit_code};
use crate::front_end::KafkaFrontEnd;

impl KafkaFrontEnd {
    /// Write on the transactional id: what every transactional request needs first.
    fn may_write_transaction(&self, id: &str) -> bool {
        self.may(Operation::Write, ResourceType::TransactionalId, id)
    }

    /// With authorisation on, records the principal as the owner of a transactional id's
    /// `producer_id`: in this broker's file, and in a cluster for every broker (which write
    /// through any of them).
    async fn record_transactional_owner(
        &self,
        producer_id: i64,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if let Some(cluster) = self.cluster.as_ref().filter(|_| self.guard.is_on()) {
            cluster
                .record_producer_owner(producer_id, self.guard.principal())
                .await?;
        }
        Ok(self.record_producer(producer_id)?)
    }

    /// InitProducerId with a transactional id (the idempotent case is `init_producer_id`'s).
    pub(crate) async fn init_transactional_producer(
        &self,
        id: &str,
        request: &InitProducerIdRequest,
        version: i16,
    ) -> InitProducerIdResponse {
        if !self.may_write_transaction(id) {
            return InitProducerIdResponse::default()
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
                .with_producer_id(ProducerId(NO_PRODUCER_ID))
                .with_producer_epoch(-1);
        }
        // KIP-360 (v3+): a producer that knows its id and epoch names them to recover.
        let expected = (version >= 3 && request.producer_id.0 != NO_PRODUCER_ID)
            .then_some((request.producer_id.0, request.producer_epoch));
        // A negative timeout is out of range like one above the maximum.
        let timeout_ms = u64::try_from(request.transaction_timeout_ms).unwrap_or(u64::MAX);
        match self
            .transactions
            .init_producer(id, expected, timeout_ms)
            .await
        {
            Ok((producer_id, epoch)) => match self.record_transactional_owner(producer_id).await {
                Ok(()) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(producer_id))
                    .with_producer_epoch(epoch),
                Err(error) => {
                    tracing::warn!(%error, "the producer id's owner could not be recorded");
                    InitProducerIdResponse::default()
                        .with_error_code(ResponseError::KafkaStorageError.code())
                        .with_producer_id(ProducerId(NO_PRODUCER_ID))
                        .with_producer_epoch(-1)
                }
            },
            Err(error) => {
                tracing::debug!(transactional_id = id, %error, "InitProducerId refused");
                InitProducerIdResponse::default()
                    .with_error_code(coordinator_code(&error, version >= 4).code())
                    .with_producer_id(ProducerId(NO_PRODUCER_ID))
                    .with_producer_epoch(-1)
            }
        }
    }

    /// AddPartitionsToTxn: v0-3 add one transaction's partitions; v4-5 (a broker's request,
    /// which needs ClusterAction) add or only verify those of several.
    pub(crate) async fn add_partitions_to_txn(
        &self,
        request: &AddPartitionsToTxnRequest,
        version: i16,
    ) -> AddPartitionsToTxnResponse {
        if version < BATCHED_ADD_VERSION {
            let producer = (
                request.v3_and_below_transactional_id.0.as_str(),
                request.v3_and_below_producer_id.0,
                request.v3_and_below_producer_epoch,
            );
            let results = self
                .add_partitions(producer, &request.v3_and_below_topics, version)
                .await;
            return AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(results);
        }
        if !self.may(
            Operation::ClusterAction,
            ResourceType::Cluster,
            CLUSTER_NAME,
        ) {
            return AddPartitionsToTxnResponse::default()
                .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
        }
        let mut results = Vec::with_capacity(request.transactions.len());
        for txn in &request.transactions {
            let producer = (
                txn.transactional_id.0.as_str(),
                txn.producer_id.0,
                txn.producer_epoch,
            );
            let topic_results = if txn.verify_only {
                self.verify_partitions(producer, &txn.topics, version)
            } else {
                self.add_partitions(producer, &txn.topics, version).await
            };
            results.push(
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(txn.transactional_id.clone())
                    .with_topic_results(topic_results),
            );
        }
        AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
    }

    /// One transaction's add: every partition gets the one answer, as in Kafka — unknown
    /// partitions UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, or the
    /// coordinator's answer for all.
    async fn add_partitions(
        &self,
        (id, producer_id, epoch): (&str, i64, i16),
        topics: &[AddPartitionsToTxnTopic],
        version: i16,
    ) -> Vec<AddPartitionsToTxnTopicResult> {
        let asked: Vec<(String, i32)> = topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
            .collect();
        let partitions: Option<Vec<(String, u32)>> = asked
            .iter()
            .map(|(topic, p)| u32::try_from(*p).ok().map(|p| (topic.clone(), p)))
            .collect();
        // As Kafka: Write on the transactional id for all of it; then Write on each topic, and
        // when one is denied nothing is added (the others are OPERATION_NOT_ATTEMPTED).
        let refusal = if !self.may_write_transaction(id) {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        } else {
            None
        };
        let denied_topics: HashSet<&str> = topics
            .iter()
            .filter(|t| {
                refusal.is_none() && !self.may(Operation::Write, ResourceType::Topic, &t.name)
            })
            .map(|t| t.name.0.as_str())
            .collect();
        if let Some(cluster) = &self.cluster {
            // The coordinator's copy may not hold a topic its producer writes through others.
            let names: Vec<String> = topics.iter().map(|t| t.name.to_string()).collect();
            self.hold_shared_topics(cluster, &names, false).await;
        }
        let result = match partitions {
            _ if refusal.is_some() || !denied_topics.is_empty() => Ok(()),
            Some(partitions) => {
                self.transactions
                    .add_partitions((id, producer_id, epoch), &partitions, self.connection)
                    .await
            }
            // A negative index names no partition of any topic.
            None => Err(AddPartitionsError::Unknown(Vec::new())),
        };
        let code_for = |topic: &str, partition: i32| -> i16 {
            if let Some(refusal) = refusal {
                return refusal.code();
            }
            if !denied_topics.is_empty() {
                return if denied_topics.contains(topic) {
                    ResponseError::TopicAuthorizationFailed.code()
                } else {
                    ResponseError::OperationNotAttempted.code()
                };
            }
            match &result {
                Ok(()) => 0,
                Err(AddPartitionsError::Unknown(unknown)) => {
                    let is_unknown = u32::try_from(partition)
                        .map_or(true, |p| unknown.iter().any(|(t, u)| t == topic && *u == p));
                    if is_unknown {
                        ResponseError::UnknownTopicOrPartition.code()
                    } else {
                        ResponseError::OperationNotAttempted.code()
                    }
                }
                Err(AddPartitionsError::Coordinator(error)) => {
                    coordinator_code(error, version >= 2).code()
                }
            }
        };
        if let Err(error) = &result {
            tracing::debug!(transactional_id = id, %error, "AddPartitionsToTxn refused");
        }
        topic_results(topics, code_for)
    }

    /// One transaction's verification (v4-5 `verify_only`): each partition is in the
    /// producer's open transaction, or TRANSACTION_ABORTABLE (INVALID_TXN_STATE at v4).
    fn verify_partitions(
        &self,
        (id, producer_id, epoch): (&str, i64, i16),
        topics: &[AddPartitionsToTxnTopic],
        version: i16,
    ) -> Vec<AddPartitionsToTxnTopicResult> {
        let txn = self.transactions.coordinator().describe(id);
        let code_for = |topic: &str, partition: i32| -> i16 {
            let checked = txn
                .as_ref()
                .ok_or_else(|| CoordinatorError::UnknownTransactionalId(id.to_owned()))
                .and_then(|txn| {
                    // A negative index names no partition of any transaction.
                    let partition = u32::try_from(partition).unwrap_or(u32::MAX);
                    Ok(txn.check_partition(producer_id, epoch, (topic, partition))?)
                });
            match checked {
                Ok(()) => 0,
                Err(error) if version >= 5 => implicit_add_code(&error, true).code(),
                Err(error) => coordinator_code(&error, true).code(),
            }
        };
        topic_results(topics, code_for)
    }

    /// AddOffsetsToTxn: the group's offsets join the transaction.
    pub(crate) async fn add_offsets_to_txn(
        &self,
        request: &AddOffsetsToTxnRequest,
        version: i16,
    ) -> AddOffsetsToTxnResponse {
        if !self.may_write_transaction(&request.transactional_id) {
            return AddOffsetsToTxnResponse::default()
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
        }
        if !self.may(Operation::Read, ResourceType::Group, &request.group_id) {
            return AddOffsetsToTxnResponse::default()
                .with_error_code(ResponseError::GroupAuthorizationFailed.code());
        }
        let result = self
            .transactions
            .add_offsets(
                (
                    &request.transactional_id.0,
                    request.producer_id.0,
                    request.producer_epoch,
                ),
                &request.group_id.0,
                self.connection,
            )
            .await;
        AddOffsetsToTxnResponse::default().with_error_code(code_of_result(result, version >= 2))
    }

    /// TxnOffsetCommit: the offsets wait in the transaction; every partition gets the one
    /// answer.
    pub(crate) async fn txn_offset_commit(
        &self,
        request: TxnOffsetCommitRequest,
        version: i16,
    ) -> TxnOffsetCommitResponse {
        // As Kafka: Write on the transactional id, then Read on the group, for all of it; then
        // Read on each topic: only the allowed topics' offsets are committed.
        let refusal = if !self.may_write_transaction(&request.transactional_id) {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        } else if !self.may(Operation::Read, ResourceType::Group, &request.group_id) {
            Some(ResponseError::GroupAuthorizationFailed)
        } else {
            None
        };
        let readable: HashSet<&str> = request
            .topics
            .iter()
            .filter(|t| {
                refusal.is_none() && self.may(Operation::Read, ResourceType::Topic, &t.name)
            })
            .map(|t| t.name.0.as_str())
            .collect();
        let offsets: Vec<_> = request
            .topics
            .iter()
            .filter(|topic| readable.contains(topic.name.0.as_str()))
            .flat_map(|topic| {
                topic.partitions.iter().map(|p| {
                    (
                        topic.name.0.to_string(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_metadata.as_ref().map(ToString::to_string),
                    )
                })
            })
            .collect();
        // KIP-447 (v3): the member and generation, checked by the group when given.
        let member = if version >= 3 {
            (request.generation_id, request.member_id.as_str())
        } else {
            (-1, "")
        };
        let committed = if let Some(refusal) = refusal {
            Err(refusal)
        } else if offsets.is_empty() {
            Ok(())
        } else if version >= IMPLICIT_ADD_OFFSETS_VERSION
            && let Err(refused) = self.add_group_implicitly(&request).await
        {
            Err(refused)
        } else {
            self.commit_txn_offsets(&request, member, offsets).await
        };
        let code_for = |topic: &str| match &committed {
            Ok(()) if !readable.contains(topic) => ResponseError::TopicAuthorizationFailed.code(),
            Ok(()) => 0,
            Err(refusal) => refusal.code(),
        };
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                let code = code_for(&topic.name);
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        TxnOffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect();
                TxnOffsetCommitResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions)
            })
            .collect();
        TxnOffsetCommitResponse::default().with_topics(topics)
    }

    /// TxnOffsetCommit v5 (KIP-890 part 2): the group joins the transaction with its first
    /// offsets, as AddOffsetsToTxn would add it; the refusal as Kafka's error.
    async fn add_group_implicitly(
        &self,
        request: &TxnOffsetCommitRequest,
    ) -> Result<(), ResponseError> {
        let transaction = (
            request.transactional_id.0.as_str(),
            request.producer_id.0,
            request.producer_epoch,
        );
        self.transactions
            .add_offsets(transaction, &request.group_id.0, self.connection)
            .await
            .map_err(|error| {
                tracing::debug!(%error, "TxnOffsetCommit's implicit add refused");
                implicit_add_code(&error, true)
            })
    }

    /// Commits `offsets` in the request's transaction; the refusal as Kafka's error.
    async fn commit_txn_offsets(
        &self,
        request: &TxnOffsetCommitRequest,
        member: (i32, &str),
        offsets: Vec<(String, i32, i64, Option<String>)>,
    ) -> Result<(), ResponseError> {
        let committed = self
            .transactions
            .commit_offsets(
                (
                    &request.transactional_id.0,
                    request.producer_id.0,
                    request.producer_epoch,
                ),
                &request.group_id.0,
                member,
                offsets,
            )
            .await;
        if let Err(error) = &committed {
            tracing::debug!(%error, "TxnOffsetCommit refused");
        }
        committed.map_err(|error| txn_offset_commit_code(&error))
    }

    /// EndTxn: answered once the markers are written and the groups' offsets settled. From v5
    /// (KIP-890 part 2) every end moves the producer to a new epoch, which the answer carries:
    /// no late request of this transaction can be taken for one of the next.
    pub(crate) async fn end_txn(&self, request: &EndTxnRequest, version: i16) -> EndTxnResponse {
        let refused = |code: ResponseError| {
            EndTxnResponse::default()
                .with_error_code(code.code())
                .with_producer_id(ProducerId(NO_PRODUCER_ID))
                .with_producer_epoch(-1)
        };
        if !self.may_write_transaction(&request.transactional_id) {
            return refused(ResponseError::TransactionalIdAuthorizationFailed);
        }
        let ended = self
            .transactions
            .end(
                (
                    &request.transactional_id.0,
                    request.producer_id.0,
                    request.producer_epoch,
                ),
                (request.committed, version >= BUMPING_END_VERSION),
                self.connection,
            )
            .await;
        match ended {
            Ok((producer_id, epoch)) => EndTxnResponse::default()
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(epoch),
            Err(error) => {
                tracing::debug!(%error, "EndTxn refused");
                refused(coordinator_code(&error, version >= 2))
            }
        }
    }
}

/// Each asked partition of `topics` with the code `code_for` gives it.
fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    code_for: impl Fn(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|topic| {
            let results = topic
                .partitions
                .iter()
                .map(|&partition| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(partition)
                        .with_partition_error_code(code_for(&topic.name.0, partition))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic.name.clone())
                .with_results_by_partition(results)
        })
        .collect()
}

/// The first AddPartitionsToTxn version that carries several transactions (a broker's add or
/// verification, KIP-890).
const BATCHED_ADD_VERSION: i16 = 4;

/// The first TxnOffsetCommit version that adds its group to the transaction itself (KIP-890
/// part 2: such a client sends no AddOffsetsToTxn).
const IMPLICIT_ADD_OFFSETS_VERSION: i16 = 5;

/// The first EndTxn version whose ends bump the producer's epoch (KIP-890 part 2).
pub(crate) const BUMPING_END_VERSION: i16 = 5;
