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
    BatchHeader, NewEntry, PartitionId, ProducerStateManager, SequenceRange, default_shard_count,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::budget::{PRODUCER_ENTRY_BYTES, StorageBudget, accounted_bytes};
use crate::producers::ProducerIds;
use crate::topics::{CreateCheck, Partition, TopicCache, TopicRegistry};
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

/// How many connections the listener has accepted, refused and holds open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Connections served since the broker started.
    pub accepted: u64,
    /// Connections closed at once because `max_connections` were already served.
    pub refused: u64,
    /// Connections being served now.
    pub open: u64,
}

#[derive(Debug, Default)]
pub(crate) struct ConnectionCounters {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub closed: AtomicU64,
}

/// Bytes a fetch answer spends on each record besides its bytes (postcard's length prefix).
const FETCH_RECORD_OVERHEAD: usize = 5;

/// Bytes a fetch answer spends on each batch besides its records (offsets, producer metadata and
/// the record count, each at its largest varint encoding).
const FETCH_BATCH_OVERHEAD: usize = 48;

/// Bytes one producer takes in a describe-producers answer, at most.
const DESCRIBED_PRODUCER_BYTES: usize = 40;

/// Most producers in one describe-producers answer.
const MAX_DESCRIBE_PAGE: usize = 1000;

/// Topics, partitions, producer state and logs: everything a request acts on.
#[derive(Debug)]
pub struct Broker {
    outcomes: OutcomeCounters,
    topics: TopicRegistry,
    state: ProducerStateManager,
    producer_ids: ProducerIds,
    budget: Arc<StorageBudget>,
    max_fetch_bytes: usize,
    max_describe_page: usize,
    pub(crate) connections: ConnectionCounters,
}

impl Broker {
    /// A broker with the topics and limits of `config`.
    ///
    /// # Errors
    /// [`RequestError::InvalidInput`] for a declared topic with an invalid name;
    /// [`RequestError::StorageFull`] if the declared topics exceed a limit.
    pub fn new(config: &Config) -> Result<Self, RequestError> {
        let shards = match config.state_shards {
            0 => default_shard_count(),
            n => n,
        };
        let frame_budget = config
            .max_frame_bytes
            .saturating_sub(FETCH_FRAME_SLACK)
            .max(1);
        let budget = Arc::new(StorageBudget::new(config.max_stored_bytes));
        Ok(Self {
            outcomes: OutcomeCounters::default(),
            topics: TopicRegistry::new(config, Arc::clone(&budget))?,
            state: ProducerStateManager::with_shards(shards),
            producer_ids: ProducerIds::new(
                config.max_producer_ids,
                config.producer_id_expiration(),
            ),
            budget,
            max_fetch_bytes: (config.max_fetch_bytes as usize).min(frame_budget),
            max_describe_page: (frame_budget / DESCRIBED_PRODUCER_BYTES)
                .clamp(1, MAX_DESCRIBE_PAGE),
            connections: ConnectionCounters::default(),
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
        let size = accounted_bytes(request.records.iter().map(|r| r.len()));
        let check = CreateCheck {
            partition: request.partition,
            bytes: size + PRODUCER_ENTRY_BYTES,
        };
        let topic = topics.get_or_create(&self.topics, request.topic, check)?;
        let partition = topic.partition(request.partition)?;
        let header = header.on_partition(partition.id);
        let writer = Writer {
            producer_id: request.producer_id,
            epoch: request.epoch,
            base_sequence: request.sequence,
        };
        let verdict = self.state.append_batch(&header, |new_entry| {
            self.append(partition, writer, &request.records, size, new_entry)
        })?;
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

    /// Appends under the caller's shard lock, within the broker's storage limit: `size` for the
    /// batch and, for a producer's first batch here, its state entry.
    ///
    /// The partition draws on its reservation of the budget and tops it up when it runs short
    /// (see [`crate::budget`]), so most appends touch only their own partition.
    fn append(
        &self,
        partition: &Partition,
        writer: Writer,
        records: &[&minibroker_protocol::serde_bytes::Bytes],
        size: u64,
        new_entry: NewEntry,
    ) -> Result<i64, RequestError> {
        let charge = size + if new_entry.0 { PRODUCER_ENTRY_BYTES } else { 0 };
        let mut data = partition.log();
        if data.allowance < charge {
            let wanted = charge - data.allowance;
            let granted = self
                .budget
                .reserve_for_partition(wanted, data.held)
                .ok_or_else(|| {
                    RequestError::StorageFull(format!(
                        "the broker's store is full ({} bytes); the batch ({charge} bytes with overhead) was not appended",
                        self.budget.max()
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
        data.allowance -= charge;
        data.held += charge;
        Ok(base_offset)
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
            record_overhead: FETCH_RECORD_OVERHEAD,
            batch_overhead: FETCH_BATCH_OVERHEAD,
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
        tracing::debug!(producer_id, epoch, "producer initialised");
        Ok(InitProducerResponse { producer_id, epoch })
    }

    /// One page of the producer state of one partition, in producer id order.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn describe_producers(
        &self,
        request: &DescribeProducersRequest<'_>,
    ) -> Result<DescribeProducersResponse, RequestError> {
        let topic = self.topics.get(request.topic)?;
        let partition = topic.partition(request.partition)?;
        let limit = match request.limit as usize {
            0 => self.max_describe_page,
            n => n.min(self.max_describe_page),
        };
        let page = self
            .state
            .producers_page(partition.id, request.after_producer_id, limit);
        let producers = page
            .producers
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
        Ok(DescribeProducersResponse {
            producers,
            next_after: page.next_after,
        })
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

    /// Bytes charged to the storage limit (kept, or reserved by partitions for their next
    /// appends), and the limit.
    #[must_use]
    pub fn storage_charged(&self) -> (u64, u64) {
        (self.budget.charged(), self.budget.max())
    }

    /// How many connections were accepted and refused, and how many are open.
    #[must_use]
    pub fn connection_counts(&self) -> ConnectionCounts {
        let accepted = self.connections.accepted.load(Ordering::Relaxed);
        ConnectionCounts {
            accepted,
            refused: self.connections.refused.load(Ordering::Relaxed),
            open: accepted.saturating_sub(self.connections.closed.load(Ordering::Relaxed)),
        }
    }

    /// How many producer ids are remembered for a later epoch bump.
    #[must_use]
    pub fn remembered_producer_ids(&self) -> usize {
        self.producer_ids.remembered()
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
