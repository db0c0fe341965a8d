//! [`ProducerStateManager`]: the rule of [`crate::decide`] behind sharded locks.
//!
//! State is split into a fixed number of shards, each a `std::sync::Mutex` over an ordered map
//! from (partition, producer id) to [`ProducerEntry`]. The shard is chosen by the partition alone, so
//! every producer of one partition meets under one lock: the check and the append of a batch
//! happen atomically, and a producer's batches reach the log in sequence order. Different
//! partitions mostly land on different shards and proceed in parallel.
//!
//! A plain `std` mutex fits because the critical section is short and never awaits; callers must
//! not hold one across an `.await` (none is ever handed out).
//!
//! The map is a B-tree rather than a hash table: one partition's producers then sit together in
//! id order and can be listed a page at a time, so an admin view of a partition with half a
//! million producers holds the lock for one page at a time, never for the whole scan. Measured
//! against the hash table it replaced (foldhash, plus an ordered index for paging), it also takes
//! less memory (168 against 224 bytes per entry at a million entries) and costs a few nanoseconds
//! more per lookup in a shard of many partitions (`cargo bench -p minibroker-state`; the README
//! has the figures).

use crate::entry::NO_OFFSET;
use crate::{Decision, Outcome, ProducerEntry, SequenceRange, StateError, decide};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::convert::Infallible;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Identifies a partition to the state manager. The broker numbers its partitions across all
/// topics; the manager never needs to know topic names.
pub type PartitionId = u32;

/// The producer entries of one shard, keyed by (partition, producer id), in key order (so by
/// producer id within a partition). Unlike a hash table, no choice of producer ids by a client
/// can degrade its lookups.
type Shard = BTreeMap<(PartitionId, i64), ProducerEntry>;

/// A shard's lock on a cache line of its own, so two cores working on neighbouring shards do
/// not invalidate each other's line (false sharing).
#[derive(Debug, Default)]
#[repr(align(128))]
struct PaddedShard(Mutex<Shard>);

/// Who wrote a batch and which sequences it occupies: everything [`decide`] needs besides the
/// stored state. Construction rejects negative ids, epochs and sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchHeader {
    producer_id: i64,
    partition: PartitionId,
    epoch: i16,
    sequences: SequenceRange,
    /// When the batch arrives (the broker's clock, milliseconds); 0 unless set with
    /// [`BatchHeader::at`].
    timestamp_ms: i64,
    /// Whether the batch belongs to a transaction (set with [`BatchHeader::transactional`]).
    transactional: bool,
}

impl BatchHeader {
    /// A validated header.
    ///
    /// # Errors
    /// [`StateError::NegativeProducerId`] or [`StateError::NegativeEpoch`] for negative values
    /// (the sequence range is already validated by [`SequenceRange`]).
    pub fn new(
        producer_id: i64,
        partition: PartitionId,
        epoch: i16,
        sequences: SequenceRange,
    ) -> Result<Self, StateError> {
        if producer_id < 0 {
            return Err(StateError::NegativeProducerId(producer_id));
        }
        if epoch < 0 {
            return Err(StateError::NegativeEpoch(epoch));
        }
        Ok(Self {
            producer_id,
            partition,
            epoch,
            sequences,
            timestamp_ms: 0,
            transactional: false,
        })
    }

    /// The same batch header, of a batch in the producer's transaction: accepting it marks the
    /// transaction open on the partition until its marker.
    #[must_use]
    pub fn transactional(self, transactional: bool) -> Self {
        Self {
            transactional,
            ..self
        }
    }

    /// Whether the batch belongs to a transaction.
    #[must_use]
    pub fn is_transactional(&self) -> bool {
        self.transactional
    }

    /// The same batch header, arriving at `timestamp_ms` (what an accepted batch records as its
    /// producer's last activity, for expiry).
    #[must_use]
    pub fn at(self, timestamp_ms: i64) -> Self {
        Self {
            timestamp_ms,
            ..self
        }
    }

    /// The same batch header for another partition (the fields are already validated).
    #[must_use]
    pub fn on_partition(self, partition: PartitionId) -> Self {
        Self { partition, ..self }
    }

    /// The producer id.
    #[must_use]
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }
    /// The partition written to.
    #[must_use]
    pub fn partition(&self) -> PartitionId {
        self.partition
    }
    /// The producer's epoch.
    #[must_use]
    pub fn epoch(&self) -> i16 {
        self.epoch
    }
    /// The sequences the batch occupies.
    #[must_use]
    pub fn sequences(&self) -> SequenceRange {
        self.sequences
    }
}

/// Passed to the append closure of [`ProducerStateManager::append_batch`]: `true` when the batch
/// is the producer's first on the partition, so accepting it stores a new entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NewEntry(pub bool);

/// The outcome of a batch and, for ACCEPTED and a recognised DUPLICATE, its base offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Verdict {
    /// One of the four outcomes.
    pub outcome: Outcome,
    /// ACCEPTED: where the batch was appended. DUPLICATE: where the original was appended, when
    /// the retry matches one of the cached recent batches. Otherwise `None`.
    pub base_offset: Option<i64>,
    /// Whether the partition held state for this producer when the batch was judged (Kafka
    /// answers a refused batch of an unknown producer differently from a gap).
    pub known_producer: bool,
}

/// One producer's state on a partition, as shown by [`ProducerStateManager::producers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerView {
    /// The producer id.
    pub producer_id: i64,
    /// Its stored state.
    pub entry: ProducerEntry,
}

/// One page of a partition's producers, from [`ProducerStateManager::producers_page`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProducerPage {
    /// Producers in ascending id order.
    pub producers: Vec<ProducerView>,
    /// The id to continue after, when more producers follow this page.
    pub next_after: Option<i64>,
}

/// Records a batch stored at `base_offset` in its producer's entry: in `stored` itself, or in
/// the entry a producer's first batch creates, which is returned.
#[inline]
fn record(
    stored: Option<&mut ProducerEntry>,
    header: &BatchHeader,
    base_offset: i64,
) -> Option<ProducerEntry> {
    let (epoch, sequences, at) = (header.epoch, header.sequences, header.timestamp_ms);
    let mut created = None;
    let entry = match stored {
        Some(entry) => {
            entry.record(epoch, sequences, base_offset, at);
            entry
        }
        None => created.insert(ProducerEntry::new(epoch, sequences, base_offset, at)),
    };
    if header.transactional {
        entry.begin_transaction();
    }
    created
}

/// The rule and its bookkeeping for one batch against its producer's entry, wherever entries
/// are kept: decides `header` on `stored` and, only if it is ACCEPTED, calls `append` to store
/// the batch and records it, in `stored` itself or, for a producer's first batch, in the entry
/// returned for the caller to keep. Nothing else changes an entry.
///
/// [`ProducerStateManager::append_batch`] runs it under a shard lock; a store that keeps its
/// entries elsewhere (the cluster's PostgreSQL rows) runs it on the entry it read, holding
/// whatever lock makes it the only writer of the partition, so both give the same answers.
///
/// # Errors
/// Whatever `append` returns; nothing is recorded then.
#[inline]
pub fn decide_and_record<E>(
    stored: Option<&mut ProducerEntry>,
    header: &BatchHeader,
    append: impl FnOnce(NewEntry) -> Result<i64, E>,
) -> Result<(Verdict, Option<ProducerEntry>), E> {
    let known_producer = stored.is_some();
    let decision = decide(stored.as_deref(), header.epoch, header.sequences);
    let (base_offset, created) = match decision {
        Decision::Accept => {
            let base_offset = append(NewEntry(!known_producer))?;
            let created = record(stored, header, base_offset);
            ((base_offset != NO_OFFSET).then_some(base_offset), created)
        }
        Decision::Duplicate { base_offset } => (base_offset, None),
        Decision::OutOfOrder | Decision::FencedEpoch => (None, None),
    };
    let verdict = Verdict {
        outcome: decision.outcome(),
        base_offset,
        known_producer,
    };
    Ok((verdict, created))
}

/// What [`ProducerStateManager::end_transaction`] did with a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerVerdict<T> {
    /// Written (what the write returned), and recorded in the producer's entry.
    Written(T),
    /// Refused: the producer's epoch on the partition is above the marker's.
    Fenced {
        /// The epoch on file.
        current: i16,
    },
}

/// Default shard count: a small multiple of the cores, so two busy partitions rarely share a lock.
#[must_use]
pub fn default_shard_count() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get()) * 8
}

/// Tracks every producer's epoch and sequences per partition and decides each append.
#[derive(Debug)]
pub struct ProducerStateManager {
    shards: Box<[PaddedShard]>,
}

impl Default for ProducerStateManager {
    fn default() -> Self {
        Self::new()
    }
}

impl ProducerStateManager {
    /// A manager with [`default_shard_count`] shards.
    #[must_use]
    pub fn new() -> Self {
        Self::with_shards(default_shard_count())
    }

    /// A manager with `shards` shards (at least one).
    #[must_use]
    pub fn with_shards(shards: usize) -> Self {
        Self {
            shards: (0..shards.max(1)).map(|_| PaddedShard::default()).collect(),
        }
    }

    /// The seed API: decides one single-sequence request without a log and records it if
    /// ACCEPTED. Nothing else changes state.
    ///
    /// # Errors
    /// [`StateError`] for a negative producer id, epoch or sequence; nothing is stored then.
    ///
    /// # Example
    /// The mission text's worked example:
    /// ```
    /// use minibroker_state::ProducerStateManager;
    ///
    /// let mgr = ProducerStateManager::new();
    /// let p1 = 1;
    /// let outcomes = [
    ///     mgr.append(p1, 0, 0, 0)?, // ACCEPTED
    ///     mgr.append(p1, 0, 0, 1)?, // ACCEPTED
    ///     mgr.append(p1, 0, 0, 1)?, // DUPLICATE    (retry of the above)
    ///     mgr.append(p1, 0, 0, 5)?, // OUT_OF_ORDER (gap: 2, 3, 4 missing)
    ///     mgr.append(p1, 0, 1, 0)?, // ACCEPTED     (new session restarts at 0)
    ///     mgr.append(p1, 0, 0, 2)?, // FENCED_EPOCH (stale epoch: a zombie)
    /// ];
    /// for outcome in outcomes {
    ///     println!("{outcome}");
    /// }
    /// let names: Vec<String> = outcomes.iter().map(|o| o.to_string()).collect();
    /// assert_eq!(
    ///     names,
    ///     ["ACCEPTED", "ACCEPTED", "DUPLICATE", "OUT_OF_ORDER", "ACCEPTED", "FENCED_EPOCH"]
    /// );
    /// # Ok::<(), minibroker_state::StateError>(())
    /// ```
    pub fn append(
        &self,
        producer_id: i64,
        partition: PartitionId,
        epoch: i16,
        sequence: i32,
    ) -> Result<Outcome, StateError> {
        let header = BatchHeader::new(
            producer_id,
            partition,
            epoch,
            SequenceRange::single(sequence)?,
        )?;
        let verdict = self.append_batch(&header, |_| Ok::<_, Infallible>(NO_OFFSET));
        Ok(match verdict {
            Ok(verdict) => verdict.outcome,
            Err(never) => match never {},
        })
    }

    /// Decides a batch and, only if it is ACCEPTED, calls `append` under the partition's shard
    /// lock to store it, then records it with the base offset `append` returned.
    ///
    /// `append` is told whether the batch is the producer's first on this partition (so a new
    /// entry will be stored), which lets the caller charge that entry's memory to a limit.
    ///
    /// Because the decision, the append and the bookkeeping happen under one lock, two racing
    /// retries of the same batch can never both be appended, and a producer's batches are
    /// appended in sequence order.
    ///
    /// # Errors
    /// Whatever `append` returns; the state is then left exactly as it was.
    pub fn append_batch<E>(
        &self,
        header: &BatchHeader,
        append: impl FnOnce(NewEntry) -> Result<i64, E>,
    ) -> Result<Verdict, E> {
        let key = (header.partition, header.producer_id);
        let mut shard = self.lock(header.partition);
        // One walk of the shard: the entry found is both what the rule reads and what an
        // accepted batch updates.
        match shard.entry(key) {
            Entry::Occupied(mut slot) => {
                decide_and_record(Some(slot.get_mut()), header, append).map(|(verdict, _)| verdict)
            }
            Entry::Vacant(slot) => {
                let (verdict, created) = decide_and_record(None, header, append)?;
                if let Some(created) = created {
                    slot.insert(created);
                }
                Ok(verdict)
            }
        }
    }

    /// Writes a transaction marker (COMMIT or ABORT) of `producer_id` at `epoch` under the
    /// partition's shard lock, unless the producer's epoch on file is higher; then records it: the
    /// producer's transaction on the partition is closed, and a higher epoch becomes its epoch, with
    /// no batch yet (the fencing an abort with a bumped epoch does). A producer with no entry here
    /// gets none: it never wrote to the partition, and a transactional batch needs its
    /// coordinator's add first, which the fenced instance no longer gets.
    ///
    /// # Errors
    /// Whatever `write` returns; the state is then left exactly as it was.
    pub fn end_transaction<T, E>(
        &self,
        partition: PartitionId,
        producer_id: i64,
        epoch: i16,
        now_ms: i64,
        write: impl FnOnce() -> Result<T, E>,
    ) -> Result<MarkerVerdict<T>, E> {
        let mut shard = self.lock(partition);
        let slot = shard.entry((partition, producer_id));
        if let Entry::Occupied(entry) = &slot
            && entry.get().epoch() > epoch
        {
            return Ok(MarkerVerdict::Fenced {
                current: entry.get().epoch(),
            });
        }
        let written = write()?;
        if let Entry::Occupied(mut entry) = slot {
            entry.get_mut().end_transaction(epoch, now_ms);
        }
        Ok(MarkerVerdict::Written(written))
    }

    /// Records a marker read back from the log during recovery, as [`Self::end_transaction`]
    /// records a written one.
    pub fn replay_marker(&self, partition: PartitionId, producer_id: i64, epoch: i16, now_ms: i64) {
        let replayed = self.end_transaction(partition, producer_id, epoch, now_ms, || {
            Ok::<_, Infallible>(())
        });
        if let Err(never) = replayed {
            match never {}
        }
    }

    /// Records a batch read back from the log during recovery, without deciding it: the log
    /// holds only batches the rule accepted, in the order it accepted them, so replaying them
    /// rebuilds exactly the state they left.
    pub fn replay(&self, header: &BatchHeader, base_offset: i64) {
        let key = (header.partition, header.producer_id);
        let mut shard = self.lock(header.partition);
        if let Some(created) = record(shard.get_mut(&key), header, base_offset) {
            shard.insert(key, created);
        }
    }

    /// Puts back the entries of `partition` saved by a snapshot, replacing what it held.
    pub fn restore(
        &self,
        partition: PartitionId,
        producers: impl IntoIterator<Item = (i64, ProducerEntry)>,
    ) {
        let mut shard = self.lock(partition);
        shard.retain(|(p, _), _| *p != partition);
        shard.extend(
            producers
                .into_iter()
                .map(|(producer_id, entry)| ((partition, producer_id), entry)),
        );
    }

    /// Every entry of `partition`, copied under its shard lock together with `at()`, which the
    /// caller uses to read where its log ends: no batch of an idempotent producer can be appended
    /// between the two, so the copy is exactly the state of the log below that point.
    pub fn partition_snapshot<T>(
        &self,
        partition: PartitionId,
        at: impl FnOnce() -> T,
    ) -> (Vec<(i64, ProducerEntry)>, T) {
        let shard = self.lock(partition);
        let entries = shard
            .range((partition, i64::MIN)..=(partition, i64::MAX))
            .map(|((_, producer_id), entry)| (*producer_id, *entry))
            .collect();
        (entries, at())
    }

    /// How many producers have state on `partition` (counted under its shard lock, not copied).
    #[must_use]
    pub fn partition_len(&self, partition: PartitionId) -> usize {
        self.lock(partition)
            .range((partition, i64::MIN)..=(partition, i64::MAX))
            .count()
    }

    /// Forgets every producer whose last batch was accepted longer than `expiration_ms` before
    /// `now_ms` (Kafka's `producer.id.expiration.ms`), one shard at a time; returns how many. An
    /// expired producer's next batch is judged as a new producer's. A producer with a transaction
    /// open on a partition is kept there until its marker, however idle.
    pub fn expire(&self, now_ms: i64, expiration_ms: i64) -> usize {
        let oldest_kept = now_ms.saturating_sub(expiration_ms);
        self.shards
            .iter()
            .map(|shard| {
                let mut shard = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
                let before = shard.len();
                shard.retain(|_, entry| {
                    entry.in_transaction() || entry.last_timestamp() >= oldest_kept
                });
                before - shard.len()
            })
            .sum()
    }

    /// Drops every entry of `partition` (its topic was deleted); returns how many.
    pub fn forget_partition(&self, partition: PartitionId) -> usize {
        let mut shard = self.lock(partition);
        let before = shard.len();
        shard.retain(|(p, _), _| *p != partition);
        before - shard.len()
    }

    /// The stored state of one producer on one partition.
    #[must_use]
    pub fn entry(&self, partition: PartitionId, producer_id: i64) -> Option<ProducerEntry> {
        self.lock(partition).get(&(partition, producer_id)).copied()
    }

    /// Up to `limit` producers of `partition` with ids above `after` (all ids when `None`), in
    /// ascending id order. The shard lock is held only while this one page is copied.
    #[must_use]
    pub fn producers_page(
        &self,
        partition: PartitionId,
        after: Option<i64>,
        limit: usize,
    ) -> ProducerPage {
        let start = match after {
            Some(id) => Bound::Excluded((partition, id)),
            None => Bound::Included((partition, i64::MIN)),
        };
        let shard = self.lock(partition);
        let mut keys = shard.range((start, Bound::Included((partition, i64::MAX))));
        let producers: Vec<ProducerView> = keys
            .by_ref()
            .take(limit)
            .map(|(key, entry)| ProducerView {
                producer_id: key.1,
                entry: *entry,
            })
            .collect();
        let more = keys.next().is_some();
        drop(shard);
        let next_after = if more {
            producers.last().map(|view| view.producer_id)
        } else {
            None
        };
        ProducerPage {
            producers,
            next_after,
        }
    }

    /// A read-only view of every producer on `partition`, ordered by producer id, gathered a
    /// page at a time (see [`Self::producers_page`]).
    #[must_use]
    pub fn producers(&self, partition: PartitionId) -> Vec<ProducerView> {
        const PAGE: usize = 1024;
        let mut views = Vec::new();
        let mut after = None;
        loop {
            let page = self.producers_page(partition, after, PAGE);
            views.extend(page.producers);
            match page.next_after {
                Some(next) => after = Some(next),
                None => return views,
            }
        }
    }

    /// A copy of all state, keyed by (partition, producer id). Shards are copied one at a time,
    /// so under concurrent appends the copy is consistent per partition, not across partitions.
    #[must_use]
    pub fn snapshot(&self) -> BTreeMap<(PartitionId, i64), ProducerEntry> {
        self.shards
            .iter()
            .flat_map(|shard| {
                let shard = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
                shard.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
            })
            .collect()
    }

    /// How many (partition, producer) entries are stored.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.0.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Whether no entry is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self, partition: PartitionId) -> MutexGuard<'_, Shard> {
        let index = partition as usize % self.shards.len();
        // A panic inside an append closure happens before the entry is touched, so a poisoned
        // shard still holds consistent state and can be used as is.
        self.shards[index]
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
