//! [`Unacknowledged`]: one connection's produces whose answers may not leave yet, and the one
//! step, [`Unacknowledged::commit`], that stores what they acknowledge.
//!
//! A produce to a durable partition appends its batch in memory, under the partition's locks,
//! and returns its verdict at once; the batch is written to its segment file (one `write(2)` for
//! every batch the connection's pipelined produces appended), synced when the `always` policy
//! says so (one fsync shared with every connection waiting at the same time), and the
//! producer-state snapshot a segment roll took is written, all in `commit`, which the connection
//! runs with no lock held before its answers leave. A verdict sent before `commit` returned `Ok`
//! could acknowledge a batch a crash then loses.
//!
//! It also caches the topics the connection produced to, so finding a request's topic takes no
//! lock, no hashing and no reference-count update on the registry's shared cache lines. A deleted
//! topic is marked, and dropped from the cache on its next use.

use minibroker_log::WriteBack;
use std::sync::Arc;

use crate::BrokerError;
use crate::partition::Partition;
use crate::snapshot::TakenSnapshot;
use crate::topics::{CreateCheck, Topic, TopicRegistry};

/// One connection's unacknowledged produces; see the module docs.
#[derive(Debug, Default)]
pub struct Unacknowledged {
    topics: Vec<Arc<Topic>>,
    unwritten: Vec<Unwritten>,
    snapshots: Vec<TakenSnapshot>,
    write_backs: Vec<WriteBack>,
}

/// A durable partition produced to, and the offset a sync must cover before the answers leave
/// (with the `always` flush policy).
#[derive(Debug)]
struct Unwritten {
    topic: Arc<Topic>,
    partition: u32,
    sync_through: Option<i64>,
}

/// What one produce left for [`Unacknowledged::commit`].
#[derive(Debug, Default)]
pub(crate) struct Left {
    /// The offset an fsync must cover before the answer (the `always` policy).
    pub sync_through: Option<i64>,
    /// After a roll: the producer-state snapshot to write.
    pub snapshot: Option<TakenSnapshot>,
    /// A background sync of the active segment that came due.
    pub write_back: Option<WriteBack>,
}

impl Unacknowledged {
    /// Connections rarely write more topics than this; past it, lookups go to the registry.
    const CAPACITY: usize = 16;

    /// Keeps what a produce to partition `partition` of the cached topic `name` left to do;
    /// `durable` when the partition's batches may wait to be written.
    pub(crate) fn note(&mut self, name: &str, partition: u32, durable: bool, left: Left) {
        self.snapshots.extend(left.snapshot);
        self.write_backs.extend(left.write_back);
        if !durable {
            return;
        }
        let Some(topic) = self.topics.iter().find(|t| t.name == name) else {
            return;
        };
        match self
            .unwritten
            .iter_mut()
            .find(|u| u.partition == partition && Arc::ptr_eq(&u.topic, topic))
        {
            Some(noted) => noted.sync_through = noted.sync_through.max(left.sync_through),
            None => self.unwritten.push(Unwritten {
                topic: Arc::clone(topic),
                partition,
                sync_through: left.sync_through,
            }),
        }
    }

    /// Stores what the verdicts given since the last call acknowledge: writes the batches of
    /// every durable partition produced to (whoever appended them; one `write(2)` per
    /// partition), with the `always` policy waits for the fsyncs that cover them, and writes the
    /// snapshots segment rolls took. In memory there is nothing to do.
    ///
    /// # Errors
    /// A storage error when a write or fsync fails: those partitions are read-only from then on,
    /// and the verdicts must not be sent (their batches are not stored, or not durably).
    pub async fn commit(&mut self) -> Result<(), BrokerError> {
        for write_back in self.write_backs.drain(..) {
            // Not waited for: it only spreads a segment's syncing over time.
            tokio::task::spawn_blocking(move || write_back.run());
        }
        if self.unwritten.is_empty() && self.snapshots.is_empty() {
            return Ok(());
        }
        for snapshot in std::mem::take(&mut self.snapshots) {
            // On a blocking thread: its fsyncs would stall every connection of this worker.
            let _ = tokio::task::spawn_blocking(move || snapshot.write()).await;
        }
        let noted = std::mem::take(&mut self.unwritten);
        let mut result = Ok(());
        let mut syncs = Vec::new();
        for (partition, sync_through) in noted
            .iter()
            .filter_map(|noted| Some((noted.partition()?, noted.sync_through)))
        {
            // `and` keeps the first error.
            match partition.write_pending() {
                Err(error) => result = result.and(Err(error)),
                Ok(()) => syncs.extend(sync_through.map(|through| partition.wait_durable(through))),
            }
        }
        for synced in futures::future::join_all(syncs).await {
            result = result.and(synced);
        }
        // The list's memory is kept for the next produces.
        let mut noted = noted;
        noted.clear();
        self.unwritten = noted;
        result
    }

    /// The topic named `name`, from the cache or else from `registry` (creating it if allowed).
    ///
    /// # Errors
    /// As [`TopicRegistry::get_or_create`].
    pub(crate) fn get_or_create<'a>(
        &'a mut self,
        registry: &TopicRegistry,
        name: &str,
        check: CreateCheck,
    ) -> Result<&'a Topic, BrokerError> {
        self.cached_or(name, |name| registry.get_or_create(name, check))
    }

    /// The topic named `name`, from the cache or else from `registry` (never creating it).
    ///
    /// # Errors
    /// As [`TopicRegistry::get`].
    pub(crate) fn get<'a>(
        &'a mut self,
        registry: &TopicRegistry,
        name: &str,
    ) -> Result<&'a Topic, BrokerError> {
        self.cached_or(name, |name| registry.get(name))
    }

    fn cached_or<'a>(
        &'a mut self,
        name: &str,
        look_up: impl FnOnce(&str) -> Result<Arc<Topic>, BrokerError>,
    ) -> Result<&'a Topic, BrokerError> {
        if let Some(index) = self.topics.iter().position(|t| t.name == name) {
            if !self.topics[index].is_stale() {
                return Ok(&self.topics[index]);
            }
            self.topics.remove(index);
        }
        let topic = look_up(name)?;
        if self.topics.len() == Self::CAPACITY {
            self.topics.remove(0);
        }
        self.topics.push(topic);
        Ok(&self.topics[self.topics.len() - 1])
    }
}

impl Unwritten {
    /// The partition, unless the topic changed under it.
    fn partition(&self) -> Option<&Partition> {
        self.topic.partition(self.partition).ok()
    }
}
