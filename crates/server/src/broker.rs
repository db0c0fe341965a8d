//! The broker core: topics → partitions → producer state + log, in domain terms. Synchronous and
//! lock-based, so every front end (the native protocol, Kafka's) calls it from its own tasks and
//! translates its wire to these types and back.
//!
//! Producing checks the batch, takes the partition's state shard lock, validates, and — only for
//! ACCEPTED — appends to the partition log under that same lock (see `minibroker_state`), so a
//! retry racing its original can never be stored twice.
//!
//! With a data directory the logs are segment files. A produce's batch may wait in memory to be
//! written together with others; its answer waits, after every lock is released, for the write
//! and, when the flush policy says so, the fsync that cover it (`Broker::write_produced`, called
//! by the connection before its answers leave; `crate::flush`). `durability` recovers state at
//! start, snapshots it, and runs retention and expiry.

mod durability;

pub(crate) use durability::TakenSnapshot;

use bytes::Bytes;
use minibroker_log::{FsStorage, LogError, PartitionLog, Storage};
use minibroker_log::{ReadLimits, Released};
use minibroker_records::{BatchInfo, NO_PRODUCER_ID};
use minibroker_state::{
    BatchHeader, NewEntry, Outcome, ProducerPage, ProducerStateManager, ProducerView,
    SequenceRange, Verdict, default_shard_count,
};
use std::sync::Arc;

use crate::budget::{PRODUCER_ENTRY_BYTES, StorageBudget, accounted_bytes, released_charge};
use crate::config::FlushPolicy;
use crate::counters::{ConnectionCounters, ConnectionCounts, OutcomeCounters, OutcomeCounts};
use crate::data_dir::DataDir;
use crate::groups::GroupCoordinator;
use crate::producers::ProducerIds;
use crate::signal::AppendSignal;
use crate::stats::{HistogramSnapshot, PartitionStats, RequestTimings};
use crate::topics::{CreateCheck, Partition, PartitionData, TopicCache, TopicRegistry};
use crate::{BrokerError, Config, ServerError};
use std::sync::atomic::{AtomicBool, Ordering};

/// Most producers one page of [`Broker::describe_producers`] holds.
pub const MAX_DESCRIBE_PAGE: usize = 1000;

/// Batches read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The offset the next appended record will get.
    pub high_watermark: i64,
    /// The first offset the partition holds.
    pub log_start_offset: i64,
    /// Whole stored batches (Kafka v2 record batches) in offset order; the first holds the
    /// offset asked for, and may begin before it.
    pub batches: Vec<Bytes>,
}

/// What the synchronous part of a produce leaves to do once its locks are released.
struct Produced {
    verdict: Verdict,
    /// The offset an fsync must cover before the answer (the `always` policy).
    sync_through: Option<i64>,
    /// After a roll: the producer-state snapshot to write.
    snapshot: Option<TakenSnapshot>,
}

/// A producer id and the epoch to use with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdentity {
    /// The producer id.
    pub producer_id: i64,
    /// The epoch; older epochs of this id are fenced from now on.
    pub epoch: i16,
}

/// One partition of a described topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionSummary {
    /// Its index.
    pub partition: u32,
    /// First offset held.
    pub log_start_offset: i64,
    /// Next offset to be written.
    pub log_end_offset: i64,
    /// Batch bytes held.
    pub stored_bytes: u64,
    /// Producers with state on it.
    pub producers: u64,
}

/// One partition's figures for the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetrics {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// First offset held.
    pub log_start_offset: i64,
    /// Next offset to be written.
    pub log_end_offset: i64,
    /// Batch bytes held.
    pub stored_bytes: u64,
    /// Produce outcomes, by [`Outcome::index`].
    pub outcomes: [u64; 4],
    /// Records appended.
    pub records_in: u64,
    /// Batch bytes appended.
    pub bytes_in: u64,
    /// Records handed out by fetches.
    pub records_out: u64,
    /// Batch bytes handed out by fetches.
    pub bytes_out: u64,
    /// Fsync latencies (durable logs).
    pub fsync: HistogramSnapshot,
    /// Read-only after a storage error.
    pub read_only: bool,
}

/// Runs `read` on the partition's log under its lock. A durable log writes its pending batches
/// before a read; when that fails, the partition is read-only from then on.
fn read_log<T>(
    partition: &Partition,
    read: impl FnOnce(&mut PartitionLog) -> Result<T, LogError>,
) -> Result<T, BrokerError> {
    let result = read(&mut partition.log().log);
    result.map_err(|error| {
        crate::flush::storage_failed(partition, &error);
        error.into()
    })
}

/// A topic and its partition count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSummary {
    /// The topic's name.
    pub name: String,
    /// How many partitions it has.
    pub partitions: u32,
}

/// Topics, partitions, producer state and logs: everything a request acts on.
#[derive(Debug)]
pub struct Broker {
    outcomes: OutcomeCounters,
    topics: TopicRegistry,
    state: ProducerStateManager,
    producer_ids: ProducerIds,
    budget: Arc<StorageBudget>,
    max_fetch_bytes: usize,
    /// The data directory, for a durable broker.
    data: Option<Arc<DataDir>>,
    /// Consumer groups and their committed offsets.
    groups: GroupCoordinator,
    /// Every connection's request latencies, when metrics are on.
    timings: Option<Arc<RequestTimings>>,
    /// Set once the broker's listeners are bound (and recovery, done in `new`, is over).
    ready: AtomicBool,
    /// The configuration, for what durability and maintenance read from it (shared with the
    /// topic registry, for each new topic's retention).
    config: Arc<Config>,
    pub(crate) connections: ConnectionCounters,
    /// Connection slots, shared by every listener of this broker: `max_connections` is one
    /// limit whatever the protocols.
    pub(crate) connection_slots: Arc<tokio::sync::Semaphore>,
}

impl Broker {
    /// A broker with the topics and limits of `config`.
    ///
    /// # Errors
    /// [`ServerError::Config`] for limits that make no sense together;
    /// [`ServerError::DeclaredTopic`] for a declared topic that cannot be created.
    pub fn new(config: &Config) -> Result<Self, ServerError> {
        Self::build(config, Arc::new(FsStorage), true)
    }

    /// A broker whose data directory (`config.data_dir`, if set) lives on `storage` instead of
    /// the real file system: tests use it to crash the storage under the broker.
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_storage(config: &Config, storage: Arc<dyn Storage>) -> Result<Self, ServerError> {
        Self::build(config, storage, false)
    }

    fn build(config: &Config, storage: Arc<dyn Storage>, lock: bool) -> Result<Self, ServerError> {
        config.validate()?;
        let shards = match config.state_shards {
            0 => default_shard_count(),
            n => n,
        };
        let budget = Arc::new(StorageBudget::new(config.max_stored_bytes));
        let data = match &config.data_dir {
            Some(root) => Some(Arc::new(DataDir::open(
                root,
                storage,
                config.segments(),
                lock,
                (config.max_connections, config.max_open_files),
            )?)),
            None => None,
        };
        let mut producer_ids =
            ProducerIds::new(config.max_producer_ids, config.producer_id_expiration());
        if let Some(data) = &data {
            producer_ids = producer_ids.reserving_in(Arc::clone(data))?;
        }
        let shared = Arc::new(config.clone());
        let groups = GroupCoordinator::with_budget(config, data.clone(), Arc::clone(&budget))?;
        let broker = Self {
            outcomes: OutcomeCounters::default(),
            topics: TopicRegistry::new(&shared, Arc::clone(&budget), data.clone())?,
            state: ProducerStateManager::with_shards(shards),
            producer_ids,
            budget,
            max_fetch_bytes: config.max_fetch_bytes as usize,
            groups,
            timings: config
                .metrics_listen
                .map(|_| Arc::new(RequestTimings::default())),
            ready: AtomicBool::new(false),
            data,
            config: shared,
            connections: ConnectionCounters::default(),
            connection_slots: Arc::new(tokio::sync::Semaphore::new(config.max_connections)),
        };
        broker.recover()?;
        Ok(broker)
    }

    /// Appends one Kafka v2 record batch to `topic`/`partition` if the exactly-once rule accepts
    /// it: the rule reads the producer id, epoch, base sequence and record count from the batch's
    /// header, and the batch is stored as it is but for its base offset. A batch of a producer
    /// that is not idempotent (producer id -1) is appended without the rule. `topics` is the
    /// caller's cache of topics (one per connection).
    ///
    /// With a data directory, the batch is written to its segment file when this returns, and
    /// with the `always` flush policy an ACCEPTED or DUPLICATE verdict is returned only once the
    /// batch is synced to disk.
    ///
    /// # Errors
    /// A damaged or unacceptable batch, a transactional one, negative producer fields, a bad
    /// topic or partition, or a full store. Nothing is stored or created then. A storage error
    /// when the disk fails (the partition is read-only from then on).
    pub async fn produce(
        &self,
        topics: &mut TopicCache,
        topic: &str,
        partition: u32,
        batch: &[u8],
    ) -> Result<Verdict, BrokerError> {
        let verdict = self.produce_unwritten(topics, topic, partition, batch);
        self.write_produced(topics).await?;
        verdict
    }

    /// As [`Self::produce`], but a durable partition may keep the batch in memory, to be written
    /// (and with the `always` policy synced) together with others: the verdict must not reach
    /// the producer before [`Self::write_produced`] has returned `Ok` for the same `topics`. A
    /// connection calls that once before it sends the answers it has gathered, so its pipelined
    /// produces share one write and one fsync.
    ///
    /// It never waits, so a front end answers a produce without an `.await`. The producer-state
    /// snapshot a segment roll takes is written by [`Self::write_produced`] too (its fsyncs
    /// belong on a blocking thread), before the answers leave.
    ///
    /// # Errors
    /// As [`Self::produce`].
    pub fn produce_unwritten(
        &self,
        topics: &mut TopicCache,
        topic: &str,
        partition: u32,
        batch: &[u8],
    ) -> Result<Verdict, BrokerError> {
        let Produced {
            verdict,
            sync_through,
            snapshot,
        } = self.produce_now(topics, topic, partition, batch)?;
        if let Some(snapshot) = snapshot {
            topics.note_snapshot(snapshot);
        }
        if self.data.is_some() {
            // ACCEPTED, or a DUPLICATE whose original may itself still be unwritten.
            topics.note_unwritten(topic, partition, sync_through);
        }
        Ok(verdict)
    }

    /// Writes the batches of every durable partition produced to through `topics` since the
    /// last call, whoever appended them (one `write(2)` per partition), and with the `always`
    /// policy waits for the fsyncs that cover them (one per partition, shared with every
    /// connection waiting at the same time), so that the verdicts [`Self::produce_unwritten`]
    /// gave can be sent.
    ///
    /// # Errors
    /// A storage error when a write or fsync fails: those partitions are read-only from then on,
    /// and the verdicts must not be sent (their batches are not stored, or not durably).
    pub async fn write_produced(&self, topics: &mut TopicCache) -> Result<(), BrokerError> {
        if !topics.has_unwritten() {
            // In memory, always: nothing to write, nothing to wait for.
            return Ok(());
        }
        for snapshot in topics.take_snapshots() {
            // On a blocking thread: its fsyncs would stall every connection of this worker.
            let _ = tokio::task::spawn_blocking(move || snapshot.write()).await;
        }
        let noted = topics.take_unwritten();
        let mut result = Ok(());
        let mut syncs = Vec::new();
        for (partition, sync_through) in noted
            .iter()
            .filter_map(|noted| Some((noted.partition()?, noted.sync_through)))
        {
            // The lock is released before `storage_failed` takes it again.
            let written = partition.log().log.write_pending();
            let failed = match written {
                Err(error) => {
                    crate::flush::storage_failed(partition, &error);
                    Some(error.into())
                }
                // Another connection's write failed first and took these batches with it.
                Ok(()) if partition.flush.is_read_only() => {
                    Some(crate::flush::read_only(partition))
                }
                Ok(()) => None,
            };
            // `and` keeps the first error.
            match failed {
                Some(error) => result = result.and(Err(error)),
                None => syncs.extend(
                    sync_through.map(|through| partition.flush.wait_durable(partition, through)),
                ),
            }
        }
        for synced in futures::future::join_all(syncs).await {
            result = result.and(synced);
        }
        topics.reuse_unwritten(noted);
        result
    }

    /// The synchronous part of [`Self::produce`], under the locks.
    fn produce_now(
        &self,
        topics: &mut TopicCache,
        topic: &str,
        partition: u32,
        batch: &[u8],
    ) -> Result<Produced, BrokerError> {
        // Check the batch before the topic lookup, so bad input never auto-creates a topic.
        let max = crate::config::batch_room(self.config.max_frame_bytes);
        if batch.len() > max {
            return Err(BrokerError::BatchTooLarge {
                bytes: batch.len(),
                max,
            });
        }
        // The records are walked too: a batch no consumer could read is never acknowledged.
        let info = minibroker_records::validate(batch)?;
        if info.transactional || info.control {
            return Err(BrokerError::TransactionsUnsupported);
        }
        let size = self.batch_charge(batch.len());
        let idempotent = info.producer_id != NO_PRODUCER_ID;
        let header = if idempotent {
            let sequences = SequenceRange::spanning(info.base_sequence, info.record_count)?;
            Some(BatchHeader::new(
                info.producer_id,
                0,
                info.epoch,
                sequences,
            )?)
        } else {
            None
        };
        let check = CreateCheck {
            partition,
            bytes: size + PRODUCER_ENTRY_BYTES,
        };
        let resolved = topics.get_or_create(&self.topics, topic, check)?;
        let target = resolved.partition(partition)?;
        if target.flush.is_read_only() {
            return Err(crate::flush::read_only(target));
        }
        let now_ms = crate::clock::now_millis();
        let mut rolled = false;
        let verdict = match header {
            Some(header) => self
                .state
                .append_batch(&header.on_partition(target.id).at(now_ms), |new_entry| {
                    self.append(target, batch, &info, new_entry, now_ms, &mut rolled)
                })?,
            None => Verdict {
                outcome: Outcome::Accepted,
                base_offset: Some(self.append(
                    target,
                    batch,
                    &info,
                    NewEntry(false),
                    now_ms,
                    &mut rolled,
                )?),
                known_producer: false,
            },
        };
        // A new segment: snapshot producer state, so recovery replays only what follows.
        let snapshot = rolled.then(|| self.take_snapshot(target)).flatten();
        self.outcomes.count(target.id, verdict.outcome);
        let stats = &target.stats;
        PartitionStats::add(&stats.outcomes[verdict.outcome.index()], 1);
        if verdict.outcome == Outcome::Accepted {
            PartitionStats::add(&stats.records_in, u64::from(info.record_count));
            PartitionStats::add(&stats.bytes_in, batch.len() as u64);
        }
        if verdict.outcome == Outcome::Accepted {
            // After every lock is released: wake fetches waiting for data.
            target.appended.notify();
        }
        if verdict.outcome != Outcome::Accepted {
            tracing::debug!(
                topic,
                partition,
                producer_id = info.producer_id,
                epoch = info.epoch,
                sequence = info.base_sequence,
                records = info.record_count,
                outcome = %verdict.outcome,
                "produce not appended"
            );
        }
        let through = match (verdict.outcome, verdict.base_offset) {
            _ if self.data.is_none() || self.config.flush != FlushPolicy::Always => None,
            (Outcome::Accepted, Some(offset)) => Some(offset + i64::from(info.record_count)),
            // A retry acknowledged only once its original is durable.
            (Outcome::Duplicate, Some(offset)) => Some(offset + 1),
            (Outcome::Duplicate, None) => Some(target.log().log.next_offset()),
            _ => None,
        };
        Ok(Produced {
            verdict,
            sync_through: through,
            snapshot,
        })
    }

    /// Appends under the caller's shard lock, within the broker's storage limit: the batch and,
    /// for a producer's first batch here, its state entry.
    ///
    /// The partition draws on its reservation of the budget and tops it up when it runs short
    /// (see [`crate::budget`]), so most appends touch only their own partition.
    fn append(
        &self,
        partition: &Partition,
        batch: &[u8],
        info: &BatchInfo,
        new_entry: NewEntry,
        now_ms: i64,
        rolled: &mut bool,
    ) -> Result<i64, BrokerError> {
        let charge =
            self.batch_charge(batch.len()) + if new_entry.0 { PRODUCER_ENTRY_BYTES } else { 0 };
        let mut data = partition.log();
        if data.allowance < charge {
            let wanted = charge - data.allowance;
            let granted = self.budget.reserve_for_partition(wanted, data.held).ok_or(
                BrokerError::StoreFull {
                    limit: self.budget.max(),
                    refused: "the batch",
                },
            )?;
            data.allowance += granted;
        }
        let appended = match data.log.append(batch, info.record_count, now_ms) {
            Ok(appended) => appended,
            Err(error) => {
                drop(data);
                crate::flush::storage_failed(partition, &error);
                return Err(error.into());
            }
        };
        *rolled = appended.rolled;
        data.allowance -= charge;
        data.held += charge;
        self.give_back(&mut data, appended.released);
        if let Some(write_back) = appended.write_back {
            tokio::task::spawn_blocking(move || write_back.run());
        }
        Ok(appended.base_offset)
    }

    /// Gives the storage limit back what the batches retention dropped from an in-memory log
    /// were charged (a durable log's batches are not charged).
    fn give_back(&self, data: &mut PartitionData, released: Released) {
        if self.data.is_none() && released != Released::default() {
            let freed = released_charge(released).min(data.held);
            data.held -= freed;
            self.budget.release(freed);
        }
    }

    /// What a batch of `len` bytes costs the storage limit: its bytes and index entry in memory,
    /// nothing when it is kept on disk (retention bounds that).
    fn batch_charge(&self, len: usize) -> u64 {
        if self.data.is_some() {
            0
        } else {
            accounted_bytes(len)
        }
    }

    /// The whole batches holding `offset` and after, up to about `max_bytes` (capped by
    /// `max_fetch_bytes`; at least one batch when any is there). Each batch is counted with
    /// `batch_overhead` more bytes: what the caller's encoding adds to it, so the answer's size
    /// is bounded.
    ///
    /// # Errors
    /// Unknown topic, partition out of range, or offset out of range.
    pub fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: i64,
        max_bytes: usize,
        batch_overhead: usize,
    ) -> Result<Fetched, BrokerError> {
        let topic = self.topics.get(topic)?;
        let partition = topic.partition(partition)?;
        let limits = ReadLimits {
            max_bytes: max_bytes.min(self.max_fetch_bytes),
            batch_overhead,
        };
        let (batches, high_watermark, log_start_offset) = read_log(partition, |log| {
            let batches = log.read(offset, limits)?;
            Ok((batches, log.next_offset(), log.start_offset()))
        })?;
        let records: i64 = batches
            .iter()
            .map(|b| minibroker_records::end_offset(b) - minibroker_records::base_offset(b))
            .sum();
        PartitionStats::add(&partition.stats.records_out, records.max(0) as u64);
        PartitionStats::add(
            &partition.stats.bytes_out,
            batches.iter().map(|b| b.len() as u64).sum(),
        );
        Ok(Fetched {
            high_watermark,
            log_start_offset,
            batches,
        })
    }

    /// Issues a producer id, or bumps a known id's epoch (fencing its older instances).
    ///
    /// # Errors
    /// A negative, unknown or forgotten id, or an exhausted epoch.
    pub fn init_producer(&self, producer_id: Option<i64>) -> Result<ProducerIdentity, BrokerError> {
        if let Some(id) = producer_id.filter(|id| *id < 0) {
            return Err(minibroker_state::StateError::NegativeProducerId(id).into());
        }
        let (producer_id, epoch) = self.producer_ids.init(producer_id)?;
        tracing::debug!(producer_id, epoch, "producer initialised");
        Ok(ProducerIdentity { producer_id, epoch })
    }

    /// Up to `limit` producers of `topic`/`partition` (at most [`MAX_DESCRIBE_PAGE`]) with ids
    /// above `after`, in id order. The state lock is held for this one page only.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn describe_producers(
        &self,
        topic: &str,
        partition: u32,
        after: Option<i64>,
        limit: usize,
    ) -> Result<ProducerPage, BrokerError> {
        let topic = self.topics.get(topic)?;
        let partition = topic.partition(partition)?;
        let page =
            self.state
                .producers_page(partition.id, after, limit.clamp(1, MAX_DESCRIBE_PAGE));
        Ok(page)
    }

    /// Every producer of `topic`/`partition`, in id order, read a page at a time.
    ///
    /// # Errors
    /// As [`Self::describe_producers`].
    pub fn producers(&self, topic: &str, partition: u32) -> Result<Vec<ProducerView>, BrokerError> {
        let partition = self.topics.get(topic)?.partition(partition)?.id;
        Ok(self.state.producers(partition))
    }

    /// The partition count of `topic`, creating it with the default count when `auto_create` is
    /// set and the configuration allows it (Kafka's Metadata request).
    ///
    /// # Errors
    /// A bad or unknown name, or a limit reached by the creation.
    pub fn topic(&self, topic: &str, auto_create: bool) -> Result<TopicSummary, BrokerError> {
        let found = if auto_create {
            let check = CreateCheck {
                partition: 0,
                bytes: 0,
            };
            self.topics.get_or_create(topic, check)?
        } else {
            self.topics.get(topic)?
        };
        Ok(TopicSummary {
            name: found.name.clone(),
            partitions: found.partition_count(),
        })
    }

    /// Creates `topic` with `partitions` partitions.
    ///
    /// # Errors
    /// The topic exists, a bad name or partition count, or a limit.
    pub fn create_topic(&self, topic: &str, partitions: u32) -> Result<(), BrokerError> {
        self.topics.create_new(topic, partitions).map(|_| ())
    }

    /// Every partition of `topic`: (index, log start, log end, stored bytes, producers).
    ///
    /// # Errors
    /// A bad or unknown topic name.
    pub fn describe_topic(&self, topic: &str) -> Result<Vec<PartitionSummary>, BrokerError> {
        let topic = self.topics.get(topic)?;
        Ok(topic
            .partitions()
            .iter()
            .enumerate()
            .map(|(index, partition)| {
                let (start, end, stored) = {
                    let data = partition.log();
                    (
                        data.log.start_offset(),
                        data.log.next_offset(),
                        data.log.stored_bytes(),
                    )
                };
                PartitionSummary {
                    partition: index as u32,
                    log_start_offset: start,
                    log_end_offset: end,
                    stored_bytes: stored,
                    producers: self.state.partition_len(partition.id) as u64,
                }
            })
            .collect())
    }

    /// Deletes `topic` and everything it stores.
    ///
    /// # Errors
    /// An unknown topic.
    pub fn delete_topic(&self, topic: &str) -> Result<(), BrokerError> {
        let deleted = self.topics.delete(topic)?;
        for partition in deleted.partitions() {
            self.state.forget_partition(partition.id);
        }
        Ok(())
    }

    /// What wakes when `topic`/`partition` gets an append: for fetches that wait for data
    /// instead of polling.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn appends(&self, topic: &str, partition: u32) -> Result<Arc<AppendSignal>, BrokerError> {
        let topic = self.topics.get(topic)?;
        Ok(Arc::clone(&topic.partition(partition)?.appended))
    }

    /// The first offset held and the next offset to be written in `topic`/`partition`.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn offsets(&self, topic: &str, partition: u32) -> Result<(i64, i64), BrokerError> {
        let topic = self.topics.get(topic)?;
        let data = topic.partition(partition)?.log();
        Ok((data.log.start_offset(), data.log.next_offset()))
    }

    /// The first offset held in `topic`/`partition`, found through the caller's topic cache (a
    /// produce answer reports it, so the lookup stays off the shared registry).
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn log_start_offset(
        &self,
        topics: &mut TopicCache,
        topic: &str,
        partition: u32,
    ) -> Result<i64, BrokerError> {
        let topic = topics.get(&self.topics, topic)?;
        Ok(topic.partition(partition)?.log().log.start_offset())
    }

    /// The offset and timestamp of the first record at or after `timestamp` (milliseconds) in
    /// `topic`/`partition`, if any.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, BrokerError> {
        let topic = self.topics.get(topic)?;
        read_log(topic.partition(partition)?, |log| {
            log.offset_for_timestamp(timestamp)
        })
    }

    /// The offset and timestamp of the record with the largest timestamp, if any.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn offset_of_max_timestamp(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Option<(i64, i64)>, BrokerError> {
        let topic = self.topics.get(topic)?;
        read_log(
            topic.partition(partition)?,
            PartitionLog::offset_of_max_timestamp,
        )
    }

    /// Every topic and its partition count, by name.
    #[must_use]
    pub fn metadata(&self) -> Vec<TopicSummary> {
        self.topics
            .list()
            .iter()
            .map(|topic| TopicSummary {
                name: topic.name.clone(),
                partitions: topic.partition_count(),
            })
            .collect()
    }

    /// How many partitions exist across all topics.
    #[must_use]
    pub fn partition_count(&self) -> u32 {
        self.topics.partition_count()
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

    /// Every connection's request latencies, when metrics are on (`metrics_listen`).
    #[must_use]
    pub fn timings(&self) -> Option<&Arc<RequestTimings>> {
        self.timings.as_ref()
    }

    /// Marks the broker ready: its listeners are bound (recovery finished in `new`).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Whether the broker is ready to serve (`/ready`).
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// How many (partition, producer) state entries are kept.
    #[must_use]
    pub fn producer_state_entries(&self) -> usize {
        self.state.len()
    }

    /// What the metrics report for every partition, by topic and index.
    #[must_use]
    pub fn partition_metrics(&self) -> Vec<PartitionMetrics> {
        let mut all = Vec::new();
        for topic in self.topics.list() {
            for (index, partition) in topic.partitions().iter().enumerate() {
                let (start, end, stored) = {
                    let data = partition.log();
                    (
                        data.log.start_offset(),
                        data.log.next_offset(),
                        data.log.stored_bytes(),
                    )
                };
                let s = &partition.stats;
                all.push(PartitionMetrics {
                    topic: topic.name.clone(),
                    partition: index as u32,
                    log_start_offset: start,
                    log_end_offset: end,
                    stored_bytes: stored,
                    outcomes: std::array::from_fn(|i| PartitionStats::get(&s.outcomes[i])),
                    records_in: PartitionStats::get(&s.records_in),
                    bytes_in: PartitionStats::get(&s.bytes_in),
                    records_out: PartitionStats::get(&s.records_out),
                    bytes_out: PartitionStats::get(&s.bytes_out),
                    fsync: partition.flush.latency.snapshot(),
                    read_only: partition.flush.is_read_only(),
                });
            }
        }
        all
    }

    /// The consumer-group coordinator.
    #[must_use]
    pub fn groups(&self) -> &GroupCoordinator {
        &self.groups
    }

    /// How many fsyncs of partition logs were done (each may cover many produces).
    #[must_use]
    pub fn fsyncs(&self) -> u64 {
        self.topics
            .list()
            .iter()
            .flat_map(|topic| topic.partitions().iter().map(|p| p.flush.sync_count()))
            .sum()
    }

    /// How many connections were accepted and refused, and how many are open.
    #[must_use]
    pub fn connection_counts(&self) -> ConnectionCounts {
        self.connections.get()
    }

    /// How many producer ids are remembered for a later epoch bump.
    #[must_use]
    pub fn remembered_producer_ids(&self) -> usize {
        self.producer_ids.remembered()
    }

    /// Batch bytes stored across all partitions (sums every partition; not for hot paths).
    #[must_use]
    pub fn stored_bytes(&self) -> u64 {
        self.topics
            .list()
            .iter()
            .flat_map(|topic| {
                topic
                    .partitions()
                    .iter()
                    .map(|p| p.log().log.stored_bytes())
            })
            .sum()
    }
}
