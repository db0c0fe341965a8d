//! Fetch: whole stored batches from each partition asked for, within the answer's room, waiting
//! for data up to the client's `max_wait_ms` (at most 30 s).

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId, TopicName};
use minibroker_broker::Isolation;
use std::collections::HashMap;
use std::time::Duration;

use super::NONE;
use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;
use minibroker_security::{Operation, ResourceType};

/// Batches read from elsewhere than the broker's log, by topic and partition: on a broker of a
/// cluster, those its copy no longer holds, read from the database.
/// An error stands for batches that could not be read there, and must not be answered from the
/// log (which would say the offset is out of range).
pub(crate) type OlderBatches = HashMap<(String, i32), Result<Older, ResponseError>>;

/// Batches a broker of a cluster read from the database, below its copy.
#[derive(Debug, Default)]
pub(crate) struct Older {
    /// The batches, from the offset asked for.
    pub(crate) batches: Vec<Bytes>,
    /// For a read_committed fetch, the aborted transactions with records among them:
    /// (producer id, first offset).
    pub(crate) aborted: Vec<(i64, i64)>,
    /// For a read_committed fetch, the copy's last stable offset when they were read: the
    /// read stops there.
    pub(crate) stable: Option<i64>,
}

/// The longest a fetch waits for data, whatever the client asks.
const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

impl KafkaFrontEnd {
    pub(crate) async fn fetch(&mut self, request: FetchRequest, version: i16) -> FetchResponse {
        let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0))
            .min(MAX_FETCH_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
        self.catch_up().await;
        let older = match &self.cluster {
            Some(cluster) => self.shared_older_batches(cluster, &request).await,
            None => OlderBatches::new(),
        };
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
            let (response, bytes) = self.fetch_once(&request, version, &older);
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
                () = tokio::time::sleep_until(deadline) => {
                    return self.fetch_once(&request, version, &older).0;
                }
            }
        }
    }

    /// One pass over the requested partitions; returns the answer and its record bytes.
    fn fetch_once(
        &self,
        request: &FetchRequest,
        version: i16,
        older: &OlderBatches,
    ) -> (FetchResponse, usize) {
        let mut room = Room {
            max: usize::try_from(request.max_bytes)
                .unwrap_or(0)
                .min(self.config.max_fetch_response_bytes),
            taken: 0,
        };
        let mut responses = Vec::with_capacity(request.topics.len());
        for topic in &request.topics {
            let readable = self.may(Operation::Read, ResourceType::Topic, &topic.topic);
            let partitions = topic
                .partitions
                .iter()
                .map(|wanted| {
                    if !readable {
                        return denied_partition(wanted.partition);
                    }
                    let isolation = request.isolation_level;
                    // Only a broker of a cluster has any (no key is made otherwise).
                    let older = (!older.is_empty())
                        .then(|| older.get(&(topic.topic.to_string(), wanted.partition)))
                        .flatten();
                    self.fetch_partition(&topic.topic, wanted, isolation, version, older, &mut room)
                })
                .collect();
            responses.push(
                FetchableTopicResponse::default()
                    .with_topic(topic.topic.clone())
                    .with_partitions(partitions),
            );
        }
        (
            FetchResponse::default().with_responses(responses),
            room.taken,
        )
    }

    /// One partition's part of a fetch answer, taking its records from `room`.
    fn fetch_partition(
        &self,
        topic: &TopicName,
        wanted: &FetchPartition,
        isolation_level: i8,
        version: i16,
        older: Option<&Result<Older, ResponseError>>,
        room: &mut Room,
    ) -> PartitionData {
        let data = PartitionData::default()
            .with_partition_index(wanted.partition)
            .with_high_watermark(NONE)
            .with_last_stable_offset(NONE)
            .with_aborted_transactions(Some(Vec::new()));
        // The log start offset is in answers from v5 on.
        let start = |offset: i64| if version >= 5 { offset } else { NONE };
        let Ok(partition) = u32::try_from(wanted.partition) else {
            return data.with_error_code(ResponseError::UnknownTopicOrPartition.code());
        };
        // The broker always returns at least one batch; only the first partition with data may
        // go past the answer's room with it.
        let limit = usize::try_from(wanted.partition_max_bytes)
            .unwrap_or(0)
            .min(room.left());
        if let (Some(older), Ok((local_start, end))) =
            (older, self.broker.offsets(topic, partition))
        {
            let older = match older {
                Ok(older) => older,
                Err(error) => return data.with_error_code(error.code()),
            };
            // Read from the cluster's database. The last stable offset is the copy's, which
            // holds open every transaction begun below it and still open; read_committed
            // stops where it was when the aborted transactions were read, and is told those
            // among what it reads.
            let stable = older.stable.unwrap_or_else(|| {
                self.broker
                    .last_stable_offset(topic, partition)
                    .unwrap_or(end)
            });
            let stable_part;
            let batches = if isolation_of(isolation_level) == Isolation::ReadCommitted {
                stable_part = older
                    .batches
                    .iter()
                    .take_while(|batch| minibroker_records::base_offset(batch) < stable)
                    .cloned()
                    .collect::<Vec<_>>();
                &stable_part
            } else {
                &older.batches
            };
            let records = room.take(batches, limit);
            return data
                .with_high_watermark(end)
                .with_last_stable_offset(stable)
                .with_log_start_offset(start(self.log_start_of(topic, partition, local_start)))
                .with_aborted_transactions(Some(aborted_of(&older.aborted)))
                .with_records(Some(records));
        }
        let isolation = isolation_of(isolation_level);
        let fetched = self.broker.fetch(
            topic,
            partition,
            wanted.fetch_offset,
            limit.max(1),
            0,
            isolation,
        );
        match fetched {
            Ok(fetched) => {
                let records = room.take(&fetched.batches, limit);
                let aborted: Vec<(i64, i64)> = fetched
                    .aborted
                    .iter()
                    .map(|a| (a.producer_id, a.first_offset))
                    .collect();
                let aborted = aborted_of(&aborted);
                data.with_high_watermark(fetched.high_watermark)
                    .with_last_stable_offset(fetched.last_stable_offset)
                    .with_log_start_offset(start(self.log_start_of(
                        topic,
                        partition,
                        fetched.log_start_offset,
                    )))
                    .with_aborted_transactions(Some(aborted))
                    .with_records(Some(records))
            }
            Err(error) => {
                let (first, end) = self
                    .broker
                    .offsets(topic, partition)
                    .unwrap_or((NONE, NONE));
                data.with_error_code(code_of(&error).code())
                    .with_high_watermark(end)
                    .with_last_stable_offset(end)
                    .with_log_start_offset(start(self.log_start_of(topic, partition, first)))
            }
        }
    }
}

/// A Fetch answer's aborted transactions, from (producer id, first offset) pairs.
fn aborted_of(aborted: &[(i64, i64)]) -> Vec<AbortedTransaction> {
    aborted
        .iter()
        .map(|&(producer_id, first_offset)| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(producer_id))
                .with_first_offset(first_offset)
        })
        .collect()
}

/// What a request's `isolation_level` asks for (1: `read_committed`; Fetch and ListOffsets).
pub(crate) fn isolation_of(isolation_level: i8) -> Isolation {
    if isolation_level == 1 {
        Isolation::ReadCommitted
    } else {
        Isolation::ReadUncommitted
    }
}

/// The record bytes a fetch answer may hold, and those it holds.
struct Room {
    max: usize,
    taken: usize,
}

impl Room {
    fn left(&self) -> usize {
        self.max.saturating_sub(self.taken)
    }

    /// The records of `batches` (read within `limit`) that go into the answer: all of them, but
    /// nothing past the room unless no partition before had data (KIP-74).
    fn take(&mut self, batches: &[Bytes], limit: usize) -> Bytes {
        let records: Bytes = match batches {
            [first, ..] if self.taken > 0 && first.len() > limit => Bytes::new(),
            // One batch, the usual tail read, goes out without a copy.
            [one] => one.clone(),
            many => many.concat().into(),
        };
        self.taken += records.len();
        records
    }
}

/// A partition of a topic the principal may not read: TOPIC_AUTHORIZATION_FAILED, no records.
fn denied_partition(index: i32) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
        .with_high_watermark(NONE)
        .with_last_stable_offset(NONE)
        .with_aborted_transactions(Some(Vec::new()))
}
