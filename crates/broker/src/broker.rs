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
//! and, when the flush policy says so, the fsync that cover it ([`Unacknowledged::commit`], run
//! by the connection before its answers leave; `crate::group_commit`). `durability` recovers
//! state at start, snapshots it, and runs retention and expiry.

mod committed;
mod compaction;
mod delete_records;
mod durability;
mod settings;
mod transactions;

pub use committed::Placed;
pub use delete_records::HIGH_WATERMARK;
pub use transactions::Isolation;

use bytes::Bytes;
use minibroker_log::{PartitionLog, WriteBack};
use minibroker_log::{ReadLimits, Released};
use minibroker_records::{BatchInfo, Inspected, NO_PRODUCER_ID};
use minibroker_state::{
    AbortedTransaction, BatchHeader, NewEntry, Outcome, ProducerPage, ProducerStateManager,
    ProducerView, SequenceRange, Verdict, default_shard_count,
};
use minibroker_storage::{FsStorage, Storage};
use std::sync::{Arc, Mutex, PoisonError};

use crate::budget::{PRODUCER_ENTRY_BYTES, StorageBudget, accounted_bytes, released_charge};
use crate::config::FlushPolicy;
use crate::counters::OutcomeCounts;
use crate::data_dir::DataDir;
use crate::partition::{Partition, PartitionData};
use crate::producers::ProducerIds;
use crate::signal::AppendSignal;
use crate::stats::{HistogramSnapshot, PartitionStats};
use crate::topics::{CreateCheck, TopicRegistry};
use crate::unacknowledged::{Left, Unacknowledged};
use crate::{BrokerConfig, BrokerError, ServerError};

/// Most producers one page of [`Broker::describe_producers`] holds.
pub const MAX_DESCRIBE_PAGE: usize = 1000;

/// What a produce answers: the rule's verdict, and the partition's log start offset (Kafka's
/// answer carries it) read as the batch was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    /// ACCEPTED, DUPLICATE, OUT_OF_ORDER or FENCED_EPOCH, with the offset where it applies.
    pub verdict: Verdict,
    /// The partition's first offset.
    pub log_start_offset: i64,
}

/// Batches read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The offset the next appended record will get.
    pub high_watermark: i64,
    /// The first offset the partition holds.
    pub log_start_offset: i64,
    /// The offset below which every transaction has ended (the high watermark when none is
    /// open).
    pub last_stable_offset: i64,
    /// Whole stored batches (Kafka v2 record batches) in offset order; the first holds the
    /// offset asked for, and may begin before it. A `read_committed` fetch stops at the last
    /// stable offset.
    pub batches: Vec<Bytes>,
    /// For a `read_committed` fetch, the aborted transactions with records among `batches`,
    /// whose records the consumer drops; empty otherwise.
    pub aborted: Vec<AbortedTransaction>,
}

/// What an append left besides its offset.
#[derive(Debug, Default)]
struct AppendedHere {
    /// A new segment was started for it.
    rolled: bool,
    /// A background sync of the active segment came due.
    write_back: Option<WriteBack>,
    /// The partition's log start offset after the append (read under the same lock).
    log_start_offset: Option<i64>,
}

/// What [`Broker::append`] writes: a producer's records, or a transaction marker.
#[derive(Debug, Clone, Copy)]
enum Write {
    /// Records; `new_entry` says whether they make the producer's first entry here.
    Records { new_entry: NewEntry },
    /// A COMMIT (`true`) or ABORT marker.
    Marker { commit: bool },
    /// A batch of records a cluster's database already judged and placed (a copy's): it fits
    /// its transaction there, and opens or joins it here as it did there.
    Placed,
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
    /// The offset below which every transaction has ended.
    pub last_stable_offset: i64,
    /// Batch bytes held.
    pub stored_bytes: u64,
    /// Produce outcomes.
    pub outcomes: OutcomeCounts,
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
    /// Bytes of segments (chunks) compaction rewrote, as they were before.
    pub bytes_cleaned: u64,
    /// For a compacted topic: the bytes compaction may clean that it has not yet, and all it
    /// may clean (their ratio is what `min.cleanable.dirty.ratio` is compared with).
    pub cleanable: Option<(u64, u64)>,
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
    topics: TopicRegistry,
    state: ProducerStateManager,
    producer_ids: ProducerIds,
    budget: Arc<StorageBudget>,
    max_fetch_bytes: usize,
    /// The data directory, for a durable broker.
    data: Option<Arc<DataDir>>,
    /// The produce outcomes of deleted topics' partitions (the others count their own).
    deleted_outcomes: Mutex<OutcomeCounts>,
    /// The configuration, for what durability and maintenance read from it (shared with the
    /// topic registry, for each new topic's retention).
    config: Arc<BrokerConfig>,
}

impl Broker {
    /// A broker with the topics and limits of `config`.
    ///
    /// # Errors
    /// [`ServerError::Config`] for limits that make no sense together;
    /// [`ServerError::DeclaredTopic`] for a declared topic that cannot be created.
    pub fn new(config: &BrokerConfig) -> Result<Self, ServerError> {
        Self::build(config, Arc::new(FsStorage), true)
    }

    /// A broker whose data directory (`config.data_dir`, if set) lives on `storage` instead of
    /// the real file system: tests use it to crash the storage under the broker.
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_storage(
        config: &BrokerConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<Self, ServerError> {
        Self::build(config, storage, false)
    }

    fn build(
        config: &BrokerConfig,
        storage: Arc<dyn Storage>,
        lock: bool,
    ) -> Result<Self, ServerError> {
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
        let broker = Self {
            topics: TopicRegistry::new(&shared, Arc::clone(&budget), data.clone())?,
            state: ProducerStateManager::with_shards(shards),
            producer_ids,
            budget,
            max_fetch_bytes: config.max_fetch_bytes as usize,
            data,
            deleted_outcomes: Mutex::default(),
            config: shared,
        };
        broker.recover()?;
        Ok(broker)
    }

    /// Appends one Kafka v2 record batch to `topic`/`partition` if the exactly-once rule accepts
    /// it: the rule reads the producer id, epoch, base sequence and record count from the batch's
    /// header, and the batch is stored as it is but for its base offset. A batch of a producer
    /// that is not idempotent (producer id -1) is appended without the rule. A transactional
    /// batch is appended only to a partition the producer's coordinator added to its transaction
    /// at that epoch ([`Self::add_to_transaction`]).
    ///
    /// It never waits. A durable partition may keep the batch in memory, to be written (and with
    /// the `always` policy synced) together with others: the verdict must not reach the producer
    /// before `unacknowledged.commit()` has returned `Ok` ([`Unacknowledged`]). A connection
    /// commits once before it sends the answers it has gathered, so its pipelined produces share
    /// one write and one fsync.
    ///
    /// # Errors
    /// A damaged or unacceptable batch, a control batch, a batch outside the producer's
    /// transaction, negative producer fields, a bad topic or partition, or a full store. Nothing is stored or created then. A storage error
    /// when the disk fails (the partition is read-only from then on).
    pub fn produce(
        &self,
        unacknowledged: &mut Unacknowledged,
        topic: &str,
        partition: u32,
        batch: &[u8],
    ) -> Result<Verdict, BrokerError> {
        // The size first: a batch too large is refused before its checksum is computed.
        self.check_size(batch)?;
        let batch = Inspected::new(batch)?;
        Ok(self
            .produce_inspected(unacknowledged, topic, partition, batch)?
            .verdict)
    }

    /// [`Self::produce`] of a batch whose header the caller has read already (a front end that
    /// needs its producer id first), with what an answer needs besides the verdict, so the
    /// header is read once and the partition looked up once.
    ///
    /// # Errors
    /// As [`Self::produce`].
    pub fn produce_inspected(
        &self,
        unacknowledged: &mut Unacknowledged,
        topic: &str,
        partition: u32,
        inspected: Inspected<'_>,
    ) -> Result<Produced, BrokerError> {
        let batch = inspected.bytes();
        // Check the batch before the topic lookup, so bad input never auto-creates a topic.
        let header = self.check_batch(inspected)?;
        let info = *inspected.info();
        let check = CreateCheck {
            partition,
            bytes: self.batch_charge(batch.len()) + PRODUCER_ENTRY_BYTES,
        };
        let found = if info.transactional {
            // A transaction's partitions were added before its batches (AddPartitionsToTxn
            // needs them to exist), so its batch never creates a topic.
            unacknowledged
                .get(&self.topics, topic)
                .map_err(|_| transactions::not_added(&info))?
        } else {
            unacknowledged.get_or_create(&self.topics, topic, check)?
        };
        let settings = found.settings();
        let max = settings.max_message_bytes;
        if batch.len() > max {
            // The topic's `max.message.bytes`, below the broker's own limit checked above.
            return Err(BrokerError::BatchTooLarge {
                bytes: batch.len(),
                max,
            });
        }
        if settings.compaction.is_some()
            && !info.control
            && minibroker_records::has_keyless_record(batch)?
        {
            // Kafka's rule too: compaction keeps the newest record of each key.
            return Err(minibroker_records::RecordsError::Invalid(format!(
                "a record without a key: topic {topic:?} is compacted (cleanup.policy compact)"
            ))
            .into());
        }
        let target = found.partition(partition)?;
        target.refuse_if_read_only()?;
        let (verdict, appended) = self.validate_and_append(target, header, batch, &info)?;
        // A new segment: snapshot producer state, so recovery replays only what follows.
        let snapshot = appended
            .rolled
            .then(|| self.take_snapshot(target))
            .flatten();
        Self::count(target, &verdict, &info, batch.len());
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
        let left = Left {
            sync_through: self.sync_before_answer(target, &verdict, &info),
            snapshot,
            write_back: appended.write_back,
        };
        let log_start_offset = match appended.log_start_offset {
            Some(start) => start,
            None => target.log().log.start_offset(),
        };
        // ACCEPTED, or a DUPLICATE whose original may itself still be unwritten.
        unacknowledged.note(topic, partition, self.data.is_some(), left);
        Ok(Produced {
            verdict,
            log_start_offset,
        })
    }

    /// [`Self::produce`], then [`Unacknowledged::commit`]: the batch is stored (and, with the
    /// `always` policy, synced) when this returns, for a caller that answers one produce at a
    /// time (an embedding test, a tool).
    ///
    /// # Errors
    /// As [`Self::produce`], and a storage error from the commit (reported first).
    pub async fn produce_stored(
        &self,
        unacknowledged: &mut Unacknowledged,
        topic: &str,
        partition: u32,
        batch: &[u8],
    ) -> Result<Verdict, BrokerError> {
        let verdict = self.produce(unacknowledged, topic, partition, batch);
        unacknowledged.commit().await?;
        verdict
    }

    /// Checks a batch before anything else is looked at: its size, its bytes and records, and,
    /// for an idempotent producer, its producer fields (the rule's header, partition unset).
    ///
    /// # Errors
    /// What [`Self::produce`] refuses of the batch alone.
    pub fn check_batch(&self, batch: Inspected<'_>) -> Result<Option<BatchHeader>, BrokerError> {
        self.check_size(batch.bytes())?;
        // The records are walked too: a batch no consumer could read is never acknowledged.
        batch.walk()?;
        let info = batch.info();
        if info.control {
            return Err(BrokerError::ControlBatch);
        }
        if info.producer_id == NO_PRODUCER_ID {
            if info.transactional {
                return Err(BrokerError::InvalidTxnState {
                    producer_id: info.producer_id,
                    epoch: info.epoch,
                    reason: "a transactional batch needs a producer id",
                });
            }
            return Ok(None);
        }
        let sequences = SequenceRange::spanning(info.base_sequence, info.record_count)?;
        let header = BatchHeader::new(info.producer_id, 0, info.epoch, sequences)?
            .transactional(info.transactional);
        Ok(Some(header))
    }

    /// A batch must fit a fetch answer ([`crate::batch_room`]).
    fn check_size(&self, batch: &[u8]) -> Result<(), BrokerError> {
        let max = crate::config::batch_room(self.config.max_frame_bytes);
        if batch.len() > max {
            return Err(BrokerError::BatchTooLarge {
                bytes: batch.len(),
                max,
            });
        }
        Ok(())
    }

    /// The exactly-once rule's verdict on the batch, and, for ACCEPTED, its append under the
    /// rule's shard lock (see `minibroker_state`), so a retry racing its original can never be
    /// stored twice. A batch without a producer id is appended without the rule.
    fn validate_and_append(
        &self,
        target: &Partition,
        header: Option<BatchHeader>,
        batch: &[u8],
        info: &BatchInfo,
    ) -> Result<(Verdict, AppendedHere), BrokerError> {
        let now_ms = crate::clock::now_millis();
        let mut appended = AppendedHere::default();
        let verdict = match header {
            Some(header) => self.state.append_batch(
                &header.on_partition(target.id).at(now_ms),
                |new_entry| {
                    let write = Write::Records { new_entry };
                    self.append(target, batch, info, write, now_ms, &mut appended)
                },
            )?,
            None => Verdict {
                outcome: Outcome::Accepted,
                base_offset: Some(self.append(
                    target,
                    batch,
                    info,
                    Write::Records {
                        new_entry: NewEntry(false),
                    },
                    now_ms,
                    &mut appended,
                )?),
                known_producer: false,
            },
        };
        Ok((verdict, appended))
    }

    /// Counts the verdict on the partition and, for ACCEPTED, wakes fetches waiting for data
    /// (after every lock is released).
    fn count(target: &Partition, verdict: &Verdict, info: &BatchInfo, batch_len: usize) {
        let stats = &target.stats;
        PartitionStats::add(&stats.outcomes[verdict.outcome.index()], 1);
        if verdict.outcome == Outcome::Accepted {
            PartitionStats::add(&stats.records_in, u64::from(info.record_count));
            PartitionStats::add(&stats.bytes_in, batch_len as u64);
            target.appended.notify();
        }
    }

    /// The offset an fsync must cover before the verdict may be answered: under the `always`
    /// flush policy, the batch's end for ACCEPTED, and for a DUPLICATE its original's (a retry
    /// is acknowledged only once its original is durable).
    fn sync_before_answer(
        &self,
        target: &Partition,
        verdict: &Verdict,
        info: &BatchInfo,
    ) -> Option<i64> {
        if !self.must_sync() {
            return None;
        }
        match (verdict.outcome, verdict.base_offset) {
            (Outcome::Accepted, Some(offset)) => Some(offset + i64::from(info.record_count)),
            (Outcome::Duplicate, Some(offset)) => Some(offset + 1),
            (Outcome::Duplicate, None) => Some(target.log().log.next_offset()),
            _ => None,
        }
    }

    /// Whether an answer waits for an fsync of what it stored (a durable broker under the
    /// `always` flush policy).
    fn must_sync(&self) -> bool {
        self.data.is_some() && self.config.flush == FlushPolicy::Always
    }

    /// Appends under the caller's shard lock, within the broker's storage limit: the batch and,
    /// for a producer's first batch here, its state entry.
    ///
    /// The partition draws on its reservation of the budget and tops it up when it runs short
    /// (see [`crate::budget`]), so most appends touch only their own partition. The partition's
    /// transactions change with its log: a producer's batch must fit its transaction there, and
    /// a marker ends it.
    fn append(
        &self,
        partition: &Partition,
        batch: &[u8],
        info: &BatchInfo,
        write: Write,
        now_ms: i64,
        appended_here: &mut AppendedHere,
    ) -> Result<i64, BrokerError> {
        let new_entry = matches!(write, Write::Records { new_entry } if new_entry.0);
        let charge =
            self.batch_charge(batch.len()) + if new_entry { PRODUCER_ENTRY_BYTES } else { 0 };
        let mut data = partition.log();
        // Under the lock: a topic deleted since the lookup takes nothing more (and charges
        // nothing more to the budget its deletion gave back).
        partition.refuse_if_read_only()?;
        if matches!(write, Write::Records { .. }) && info.producer_id != NO_PRODUCER_ID {
            transactions::check_fits(&data.transactions, info)?;
        }
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
        let appended = data.log.append(batch, info.record_count, now_ms)?;
        data.allowance -= charge;
        data.held += charge;
        match write {
            Write::Records { .. } | Write::Placed if info.transactional => data
                .transactions
                .record_batch(info.producer_id, appended.base_offset),
            Write::Records { .. } | Write::Placed => {}
            Write::Marker { commit } => {
                data.transactions.record_marker(
                    (info.producer_id, info.epoch),
                    appended.base_offset,
                    commit,
                );
            }
        }
        self.give_back(&mut data, appended.released);
        *appended_here = AppendedHere {
            rolled: appended.rolled,
            write_back: appended.write_back,
            log_start_offset: Some(data.log.start_offset()),
        };
        Ok(appended.base_offset)
    }

    /// [`Self::give_back`] for what left the front of the log (retention, DeleteRecords), and
    /// forgets the aborted transactions wholly below the new start; returns that start.
    fn dropped_from_front(&self, data: &mut PartitionData, released: Released) -> i64 {
        self.give_back(data, released);
        let start = data.log.start_offset();
        data.transactions.forget_before(start);
        start
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
    /// is bounded. With [`Isolation::ReadCommitted`] the batches stop at the last stable offset and
    /// come with the aborted transactions among them.
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
        isolation: Isolation,
    ) -> Result<Fetched, BrokerError> {
        let topic = self.topics.get(topic)?;
        let partition = topic.partition(partition)?;
        let mut limits = ReadLimits::bytes(max_bytes.min(self.max_fetch_bytes), batch_overhead);
        let fetched = {
            let mut data = partition.log();
            let high_watermark = data.log.next_offset();
            let last_stable_offset = data.transactions.last_stable_offset(high_watermark);
            if isolation == Isolation::ReadCommitted {
                // Nothing at or past the LSO is read: it would only be dropped.
                limits.before_offset = last_stable_offset;
            }
            let batches = data.log.read(offset, limits)?;
            let mut aborted = Vec::new();
            if isolation == Isolation::ReadCommitted
                && let Some(last) = batches.last()
            {
                let upper = minibroker_records::end_offset(last);
                aborted.extend(data.transactions.aborted_between(offset, upper));
            }
            Fetched {
                high_watermark,
                log_start_offset: data.log.start_offset(),
                last_stable_offset,
                batches,
                aborted,
            }
        };
        let batches = &fetched.batches;
        let records: i64 = batches
            .iter()
            .map(|b| minibroker_records::end_offset(b) - minibroker_records::base_offset(b))
            .sum();
        PartitionStats::add(&partition.stats.records_out, records.max(0) as u64);
        PartitionStats::add(
            &partition.stats.bytes_out,
            batches.iter().map(|b| b.len() as u64).sum(),
        );
        Ok(fetched)
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
        self.create_topic_with(topic, partitions, &[])
    }

    /// Grows `topic` to `partitions` partitions (the new ones empty; partitions are never
    /// removed); with `validate_only`, only checks that it could.
    ///
    /// # Errors
    /// An unknown topic; [`BrokerError::PartitionsNotIncreased`]; a count past
    /// `max_partitions_per_topic`, or a partition or storage limit; a storage error.
    pub fn create_partitions(
        &self,
        topic: &str,
        partitions: u32,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        self.topics
            .grow(topic, partitions, validate_only)
            .map(|_| ())
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
        let mut outcomes = self.lock_deleted_outcomes();
        for partition in deleted.partitions() {
            self.state.forget_partition(partition.id);
            *outcomes = *outcomes + partition.stats.outcome_counts();
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

    /// The first offset held in `topic`/`partition`, found through the connection's topic cache
    /// (a produce answer reports it, so the lookup stays off the shared registry).
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn log_start_offset(
        &self,
        unacknowledged: &mut Unacknowledged,
        topic: &str,
        partition: u32,
    ) -> Result<i64, BrokerError> {
        let topic = unacknowledged.get(&self.topics, topic)?;
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
        topic
            .partition(partition)?
            .read(|log| log.offset_for_timestamp(timestamp))
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
        topic
            .partition(partition)?
            .read(PartitionLog::offset_of_max_timestamp)
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

    /// How many produce requests got each outcome, deleted topics' included (not for hot
    /// paths: it sums every partition's counters).
    #[must_use]
    pub fn outcome_counts(&self) -> OutcomeCounts {
        let deleted = *self.lock_deleted_outcomes();
        self.topics
            .list()
            .iter()
            .flat_map(|topic| topic.partitions().iter())
            .fold(deleted, |total, partition| {
                total + partition.stats.outcome_counts()
            })
    }

    fn lock_deleted_outcomes(&self) -> std::sync::MutexGuard<'_, OutcomeCounts> {
        self.deleted_outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes charged to the storage limit (kept, or reserved by partitions for their next
    /// appends), and the limit.
    #[must_use]
    pub fn storage_charged(&self) -> (u64, u64) {
        (self.budget.charged(), self.budget.max())
    }

    /// The data directory of a durable broker, for what else keeps its files there (the group
    /// coordinator's committed offsets).
    #[must_use]
    pub fn data_dir(&self) -> Option<&Arc<DataDir>> {
        self.data.as_ref()
    }

    /// The storage limit everything a client makes the broker keep is charged to (groups'
    /// members and offsets too).
    #[must_use]
    pub fn budget(&self) -> &Arc<StorageBudget> {
        &self.budget
    }

    /// The configuration the broker was built with.
    #[must_use]
    pub fn config(&self) -> &BrokerConfig {
        &self.config
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
        let now_ms = crate::clock::now_millis();
        for topic in self.topics.list() {
            let compaction = topic.settings().compaction;
            for (index, partition) in topic.partitions().iter().enumerate() {
                let (start, end, stable, stored, cleanable) = {
                    let data = partition.log();
                    let end = data.log.next_offset();
                    (
                        data.log.start_offset(),
                        end,
                        data.transactions.last_stable_offset(end),
                        data.log.stored_bytes(),
                        compaction.map(|c| data.log.cleanable_bytes(c.cutoff(now_ms))),
                    )
                };
                let s = &partition.stats;
                all.push(PartitionMetrics {
                    topic: topic.name.clone(),
                    partition: index as u32,
                    log_start_offset: start,
                    log_end_offset: end,
                    last_stable_offset: stable,
                    stored_bytes: stored,
                    outcomes: s.outcome_counts(),
                    records_in: PartitionStats::get(&s.records_in),
                    bytes_in: PartitionStats::get(&s.bytes_in),
                    records_out: PartitionStats::get(&s.records_out),
                    bytes_out: PartitionStats::get(&s.bytes_out),
                    fsync: partition.sync_latency(),
                    read_only: partition.is_read_only(),
                    bytes_cleaned: PartitionStats::get(&s.bytes_cleaned),
                    cleanable,
                });
            }
        }
        all
    }

    /// How many fsyncs of partition logs were done (each may cover many produces).
    #[must_use]
    pub fn fsyncs(&self) -> u64 {
        self.topics
            .list()
            .iter()
            .flat_map(|topic| topic.partitions().iter().map(|p| p.sync_count()))
            .sum()
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
