//! The producers' rows a broker's windows last wrote or read, each with its version: what lets
//! a window be judged before its rows are read, in one round trip instead of two.
//!
//! A window whose producers are all known here is judged against these rows at once, and its
//! writes go out with a check that the server runs under the partitions' locks: every
//! partition is there and every producer's row is still the version it was judged against.
//! Any other writer of a row (another broker, a broker of an older version) gives it a new
//! version, so a stale row fails the check, the transaction rolls back, and the window is
//! judged again with its rows read. A window that is not fully known here reads its rows
//! first. Either way the rule runs on the rows the database holds under the lock; this only
//! saves reading them when they are already known.
//!
//! Versions are random: two writers that both change one row never give it the same version,
//! so a row that another broker changed never passes for the one this broker expects.

use minibroker_state::ProducerEntry;
use std::collections::HashMap;
use std::sync::Mutex;

use super::ProducerKey;

/// A producer's row as a window left it.
#[derive(Debug, Clone, Copy)]
pub(super) struct KnownRow {
    pub(super) entry: ProducerEntry,
    pub(super) version: i64,
}

/// Rows known at most: past this the broker forgets them all and reads them again.
const MOST_KNOWN: usize = 100_000;

/// The rows a broker's committer knows.
#[derive(Debug, Default)]
pub struct KnownProducers {
    rows: Mutex<HashMap<ProducerKey, KnownRow>>,
}

impl KnownProducers {
    /// None known yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The rows of `keys`, when every one is known.
    pub(super) fn recall(&self, keys: &[ProducerKey]) -> Option<HashMap<ProducerKey, KnownRow>> {
        let rows = self.lock();
        keys.iter()
            .map(|key| Some((*key, *rows.get(key)?)))
            .collect()
    }

    /// Rows a committed window left.
    pub(super) fn remember(&self, left: impl IntoIterator<Item = (ProducerKey, KnownRow)>) {
        let mut rows = self.lock();
        rows.extend(left);
        if rows.len() > MOST_KNOWN {
            rows.clear();
        }
    }

    /// Forgets `keys`: a window that touched them failed, so what it left is not known.
    pub(super) fn forget(&self, keys: &[ProducerKey]) {
        let mut rows = self.lock();
        for key in keys {
            rows.remove(key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProducerKey, KnownRow>> {
        // A panic while holding it cannot leave the map half-changed: every change is one call.
        self.rows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
