//! [`Transaction`]: one transactional id and the requests that move it, following Kafka's
//! coordinator (`TransactionCoordinator`, `TransactionMetadata`) case by case.
//!
//! Each request either refuses with a [`TxnError`] and changes nothing, or changes the state and
//! says so ([`Change`]); a change must be durable before the request is answered. A Prepare*
//! state means markers to write: the driver writes them to every partition of the transaction,
//! then calls [`Transaction::complete`].

use std::collections::BTreeSet;
use thiserror::Error;

use crate::TxnState;
use crate::record::{Addition, RecordError};

/// Why a transactional request is refused; each is one Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TxnError {
    /// The producer's epoch is not the id's current one: a newer instance took over
    /// (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for the older request versions).
    #[error("the producer was fenced by a newer instance of its transactional id")]
    ProducerFenced,
    /// The producer id is not the one this transactional id has (INVALID_PRODUCER_ID_MAPPING).
    #[error("the producer id is not the one this transactional id has")]
    InvalidProducerIdMapping,
    /// Markers of an earlier transition are being written; retry (CONCURRENT_TRANSACTIONS).
    #[error("another transition of this transaction is under way; retry")]
    ConcurrentTransactions,
    /// The request makes no sense in the current state (INVALID_TXN_STATE).
    #[error("the transaction cannot do that in state {state:?}")]
    InvalidTxnState {
        /// The state it is in.
        state: TxnState,
    },
    /// An EndTxn from a connection opened before the one that began the open transaction: a
    /// delayed end of an earlier transaction of the same epoch, which must not end this one
    /// (INVALID_TXN_STATE).
    #[error(
        "an end from a connection opened before the one that began the open transaction: a delayed end of an earlier transaction"
    )]
    LateEnd,
    /// The transaction timeout asked for is above the broker's maximum
    /// (INVALID_TRANSACTION_TIMEOUT).
    #[error("a transaction timeout of {asked} ms is above the broker's maximum of {max} ms")]
    InvalidTransactionTimeout {
        /// Asked for.
        asked: u64,
        /// `transaction.max.timeout.ms`.
        max: u64,
    },
}

/// Whether an end moves the producer to a new epoch (KIP-890 part 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndEpoch {
    /// Keep it (EndTxn v0-4): the producer's next transaction uses the same epoch, so nothing
    /// tells a late request of this transaction from one of the next.
    Kept,
    /// Bump it (EndTxn v5): the markers and the producer's next transaction carry the next
    /// epoch, which fences every late request of this one. Once the epoch has run out, the
    /// producer goes on as `spare_producer_id` (which must then be given) at epoch 0.
    Bumped {
        /// A new producer id, for an epoch that has run out
        /// ([`Transaction::needs_spare_producer_id`]).
        spare_producer_id: Option<i64>,
    },
}

/// Whether a request changed the transaction (and so must be made durable before its answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing to persist: a retry, or partitions already in the transaction.
    Unchanged,
    /// The transaction changed.
    Changed,
}

/// What InitProducerId gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitOutcome {
    /// The producer id and epoch to answer with; the state is Empty.
    Ready {
        /// The producer id (a new one once the epoch ran out).
        producer_id: i64,
        /// The epoch; every older one is fenced.
        epoch: i16,
    },
    /// An open transaction of an older instance was fenced: the epoch is bumped to `epoch` and
    /// the transaction is PrepareAbort. Write its ABORT markers with `epoch`, complete it, and
    /// answer CONCURRENT_TRANSACTIONS; the client asks again and gets the next epoch.
    Fenced {
        /// The bumped epoch the markers carry.
        epoch: i16,
    },
}

/// The epoch at which InitProducerId moves to a new producer id instead of bumping (Kafka
/// leaves the last epoch for a fence).
const LAST_BUMPED_EPOCH: i16 = i16::MAX - 1;

/// One transactional id's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    transactional_id: String,
    producer_id: i64,
    epoch: i16,
    timeout_ms: u64,
    state: TxnState,
    /// The partitions the open (or ending) transaction wrote to.
    partitions: BTreeSet<(String, u32)>,
    /// The consumer groups whose offsets it commits.
    groups: BTreeSet<String>,
    /// When its first partition or group was added (the timeout counts from here).
    start_ms: Option<i64>,
    /// When it last changed (expiry counts from here).
    last_update_ms: i64,
    /// The producer id and epoch the last end that bumped the epoch was asked with: a retry of
    /// that end carries them (Kafka's previous producer id and last producer epoch).
    previous: Option<(i64, i16)>,
    /// The producer id an end whose epoch ran out completes with (Kafka's next producer id).
    next_producer_id: Option<i64>,
}

impl Transaction {
    /// A new transactional id with `producer_id` at epoch 0, Empty, with a timeout of
    /// `timeout_ms`, created at `now` (its expiry counts from there).
    #[must_use]
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: u64, now: i64) -> Self {
        Self {
            transactional_id: transactional_id.to_owned(),
            producer_id,
            epoch: 0,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            start_ms: None,
            last_update_ms: now,
            previous: None,
            next_producer_id: None,
        }
    }

    /// The transactional id.
    #[must_use]
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// The producer id.
    #[must_use]
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// The current epoch.
    #[must_use]
    pub fn epoch(&self) -> i16 {
        self.epoch
    }

    /// The state.
    #[must_use]
    pub fn state(&self) -> TxnState {
        self.state
    }

    /// The transaction timeout its producer asked for, in milliseconds.
    #[must_use]
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }

    /// When the open transaction began (its first add), in milliseconds since the epoch.
    #[must_use]
    pub fn start_ms(&self) -> Option<i64> {
        self.start_ms
    }

    /// The partitions of the open or ending transaction, by topic and index.
    pub fn partitions(&self) -> impl Iterator<Item = &(String, u32)> + Clone {
        self.partitions.iter()
    }

    /// The groups whose offsets the open or ending transaction commits.
    pub fn groups(&self) -> impl Iterator<Item = &String> + Clone {
        self.groups.iter()
    }

    /// How many groups the open or ending transaction commits offsets of.
    #[must_use]
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// What the id costs the broker's memory: its state in the coordinator and its copy in the
    /// transaction log, each an entry with its id, partitions and groups.
    #[must_use]
    pub fn held_bytes(&self) -> u64 {
        const ENTRY: usize = 256;
        const ITEM: usize = 48;
        let partitions: usize = self.partitions.iter().map(|(t, _)| ITEM + t.len()).sum();
        let groups: usize = self.groups.iter().map(|g| ITEM + g.len()).sum();
        2 * (ENTRY + self.transactional_id.len() + partitions + groups) as u64
    }

    /// InitProducerId for this id at `now`: a new epoch (or `new_producer_id`, when
    /// [`Self::needs_new_producer_id`] says one is needed) with a timeout of `timeout_ms`, or the
    /// fence of an open transaction. `expected` is the (producer id, epoch) a KIP-360 client
    /// sends to recover; it must be the current pair.
    ///
    /// # Errors
    /// [`TxnError::ProducerFenced`] for an `expected` pair that is not current;
    /// [`TxnError::ConcurrentTransactions`] while markers are being written, or when a new
    /// producer id is needed and none was given (ask again with one).
    pub fn init(
        &mut self,
        expected: Option<(i64, i16)>,
        timeout_ms: u64,
        new_producer_id: Option<i64>,
        now: i64,
    ) -> Result<InitOutcome, TxnError> {
        let new_producer_id = || new_producer_id.ok_or(TxnError::ConcurrentTransactions);
        if self.state == TxnState::Dead {
            *self = Self::new(&self.transactional_id, new_producer_id()?, timeout_ms, now);
            return Ok(self.ready());
        }
        if expected.is_some_and(|pair| pair != (self.producer_id, self.epoch)) {
            return Err(TxnError::ProducerFenced);
        }
        match self.state {
            state if state.is_preparing() => Err(TxnError::ConcurrentTransactions),
            TxnState::Ongoing => {
                let epoch = self.fence(now)?;
                Ok(InitOutcome::Fenced { epoch })
            }
            _ => {
                if self.needs_new_producer_id() {
                    self.producer_id = new_producer_id()?;
                    self.epoch = 0;
                } else {
                    self.epoch += 1;
                }
                self.timeout_ms = timeout_ms;
                self.move_to(TxnState::Empty, now);
                self.partitions.clear();
                self.groups.clear();
                self.start_ms = None;
                self.previous = None;
                self.next_producer_id = None;
                Ok(self.ready())
            }
        }
    }

    /// Whether [`Self::init`] will take a new producer id: a forgotten id, or an epoch run out.
    #[must_use]
    pub fn needs_new_producer_id(&self) -> bool {
        self.state == TxnState::Dead
            || (self.epoch >= LAST_BUMPED_EPOCH
                && !self.state.is_preparing()
                && self.state != TxnState::Ongoing)
    }

    fn ready(&self) -> InitOutcome {
        InitOutcome::Ready {
            producer_id: self.producer_id,
            epoch: self.epoch,
        }
    }

    /// AddPartitionsToTxn: `partitions` join the transaction, opening it if none is open.
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`] for another producer id;
    /// [`TxnError::ProducerFenced`] for another epoch; [`TxnError::ConcurrentTransactions`]
    /// while markers are being written; [`TxnError::InvalidTxnState`] for a forgotten id.
    pub fn add_partitions(
        &mut self,
        producer_id: i64,
        epoch: i16,
        partitions: impl IntoIterator<Item = (String, u32)>,
        now: i64,
    ) -> Result<Change, TxnError> {
        let partitions: Vec<_> = partitions.into_iter().collect();
        self.add(producer_id, epoch, now, |txn| {
            let before = txn.partitions.len();
            txn.partitions.extend(partitions);
            txn.partitions.len() > before
        })
    }

    /// AddOffsetsToTxn: `group`'s offsets join the transaction, opening it if none is open.
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`] for another producer id;
    /// [`TxnError::ProducerFenced`] for another epoch; [`TxnError::ConcurrentTransactions`]
    /// while markers are being written; [`TxnError::InvalidTxnState`] for a forgotten id.
    pub fn add_group(
        &mut self,
        producer_id: i64,
        epoch: i16,
        group: &str,
        now: i64,
    ) -> Result<Change, TxnError> {
        self.add(producer_id, epoch, now, |txn| {
            txn.groups.insert(group.to_owned())
        })
    }

    /// What both adds do: check the producer, then add (`grow` says whether anything was new);
    /// a transaction that was not open opens at `now`.
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`] for another producer id;
    /// [`TxnError::ProducerFenced`] for another epoch; [`TxnError::ConcurrentTransactions`]
    /// while markers are being written; [`TxnError::InvalidTxnState`] for a dead id.
    fn add(
        &mut self,
        producer_id: i64,
        epoch: i16,
        now: i64,
        grow: impl FnOnce(&mut Self) -> bool,
    ) -> Result<Change, TxnError> {
        self.check_producer(producer_id, epoch)?;
        match self.state {
            state if state.is_preparing() => Err(TxnError::ConcurrentTransactions),
            TxnState::Dead => Err(TxnError::InvalidTxnState { state: self.state }),
            TxnState::Ongoing => Ok(if grow(self) {
                self.last_update_ms = now;
                Change::Changed
            } else {
                Change::Unchanged
            }),
            _ => {
                self.partitions.clear();
                self.groups.clear();
                grow(self);
                self.start_ms = Some(now);
                self.move_to(TxnState::Ongoing, now);
                Ok(Change::Changed)
            }
        }
    }

    /// EndTxn: commit (`commit`) or abort the open transaction, keeping the epoch or bumping it
    /// (`epoch_after`). The answer may go once the returned change is durable; the markers follow
    /// ([`Self::complete`]). A retry of an end that completed changes nothing: with a kept epoch
    /// it carries the current pair, with a bumped one the pair the end was asked with.
    ///
    /// With a bumped epoch an abort with nothing open is an end too (it only moves the epoch on),
    /// as Kafka's coordinator answers EndTxn v5.
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`], [`TxnError::ProducerFenced`] as for the adds;
    /// [`TxnError::ConcurrentTransactions`] for a retry while its markers are being written, or
    /// an epoch that ran out without a spare producer id; [`TxnError::InvalidTxnState`] for an
    /// end with no open transaction, or the other result of one that is ending or ended.
    pub fn end(
        &mut self,
        (producer_id, epoch): (i64, i16),
        commit: bool,
        epoch_after: EndEpoch,
        now: i64,
    ) -> Result<Change, TxnError> {
        let bumped = matches!(epoch_after, EndEpoch::Bumped { .. });
        let ending_or_ended = self.state.is_preparing() || self.state.is_complete();
        if bumped && ending_or_ended && self.previous == Some((producer_id, epoch)) {
            // A retry of the end that bumped the epoch.
            return self.retried_end(commit);
        }
        self.check_producer(producer_id, epoch)?;
        match (self.state, commit) {
            (TxnState::Ongoing, _) => self.prepare_end(commit, epoch_after, now),
            (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false)
                if bumped =>
            {
                self.prepare_end(false, epoch_after, now)
            }
            _ if !bumped && ending_or_ended => self.retried_end(commit),
            _ => Err(TxnError::InvalidTxnState { state: self.state }),
        }
    }

    /// The answer to a retry of the end that left this state.
    fn retried_end(&self, commit: bool) -> Result<Change, TxnError> {
        match (self.state, commit) {
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Err(TxnError::ConcurrentTransactions)
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                Ok(Change::Unchanged)
            }
            _ => Err(TxnError::InvalidTxnState { state: self.state }),
        }
    }

    /// PrepareCommit or PrepareAbort, the epoch moved on first if `epoch_after` says so.
    fn prepare_end(
        &mut self,
        commit: bool,
        epoch_after: EndEpoch,
        now: i64,
    ) -> Result<Change, TxnError> {
        if let EndEpoch::Bumped { spare_producer_id } = epoch_after {
            if self.needs_spare_producer_id() {
                self.next_producer_id =
                    Some(spare_producer_id.ok_or(TxnError::ConcurrentTransactions)?);
            }
            self.previous = Some((self.producer_id, self.epoch));
            self.epoch = self.epoch.saturating_add(1);
        }
        if self.start_ms.is_none() {
            // An abort with nothing open: it starts and ends now.
            self.start_ms = Some(now);
        }
        let next = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        self.move_to(next, now);
        Ok(Change::Changed)
    }

    /// Whether an end that bumps the epoch needs a spare producer id: the epoch has run out
    /// (the markers take the last one, and the producer goes on with a new id at epoch 0).
    #[must_use]
    pub fn needs_spare_producer_id(&self) -> bool {
        self.epoch >= LAST_BUMPED_EPOCH
    }

    /// Completes a Prepare* state once its markers are written: CompleteCommit or
    /// CompleteAbort. The partitions and groups are forgotten.
    ///
    /// # Errors
    /// [`TxnError::InvalidTxnState`] when nothing is being prepared.
    pub fn complete(&mut self, now: i64) -> Result<(), TxnError> {
        let next = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            state => return Err(TxnError::InvalidTxnState { state }),
        };
        self.move_to(next, now);
        self.partitions.clear();
        self.groups.clear();
        self.start_ms = None;
        if let Some(next_producer_id) = self.next_producer_id.take() {
            self.producer_id = next_producer_id;
            self.epoch = 0;
        }
        Ok(())
    }

    /// Whether the open transaction has run past its timeout at `now` (it counts from its first
    /// add).
    #[must_use]
    pub fn is_timed_out(&self, now: i64) -> bool {
        let timeout = i64::try_from(self.timeout_ms).unwrap_or(i64::MAX);
        self.state == TxnState::Ongoing
            && self
                .start_ms
                .is_some_and(|start| now.saturating_sub(start) > timeout)
    }

    /// Fences the open transaction (a newer instance, or its timeout): the epoch is bumped and
    /// the transaction goes to PrepareAbort, its ABORT markers to carry the returned epoch.
    ///
    /// # Errors
    /// [`TxnError::InvalidTxnState`] when no transaction is open.
    pub fn fence(&mut self, now: i64) -> Result<i16, TxnError> {
        if self.state != TxnState::Ongoing {
            return Err(TxnError::InvalidTxnState { state: self.state });
        }
        self.move_to(TxnState::PrepareEpochFence, now);
        self.epoch = self.epoch.saturating_add(1);
        // No request of the fenced instance is a retry now.
        self.previous = None;
        self.move_to(TxnState::PrepareAbort, now);
        Ok(self.epoch)
    }

    /// Whether the id may be forgotten at `now`: no transaction open or ending, and no change
    /// for `expiration_ms` (Kafka's `transactional.id.expiration.ms`).
    #[must_use]
    pub fn is_expired(&self, now: i64, expiration_ms: u64) -> bool {
        let expiration = i64::try_from(expiration_ms).unwrap_or(i64::MAX);
        TxnState::Dead.may_follow(self.state)
            && now.saturating_sub(self.last_update_ms) > expiration
    }

    /// Forgets the id (Dead): what the coordinator does to an expired one. Its next
    /// InitProducerId starts it over with a new producer id.
    ///
    /// # Errors
    /// [`TxnError::InvalidTxnState`] while a transaction is open or ending.
    pub fn forget(&mut self, now: i64) -> Result<(), TxnError> {
        if !TxnState::Dead.may_follow(self.state) {
            return Err(TxnError::InvalidTxnState { state: self.state });
        }
        self.move_to(TxnState::Dead, now);
        Ok(())
    }

    /// Every field, for the record: id, producer id, epoch, timeout, state, start, last update.
    pub(crate) fn parts(&self) -> (&str, i64, i16, u64, TxnState, Option<i64>, i64) {
        (
            &self.transactional_id,
            self.producer_id,
            self.epoch,
            self.timeout_ms,
            self.state,
            self.start_ms,
            self.last_update_ms,
        )
    }

    /// What an end that bumped the epoch left: the pair it was asked with, and the producer id
    /// it completes with when the epoch ran out (see `record`).
    pub(crate) fn bump_parts(&self) -> (Option<(i64, i16)>, Option<i64>) {
        (self.previous, self.next_producer_id)
    }

    /// The same transaction with what an end that bumped the epoch left (see `record`).
    pub(crate) fn with_bump_parts(
        mut self,
        (previous, next_producer_id): (Option<(i64, i16)>, Option<i64>),
    ) -> Self {
        self.previous = previous;
        self.next_producer_id = next_producer_id;
        self
    }

    /// A transaction from a record's fields, unchecked (see `record`).
    pub(crate) fn from_parts(
        transactional_id: String,
        (producer_id, epoch, timeout_ms): (i64, i16, u64),
        state: TxnState,
        (start_ms, last_update_ms): (Option<i64>, i64),
        partitions: BTreeSet<(String, u32)>,
        groups: BTreeSet<String>,
    ) -> Self {
        Self {
            transactional_id,
            producer_id,
            epoch,
            timeout_ms,
            state,
            partitions,
            groups,
            start_ms,
            last_update_ms,
            previous: None,
            next_producer_id: None,
        }
    }

    /// What `self` added to `before`'s open transaction, when that is all that changed: both
    /// Ongoing, of one producer, epoch, timeout and start, and `self` holding every partition
    /// and group `before` holds. The log writes that instead of the whole record.
    pub(crate) fn addition_since(&self, before: &Self) -> Option<Addition> {
        let same = self.state == TxnState::Ongoing
            && before.state == TxnState::Ongoing
            && self.transactional_id == before.transactional_id
            && (self.producer_id, self.epoch, self.timeout_ms, self.start_ms)
                == (
                    before.producer_id,
                    before.epoch,
                    before.timeout_ms,
                    before.start_ms,
                )
            && self.partitions.is_superset(&before.partitions)
            && self.groups.is_superset(&before.groups);
        same.then(|| Addition {
            transactional_id: self.transactional_id.clone(),
            producer_id: self.producer_id,
            epoch: self.epoch,
            last_update_ms: self.last_update_ms,
            partitions: self
                .partitions
                .difference(&before.partitions)
                .cloned()
                .collect(),
            groups: self.groups.difference(&before.groups).cloned().collect(),
        })
    }

    /// Replays an [`Addition`] read from the log onto the state the log held before it.
    ///
    /// # Errors
    /// [`RecordError::Impossible`] when it is not an addition to this producer's open
    /// transaction.
    pub(crate) fn apply_addition(&mut self, addition: Addition) -> Result<(), RecordError> {
        if self.state != TxnState::Ongoing
            || (self.producer_id, self.epoch) != (addition.producer_id, addition.epoch)
        {
            return Err(RecordError::Impossible(
                "an addition to no open transaction of its producer and epoch",
            ));
        }
        self.partitions.extend(addition.partitions);
        self.groups.extend(addition.groups);
        self.last_update_ms = addition.last_update_ms;
        Ok(())
    }

    /// TxnOffsetCommit's check: the producer is current, and its open transaction has added
    /// `group` (AddOffsetsToTxn).
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`] for another producer id;
    /// [`TxnError::ProducerFenced`] for another epoch; [`TxnError::InvalidTxnState`] when no
    /// transaction is open or it has not added the group.
    pub fn check_offsets_commit(
        &self,
        producer_id: i64,
        epoch: i16,
        group: &str,
    ) -> Result<(), TxnError> {
        self.check_producer(producer_id, epoch)?;
        if self.state != TxnState::Ongoing || !self.groups.contains(group) {
            return Err(TxnError::InvalidTxnState { state: self.state });
        }
        Ok(())
    }

    /// A broker's verification of a batch's partition (AddPartitionsToTxn v4-5 `verify_only`):
    /// the producer is current, and its open transaction has added `topic`/`partition`.
    ///
    /// # Errors
    /// As [`Self::check_offsets_commit`], for the partition instead of a group.
    pub fn check_partition(
        &self,
        producer_id: i64,
        epoch: i16,
        (topic, partition): (&str, u32),
    ) -> Result<(), TxnError> {
        self.check_producer(producer_id, epoch)?;
        let added = self
            .partitions
            .iter()
            .any(|(t, p)| t == topic && *p == partition);
        if self.state != TxnState::Ongoing || !added {
            return Err(TxnError::InvalidTxnState { state: self.state });
        }
        Ok(())
    }

    fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), TxnError> {
        if producer_id != self.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if epoch != self.epoch {
            return Err(TxnError::ProducerFenced);
        }
        Ok(())
    }

    fn move_to(&mut self, next: TxnState, now: i64) {
        debug_assert!(next.may_follow(self.state), "{:?} -> {next:?}", self.state);
        self.state = next;
        self.last_update_ms = now;
    }
}
