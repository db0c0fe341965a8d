//! [`Health`]: whether a partition's files still take writes — one state, shared by the log, its
//! background syncs and the broker's partition, so that they can never disagree.
//!
//! The first failed write or sync fails it for good, with its reason: after a failed fsync the
//! kernel may have dropped the dirty pages, so a later sync that succeeds would prove nothing.
//! Reading it is one atomic load, cheap enough for every produce.

use std::sync::{Arc, OnceLock};

/// A partition's health; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<OnceLock<String>>);

impl Health {
    /// Fails it with `reason` (logged the first time); a later failure keeps the first reason.
    pub fn fail(&self, reason: String) {
        if let Err(reason) = self.0.set(reason) {
            tracing::debug!(reason, "another storage error on a read-only partition");
        } else {
            tracing::error!(
                reason = self.failure(),
                "a write or sync failed; the partition is read-only from now on"
            );
        }
    }

    /// Why it failed, if it did.
    #[must_use]
    pub fn failure(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
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
        health.fail("fsync failed".to_owned());
        health.fail("a later write failed".to_owned());
        assert_eq!(shared.failure(), Some("fsync failed"));
    }
}
