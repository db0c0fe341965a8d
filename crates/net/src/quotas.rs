//! Connection quotas per client address and per principal (Kafka's `max.connections.per.ip`,
//! and the same for a logged-in user), so one client — or one leaked credential — cannot hold
//! every slot of `max_connections`.
//!
//! A [`Quota`] counts open connections per key; [`Quota::take`] hands out a [`Held`] slot that
//! gives itself back when dropped, however the connection ends.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

/// Open connections per key, up to a limit each.
#[derive(Debug)]
pub struct Quota<K: Eq + Hash> {
    limit: Option<usize>,
    open: Mutex<HashMap<K, usize>>,
}

impl<K: Eq + Hash + Clone> Quota<K> {
    /// A quota of `limit` connections per key (`None`: no limit).
    #[must_use]
    pub fn new(limit: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            limit,
            open: Mutex::default(),
        })
    }

    /// A slot for `key`, or `None` when it holds its limit already.
    #[must_use]
    pub fn take(self: &Arc<Self>, key: K) -> Option<Held<K>> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key.clone()).or_default();
        if self.limit.is_some_and(|limit| *count >= limit) {
            return None;
        }
        *count += 1;
        Some(Held {
            quota: Arc::clone(self),
            key,
        })
    }

    /// How many connections `key` holds.
    #[must_use]
    pub fn open(&self, key: &K) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(key).copied().unwrap_or(0)
    }

    /// The limit per key.
    #[must_use]
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }
}

/// One connection's slot in a [`Quota`], given back when dropped.
#[derive(Debug)]
pub struct Held<K: Eq + Hash> {
    quota: Arc<Quota<K>>,
    key: K,
}

impl<K: Eq + Hash> Drop for Held<K> {
    fn drop(&mut self) {
        let mut open = self
            .quota
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_limit_and_dropped_slots_come_back() {
        let quota = Quota::new(Some(2));
        let a1 = quota.take("a").unwrap();
        let _a2 = quota.take("a").unwrap();
        assert!(quota.take("a").is_none());
        let _b = quota.take("b").unwrap();
        drop(a1);
        assert_eq!(quota.open(&"a"), 1);
        assert!(quota.take("a").is_some());
        let unlimited = Quota::new(None);
        let held: Vec<_> = (0..100).map(|_| unlimited.take(1).unwrap()).collect();
        assert_eq!(unlimited.open(&1), 100);
        drop(held);
        assert_eq!(unlimited.open(&1), 0);
    }
}
