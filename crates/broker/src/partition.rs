//! [`Partition`]: one partition of a topic — its log behind its own lock, the group commit of its
//! fsyncs, its one [`Health`], what wakes fetches waiting for its next append, and its traffic
//! counters.
//!
//! Health is the log's own state (`minibroker_log::Health`), shared by the log, its background
//! syncs and this partition: the first failed write or sync makes the partition read-only for
//! good, whichever of them saw it, and every later produce is refused with the reason. A failed
//! fsync is never retried: after one the kernel may have dropped the dirty pages, so a retry
//! that succeeds would prove nothing.

use minibroker_log::{Health, LogError, PartitionLog, SyncPoint};
use minibroker_state::{PartitionId, PartitionTransactions};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::BrokerError;
use crate::group_commit::{GroupCommit, NextStep};
use crate::signal::AppendSignal;
use crate::stats::{HistogramSnapshot, PartitionStats};

/// One partition: its broker-wide id and its log.
#[derive(Debug)]
pub struct Partition {
    /// Broker-wide partition id, used as the key of producer state.
    pub id: PartitionId,
    data: Mutex<PartitionData>,
    /// Whether the partition still takes writes (shared with its log).
    health: Health,
    /// Group commit of the `always` policy's fsyncs.
    commit: GroupCommit,
    /// Woken after every append, for fetches waiting for data.
    pub appended: Arc<AppendSignal>,
    /// Traffic counters, for the metrics.
    pub stats: PartitionStats,
    /// Whether a compaction pass runs on it.
    cleaning: std::sync::atomic::AtomicBool,
}

/// A compaction pass's hold on its partition ([`Partition::start_cleaning`]), let go when
/// dropped.
#[derive(Debug)]
pub(crate) struct Cleaning<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Cleaning<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// What a partition's lock guards.
#[derive(Debug, Default)]
pub struct PartitionData {
    /// The partition's records.
    pub log: PartitionLog,
    /// Bytes of the broker's storage limit this partition has reserved and not yet used; see
    /// `Broker::append`.
    pub allowance: u64,
    /// Bytes this partition has charged to the storage limit for what it holds.
    pub held: u64,
    /// Its open and aborted transactions, changed only with its log.
    pub transactions: PartitionTransactions,
    /// The earliest delete horizon of the tombstones the last compaction pass kept (a pass is
    /// due for them then); not kept across a restart, where the next pass finds them again.
    pub delete_horizon: Option<i64>,
}

impl Partition {
    /// Partition `id` holding `log`.
    pub(crate) fn new(id: PartitionId, log: PartitionLog) -> Self {
        Self {
            id,
            health: log.health(),
            data: Mutex::new(PartitionData {
                log,
                ..PartitionData::default()
            }),
            commit: GroupCommit::default(),
            appended: Arc::new(AppendSignal::default()),
            stats: PartitionStats::default(),
            cleaning: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The partition's one compaction pass, or `None` while another runs.
    pub(crate) fn start_cleaning(&self) -> Option<Cleaning<'_>> {
        use std::sync::atomic::Ordering;
        self.cleaning
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Cleaning(&self.cleaning))
    }

    /// Locks the partition's log. Appends happen under the state shard lock, then this one;
    /// reads take only this one.
    pub fn log(&self) -> MutexGuard<'_, PartitionData> {
        // An append either completes or leaves the log unchanged, so a poisoned lock still
        // guards a consistent log.
        self.data.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `read` on the log under its lock (a durable log writes its pending batches first).
    ///
    /// # Errors
    /// What the log refused the read with.
    pub fn read<T>(
        &self,
        read: impl FnOnce(&mut PartitionLog) -> Result<T, LogError>,
    ) -> Result<T, BrokerError> {
        Ok(read(&mut self.log().log)?)
    }

    /// Retires the partition of a deleted topic: once file work outside its lock has finished,
    /// it takes no more writes and touches no file (see `minibroker_log::Health`).
    pub(crate) fn retire(&self) {
        self.health.retire();
    }

    /// Whether its topic was deleted ([`Self::retire`]).
    #[must_use]
    pub fn is_deleted(&self) -> bool {
        self.health.is_deleted()
    }

    /// Whether the partition stopped taking writes after a storage error.
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.health.is_failed()
    }

    /// Refuses a write to a read-only partition, with its first failure.
    ///
    /// # Errors
    /// [`BrokerError::ReadOnly`] once a write or sync of the partition failed.
    pub fn refuse_if_read_only(&self) -> Result<(), BrokerError> {
        match self.health.failure() {
            // Deleted after a failed write: the topic is gone, whatever failed first.
            Some(_) if self.health.is_deleted() => Err(LogError::Deleted.into()),
            Some(first) => Err(BrokerError::ReadOnly(Arc::clone(first))),
            None => Ok(()),
        }
    }

    /// Writes the batches appended and not yet written (one `write(2)`).
    ///
    /// # Errors
    /// A storage error when the write fails, or failed earlier (another connection's write took
    /// these batches with it): the partition is read-only, and what waited is not stored.
    pub fn write_pending(&self) -> Result<(), BrokerError> {
        self.log().log.write_pending()?;
        self.refuse_if_read_only()
    }

    /// Waits until every offset below `through` is durable, leading a sync if none is running
    /// (see `crate::group_commit`).
    ///
    /// # Errors
    /// A storage error when the partition is read-only or the sync fails.
    pub async fn wait_durable(&self, through: i64) -> Result<(), BrokerError> {
        loop {
            self.refuse_if_read_only()?;
            let waiting = self.commit.notified();
            tokio::pin!(waiting);
            let leading = match self.commit.next_step(through, waiting.as_mut()) {
                NextStep::Done => return Ok(()),
                NextStep::Wait => {
                    waiting.await;
                    continue;
                }
                NextStep::Lead(leading) => leading,
            };
            let Some(point) = self.sync_point() else {
                // In memory, nothing to sync; or writing the pending batches failed.
                drop(leading);
                return self.refuse_if_read_only();
            };
            if point.through < through {
                // No sync can cover it: the verdict would acknowledge an offset the log does
                // not hold. Refused, never waited for (a wait would spin on syncs forever).
                drop(leading);
                return Err(BrokerError::Log(LogError::Damaged(format!(
                    "an answer waits for offset {} to be synced, but the log ends at {}",
                    through - 1,
                    point.through
                ))));
            }
            let file = point.file;
            let started = Instant::now();
            let synced = tokio::task::spawn_blocking(move || file.sync())
                .await
                .unwrap_or_else(|error| Err(std::io::Error::other(error)));
            self.finish_sync(point.through, started.elapsed(), synced);
            drop(leading);
        }
    }

    /// Syncs the partition now, on this thread (clean shutdown, the interval flush): outside
    /// the `always` policy's group commit, but counted with its syncs.
    pub fn sync_now(&self) {
        let Some(point) = self.sync_point() else {
            return;
        };
        let started = Instant::now();
        let synced = point.file.sync();
        self.finish_sync(point.through, started.elapsed(), synced);
    }

    /// What a sync must cover (pending batches written first); `None` in memory, or when that
    /// write failed and made the partition read-only.
    fn sync_point(&self) -> Option<SyncPoint> {
        self.log().log.durable()?.sync_point().ok()
    }

    /// Records a sync covering offsets below `through`: its latency, and then the new durable
    /// point or, when it failed, the partition read-only.
    fn finish_sync(&self, through: i64, elapsed: Duration, synced: std::io::Result<()>) {
        match synced {
            Ok(()) => self.commit.record(elapsed, Some(through)),
            Err(error) => {
                self.commit.record(elapsed, None);
                if let Some(log) = self.log().log.durable() {
                    let failure = LogError::storage("syncing a segment (fsync)", log.dir(), error);
                    log.set_failed(failure);
                }
            }
        }
    }

    /// How many syncs of the partition succeeded.
    #[must_use]
    pub fn sync_count(&self) -> u64 {
        self.commit.sync_count()
    }

    /// How long its syncs took.
    #[must_use]
    pub fn sync_latency(&self) -> HistogramSnapshot {
        self.commit.latency()
    }
}
