//! [`TransactionCoordinator`]: every transactional id of the broker, each change made durable in
//! the [`TransactionLog`] before it is applied and answered.
//!
//! A request takes its id's turn (an async lock; ids share 64 of them by hash), so one change
//! of an id is decided and written at a time, and works on a copy of the id's [`Transaction`].
//! The changed copy goes to the log's writer thread (`writer`), which writes and syncs the
//! changes of every id waiting at that moment in one group, and only then does the copy replace
//! the state and the turn pass on: a failed write changes nothing and the request is answered
//! with the storage error. No fsync runs on the runtime, and no lock is held across one but the
//! turn of the ids in the group. Without a data directory the log is absent and changes apply
//! at once.
//!
//! What it does not do itself: write the COMMIT and ABORT markers (the partitions' part) and
//! answer on the wire (the Kafka front end's). After an [`TransactionCoordinator::end`], a
//! fence or a timeout, the driver writes the markers to the partitions it is given, then calls
//! [`TransactionCoordinator::complete`].

use minibroker_broker::{BrokerConfig, StorageBudget};
use minibroker_storage::Storage;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use thiserror::Error;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, oneshot};

use crate::shared::SharedTransactions;
use crate::writer::LogWriter;
use crate::{
    Change, EndEpoch, InitOutcome, Transaction, TransactionLog, TransactionLogError, TxnError,
    TxnState,
};

/// How many turns the ids share (see the module docs): two ids of one turn wait for each
/// other's writes, so enough that concurrent producers rarely meet, few enough to keep no map
/// of locks per id.
const TURNS: usize = 64;

/// The coordinator's bounds (Kafka's `transaction.max.timeout.ms` and
/// `transactional.id.expiration.ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest transaction timeout a producer may ask for (Kafka: 15 minutes).
    pub max_timeout_ms: u64,
    /// An id with nothing open and no change for this long is forgotten (Kafka: 7 days).
    pub expiration_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_timeout_ms: 900_000,
            expiration_ms: 7 * 24 * 3_600_000,
        }
    }
}

/// The longest transactional id accepted, in bytes (Kafka sets none below its 32 KiB string;
/// the ids clients make, Kafka Streams' included, are a few dozen bytes).
pub const MAX_TRANSACTIONAL_ID_BYTES: usize = 1024;

/// Most consumer groups one transaction may commit offsets of (AddOffsetsToTxn); a pipeline
/// commits one.
pub const MAX_GROUPS_PER_TRANSACTION: usize = 100;

/// Why a request to the coordinator failed.
#[derive(Debug, Error)]
pub enum CoordinatorError {
    /// The transaction refused it.
    #[error(transparent)]
    Refused(#[from] TxnError),
    /// An empty transactional id (INVALID_REQUEST).
    #[error("a transactional id must not be empty")]
    EmptyTransactionalId,
    /// A transactional id longer than [`MAX_TRANSACTIONAL_ID_BYTES`] (INVALID_REQUEST).
    #[error(
        "a transactional id of {0} bytes is longer than the {MAX_TRANSACTIONAL_ID_BYTES} accepted"
    )]
    TransactionalIdTooLong(usize),
    /// A transaction's groups would pass [`MAX_GROUPS_PER_TRANSACTION`] (POLICY_VIOLATION).
    #[error("a transaction commits offsets of at most {MAX_GROUPS_PER_TRANSACTION} groups")]
    TooManyGroups,
    /// What transactional ids hold would pass the broker's `max_stored_bytes`
    /// (POLICY_VIOLATION); nothing changed.
    #[error("the broker holds its maximum of {0} bytes")]
    StorageFull(u64),
    /// No such transactional id (an add or end before any InitProducerId).
    #[error("no transaction is known for transactional id {0:?}")]
    UnknownTransactionalId(String),
    /// The change could not be made durable; nothing changed.
    #[error(transparent)]
    Log(#[from] TransactionLogError),
    /// No producer id could be issued.
    #[error("no producer id could be issued: {0}")]
    ProducerId(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// In a cluster: another broker coordinates the transactional id (or this one lost its
    /// lease); the client finds the coordinator again.
    #[error("this broker is not the transactional id's coordinator")]
    NotCoordinator,
    /// In a cluster: the id changed in the database since this broker read it (it lost the
    /// lease and took it again); nothing changed, and the client asks again.
    #[error("the transactional id changed in the cluster since it was read; retry")]
    Changed,
    /// In a cluster: the database could not be asked; nothing changed.
    #[error("the cluster's database: {0}")]
    Shared(String),
}

/// A budget of the broker's default `max_stored_bytes`, for a coordinator built alone.
fn default_budget() -> Arc<StorageBudget> {
    Arc::new(StorageBudget::new(BrokerConfig::default().max_stored_bytes))
}

/// Every transactional id's state, as its log has it.
type Ids = Arc<Mutex<HashMap<String, Transaction>>>;

/// One id's turn to change, held from its decision until its change is applied.
type Turn = OwnedMutexGuard<()>;

/// Every transactional id; see the module docs.
#[derive(Debug)]
pub struct TransactionCoordinator {
    ids: Ids,
    turns: Box<[Arc<AsyncMutex<()>>]>,
    writer: Option<LogWriter>,
    limits: Limits,
    /// What the ids hold ([`Transaction::held_bytes`]) is charged here.
    budget: Arc<StorageBudget>,
    /// In a cluster: where ids are leased and kept (set once, before the broker serves).
    shared: OnceLock<Arc<dyn SharedTransactions>>,
    /// In a cluster: the epoch of the lease under which each id in memory was read.
    read_under: Mutex<HashMap<String, i64>>,
}

impl TransactionCoordinator {
    /// A coordinator under `limits`, its transactions in memory only.
    #[must_use]
    pub fn in_memory(limits: Limits) -> Self {
        Self::with(limits, HashMap::new(), None)
    }

    fn with(limits: Limits, ids: HashMap<String, Transaction>, writer: Option<LogWriter>) -> Self {
        Self {
            ids: Arc::new(Mutex::new(ids)),
            turns: (0..TURNS).map(|_| Arc::default()).collect(),
            writer,
            limits,
            budget: default_budget(),
            shared: OnceLock::new(),
            read_under: Mutex::default(),
        }
    }

    /// Makes this the transaction coordinator of a broker of a cluster: an id is served only
    /// under its lease, and every change of it is made in `shared` (see `shared`). Set before
    /// the broker serves; a second call changes nothing.
    pub fn share(&self, shared: Arc<dyn SharedTransactions>) {
        let _already = self.shared.set(shared);
    }

    /// The cluster's side, when this coordinator is a cluster broker's.
    #[must_use]
    pub fn shared(&self) -> Option<&Arc<dyn SharedTransactions>> {
        self.shared.get()
    }

    fn read_under(&self) -> MutexGuard<'_, HashMap<String, i64>> {
        self.read_under
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// In a cluster, with `id`'s turn held: makes sure this broker holds the id's lease and has
    /// the id as the database keeps it (read again whenever the lease is newly this broker's).
    /// The lease's epoch; `None` on a broker of its own.
    ///
    /// # Errors
    /// [`CoordinatorError::NotCoordinator`]; a storage error.
    async fn ensure(&self, id: &str) -> Result<Option<i64>, CoordinatorError> {
        let Some(shared) = self.shared.get() else {
            return Ok(None);
        };
        let live = shared.epoch(id);
        if live.is_some() && live == self.read_under().get(id).copied() {
            return Ok(live);
        }
        let (epoch, found) = shared.claim(id).await?;
        let mut ids = self.ids();
        if let Some(old) = ids.remove(id) {
            self.budget.release(old.held_bytes());
        }
        if let Some(found) = found {
            // What the cluster keeps is taken whatever the budget: it was accepted once.
            self.budget.charge(found.held_bytes());
            ids.insert(id.to_owned(), found);
        }
        self.read_under().insert(id.to_owned(), epoch);
        Ok(Some(epoch))
    }

    /// Takes transactional id `id` into this broker's care in a cluster, as a request for it
    /// would (see [`SharedTransactions::orphaned`]).
    ///
    /// # Errors
    /// As a request for the id: another broker holds its lease; a storage error.
    pub async fn take_over(&self, id: &str) -> Result<(), CoordinatorError> {
        let _turn = self.turn(id).await;
        self.ensure(id).await.map(|_| ())
    }

    /// Forgets what this broker holds of `id` in a cluster: its lease turned out to be
    /// another's, or the database holds something else; the next request reads it again.
    fn forget_shared(&self, id: &str) {
        self.read_under().remove(id);
        if let Some(old) = self.ids().remove(id) {
            self.budget.release(old.held_bytes());
        }
    }

    /// A coordinator under `limits` whose transactions are kept in the log in `dir` on
    /// `storage`, and loaded from it.
    ///
    /// # Errors
    /// As [`TransactionLog::open`]; [`TransactionLogError::Io`] when the log's writer thread
    /// cannot be started.
    pub fn open(
        limits: Limits,
        storage: Arc<dyn Storage>,
        dir: &Path,
    ) -> Result<Self, TransactionLogError> {
        let (log, states) = TransactionLog::open(storage, dir)?;
        let ids = states
            .into_iter()
            .map(|txn| (txn.transactional_id().to_owned(), txn))
            .collect();
        let writer = LogWriter::start(log).map_err(|source| TransactionLogError::Io {
            what: "starting the writer of",
            path: dir.join(crate::FILE_NAME),
            source: Arc::new(source),
        })?;
        let coordinator = Self::with(limits, ids, Some(writer));
        coordinator.budget.charge(coordinator.held_bytes());
        Ok(coordinator)
    }

    /// The coordinator, what its ids hold charged to `budget` (the broker's) instead of a
    /// budget of its own of the default `max_stored_bytes`. What was loaded is charged whatever
    /// the budget: it was accepted once.
    #[must_use]
    pub fn charged_to(mut self, budget: Arc<StorageBudget>) -> Self {
        let held = self.held_bytes();
        self.budget.release(held);
        budget.charge(held);
        self.budget = budget;
        self
    }

    fn held_bytes(&self) -> u64 {
        self.ids().values().map(Transaction::held_bytes).sum()
    }

    fn ids(&self) -> MutexGuard<'_, HashMap<String, Transaction>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Group writes of the log done so far (each one write and one sync, for every change
    /// waiting at the time); 0 without a log.
    #[must_use]
    pub fn log_group_writes(&self) -> u64 {
        self.writer.as_ref().map_or(0, LogWriter::group_writes)
    }

    /// Waits for `id`'s turn (see the module docs).
    async fn turn(&self, id: &str) -> Turn {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut hasher);
        let turn = &self.turns[(hasher.finish() % TURNS as u64) as usize];
        Arc::clone(turn).lock_owned().await
    }

    /// Runs `change` on a copy of `id`'s transaction in the id's turn, makes the copy durable
    /// when `change` says it changed, then keeps it.
    async fn apply<T>(
        &self,
        id: &str,
        change: impl FnOnce(&mut Transaction) -> Result<(T, Change), CoordinatorError>,
    ) -> Result<T, CoordinatorError> {
        let turn = self.turn(id).await;
        self.ensure(id).await?;
        let mut copy = self
            .ids()
            .get(id)
            .cloned()
            .ok_or_else(|| CoordinatorError::UnknownTransactionalId(id.to_owned()))?;
        let (answer, changed) = change(&mut copy)?;
        if changed == Change::Changed {
            self.keep(copy, turn).await?;
        }
        Ok(answer)
    }

    /// Makes `changed` durable, then the id's state, and hands the id's `turn` on; what it
    /// grew by is charged to the budget first (refused when the budget has no room), what it
    /// shrank by released once it is kept. Settled by the writer thread, so a caller that stops
    /// waiting leaves the state as the log has it.
    async fn keep(&self, changed: Transaction, turn: Turn) -> Result<(), CoordinatorError> {
        if let Some(shared) = self.shared.get() {
            return self.keep_shared(shared.as_ref(), changed, turn).await;
        }
        let before = self
            .ids()
            .get(changed.transactional_id())
            .map_or(0, Transaction::held_bytes);
        let after = if changed.state() == TxnState::Dead {
            0
        } else {
            changed.held_bytes()
        };
        let grows = after.saturating_sub(before);
        if grows > 0 && !self.budget.try_charge(grows) {
            return Err(CoordinatorError::StorageFull(self.budget.max()));
        }
        let (ids, budget) = (Arc::clone(&self.ids), Arc::clone(&self.budget));
        let settle = move |changed: Transaction, written: Result<(), TransactionLogError>| {
            match &written {
                Ok(()) => {
                    budget.release(before.saturating_sub(after));
                    let mut ids = ids.lock().unwrap_or_else(PoisonError::into_inner);
                    // A forgotten id is not kept: its tombstone is in the log.
                    if changed.state() == TxnState::Dead {
                        ids.remove(changed.transactional_id());
                    } else {
                        ids.insert(changed.transactional_id().to_owned(), changed);
                    }
                }
                Err(_) => budget.release(grows),
            }
            drop(turn);
            written
        };
        let Some(writer) = &self.writer else {
            return settle(changed, Ok(())).map_err(CoordinatorError::from);
        };
        let (tell, told) = oneshot::channel();
        writer.submit(
            changed,
            Box::new(move |changed, written| {
                let _ = tell.send(settle(changed, written));
            }),
        );
        told.await
            .unwrap_or_else(|_| {
                Err(TransactionLogError::Io {
                    what: "writing to",
                    path: crate::FILE_NAME.into(),
                    source: Arc::new(std::io::Error::other(
                        "the transaction log's writer stopped",
                    )),
                })
            })
            .map_err(CoordinatorError::from)
    }

    /// [`Self::keep`] in a cluster: `changed` is stored in the database in place of what this
    /// broker holds of the id (a compare-and-set there), then here. A Prepare* goes no further
    /// than memory: it is ended in the database at once, its markers and offsets with it, and
    /// the id is kept Complete*.
    async fn keep_shared(
        &self,
        shared: &dyn SharedTransactions,
        changed: Transaction,
        turn: Turn,
    ) -> Result<(), CoordinatorError> {
        let id = changed.transactional_id().to_owned();
        let epoch = self
            .read_under()
            .get(&id)
            .copied()
            .ok_or(CoordinatorError::NotCoordinator)?;
        let before = self.ids().get(&id).cloned();
        let kept = if changed.state().is_preparing() {
            let before = before.as_ref().ok_or(CoordinatorError::Changed)?;
            let mut completed = changed.clone();
            completed.complete(minibroker_records::now_millis())?;
            shared
                .end(epoch, before, &changed, &completed)
                .await
                .map(|()| completed)
        } else {
            shared
                .save(epoch, before.as_ref(), &changed)
                .await
                .map(|()| changed)
        };
        let kept = match kept {
            Ok(kept) => kept,
            Err(error) => {
                if matches!(
                    error,
                    CoordinatorError::NotCoordinator | CoordinatorError::Changed
                ) {
                    self.forget_shared(&id);
                }
                return Err(error);
            }
        };
        let mut ids = self.ids();
        let held_before = ids.get(&id).map_or(0, Transaction::held_bytes);
        self.budget.release(held_before);
        if kept.state() == TxnState::Dead {
            ids.remove(&id);
        } else {
            self.budget.charge(kept.held_bytes());
            ids.insert(id, kept);
        }
        drop(turn);
        Ok(())
    }

    /// InitProducerId for transactional id `id` with a timeout of `timeout_ms`; a producer id
    /// comes from `issue` when one is needed (a new or forgotten id, or an epoch run out).
    ///
    /// # Errors
    /// [`CoordinatorError::EmptyTransactionalId`]; [`TxnError::InvalidTransactionTimeout`] above
    /// the maximum; the refusals of [`Transaction::init`]; a producer id not issued; a storage
    /// error.
    pub async fn init_producer<E: std::error::Error + Send + Sync + 'static>(
        &self,
        id: &str,
        expected: Option<(i64, i16)>,
        timeout_ms: u64,
        issue: impl FnOnce() -> Result<i64, E>,
        now: i64,
    ) -> Result<InitOutcome, CoordinatorError> {
        if id.is_empty() {
            return Err(CoordinatorError::EmptyTransactionalId);
        }
        if id.len() > MAX_TRANSACTIONAL_ID_BYTES {
            return Err(CoordinatorError::TransactionalIdTooLong(id.len()));
        }
        if timeout_ms > self.limits.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout {
                asked: timeout_ms,
                max: self.limits.max_timeout_ms,
            }
            .into());
        }
        // The id's turn for the whole init, so it cannot change between the look and the write.
        let turn = self.turn(id).await;
        self.ensure(id).await?;
        let current = self.ids().get(id).cloned();
        let new_id = if current
            .as_ref()
            .is_none_or(Transaction::needs_new_producer_id)
        {
            Some(issue().map_err(|error| CoordinatorError::ProducerId(Box::new(error)))?)
        } else {
            None
        };
        let (changed, outcome) = match (current, new_id) {
            (Some(mut txn), new_id) => {
                let outcome = txn.init(expected, timeout_ms, new_id, now)?;
                (txn, outcome)
            }
            (None, Some(producer_id)) => {
                let txn = Transaction::new(id, producer_id, timeout_ms, now);
                let outcome = InitOutcome::Ready {
                    producer_id,
                    epoch: txn.epoch(),
                };
                (txn, outcome)
            }
            (None, None) => return Err(TxnError::ConcurrentTransactions.into()),
        };
        self.keep(changed, turn).await?;
        Ok(outcome)
    }

    /// AddPartitionsToTxn for `id`.
    ///
    /// # Errors
    /// The refusals of [`Transaction::add_partitions`]; an unknown id; a storage error.
    pub async fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, u32)],
        now: i64,
    ) -> Result<(), CoordinatorError> {
        self.apply(id, |txn| {
            let change = txn.add_partitions(producer_id, epoch, partitions.iter().cloned(), now)?;
            Ok(((), change))
        })
        .await
    }

    /// AddOffsetsToTxn for `id`: `group`'s offsets join its transaction.
    ///
    /// # Errors
    /// As [`Self::add_partitions`].
    pub async fn add_group(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        now: i64,
    ) -> Result<(), CoordinatorError> {
        self.apply(id, |txn| {
            let new = !txn.groups().any(|held| held == group);
            if new && txn.group_count() >= MAX_GROUPS_PER_TRANSACTION {
                return Err(CoordinatorError::TooManyGroups);
            }
            Ok(((), txn.add_group(producer_id, epoch, group, now)?))
        })
        .await
    }

    /// EndTxn for `id` from `producer` (id and epoch), bumping the epoch if `bump` (EndTxn v5;
    /// an epoch that ran out takes a new producer id from `issue`). When it prepared the end,
    /// returns the transaction as it is now (its partitions and groups are where the markers
    /// go, with its producer id and epoch); for a retry of an end already complete, `None`.
    ///
    /// # Errors
    /// The refusals of [`Transaction::end`]; an unknown id; a producer id not issued; a storage
    /// error.
    pub async fn end<E: std::error::Error + Send + Sync + 'static>(
        &self,
        id: &str,
        producer: (i64, i16),
        (commit, bump): (bool, bool),
        issue: impl FnOnce() -> Result<i64, E>,
        now: i64,
    ) -> Result<Option<Transaction>, CoordinatorError> {
        self.apply(id, |txn| {
            let epoch_after = if bump {
                let spare_producer_id = if txn.needs_spare_producer_id() {
                    Some(issue().map_err(|error| CoordinatorError::ProducerId(Box::new(error)))?)
                } else {
                    None
                };
                EndEpoch::Bumped { spare_producer_id }
            } else {
                EndEpoch::Kept
            };
            let change = txn.end(producer, commit, epoch_after, now)?;
            let prepared = (change == Change::Changed).then(|| txn.clone());
            Ok((prepared, change))
        })
        .await
    }

    /// Completes `id`'s Prepare* state once its markers are written.
    ///
    /// # Errors
    /// The refusal of [`Transaction::complete`]; an unknown id; a storage error.
    pub async fn complete(&self, id: &str, now: i64) -> Result<(), CoordinatorError> {
        self.apply(id, |txn| {
            txn.complete(now)?;
            Ok(((), Change::Changed))
        })
        .await
    }

    /// Fences every transaction open past its timeout at `now` (epoch bumped, PrepareAbort,
    /// durable) and returns them, for their ABORT markers and then [`Self::complete`].
    ///
    /// # Errors
    /// A storage error; the transactions fenced before it are returned by the next call too,
    /// as they are still to complete.
    pub async fn fence_timed_out(&self, now: i64) -> Result<Vec<Transaction>, CoordinatorError> {
        let due = self.ids_where(|txn| txn.is_timed_out(now) && self.leased(txn));
        let mut fenced = Vec::with_capacity(due.len());
        for id in due {
            fenced.push(
                self.apply(&id, |txn| {
                    txn.fence(now)?;
                    Ok((txn.clone(), Change::Changed))
                })
                .await?,
            );
        }
        Ok(fenced)
    }

    /// Forgets the ids with nothing open and no change for `expiration_ms`; returns how many.
    ///
    /// # Errors
    /// A storage error (the ids forgotten before it stay forgotten).
    pub async fn expire(&self, now: i64) -> Result<usize, CoordinatorError> {
        let expired = self
            .ids_where(|txn| txn.is_expired(now, self.limits.expiration_ms) && self.leased(txn));
        for id in &expired {
            self.apply(id, |txn| {
                txn.forget(now)?;
                Ok(((), Change::Changed))
            })
            .await?;
        }
        Ok(expired.len())
    }

    /// Whether this broker may change `txn` by itself: always on a broker of its own; in a
    /// cluster, while it holds the id's lease (another broker's ids are its clock's).
    fn leased(&self, txn: &Transaction) -> bool {
        self.shared
            .get()
            .is_none_or(|shared| shared.epoch(txn.transactional_id()).is_some())
    }

    /// `id`'s transaction as it is now, if the id is known.
    #[must_use]
    pub fn describe(&self, id: &str) -> Option<Transaction> {
        self.ids().get(id).cloned()
    }

    /// Whether `producer_id` at `epoch` may commit offsets for `group` in `id`'s transaction
    /// now (read under the lock, nothing copied).
    ///
    /// # Errors
    /// An unknown id; the refusals of [`Transaction::check_offsets_commit`].
    pub fn check_offsets_commit(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
    ) -> Result<(), CoordinatorError> {
        self.ids()
            .get(id)
            .ok_or_else(|| CoordinatorError::UnknownTransactionalId(id.to_owned()))?
            .check_offsets_commit(producer_id, epoch, group)
            .map_err(CoordinatorError::from)
    }

    /// The transactional ids whose transaction `pick` chooses (read under the lock, nothing
    /// copied but the ids).
    #[must_use]
    pub fn ids_where(&self, pick: impl Fn(&Transaction) -> bool) -> Vec<String> {
        self.ids()
            .values()
            .filter(|txn| pick(txn))
            .map(|txn| txn.transactional_id().to_owned())
            .collect()
    }

    /// How many transactions `pick` chooses.
    #[must_use]
    pub fn count_where(&self, pick: impl Fn(&Transaction) -> bool) -> usize {
        self.ids().values().filter(|txn| pick(txn)).count()
    }

    /// Every known transactional id's transaction, as it is now.
    #[must_use]
    pub fn all(&self) -> Vec<Transaction> {
        self.ids().values().cloned().collect()
    }

    /// How many transactional ids are known.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ids().len()
    }

    /// Whether no transactional id is known.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ids().is_empty()
    }
}
