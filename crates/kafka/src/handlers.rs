//! One function per Kafka API: translate the request into broker-core calls and the results
//! into the response. No rule lives here; every decision is the core's.

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
    ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_records::NO_PRODUCER_ID;
use minibroker_server::{Broker, BrokerError, Outcome, TopicSummary};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::answer_room::{AnswerRoom, AnswerTooLarge};
use crate::errors::{code_of, produce_answer};
use crate::front_end::KafkaFrontEnd;

/// The longest a fetch waits for data, whatever the client asks.
const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

/// Kafka's marker for "no such offset/timestamp".
const NONE: i64 = -1;

fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// A Kafka partition index as the broker's: a negative one is out of range of every topic.
fn partition_index(topic: &str, index: i32) -> Result<u32, BrokerError> {
    u32::try_from(index).map_err(|_| BrokerError::PartitionOutOfRange {
        topic: topic.to_owned(),
        partition: u32::MAX,
        count: 0,
    })
}

impl KafkaFrontEnd {
    fn node(&self) -> BrokerId {
        BrokerId(self.config.node_id)
    }

    /// # Errors
    /// [`AnswerTooLarge`] when the answer would not fit in one frame.
    pub(crate) fn metadata(
        &mut self,
        request: MetadataRequest,
        version: i16,
    ) -> Result<MetadataResponse, AnswerTooLarge> {
        // Before v4 every Metadata request may create topics; after, only when it says so.
        let auto_create = version < 4 || request.allow_auto_topic_creation;
        let mut room = AnswerRoom::new(self.config.max_answer_bytes, version);
        let topics: Vec<MetadataResponseTopic> = match request.topics {
            // v0 asks for every topic with an empty list, later versions with none.
            Some(topics) if !(version == 0 && topics.is_empty()) => room
                .fill(topics.into_iter().filter_map(|topic| topic.name), |name| {
                    self.topic_metadata(&name, self.broker.topic(&name, auto_create), version)
                })?,
            // Every topic, with what the listing already says of each.
            _ => self
                .broker
                .metadata()
                .into_iter()
                .map(|topic| {
                    room.keep(self.topic_metadata(&topic.name.clone(), Ok(topic), version))
                })
                .collect::<Result<_, _>>()?,
        };
        let broker = MetadataResponseBroker::default()
            .with_node_id(self.node())
            .with_host(StrBytes::from_string(self.config.advertised_host.clone()))
            .with_port(self.config.advertised_port);
        let mut response = MetadataResponse::default()
            .with_brokers(vec![broker])
            .with_topics(topics);
        // Fields a version does not have must keep their defaults.
        if version >= 1 {
            response = response.with_controller_id(self.node());
        }
        if version >= 2 {
            response = response
                .with_cluster_id(Some(StrBytes::from_string(self.config.cluster_id.clone())));
        }
        Ok(response)
    }

    /// The Metadata answer for topic `name`, found (or refused) as `found` says.
    fn topic_metadata(
        &self,
        name: &str,
        found: Result<TopicSummary, BrokerError>,
        version: i16,
    ) -> MetadataResponseTopic {
        let topic = MetadataResponseTopic::default().with_name(Some(topic_name(name)));
        match found {
            Ok(found) => {
                let partitions = (0..found.partitions)
                    .map(|index| {
                        let partition = MetadataResponsePartition::default()
                            .with_partition_index(index as i32)
                            .with_leader_id(self.node())
                            .with_replica_nodes(vec![self.node()])
                            .with_isr_nodes(vec![self.node()]);
                        if version >= 7 {
                            partition.with_leader_epoch(minibroker_records::LEADER_EPOCH)
                        } else {
                            partition
                        }
                    })
                    .collect();
                topic.with_partitions(partitions)
            }
            Err(error) => topic.with_error_code(code_of(&error).code()),
        }
    }

    /// `None` for acks=0, which gets no answer. Partitions are served one after another; the
    /// answer is sent once their batches are written (and, with the `always` flush policy,
    /// synced) — see `FrontEnd::store_answered`.
    pub(crate) fn produce(
        &mut self,
        request: ProduceRequest,
        version: i16,
    ) -> Option<ProduceResponse> {
        let valid_acks = matches!(request.acks, -1..=1);
        let transactional = request.transactional_id.is_some();
        let mut responses = Vec::with_capacity(request.topic_data.len());
        for topic in request.topic_data {
            let mut partitions = Vec::with_capacity(topic.partition_data.len());
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
                let response = if !valid_acks {
                    refused(
                        ResponseError::InvalidRequiredAcks,
                        "acks must be -1, 0 or 1",
                    )
                } else if transactional {
                    refused(
                        ResponseError::TransactionalIdAuthorizationFailed,
                        "transactions are not supported by this broker",
                    )
                } else {
                    let records = data.records.unwrap_or_default();
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
            .produce_unwritten(&mut self.topics, topic, partition, batch)?;
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
            .log_start_offset(&mut self.topics, topic, partition)?;
        Ok((error, base_offset, log_start))
    }

    pub(crate) async fn fetch(&mut self, request: FetchRequest, version: i16) -> FetchResponse {
        let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0))
            .min(MAX_FETCH_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
        let notifiers: Vec<_> = request
            .topics
            .iter()
            .flat_map(|topic| {
                topic.partitions.iter().filter_map(|p| {
                    let partition = u32::try_from(p.partition).ok()?;
                    self.broker.appends(&topic.topic, partition).ok()
                })
            })
            .collect();
        loop {
            // Register for appends before reading, so one that lands in between still wakes us.
            let waits: Vec<_> = notifiers.iter().map(|n| n.wait()).collect();
            let (response, bytes) = self.fetch_once(&request, version);
            let now = tokio::time::Instant::now();
            // As Kafka: enough bytes (so at once for min_bytes 0), or an error to report, or
            // time is up.
            let failed = response
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .any(|p| p.error_code != 0);
            if bytes >= min_bytes || failed || now >= deadline || waits.is_empty() {
                return response;
            }
            tokio::select! {
                _ = futures::future::select_all(waits) => {}
                () = tokio::time::sleep_until(deadline) => return self.fetch_once(&request, version).0,
            }
        }
    }

    /// One pass over the requested partitions; returns the answer and its record bytes.
    fn fetch_once(&self, request: &FetchRequest, version: i16) -> (FetchResponse, usize) {
        let mut room = usize::try_from(request.max_bytes)
            .unwrap_or(0)
            .min(self.config.max_fetch_response_bytes);
        let mut total = 0usize;
        let responses = request
            .topics
            .iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|wanted| {
                        let data = PartitionData::default()
                            .with_partition_index(wanted.partition)
                            .with_high_watermark(NONE)
                            .with_last_stable_offset(NONE)
                            .with_aborted_transactions(Some(Vec::new()));
                        // The log start offset is in answers from v5 on.
                        let start = |offset: i64| if version >= 5 { offset } else { NONE };
                        let Ok(partition) = u32::try_from(wanted.partition) else {
                            return data
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                        };
                        // The broker always returns at least one batch; only the first partition
                        // with data may go past the answer's room with it.
                        let limit = usize::try_from(wanted.partition_max_bytes)
                            .unwrap_or(0)
                            .min(room);
                        match self.broker.fetch(
                            &topic.topic,
                            partition,
                            wanted.fetch_offset,
                            limit.max(1),
                            0,
                        ) {
                            Ok(fetched) => {
                                let records: Bytes = match fetched.batches.as_slice() {
                                    // Past the room only for the first partition with data.
                                    [first, ..] if total > 0 && first.len() > limit => Bytes::new(),
                                    // One batch, the usual tail read, goes out without a copy.
                                    [one] => one.clone(),
                                    many => many.concat().into(),
                                };
                                total += records.len();
                                room = room.saturating_sub(records.len());
                                data.with_high_watermark(fetched.high_watermark)
                                    .with_last_stable_offset(fetched.high_watermark)
                                    .with_log_start_offset(start(fetched.log_start_offset))
                                    .with_records(Some(records))
                            }
                            Err(error) => {
                                let (first, end) = self
                                    .broker
                                    .offsets(&topic.topic, partition)
                                    .unwrap_or((NONE, NONE));
                                data.with_error_code(code_of(&error).code())
                                    .with_high_watermark(end)
                                    .with_last_stable_offset(end)
                                    .with_log_start_offset(start(first))
                            }
                        }
                    })
                    .collect();
                FetchableTopicResponse::default()
                    .with_topic(topic.topic.clone())
                    .with_partitions(partitions)
            })
            .collect();
        (FetchResponse::default().with_responses(responses), total)
    }

    /// Lookups by time read the log, so the whole request is answered on a blocking thread, off
    /// the runtime's workers.
    ///
    /// # Errors
    /// [`AnswerTooLarge`] when the answer would not fit in one frame.
    pub(crate) async fn list_offsets(
        &self,
        request: ListOffsetsRequest,
        version: i16,
    ) -> Result<ListOffsetsResponse, AnswerTooLarge> {
        let broker = Arc::clone(&self.broker);
        let room = AnswerRoom::new(self.config.max_answer_bytes, version);
        tokio::task::spawn_blocking(move || list_offsets(&broker, request, version, room))
            .await
            .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
    }

    pub(crate) fn init_producer_id(
        &self,
        request: InitProducerIdRequest,
    ) -> InitProducerIdResponse {
        let refused = |error: ResponseError| {
            InitProducerIdResponse::default()
                .with_error_code(error.code())
                .with_producer_id(ProducerId(NO_PRODUCER_ID))
                .with_producer_epoch(-1)
        };
        match request.transactional_id.as_deref().map(|id| id.is_empty()) {
            // As Kafka: an empty transactional id is a malformed request, not a transaction.
            Some(true) => return refused(ResponseError::InvalidRequest),
            Some(false) => {
                tracing::info!(
                    "InitProducerId with a transactional id refused: no transactions yet"
                );
                return refused(ResponseError::TransactionalIdAuthorizationFailed);
            }
            None => {}
        }
        // KIP-360: a producer that knows its id asks for the next epoch.
        let known = (request.producer_id.0 != NO_PRODUCER_ID).then_some(request.producer_id.0);
        match self.broker.init_producer(known) {
            Ok(identity) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(identity.producer_id))
                .with_producer_epoch(identity.epoch),
            Err(error) => refused(code_of(&error)),
        }
    }

    pub(crate) fn create_topics(
        &self,
        request: CreateTopicsRequest,
        version: i16,
    ) -> CreateTopicsResponse {
        let topics = request
            .topics
            .into_iter()
            .map(|topic| {
                let partitions = match topic.num_partitions {
                    -1 => self.config.default_partitions,
                    n => u32::try_from(n).unwrap_or(0),
                };
                let result = if request.validate_only {
                    Ok(())
                } else {
                    self.broker.create_topic(&topic.name, partitions)
                };
                let answer = CreatableTopicResult::default().with_name(topic.name);
                let answer = if version >= 5 {
                    answer
                        .with_num_partitions(i32::try_from(partitions).unwrap_or(-1))
                        .with_replication_factor(1)
                } else {
                    answer
                };
                match result {
                    Ok(()) => answer,
                    Err(error) => answer
                        .with_error_code(code_of(&error).code())
                        .with_error_message(Some(StrBytes::from_string(error.to_string()))),
                }
            })
            .collect();
        CreateTopicsResponse::default().with_topics(topics)
    }

    pub(crate) fn delete_topics(
        &self,
        request: DeleteTopicsRequest,
        version: i16,
    ) -> DeleteTopicsResponse {
        let names: Vec<TopicName> = request
            .topic_names
            .into_iter()
            .chain(request.topics.into_iter().filter_map(|t| t.name))
            .collect();
        let responses = names
            .into_iter()
            .map(|name| {
                let answer = DeletableTopicResult::default().with_name(Some(name.clone()));
                match self.broker.delete_topic(&name) {
                    Ok(()) => answer,
                    Err(error) if version >= 5 => answer
                        .with_error_code(code_of(&error).code())
                        .with_error_message(Some(StrBytes::from_string(error.to_string()))),
                    Err(error) => answer.with_error_code(code_of(&error).code()),
                }
            })
            .collect();
        DeleteTopicsResponse::default().with_responses(responses)
    }
}

/// ListOffsets, answered in `room`. A partition named twice in one request is answered
/// INVALID_REQUEST each time, unlooked-up, as Kafka does: each partition costs at most one
/// lookup per request.
fn list_offsets(
    broker: &Broker,
    request: ListOffsetsRequest,
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
            let answer = if repeated {
                answer.with_error_code(ResponseError::InvalidRequest.code())
            } else {
                match offset_at(
                    broker,
                    &topic.name,
                    wanted.partition_index,
                    wanted.timestamp,
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

/// Kafka's offset lookups: -2 earliest, -1 latest, -3 the record with the largest timestamp,
/// otherwise the first record at or after the timestamp. Returns (offset, timestamp).
fn offset_at(
    broker: &Broker,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Result<(i64, i64), BrokerError> {
    let partition = partition_index(topic, partition)?;
    let (start, end) = broker.offsets(topic, partition)?;
    Ok(match timestamp {
        -2 => (start, NONE),
        -1 => (end, NONE),
        -3 => broker
            .offset_of_max_timestamp(topic, partition)?
            .unwrap_or((NONE, NONE)),
        at => broker
            .offset_for_timestamp(topic, partition, at)?
            .unwrap_or((NONE, NONE)),
    })
}
