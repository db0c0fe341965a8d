//! [`Health`]: whether a partition's files still take writes — one state, shared by the log, its
//! background syncs and the broker's partition, so that they can never disagree.
//!
//! The first failed write or sync fails it for good, with its reason: after a failed fsync the
//! kernel may have dropped the dirty pages, so a later sync that succeeds would prove nothing.
//! Reading it is one atomic load, cheap enough for every produce.
//!
//! A deleted topic's partitions are retired through the same state ([`Health::retire`]): a
//! connection or a background pass still holding the partition must never write into the
//! directory a topic re-created under the same name now owns. Work on the files that runs
//! outside the partition's lock (a compaction pass, a snapshot) holds [`Health::files`] while it
//! touches them, so the retirement waits for it and everything after finds the files gone.

use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard};

use crate::LogError;

/// A partition's health; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<State>);

#[derive(Debug, Default)]
struct State {
    failure: OnceLock<Arc<LogError>>,
    /// Whether the partition was deleted; held for reading by file work outside the lock.
    retired: RwLock<bool>,
}

/// The partition's files held against deletion ([`Health::files`]), let go when dropped.
pub type FilesHeld<'a> = RwLockReadGuard<'a, bool>;

impl Health {
    /// Fails it with `error` (logged the first time); a later failure keeps the first.
    pub fn fail(&self, error: LogError) {
        let deleted = matches!(error, LogError::Deleted);
        if let Err(later) = self.0.failure.set(Arc::new(error)) {
            tracing::debug!(error = %later, "another storage error on a read-only partition");
        } else if let Some(error) = self.failure()
            && !deleted
        {
            tracing::error!(%error, "a write or sync failed; the partition is read-only from now on");
        }
    }

    /// Retires a deleted partition: waits for file work outside the lock to finish, then
    /// refuses every later write ([`LogError::Deleted`]) and every later [`Self::files`].
    pub fn retire(&self) {
        let mut retired = self
            .0
            .retired
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *retired = true;
        self.fail(LogError::Deleted);
    }

    /// Holds the partition's files against its deletion while work outside the partition's
    /// lock touches them; `None` once it is deleted (the directory may be another topic's now).
    #[must_use]
    pub fn files(&self) -> Option<FilesHeld<'_>> {
        let held = self
            .0
            .retired
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        (!*held).then_some(held)
    }

    /// Whether the partition was retired ([`Self::retire`]). Not read from the failure: a
    /// partition a failed write made read-only keeps that first failure when it is retired.
    #[must_use]
    pub fn is_deleted(&self) -> bool {
        *self
            .0
            .retired
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The failure that made it read-only, if one did.
    #[must_use]
    pub fn failure(&self) -> Option<&Arc<LogError>> {
        self.0.failure.get()
    }

    /// Whether a write or sync failed.
    #[must_use]
    pub fn is_failed(&self) -> bool {
        self.0.failure.get().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_kept_and_seen_by_every_clone() {
        let health = Health::default();
        let shared = health.clone();
        assert!(!shared.is_failed());
        let failure = |what: &str| LogError::storage(what, "/p", std::io::Error::other("disk"));
        health.fail(failure("syncing a segment"));
        health.fail(failure("writing batches"));
        let first = shared.failure().expect("failed").to_string();
        assert!(first.contains("syncing a segment"), "{first}");
    }

    #[test]
    fn a_read_only_partition_retired_is_deleted_and_its_files_are_no_longer_held() {
        let health = Health::default();
        assert!(health.files().is_some());
        health.fail(LogError::storage(
            "writing",
            "/p",
            std::io::Error::other("disk"),
        ));
        assert!(!health.is_deleted());
        health.retire();
        assert!(health.is_deleted(), "though its first failure is kept");
        assert!(!health.failure().expect("failed").is_deleted());
        assert!(health.files().is_none());
    }
}
