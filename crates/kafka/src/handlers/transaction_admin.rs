//! What operators ask about transactions (KIP-664): DescribeTransactions and ListTransactions, of
//! the transaction coordinator, and DescribeProducers, of a partition's producer state — which
//! producers wrote there, their epochs and last sequences, and where each one's open transaction
//! began (what holds the last stable offset back). `minibroker transactions` and Kafka's
//! `kafka-transactions.sh` are built on them.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_transactions_response::{self, TopicData};
use kafka_protocol::messages::list_transactions_response;
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_transactions::{Transaction, TxnState};
use std::collections::BTreeMap;

use super::shared_groups::unavailable;
use super::{partition_index, topic_name};
use crate::answer_room::{AnswerRoom, AnswerTooLarge};
use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;
use minibroker_security::{Operation, ResourceType};

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

impl KafkaFrontEnd {
    /// DescribeTransactions v0: each id's state, producer, timeout, start and partitions (only
    /// of the topics the principal may describe, as Kafka answers); TRANSACTIONAL_ID_NOT_FOUND
    /// for one the coordinator does not know.
    pub(crate) async fn describe_transactions(
        &self,
        request: &DescribeTransactionsRequest,
        version: i16,
    ) -> Result<DescribeTransactionsResponse, AnswerTooLarge> {
        let mut room = AnswerRoom::new(self.config.max_answer_bytes, version);
        let mut states = Vec::with_capacity(request.transactional_ids.len());
        for id in &request.transactional_ids {
            let answer = describe_transactions_response::TransactionState::default()
                .with_transactional_id(id.clone());
            let described_txn = if self.may(Operation::Describe, ResourceType::TransactionalId, id)
            {
                self.transaction_of(id)
                    .await
                    .and_then(|found| found.ok_or(ResponseError::TransactionalIdNotFound))
            } else {
                Err(ResponseError::TransactionalIdAuthorizationFailed)
            };
            let answer = match described_txn {
                Ok(txn) => described(answer, &txn, |topic| {
                    self.may_see(Operation::Describe, ResourceType::Topic, topic)
                }),
                Err(refusal) => answer
                    .with_error_code(refusal.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            };
            states.push(room.keep(answer)?);
        }
        Ok(DescribeTransactionsResponse::default().with_transaction_states(states))
    }

    /// ListTransactions v0-1: every transactional id, filtered by state, producer id and (v1)
    /// how long its transaction has run.
    pub(crate) async fn list_transactions(
        &self,
        request: &ListTransactionsRequest,
        version: i16,
    ) -> Result<ListTransactionsResponse, AnswerTooLarge> {
        let mut unknown = Vec::new();
        let mut wanted_states = Vec::new();
        for name in &request.state_filters {
            match TxnState::from_name(name) {
                Some(state) => wanted_states.push(state),
                None => unknown.push(name.clone()),
            }
        }
        let producers: Vec<i64> = request.producer_id_filters.iter().map(|p| p.0).collect();
        let now = minibroker_records::now_millis();
        let min_duration = if version >= 1 {
            request.duration_filter
        } else {
            -1
        };
        let mut all = match self.every_transaction().await {
            Ok(all) => all,
            Err(refusal) => {
                return Ok(ListTransactionsResponse::default().with_error_code(refusal.code()));
            }
        };
        all.sort_by(|a, b| a.transactional_id().cmp(b.transactional_id()));
        let mut room = AnswerRoom::new(self.config.max_answer_bytes, version);
        let mut states = Vec::new();
        for txn in &all {
            let state_ok = wanted_states.is_empty() || wanted_states.contains(&txn.state());
            let producer_ok = producers.is_empty() || producers.contains(&txn.producer_id());
            let running = txn.start_ms().map_or(0, |start| now.saturating_sub(start));
            let duration_ok =
                min_duration < 0 || (txn.start_ms().is_some() && running >= min_duration);
            // As Kafka: only the ids the principal may describe are listed.
            let visible = || {
                self.may_see(
                    Operation::Describe,
                    ResourceType::TransactionalId,
                    txn.transactional_id(),
                )
            };
            if state_ok && producer_ok && duration_ok && visible() {
                states.push(
                    room.keep(
                        list_transactions_response::TransactionState::default()
                            .with_transactional_id(TransactionalId(text(txn.transactional_id())))
                            .with_producer_id(ProducerId(txn.producer_id()))
                            .with_transaction_state(text(txn.state().name())),
                    )?,
                );
            }
        }
        Ok(ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown)
            .with_transaction_states(states))
    }

    /// Transactional id `id` as its coordinator keeps it: this broker's, or in a cluster the
    /// database's, whichever broker coordinates it.
    async fn transaction_of(&self, id: &str) -> Result<Option<Transaction>, ResponseError> {
        match &self.cluster {
            Some(cluster) => cluster.transactions().find(id).await.map_err(unavailable),
            None => Ok(self.transactions.coordinator().describe(id)),
        }
    }

    /// Every transactional id, as [`Self::transaction_of`] reads one.
    async fn every_transaction(&self) -> Result<Vec<Transaction>, ResponseError> {
        match &self.cluster {
            Some(cluster) => cluster.transactions().all().await.map_err(unavailable),
            None => Ok(self.transactions.coordinator().all()),
        }
    }

    /// The producers of `topic`/`partition`, with their open transaction's first offset: this
    /// broker's rule's, or in a cluster the database's (the open transactions are the copy's,
    /// which places every marker).
    async fn producers_of(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Vec<ProducerState>, (ResponseError, String)> {
        let refused = |error: minibroker_broker::BrokerError| (code_of(&error), error.to_string());
        // Each producer as (id, epoch, last sequence, last timestamp).
        let producers: Vec<(i64, i16, i32, i64)> = match &self.cluster {
            None => self
                .broker
                .producers(topic, partition)
                .map_err(refused)?
                .into_iter()
                .map(|view| {
                    let entry = &view.entry;
                    let last = entry.last_sequence().unwrap_or(-1);
                    (
                        view.producer_id,
                        entry.epoch(),
                        last,
                        entry.last_timestamp(),
                    )
                })
                .collect(),
            // Read first: it brings the topic into this broker's copy.
            Some(cluster) => match cluster.producers(topic, partition).await {
                Ok(Some(rows)) => rows
                    .into_iter()
                    .map(|row| {
                        let last = row.last_sequence.unwrap_or(-1);
                        (row.producer_id, row.epoch, last, row.last_timestamp)
                    })
                    .collect(),
                Ok(None) => {
                    return Err((
                        ResponseError::UnknownTopicOrPartition,
                        format!("topic {topic:?} partition {partition} is not in the cluster"),
                    ));
                }
                Err(error) => {
                    return Err((ResponseError::CoordinatorNotAvailable, error.to_string()));
                }
            },
        };
        let open: BTreeMap<i64, i64> = self
            .broker
            .open_transactions(topic, partition)
            .map_err(refused)?
            .into_iter()
            .collect();
        Ok(producers
            .into_iter()
            .map(|(producer_id, epoch, last_sequence, last_timestamp)| {
                ProducerState::default()
                    .with_producer_id(ProducerId(producer_id))
                    .with_producer_epoch(i32::from(epoch))
                    .with_last_sequence(last_sequence)
                    .with_last_timestamp(last_timestamp)
                    .with_coordinator_epoch(0)
                    .with_current_txn_start_offset(open.get(&producer_id).copied().unwrap_or(-1))
            })
            .collect())
    }

    /// DescribeProducers v0: each partition's producers, with their open transaction's first
    /// offset (-1 when none is open).
    pub(crate) async fn describe_producers(
        &self,
        request: &DescribeProducersRequest,
        version: i16,
    ) -> Result<DescribeProducersResponse, AnswerTooLarge> {
        let mut room = AnswerRoom::new(self.config.max_answer_bytes, version);
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in &request.topics {
            let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
            // As Kafka: Read on the topic.
            let readable = self.may(Operation::Read, ResourceType::Topic, &topic.name);
            for &index in &topic.partition_indexes {
                let answer = PartitionResponse::default().with_partition_index(index);
                if !readable {
                    let refusal = ResponseError::TopicAuthorizationFailed;
                    partitions.push(
                        answer
                            .with_error_code(refusal.code())
                            .with_error_message(Some(text(&refusal.to_string()))),
                    );
                    continue;
                }
                let described = match partition_index(&topic.name, index) {
                    Ok(partition) => self.producers_of(&topic.name, partition).await,
                    Err(error) => Err((code_of(&error), error.to_string())),
                };
                let answer = match described {
                    Ok(producers) => {
                        let mut active = Vec::with_capacity(producers.len());
                        for producer in producers {
                            active.push(room.keep(producer)?);
                        }
                        answer.with_active_producers(active)
                    }
                    Err((code, message)) => answer
                        .with_error_code(code.code())
                        .with_error_message(Some(text(&message))),
                };
                partitions.push(answer);
            }
            topics.push(
                TopicResponse::default()
                    .with_name(topic_name(&topic.name))
                    .with_partitions(partitions),
            );
        }
        Ok(DescribeProducersResponse::default().with_topics(topics))
    }
}

/// DescribeTransactions' answer for a known id, naming only the topics `visible` says the
/// asker may see.
fn described(
    answer: describe_transactions_response::TransactionState,
    txn: &Transaction,
    visible: impl Fn(&str) -> bool,
) -> describe_transactions_response::TransactionState {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in txn.partitions().filter(|(topic, _)| visible(topic)) {
        topics
            .entry(topic)
            .or_default()
            .push(i32::try_from(*partition).unwrap_or(i32::MAX));
    }
    answer
        .with_transaction_state(text(txn.state().name()))
        .with_transaction_timeout_ms(i32::try_from(txn.timeout_ms()).unwrap_or(i32::MAX))
        .with_transaction_start_time_ms(txn.start_ms().unwrap_or(-1))
        .with_producer_id(ProducerId(txn.producer_id()))
        .with_producer_epoch(txn.epoch())
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    TopicData::default()
                        .with_topic(topic_name(topic))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}
