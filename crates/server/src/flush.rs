//! Group commit: produces waiting for the fsync that covers their batch share one fsync.
//!
//! With the `always` flush policy a produce is acknowledged only once its bytes are synced. The
//! batch is appended (and its offset fixed) under the partition's locks; then, with no lock held,
//! the request waits here. The first waiter to find no sync running becomes the leader: it takes
//! the partition's sync point (the active segment and the offset it covers up to), syncs it on
//! a blocking thread, and wakes everyone. Whoever was appended meanwhile is covered by the next
//! sync, which one of them leads; so while one fsync runs, every produce that arrives queues for
//! the next, and one fsync acknowledges them all.
//!
//! A failed fsync is never retried: the partition is marked read-only and every waiter, and every
//! later produce, gets a storage error (after a failed fsync the kernel may have dropped the
//! dirty pages, so a retry that succeeds would prove nothing).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use minibroker_log::{DurableLog, LogError, SyncPoint};

use crate::BrokerError;
use crate::topics::Partition;

/// One partition's group-commit state.
#[derive(Debug)]
pub struct FlushGate {
    state: Mutex<GateState>,
    synced: Notify,
    /// Set once a write or sync of the partition failed: it takes no more produces.
    read_only: AtomicBool,
    /// Syncs done for the partition's produces, shutdown and interval flushes.
    syncs: AtomicU64,
    /// How long those syncs took.
    pub latency: crate::stats::LatencyHistogram,
}

#[derive(Debug, Default)]
struct GateState {
    /// Every offset below this is durable.
    synced_through: i64,
    /// A leader is syncing.
    syncing: bool,
}

impl Default for FlushGate {
    fn default() -> Self {
        Self {
            state: Mutex::new(GateState::default()),
            synced: Notify::new(),
            read_only: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
            latency: crate::stats::LatencyHistogram::default(),
        }
    }
}

/// Resets `syncing` however the leader's sync ends, including its future being dropped (a
/// connection closed mid-request), so the next waiter can lead.
struct Leading<'a>(&'a FlushGate);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.0.state().syncing = false;
        self.0.synced.notify_waiters();
    }
}

impl FlushGate {
    fn state(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the partition stopped taking writes after a storage error.
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire)
    }

    /// Marks the partition read-only.
    pub fn set_read_only(&self) {
        self.read_only.store(true, Ordering::Release);
    }

    /// How many syncs of the partition were done.
    pub fn sync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Records that every offset below `through` is durable (after a sync).
    pub fn synced(&self, through: i64) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        state.synced_through = state.synced_through.max(through);
    }

    /// Waits until every offset of `partition` below `through` is durable, leading a sync if
    /// none is running.
    ///
    /// # Errors
    /// [`BrokerError::Storage`] when the partition is read-only or the sync fails.
    pub async fn wait_durable(
        &self,
        partition: &Partition,
        through: i64,
    ) -> Result<(), BrokerError> {
        loop {
            if self.is_read_only() {
                return Err(read_only(partition));
            }
            let waiting = self.synced.notified();
            tokio::pin!(waiting);
            match self.next_step(through, waiting.as_mut()) {
                Step::Done => return Ok(()),
                Step::Wait => {
                    waiting.await;
                    continue;
                }
                Step::Lead => {}
            }
            let leading = Leading(self);
            let Some(point) = sync_point(partition) else {
                // In memory, nothing to sync; or writing the pending batches failed.
                drop(leading);
                if self.is_read_only() {
                    return Err(read_only(partition));
                }
                return Ok(());
            };
            let file = point.file;
            let started = std::time::Instant::now();
            let synced = tokio::task::spawn_blocking(move || file.sync())
                .await
                .unwrap_or_else(|error| Err(std::io::Error::other(error.to_string())));
            self.finish_sync(partition, point.through, started, synced);
            drop(leading);
        }
    }

    /// Records a sync of `partition` started at `started` covering offsets below `through`:
    /// its latency, and then the new durable point or, when it failed, read-only.
    pub(crate) fn finish_sync(
        &self,
        partition: &Partition,
        through: i64,
        started: std::time::Instant,
        synced: std::io::Result<()>,
    ) {
        self.latency.record(started.elapsed());
        match synced {
            Ok(()) => self.synced(through),
            Err(error) => {
                tracing::error!(%error, "fsync failed; the partition is read-only from now on");
                if let Some(log) = partition.log().log.durable() {
                    log.set_failed(format!("fsync failed: {error}"));
                }
                self.set_read_only();
            }
        }
    }
}

/// What a sync of `partition` must cover (its pending batches written first); `None` for an
/// in-memory partition, or when that write failed and made the partition read-only.
pub(crate) fn sync_point(partition: &Partition) -> Option<SyncPoint> {
    let point = partition.log().log.durable().map(DurableLog::sync_point)?;
    match point {
        Ok(point) => Some(point),
        Err(error) => {
            storage_failed(partition, &error);
            None
        }
    }
}

/// Marks `partition` read-only after `error` when its log says a write or sync failed (a failed
/// read alone does not). Call it with the partition's lock released.
pub(crate) fn storage_failed(partition: &Partition, error: &LogError) {
    let failed = partition
        .log()
        .log
        .as_durable()
        .is_some_and(|log| log.failure().is_some());
    if failed && !partition.flush.is_read_only() {
        tracing::error!(%error, "a write failed; the partition is read-only from now on");
        partition.flush.set_read_only();
    }
}

/// What a waiter does next.
enum Step {
    Done,
    Wait,
    Lead,
}

impl FlushGate {
    /// Decides under the state lock: done, wait for the running sync (registered on `waiting`
    /// before the lock is released, so the leader's wake-up, which takes the lock first, cannot
    /// be missed), or lead the next sync.
    fn next_step(&self, through: i64, waiting: std::pin::Pin<&mut Notified<'_>>) -> Step {
        let mut state = self.state();
        if state.synced_through >= through {
            Step::Done
        } else if state.syncing {
            waiting.enable();
            Step::Wait
        } else {
            state.syncing = true;
            Step::Lead
        }
    }
}

/// The error for a produce to a read-only partition.
pub(crate) fn read_only(partition: &Partition) -> BrokerError {
    let reason = partition
        .log()
        .log
        .durable()
        .and_then(|log| log.failure().map(str::to_owned))
        .unwrap_or_else(|| "a write or sync failed".to_owned());
    BrokerError::Storage(format!(
        "the partition is read-only after a storage error ({reason}); restart the broker once the disk is fixed"
    ))
}
