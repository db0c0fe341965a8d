//! ListOffsets: the earliest, latest and largest-timestamp offsets, and lookups by time (the
//! segment index says where to start).

use kafka_protocol::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use minibroker_broker::{Broker, BrokerError, Isolation};
use minibroker_security::{Operation, ResourceType};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::fetch::isolation_of;
use super::{NONE, partition_index};
use crate::answer_room::{AnswerRoom, AnswerTooLarge};
use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;

/// ListOffsets' timestamps for the log start and the log end.
pub(crate) const EARLIEST: i64 = -2;
const LATEST: i64 = -1;
/// ListOffsets' timestamp for the record with the largest timestamp (KIP-734).
pub(crate) const MAX_TIMESTAMP: i64 = -3;

impl KafkaFrontEnd {
    /// Lookups by time (and of the largest timestamp) read the log, so a request with any is
    /// answered on a blocking thread, off the runtime's workers; the earliest and latest offsets
    /// are known without a read, and answered here.
    ///
    /// # Errors
    /// [`AnswerTooLarge`] when the answer would not fit in one frame.
    pub(crate) async fn list_offsets(
        &self,
        request: ListOffsetsRequest,
        version: i16,
    ) -> Result<ListOffsetsResponse, AnswerTooLarge> {
        self.catch_up().await;
        let room = AnswerRoom::new(self.config.max_answer_bytes, version);
        // As Kafka: Describe on each topic, or its partitions are answered
        // TOPIC_AUTHORIZATION_FAILED unlooked-up.
        let denied: HashSet<String> = request
            .topics
            .iter()
            .filter(|topic| !self.may(Operation::Describe, ResourceType::Topic, &topic.name))
            .map(|topic| topic.name.to_string())
            .collect();
        let known = match &self.cluster {
            Some(cluster) => Self::shared_offsets(cluster, &request).await,
            None => Known::new(),
        };
        let reads = request
            .topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .any(|partition| !matches!(partition.timestamp, EARLIEST | LATEST));
        if !reads {
            return list_offsets(&self.broker, request, &denied, &known, version, room);
        }
        let broker = Arc::clone(&self.broker);
        tokio::task::spawn_blocking(move || {
            list_offsets(&broker, request, &denied, &known, version, room)
        })
        .await
        .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
    }
}

/// Answers found before the lookups, by topic and partition: (offset, timestamp). A broker of a
/// cluster finds some in the database (`KafkaFrontEnd::shared_offsets`).
pub(crate) type Known = HashMap<(String, i32), (i64, i64)>;

/// ListOffsets, answered in `room`, with the answers `known` already. A partition named twice
/// in one request is answered INVALID_REQUEST each time, unlooked-up, as Kafka does: each
/// partition costs at most one lookup per request. The partitions of a `denied` topic are
/// answered TOPIC_AUTHORIZATION_FAILED.
fn list_offsets(
    broker: &Broker,
    request: ListOffsetsRequest,
    denied: &HashSet<String>,
    known: &Known,
    version: i16,
    mut room: AnswerRoom,
) -> Result<ListOffsetsResponse, AnswerTooLarge> {
    let mut asked: HashMap<(&str, i32), u32> = HashMap::new();
    for topic in &request.topics {
        for partition in &topic.partitions {
            *asked
                .entry((topic.name.0.as_str(), partition.partition_index))
                .or_default() += 1;
        }
    }
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for wanted in &topic.partitions {
            let answer = ListOffsetsPartitionResponse::default()
                .with_partition_index(wanted.partition_index)
                .with_timestamp(NONE)
                .with_offset(NONE);
            let answer = if version >= 4 {
                answer.with_leader_epoch(minibroker_records::LEADER_EPOCH)
            } else {
                answer
            };
            let repeated = asked[&(topic.name.0.as_str(), wanted.partition_index)] > 1;
            let answer = if denied.contains(topic.name.as_str()) {
                answer.with_error_code(ResponseError::TopicAuthorizationFailed.code())
            } else if repeated {
                answer.with_error_code(ResponseError::InvalidRequest.code())
            } else {
                match offset_at(
                    broker,
                    (&topic.name, wanted.partition_index),
                    wanted.timestamp,
                    isolation_of(request.isolation_level),
                    known,
                ) {
                    Ok((offset, timestamp)) => answer.with_offset(offset).with_timestamp(timestamp),
                    Err(error) => answer.with_error_code(code_of(&error).code()),
                }
            };
            partitions.push(room.keep(answer)?);
        }
        topics.push(
            room.keep(
                ListOffsetsTopicResponse::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            )?,
        );
    }
    Ok(ListOffsetsResponse::default().with_topics(topics))
}

/// Kafka's offset lookups: -2 earliest, -1 latest (for `read_committed`, the last stable
/// offset), -3 the record with the largest timestamp, otherwise the first record at or after the
/// timestamp. Returns (offset, timestamp).
fn offset_at(
    broker: &Broker,
    (topic, partition): (&str, i32),
    timestamp: i64,
    isolation: Isolation,
    known: &Known,
) -> Result<(i64, i64), BrokerError> {
    let index = partition;
    let partition = partition_index(topic, partition)?;
    let (start, end) = broker.offsets(topic, partition)?;
    if let Some(&answer) = (!known.is_empty())
        .then(|| known.get(&(topic.to_owned(), index)))
        .flatten()
    {
        return Ok(answer);
    }
    Ok(match timestamp {
        EARLIEST => (start, NONE),
        LATEST if isolation == Isolation::ReadCommitted => {
            (broker.last_stable_offset(topic, partition)?, NONE)
        }
        LATEST => (end, NONE),
        MAX_TIMESTAMP => broker
            .offset_of_max_timestamp(topic, partition)?
            .unwrap_or((NONE, NONE)),
        at => broker
            .offset_for_timestamp(topic, partition, at)?
            .unwrap_or((NONE, NONE)),
    })
}
