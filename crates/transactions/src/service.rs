//! [`TransactionService`]: the transaction coordinator wired to what its transactions touch —
//! the partitions their records go to and the groups whose offsets they commit — and to a clock.
//!
//! The coordinator ([`TransactionCoordinator`]) decides and persists; this drives the rest:
//! - an **add** of partitions tells each partition to expect the producer's transactional
//!   batches (KIP-890 part 1), once the add is durable;
//! - an **end** (EndTxn, a fence by a newer instance, a timeout) persists Prepare*, writes the
//!   COMMIT or ABORT marker to every partition of the transaction and waits until they are stored
//!   under the flush policy, commits or drops the offsets it committed in its groups, and only
//!   then completes the transaction. EndTxn is answered after all of that, so a `read_committed`
//!   consumer sees the outcome as soon as the producer does;
//! - the **clock** aborts transactions open past their timeout (bumping the epoch, which fences
//!   the instance that let it run out), finishes any Prepare* left by a restart or a failed
//!   write, and forgets idle transactional ids.
//!
//! A transaction is finished by one task at a time (`finishing`), so the clock and a request
//! never write its markers twice at once; a request that finds the clock finishing the end it
//! just made durable waits for it, and answers as it ended. A finish that fails part way leaves the transaction in
//! Prepare*, and the clock tries again: markers already written are written again, which a
//! partition takes as a no-op for the transaction (it is already ended there).

use minibroker_broker::{Broker, BrokerError, ErrorKind, ServerError, Unacknowledged};
use minibroker_groups::GroupCoordinator;
use minibroker_records::now_millis;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::Notify;

use crate::openers::Openers;
use crate::{
    ConnectionNumber, CoordinatorError, InitOutcome, Transaction, TransactionConfig,
    TransactionCoordinator, TxnError, TxnState,
};

/// How often the clock looks for timed-out transactions and unfinished ends.
const TICK: Duration = Duration::from_millis(200);

/// Why an AddPartitionsToTxn was refused.
#[derive(Debug, Error)]
pub enum AddPartitionsError {
    /// Partitions that do not exist; nothing was added.
    #[error("unknown topic or partition: {0:?}")]
    Unknown(Vec<(String, u32)>),
    /// The coordinator refused the add.
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
}

/// Why a TxnOffsetCommit was refused.
#[derive(Debug, Error)]
pub enum OffsetCommitError {
    /// The producer's transaction does not allow it.
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
    /// The group refused it.
    #[error(transparent)]
    Group(#[from] minibroker_groups::GroupError),
}

/// How many transactions ended, and how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransactionCounts {
    /// Transactions whose COMMIT markers were written.
    pub committed: u64,
    /// Transactions whose ABORT markers were written (timeouts and fences included).
    pub aborted: u64,
    /// Transactions the clock aborted at their timeout.
    pub timed_out: u64,
}

/// The coordinator, the partitions and groups it ends transactions in, and its clock; see the
/// module docs.
#[derive(Debug)]
pub struct TransactionService {
    coordinator: TransactionCoordinator,
    broker: Arc<Broker>,
    groups: Arc<GroupCoordinator>,
    /// Transactional ids whose end is being written now.
    finishing: Mutex<HashSet<String>>,
    /// Told when a task stops finishing an id.
    finished: Notify,
    committed: AtomicU64,
    aborted: AtomicU64,
    timed_out: AtomicU64,
    /// How often idle ids are looked for (the broker's `maintenance_interval_ms`).
    expiry_interval: Duration,
    /// Which connection began each open transaction, to tell a late EndTxn.
    openers: Openers,
}

/// A transactional id's end, claimed by one task until dropped.
struct Finishing<'a> {
    service: &'a TransactionService,
    id: String,
}

impl Drop for Finishing<'_> {
    fn drop(&mut self) {
        self.service.finishing().remove(&self.id);
        self.service.finished.notify_waiters();
    }
}

/// Whether [`TransactionService::finish_by_id`] waits for another task finishing the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Yes,
    No,
}

impl TransactionService {
    /// The service of `broker` and `groups`: its transaction log in the broker's data directory
    /// (in memory without one), and every open transaction's partitions told again to expect its
    /// batches (they forget that across a restart).
    ///
    /// # Errors
    /// [`ServerError::Config`] for bounds that make no sense; [`ServerError::DataDir`] when the
    /// transaction log cannot be read.
    pub fn for_broker(
        broker: Arc<Broker>,
        groups: Arc<GroupCoordinator>,
        config: &TransactionConfig,
    ) -> Result<Self, ServerError> {
        config.validate()?;
        let coordinator = match broker.data_dir() {
            Some(data) => TransactionCoordinator::open(
                config.limits(),
                Arc::clone(data.storage()),
                data.root(),
            )
            .map_err(|error| {
                ServerError::data_dir(
                    data.root().join(crate::FILE_NAME),
                    minibroker_broker::DataDirProblem::Content(error.to_string()),
                )
            })?,
            None => TransactionCoordinator::in_memory(config.limits()),
        }
        .charged_to(Arc::clone(broker.budget()));
        let service = Self {
            coordinator,
            expiry_interval: Duration::from_millis(broker.config().maintenance_interval_ms),
            broker,
            groups,
            finishing: Mutex::default(),
            finished: Notify::new(),
            committed: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            openers: Openers::default(),
        };
        for txn in service.coordinator.all() {
            if txn.state() == TxnState::Ongoing {
                service.expect_batches(&txn, txn.partitions().cloned());
            }
            if txn.state().is_preparing() {
                // The clock's first tick writes its markers.
                tracing::info!(
                    transactional_id = txn.transactional_id(),
                    state = txn.state().name(),
                    "a transaction decided before the restart is to be finished"
                );
            }
        }
        Ok(service)
    }

    /// The number of a client connection just opened: each transactional request names the
    /// connection it came on.
    pub fn open_connection(&self) -> ConnectionNumber {
        self.openers.open_connection()
    }

    /// The coordinator, for what only reads it (describe, list, metrics).
    #[must_use]
    pub fn coordinator(&self) -> &TransactionCoordinator {
        &self.coordinator
    }

    /// How many transactions ended, and how.
    #[must_use]
    pub fn counts(&self) -> TransactionCounts {
        TransactionCounts {
            committed: self.committed.load(Ordering::Relaxed),
            aborted: self.aborted.load(Ordering::Relaxed),
            timed_out: self.timed_out.load(Ordering::Relaxed),
        }
    }

    /// How many transactions are open or being ended now.
    #[must_use]
    pub fn open_count(&self) -> usize {
        self.coordinator
            .count_where(|txn| txn.state() == TxnState::Ongoing || txn.state().is_preparing())
    }

    fn finishing(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.finishing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims `id`'s end for this task; `None` while another task writes it.
    fn claim(&self, id: &str) -> Option<Finishing<'_>> {
        self.finishing().insert(id.to_owned()).then(|| Finishing {
            service: self,
            id: id.to_owned(),
        })
    }

    /// InitProducerId with transactional id `id`: the producer id and the epoch that fences every
    /// older instance. An older instance's open transaction is aborted first (its markers carry
    /// the bumped epoch), so the new instance starts clean.
    ///
    /// # Errors
    /// As [`TransactionCoordinator::init_producer`]; [`TxnError::ConcurrentTransactions`] while
    /// the id's end is being written (the client asks again).
    pub async fn init_producer(
        &self,
        id: &str,
        expected: Option<(i64, i16)>,
        timeout_ms: u64,
    ) -> Result<(i64, i16), CoordinatorError> {
        // In a cluster the id comes from the cluster's sequence, asked before the id's turn
        // (it goes unused when the transactional id keeps its producer id).
        let spare = self.spare_producer_id(true).await?;
        let issue = || self.issue(spare);
        match self
            .coordinator
            .init_producer(id, expected, timeout_ms, issue, now_millis())
            .await?
        {
            InitOutcome::Ready { producer_id, epoch } => return Ok((producer_id, epoch)),
            InitOutcome::Fenced { epoch } => {
                tracing::info!(transactional_id = id, epoch, "fenced an older instance");
            }
        }
        // The older instance's transaction is PrepareAbort now: end it, then init again (the
        // expected pair was checked against the instance just fenced).
        if !self.finish_by_id(id, Wait::Yes).await {
            return Err(TxnError::ConcurrentTransactions.into());
        }
        let spare = self.spare_producer_id(true).await?;
        let issue = || self.issue(spare);
        match self
            .coordinator
            .init_producer(id, None, timeout_ms, issue, now_millis())
            .await?
        {
            InitOutcome::Ready { producer_id, epoch } => Ok((producer_id, epoch)),
            InitOutcome::Fenced { .. } => Err(TxnError::ConcurrentTransactions.into()),
        }
    }

    /// In a cluster, a producer id from the cluster's sequence when `wanted`, for
    /// [`Self::issue`]; `None` on a broker of its own (its broker issues them).
    async fn spare_producer_id(&self, wanted: bool) -> Result<Option<i64>, CoordinatorError> {
        match self.coordinator.shared() {
            Some(shared) if wanted => Ok(Some(shared.issue_producer_id().await?)),
            _ => Ok(None),
        }
    }

    /// A new producer id: `spare` in a cluster, else one of the broker's.
    fn issue(&self, spare: Option<i64>) -> Result<i64, BrokerError> {
        match spare {
            Some(producer_id) => Ok(producer_id),
            None => self
                .broker
                .init_producer(None)
                .map(|issued| issued.producer_id),
        }
    }

    /// AddPartitionsToTxn: the partitions join `id`'s transaction (durably), then each expects
    /// the producer's transactional batches.
    ///
    /// # Errors
    /// [`AddPartitionsError::Unknown`] when a partition does not exist (nothing is added);
    /// the coordinator's refusals.
    pub async fn add_partitions(
        &self,
        (id, producer_id, epoch): (&str, i64, i16),
        partitions: &[(String, u32)],
        via: ConnectionNumber,
    ) -> Result<(), AddPartitionsError> {
        let unknown: Vec<(String, u32)> = partitions
            .iter()
            .filter(|(topic, partition)| {
                !self
                    .broker
                    .topic(topic, false)
                    .is_ok_and(|found| *partition < found.partitions)
            })
            .cloned()
            .collect();
        if !unknown.is_empty() {
            return Err(AddPartitionsError::Unknown(unknown));
        }
        self.coordinator
            .add_partitions(id, producer_id, epoch, partitions, now_millis())
            .await?;
        if let Some(txn) = self.coordinator.describe(id) {
            self.openers.added(&txn, via);
            // In a cluster the partitions' expectation is the database's.
            if self.coordinator.shared().is_none() {
                self.expect_batches(&txn, partitions.iter().cloned());
            }
        }
        Ok(())
    }

    /// Tells `partitions` to expect the transactional batches of `txn`'s producer at its epoch.
    fn expect_batches(&self, txn: &Transaction, partitions: impl Iterator<Item = (String, u32)>) {
        for (topic, partition) in partitions {
            let expected =
                self.broker
                    .add_to_transaction(&topic, partition, txn.producer_id(), txn.epoch());
            if let Err(error) = expected {
                // Deleted since it was added: no batch can go there.
                tracing::debug!(topic, partition, %error, "a transaction's partition is gone");
            }
        }
    }

    /// AddOffsetsToTxn: `group`'s offsets join `id`'s transaction.
    ///
    /// # Errors
    /// The coordinator's refusals.
    pub async fn add_offsets(
        &self,
        (id, producer_id, epoch): (&str, i64, i16),
        group: &str,
        via: ConnectionNumber,
    ) -> Result<(), CoordinatorError> {
        self.coordinator
            .add_group(id, producer_id, epoch, group, now_millis())
            .await?;
        if let Some(txn) = self.coordinator.describe(id) {
            self.openers.added(&txn, via);
        }
        Ok(())
    }

    /// TxnOffsetCommit: offsets `group` will show once `id`'s transaction commits. The producer
    /// must be current and its transaction must have added the group.
    ///
    /// # Errors
    /// [`OffsetCommitError::Coordinator`] for a producer or transaction that does not allow it;
    /// the group's refusals.
    pub async fn commit_offsets(
        &self,
        (id, producer_id, epoch): (&str, i64, i16),
        group: &str,
        member: (i32, &str),
        offsets: Vec<(String, i32, i64, Option<String>)>,
    ) -> Result<(), OffsetCommitError> {
        if self.coordinator.shared().is_some() {
            // In a cluster this broker may be the group's coordinator and not the
            // transaction's: the database checks the transaction, with the offsets kept.
            self.groups
                .commit_in_shared_transaction(group, (id, producer_id, epoch), member, offsets)
                .await?;
            return Ok(());
        }
        let check = || {
            self.coordinator
                .check_offsets_commit(id, producer_id, epoch, group)
        };
        // Refused at once when it can be; asked again under the group's lock, where it counts.
        check()?;
        self.groups
            .commit_in_transaction_if(group, producer_id, member, offsets, check)
            .await??;
        Ok(())
    }

    /// EndTxn on connection `via`: commit (`commit`) or abort `id`'s transaction, its markers
    /// written and its groups' offsets settled before this returns, bumping the producer's epoch
    /// if `bump` (EndTxn v5, KIP-890 part 2). A retry of an end already complete is answered as
    /// it was. Returns the producer id and epoch the producer goes on with.
    ///
    /// # Errors
    /// The coordinator's refusals; [`TxnError::LateEnd`], for an end that keeps the epoch, from
    /// a connection opened before the one that began the open transaction (a delayed end of an
    /// earlier one, see `openers`);
    /// [`TxnError::ConcurrentTransactions`] when the end could not be written in full yet (the
    /// clock goes on with it; the client asks again).
    pub async fn end(
        &self,
        (id, producer_id, epoch): (&str, i64, i16),
        (commit, bump): (bool, bool),
        via: ConnectionNumber,
    ) -> Result<(i64, i16), CoordinatorError> {
        // An end that bumps the epoch needs no such guess: a late copy of it is fenced. (Its
        // client may also have begun the transaction on another connection, its Produce v12's.)
        let open = if bump {
            None
        } else {
            self.coordinator.describe(id)
        };
        if open.is_some_and(|txn| {
            (txn.producer_id(), txn.epoch()) == (producer_id, epoch)
                && self.openers.is_late_end(&txn, via)
        }) {
            return Err(TxnError::LateEnd.into());
        }
        let spare = self.spare_producer_id(bump).await?;
        let issue = || self.issue(spare);
        let prepared = self
            .coordinator
            .end(
                id,
                (producer_id, epoch),
                (commit, bump),
                issue,
                now_millis(),
            )
            .await?;
        self.openers.ended(id);
        if prepared.is_some() && self.coordinator.shared().is_some() {
            // Ended in the database already, markers and offsets with it.
            self.count_end(commit);
        }
        if prepared.is_some() && !self.finish_by_id(id, Wait::Yes).await {
            return Err(TxnError::ConcurrentTransactions.into());
        }
        let txn = self
            .coordinator
            .describe(id)
            .ok_or_else(|| CoordinatorError::UnknownTransactionalId(id.to_owned()))?;
        Ok((txn.producer_id(), txn.epoch()))
    }

    /// Finishes `id`'s Prepare* state; returns whether it is complete now. While another task
    /// finishes it, a request waits for that task and looks again (the clock may have found
    /// the state a request just made durable before the request came back to finish it), and
    /// the clock (`Wait::No`) leaves it to that task.
    async fn finish_by_id(&self, id: &str, wait: Wait) -> bool {
        loop {
            let finished = self.finished.notified();
            tokio::pin!(finished);
            // Registered before the claim is tried, so a release in between is not missed.
            finished.as_mut().enable();
            let Some(_claim) = self.claim(id) else {
                if wait == Wait::No {
                    return false;
                }
                finished.await;
                continue;
            };
            // Read under the claim: a task that finished it before has left it complete.
            return match self.coordinator.describe(id) {
                Some(txn) if txn.state().is_preparing() => self.finish(&txn).await,
                Some(_) => true,
                None => false,
            };
        }
    }

    /// Writes `txn`'s markers and settles its groups, then completes it; returns whether all of
    /// it was done. The caller holds its claim.
    async fn finish(&self, txn: &Transaction) -> bool {
        let commit = txn.state() == TxnState::PrepareCommit;
        let (id, producer_id, epoch) = (txn.transactional_id(), txn.producer_id(), txn.epoch());
        // One line per transaction end: debug (a failure warns below).
        tracing::debug!(
            transactional_id = id,
            state = txn.state().name(),
            partitions = txn.partitions().count(),
            "writing a transaction's markers"
        );
        let mut unacknowledged = Unacknowledged::default();
        let mut done = true;
        for (topic, partition) in txn.partitions() {
            let written = self.broker.write_marker(
                &mut unacknowledged,
                topic,
                *partition,
                producer_id,
                epoch,
                commit,
            );
            if let Err(error) = written {
                done &= Self::marker_needless(&error);
                tracing::warn!(transactional_id = id, topic, partition, %error, "a transaction marker was not written");
            }
        }
        if let Err(error) = unacknowledged.commit().await {
            tracing::warn!(transactional_id = id, %error, "transaction markers were not stored");
            done = false;
        }
        for group in txn.groups() {
            if let Err(error) = self
                .groups
                .end_transaction(group, producer_id, commit)
                .await
            {
                tracing::warn!(transactional_id = id, group, %error, "a transaction's offsets were not settled");
                done = false;
            }
        }
        if !done {
            return false;
        }
        if let Err(error) = self.coordinator.complete(id, now_millis()).await {
            tracing::warn!(transactional_id = id, %error, "a transaction was not completed");
            return false;
        }
        self.count_end(commit);
        tracing::debug!(transactional_id = id, commit, "transaction ended");
        true
    }

    /// Counts a transaction ended with its markers.
    fn count_end(&self, commit: bool) {
        let counter = if commit {
            &self.committed
        } else {
            &self.aborted
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a marker refused with `error` needs no retry: its partition is gone, or a newer
    /// epoch already ended the producer's transaction there.
    fn marker_needless(error: &BrokerError) -> bool {
        matches!(
            error.kind(),
            ErrorKind::UnknownTopic | ErrorKind::PartitionOutOfRange | ErrorKind::ProducerFenced
        )
    }

    /// One pass of the clock at `now`: aborts the transactions open past their timeout and
    /// finishes every Prepare* no task is finishing.
    pub async fn tick(&self, now: i64) {
        if let Some(shared) = self.coordinator.shared() {
            // In a cluster, the transactions whose coordinator died are this broker's to abort.
            match shared.orphaned(now).await {
                Ok(orphans) => {
                    for id in orphans {
                        if let Err(error) = self.coordinator.take_over(&id).await {
                            tracing::debug!(transactional_id = id, %error, "an orphaned transaction was not taken over");
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "could not look for orphaned transactions"),
            }
        }
        match self.coordinator.fence_timed_out(now).await {
            Ok(fenced) => {
                if self.coordinator.shared().is_some() {
                    // Ended in the database already.
                    for _ in &fenced {
                        self.count_end(false);
                    }
                }
                for txn in &fenced {
                    tracing::info!(
                        transactional_id = txn.transactional_id(),
                        epoch = txn.epoch(),
                        "aborting a transaction past its timeout"
                    );
                }
                self.timed_out
                    .fetch_add(fenced.len() as u64, Ordering::Relaxed);
            }
            Err(error) => tracing::warn!(%error, "could not abort timed-out transactions"),
        }
        for id in self.coordinator.ids_where(|txn| txn.state().is_preparing()) {
            self.finish_by_id(&id, Wait::No).await;
        }
    }

    /// The clock, for as long as the returned future runs (the host spawns it, and drops it at
    /// shutdown): [`Self::tick`] five times a second, and idle ids forgotten every
    /// `maintenance_interval_ms`.
    pub async fn run(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_expiry = tokio::time::Instant::now();
        loop {
            ticks.tick().await;
            self.tick(now_millis()).await;
            if last_expiry.elapsed() >= self.expiry_interval {
                last_expiry = tokio::time::Instant::now();
                match self.coordinator.expire(now_millis()).await {
                    Ok(0) => {}
                    Ok(forgotten) => tracing::info!(forgotten, "forgot idle transactional ids"),
                    Err(error) => tracing::warn!(%error, "could not forget idle transactional ids"),
                }
                // Transactions ended by a timeout or a fence need their beginning no more.
                self.openers.keep_only(|id| {
                    self.coordinator
                        .describe(id)
                        .is_some_and(|txn| txn.state() == TxnState::Ongoing)
                });
            }
        }
    }
}
