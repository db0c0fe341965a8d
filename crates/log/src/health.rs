//! [`Health`]: whether a partition's files still take writes — one state, shared by the log, its
//! background syncs and the broker's partition, so that they can never disagree.
//!
//! The first failed write or sync fails it for good, with its reason: after a failed fsync the
//! kernel may have dropped the dirty pages, so a later sync that succeeds would prove nothing.
//! Reading it is one atomic load, cheap enough for every produce.

use std::sync::{Arc, OnceLock};

use crate::LogError;

/// A partition's health; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<OnceLock<Arc<LogError>>>);

impl Health {
    /// Fails it with `error` (logged the first time); a later failure keeps the first.
    pub fn fail(&self, error: LogError) {
        if let Err(later) = self.0.set(Arc::new(error)) {
            tracing::debug!(error = %later, "another storage error on a read-only partition");
        } else if let Some(error) = self.failure() {
            tracing::error!(%error, "a write or sync failed; the partition is read-only from now on");
        }
    }

    /// The failure that made it read-only, if one did.
    #[must_use]
    pub fn failure(&self) -> Option<&Arc<LogError>> {
        self.0.get()
    }

    /// Whether a write or sync failed.
    #[must_use]
    pub fn is_failed(&self) -> bool {
        self.0.get().is_some()
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
}
