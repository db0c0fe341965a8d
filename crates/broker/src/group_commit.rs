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
//! This module holds only the bookkeeping (what is synced, who leads, who waits);
//! `Partition::wait_durable` drives it with the partition's log.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use crate::stats::{HistogramSnapshot, LatencyHistogram};

/// One partition's group-commit state.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    state: Mutex<CommitState>,
    synced: Notify,
    /// Syncs done for the partition's produces, shutdown and interval flushes.
    syncs: AtomicU64,
    /// How long those syncs took.
    latency: LatencyHistogram,
}

#[derive(Debug, Default)]
struct CommitState {
    /// Every offset below this is durable.
    synced_through: i64,
    /// A leader is syncing.
    syncing: bool,
}

/// Resets `syncing` however the leader's sync ends, including its future being dropped (a
/// connection closed mid-request), so the next waiter can lead.
pub(crate) struct Leading<'a>(&'a GroupCommit);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.0.state().syncing = false;
        self.0.synced.notify_waiters();
    }
}

impl GroupCommit {
    fn state(&self) -> MutexGuard<'_, CommitState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A wait for the end of the running sync, to register with [`Self::next_step`].
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.synced.notified()
    }

    /// Decides under the state lock: done, wait for the running sync (registered on `waiting`
    /// before the lock is released, so the leader's wake-up, which takes the lock first, cannot
    /// be missed), or lead the next sync.
    pub(crate) fn next_step(&self, through: i64, waiting: Pin<&mut Notified<'_>>) -> NextStep<'_> {
        let mut state = self.state();
        if state.synced_through >= through {
            NextStep::Done
        } else if state.syncing {
            waiting.enable();
            NextStep::Wait
        } else {
            state.syncing = true;
            NextStep::Lead(Leading(self))
        }
    }

    /// Records a sync that took `elapsed`, and, when it succeeded, that every offset below
    /// `through` is durable.
    pub(crate) fn record(&self, elapsed: Duration, synced_through: Option<i64>) {
        self.latency.record(elapsed);
        if let Some(through) = synced_through {
            self.syncs.fetch_add(1, Ordering::Relaxed);
            let mut state = self.state();
            state.synced_through = state.synced_through.max(through);
        }
    }

    /// How many syncs succeeded.
    pub(crate) fn sync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// How long the syncs took.
    pub(crate) fn latency(&self) -> HistogramSnapshot {
        self.latency.snapshot()
    }
}

/// What [`GroupCommit::next_step`] decided.
pub(crate) enum NextStep<'a> {
    /// What the waiter waits for is durable.
    Done,
    /// Another waiter's sync runs: wait for it, then look again.
    Wait,
    /// Lead the next sync; the guard hands the lead on when dropped.
    Lead(Leading<'a>),
}
