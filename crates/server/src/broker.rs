//! The broker core: turns one decoded request into one response. Synchronous and lock-based, so
//! any front end (the native protocol today, Kafka's later) can call it from its own tasks.
//!
//! Producing takes the partition's state shard lock, validates, and — only for ACCEPTED —
//! appends to the partition log under that same lock (see `minibroker_state`), so a retry racing
//! its original can never be stored twice.

use minibroker_log::{LogError, ReadLimits, Writer};
use minibroker_protocol::{
    DescribeProducersRequest, DescribeProducersResponse, FetchRequest, FetchResponse, FetchedBatch,
    InitProducerRequest, InitProducerResponse, MetadataResponse, Outcome, ProduceRequest,
    ProduceResponse, ProducerState, Request, Response, TopicMetadata,
};
use minibroker_state::{
    BatchHeader, PartitionId, ProducerStateManager, SequenceRange, default_shard_count,
};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::producers::ProducerIds;
use crate::topics::{Partition, TopicCache, TopicRegistry};
use crate::{Config, RequestError};

/// Bytes reserved in a fetch response for everything but record data (headers, per-record
/// lengths), so the response always fits one frame.
const FETCH_FRAME_SLACK: usize = 4096;

/// How many produce requests got each outcome since the broker started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutcomeCounts {
    /// Appended.
    pub accepted: u64,
    /// Retries recognised and not appended.
    pub duplicate: u64,
    /// Gaps and bad session starts refused.
    pub out_of_order: u64,
    /// Zombie writes refused.
    pub fenced_epoch: u64,
}

/// Outcome counters, split by partition over cache-line-sized slots so that cores writing
/// different partitions do not fight over one counter's cache line on every request.
#[derive(Debug, Default)]
struct OutcomeCounters([CounterSlot; 16]);

#[derive(Debug, Default)]
#[repr(align(128))]
struct CounterSlot([AtomicU64; 4]);

impl OutcomeCounters {
    fn count(&self, partition: PartitionId, outcome: Outcome) {
        let slot = match outcome {
            Outcome::Accepted => 0,
            Outcome::Duplicate => 1,
            Outcome::OutOfOrder => 2,
            Outcome::FencedEpoch => 3,
        };
        self.0[partition as usize % self.0.len()].0[slot].fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> OutcomeCounts {
        let total = |slot: usize| {
            self.0
                .iter()
                .map(|s| s.0[slot].load(Ordering::Relaxed))
                .sum()
        };
        OutcomeCounts {
            accepted: total(0),
            duplicate: total(1),
            out_of_order: total(2),
            fenced_epoch: total(3),
        }
    }
}

/// Bytes charged against the storage limit for each batch besides its records: its place in the
/// log's index and, for a producer's first batch on a partition, its state entry. Charging it
/// keeps batches of empty records from growing memory without limit.
pub const BATCH_OVERHEAD_BYTES: u64 = 128;

/// Bytes charged for each record besides its bytes (its end position in the log).
pub const RECORD_OVERHEAD_BYTES: u64 = 4;

/// What a batch of records of these lengths counts against the storage limit.
#[must_use]
pub fn accounted_bytes(record_lengths: impl Iterator<Item = usize>) -> u64 {
    record_lengths.fold(BATCH_OVERHEAD_BYTES, |total, len| {
        total + len as u64 + RECORD_OVERHEAD_BYTES
    })
}

/// How much of the storage limit a partition reserves at a time, so that most appends need no
/// update of the broker-wide counter.
const STORAGE_RESERVATION: u64 = 1 << 20;

/// Topics, partitions, producer state and logs: everything a request acts on.
#[derive(Debug)]
pub struct Broker {
    outcomes: OutcomeCounters,
    topics: TopicRegistry,
    state: ProducerStateManager,
    producer_ids: ProducerIds,
    /// Bytes of the storage limit reserved by partitions (stored, or reserved for their next
    /// appends).
    reserved_bytes: AtomicU64,
    max_stored_bytes: u64,
    max_fetch_bytes: usize,
}

impl Broker {
    /// A broker with the topics and limits of `config`.
    ///
    /// # Errors
    /// [`RequestError::InvalidInput`] for a declared topic with an invalid name.
    pub fn new(config: &Config) -> Result<Self, RequestError> {
        let shards = match config.state_shards {
            0 => default_shard_count(),
            n => n,
        };
        let frame_budget = config
            .max_frame_bytes
            .saturating_sub(FETCH_FRAME_SLACK)
            .max(1);
        Ok(Self {
            outcomes: OutcomeCounters::default(),
            topics: TopicRegistry::new(config)?,
            state: ProducerStateManager::with_shards(shards),
            producer_ids: ProducerIds::new(config.max_producer_ids),
            reserved_bytes: AtomicU64::new(0),
            max_stored_bytes: config.max_stored_bytes,
            max_fetch_bytes: (config.max_fetch_bytes as usize).min(frame_budget),
        })
    }

    /// Serves one request. Refusals of the exactly-once rule are produce outcomes; anything the
    /// broker cannot serve is an error response.
    pub fn handle(&self, request: Request<'_>, topics: &mut TopicCache) -> Response {
        let result = match request {
            Request::Produce(produce) => self.produce(&produce, topics).map(Response::Produce),
            Request::Fetch(fetch) => self.fetch(&fetch).map(Response::Fetch),
            Request::InitProducer(init) => self.init_producer(init).map(Response::InitProducer),
            Request::DescribeProducers(describe) => self
                .describe_producers(&describe)
                .map(Response::DescribeProducers),
            Request::Metadata => Ok(Response::Metadata(self.metadata())),
        };
        result.unwrap_or_else(|error| {
            match &error {
                RequestError::Internal(_) => tracing::warn!(%error, "request failed"),
                _ => tracing::debug!(%error, "request refused"),
            }
            Response::Error(error.to_response())
        })
    }

    /// Validates and, if ACCEPTED, appends one batch. `topics` is the caller's cache of topics
    /// (one per connection).
    ///
    /// # Errors
    /// Bad input (negative fields, no records, bad topic or partition) or a full store.
    pub fn produce(
        &self,
        request: &ProduceRequest<'_>,
        topics: &mut TopicCache,
    ) -> Result<ProduceResponse, RequestError> {
        if request.records.is_empty() {
            return Err(RequestError::EmptyBatch);
        }
        // Check the fields before the topic lookup, so bad input never auto-creates a topic.
        let sequences = SequenceRange::single(request.sequence)?;
        let header = BatchHeader::new(request.producer_id, 0, request.epoch, sequences)?;
        let topic = topics.get_or_create(&self.topics, request.topic)?;
        let partition = topic.partition(request.partition)?;
        let header = header.on_partition(partition.id);
        let writer = Writer {
            producer_id: request.producer_id,
            epoch: request.epoch,
            base_sequence: request.sequence,
        };
        let verdict = self
            .state
            .append_batch(&header, || self.append(partition, writer, &request.records))?;
        let outcome = match verdict.outcome {
            minibroker_state::Outcome::Accepted => Outcome::Accepted,
            minibroker_state::Outcome::Duplicate => Outcome::Duplicate,
            minibroker_state::Outcome::OutOfOrder => Outcome::OutOfOrder,
            minibroker_state::Outcome::FencedEpoch => Outcome::FencedEpoch,
        };
        self.outcomes.count(partition.id, outcome);
        if outcome != Outcome::Accepted {
            tracing::debug!(
                topic = request.topic,
                partition = request.partition,
                producer_id = request.producer_id,
                epoch = request.epoch,
                sequence = request.sequence,
                %outcome,
                "produce not appended"
            );
        }
        Ok(ProduceResponse {
            outcome,
            base_offset: verdict.base_offset,
        })
    }

    /// Appends under the caller's shard lock, within the broker's storage limit.
    ///
    /// Each partition reserves storage from the broker-wide limit a megabyte at a time (or
    /// exactly what a batch needs, when less than a megabyte is left), so most appends only touch
    /// their own partition. The limit is never exceeded; it may refuse a batch while other
    /// partitions still hold unused reservations (at most a megabyte each).
    fn append(
        &self,
        partition: &Partition,
        writer: Writer,
        records: &[&minibroker_protocol::serde_bytes::Bytes],
    ) -> Result<i64, RequestError> {
        let size = accounted_bytes(records.iter().map(|r| r.len()));
        let mut data = partition.log();
        if data.allowance < size {
            let wanted = size - data.allowance;
            let granted = [wanted.max(STORAGE_RESERVATION), wanted]
                .into_iter()
                .find(|amount| self.reserve(*amount))
                .ok_or_else(|| {
                    RequestError::StorageFull(format!(
                        "the broker's store is full ({} bytes); the batch ({size} bytes with overhead) was not appended",
                        self.max_stored_bytes
                    ))
                })?;
            data.allowance += granted;
        }
        let base_offset = data
            .log
            .append(writer, records)
            .map_err(|error| match error {
                LogError::EmptyBatch => RequestError::EmptyBatch,
                other => RequestError::Internal(other.to_string()),
            })?;
        data.allowance -= size;
        Ok(base_offset)
    }

    /// Takes `amount` bytes of the storage limit if they are free.
    fn reserve(&self, amount: u64) -> bool {
        self.reserved_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |reserved| {
                reserved
                    .checked_add(amount)
                    .filter(|total| *total <= self.max_stored_bytes)
            })
            .is_ok()
    }

    /// Reads records from an offset.
    ///
    /// # Errors
    /// Unknown topic, partition out of range, or offset out of range.
    pub fn fetch(&self, request: &FetchRequest<'_>) -> Result<FetchResponse, RequestError> {
        let topic = self.topics.get(request.topic)?;
        let partition = topic.partition(request.partition)?;
        let limits = ReadLimits {
            max_bytes: (request.max_bytes as usize).min(self.max_fetch_bytes),
            max_records: usize::MAX,
        };
        let log = partition.log();
        let slices = log
            .read(request.offset, limits)
            .map_err(|error| RequestError::OffsetOutOfRange(error.to_string()))?;
        let high_watermark = log.next_offset();
        drop(log);
        Ok(FetchResponse {
            high_watermark,
            batches: slices
                .into_iter()
                .map(|slice| FetchedBatch {
                    first_offset: slice.first_offset,
                    batch_base_offset: slice.batch_base_offset,
                    producer_id: slice.writer.producer_id,
                    epoch: slice.writer.epoch,
                    sequence: slice.writer.base_sequence,
                    records: slice.records,
                })
                .collect(),
        })
    }

    /// Issues a producer id, or bumps an issued id's epoch.
    ///
    /// # Errors
    /// Negative or never-issued id, or an exhausted epoch.
    pub fn init_producer(
        &self,
        request: InitProducerRequest,
    ) -> Result<InitProducerResponse, RequestError> {
        if let Some(id) = request.producer_id.filter(|id| *id < 0) {
            return Err(minibroker_state::StateError::NegativeProducerId(id).into());
        }
        let (producer_id, epoch) = self.producer_ids.init(request.producer_id)?;
        tracing::info!(producer_id, epoch, "producer initialised");
        Ok(InitProducerResponse { producer_id, epoch })
    }

    /// The producer state of one partition.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn describe_producers(
        &self,
        request: &DescribeProducersRequest<'_>,
    ) -> Result<DescribeProducersResponse, RequestError> {
        let topic = self.topics.get(request.topic)?;
        let partition = topic.partition(request.partition)?;
        let producers = self
            .state
            .producers(partition.id)
            .into_iter()
            .map(|view| ProducerState {
                producer_id: view.producer_id,
                epoch: view.entry.epoch(),
                last_sequence: view.entry.last_sequence(),
                last_base_offset: view.entry.batches().next().and_then(|b| b.base_offset),
                // At most CACHED_BATCHES (5).
                cached_batches: view.entry.batches().len() as u8,
            })
            .collect();
        Ok(DescribeProducersResponse { producers })
    }

    /// Every topic and its partition count.
    #[must_use]
    pub fn metadata(&self) -> MetadataResponse {
        MetadataResponse {
            topics: self
                .topics
                .list()
                .iter()
                .map(|topic| TopicMetadata {
                    name: topic.name.clone(),
                    partitions: topic.partition_count(),
                })
                .collect(),
        }
    }

    /// How many produce requests got each outcome.
    #[must_use]
    pub fn outcome_counts(&self) -> OutcomeCounts {
        self.outcomes.get()
    }

    /// Record bytes stored across all partitions (sums every partition; not for hot paths).
    #[must_use]
    pub fn stored_bytes(&self) -> u64 {
        self.topics
            .list()
            .iter()
            .flat_map(|topic| {
                topic
                    .partitions()
                    .iter()
                    .map(|p| p.log().stored_bytes() as u64)
            })
            .sum()
    }

    /// The topic registry (for embedding and inspection).
    #[must_use]
    pub fn topics(&self) -> &TopicRegistry {
        &self.topics
    }

    /// The producer state manager (for embedding and inspection).
    #[must_use]
    pub fn state(&self) -> &ProducerStateManager {
        &self.state
    }
}
