//! The topic registry: names to partitions, each partition a log behind its own mutex.
//!
//! Partitions get broker-wide ids (`PartitionId`) so the state manager can key producer state by
//! partition without knowing topic names. Lookups take a read lock; creation a write lock.
//!
//! A name is validated before it is looked up, echoed or stored, and a request is checked
//! against the topic it would create (partition in range, room in the storage budget) before
//! creating it: a refused request leaves nothing behind. Every topic and partition is charged to
//! the storage budget and to the `max_topics` and `max_partitions` caps.

use minibroker_log::PartitionLog;
use minibroker_state::PartitionId;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::budget::{StorageBudget, topic_bytes};
use crate::data_dir::DataDir;
use crate::error::quote_prefix;
use crate::partition::Partition;
use crate::topic_settings::store::OverridesStore;
use crate::topic_settings::{Overrides, TopicSettings};
use crate::{BrokerConfig, BrokerError, ServerError};

/// Longest topic name, as in Kafka.
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// A topic and its partitions.
#[derive(Debug)]
pub struct Topic {
    /// The topic's name.
    pub name: String,
    /// Shared with the copy that replaces the topic when it grows.
    partitions: Box<[Arc<Partition>]>,
    /// Set when the topic is deleted, or replaced by a copy with more partitions, so
    /// connections that cached it look it up again.
    stale: AtomicBool,
    /// What it lives by (its overrides over the broker's settings); changed by
    /// [`TopicRegistry::alter_settings`].
    settings: RwLock<TopicSettings>,
}

impl Topic {
    fn new(name: &str, partitions: Box<[Arc<Partition>]>, settings: TopicSettings) -> Self {
        Self {
            name: name.to_owned(),
            partitions,
            stale: AtomicBool::new(false),
            settings: RwLock::new(settings),
        }
    }

    /// What the topic lives by now.
    #[must_use]
    pub fn settings(&self) -> TopicSettings {
        *self.settings.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `settings` the topic's, and every partition's log's.
    fn apply(&self, settings: TopicSettings) {
        *self
            .settings
            .write()
            .unwrap_or_else(PoisonError::into_inner) = settings;
        for partition in self.partitions.iter() {
            partition
                .log()
                .log
                .set_limits(settings.retention, settings.segments);
        }
    }

    /// Partition `index`, or a clear error naming the valid range.
    ///
    /// # Errors
    /// [`BrokerError::PartitionOutOfRange`].
    pub fn partition(&self, index: u32) -> Result<&Partition, BrokerError> {
        self.partitions
            .get(index as usize)
            .map(AsRef::as_ref)
            .ok_or_else(|| BrokerError::PartitionOutOfRange {
                topic: self.name.clone(),
                partition: index,
                count: self.partition_count(),
            })
    }

    /// How many partitions the topic has.
    #[must_use]
    pub fn partition_count(&self) -> u32 {
        // Bounded by `max_partitions_per_topic`, a u32.
        self.partitions.len() as u32
    }

    /// All partitions, by index.
    #[must_use]
    pub fn partitions(&self) -> &[Arc<Partition>] {
        &self.partitions
    }

    /// Whether the topic was deleted or grew (connections that cached it look it up again).
    pub(crate) fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Acquire)
    }
}

/// All topics of a broker.
#[derive(Debug)]
pub struct TopicRegistry {
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// The topics' own settings.
    overrides: OverridesStore,
    /// Partition ids and how many partitions exist.
    partition_ids: Mutex<PartitionIds>,
    budget: Arc<StorageBudget>,
    /// Where topics are stored, for a durable broker.
    data: Option<Arc<DataDir>>,
    /// The broker's configuration (shared with it), for each topic's retention.
    config: Arc<BrokerConfig>,
    auto_create: bool,
    default_partitions: u32,
    max_topics: usize,
    max_partitions: u32,
    max_partitions_per_topic: u32,
}

/// Broker-wide partition ids are never reused, so producer state left by a deleted topic's
/// partitions can never be mistaken for a new one's.
#[derive(Debug, Default)]
struct PartitionIds {
    next: PartitionId,
    live: u32,
}

/// Whether a topic is being created or recovered from the data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    New,
    Stored,
}

/// What a request that may auto-create its topic must satisfy before the topic is created.
#[derive(Debug, Clone, Copy)]
pub struct CreateCheck {
    /// The partition the request writes to.
    pub partition: u32,
    /// Bytes the request will charge to the storage budget once the topic exists.
    pub bytes: u64,
}

impl TopicRegistry {
    /// A registry holding the topics stored in `data` (recovered from their files) and those
    /// declared in `config`, charging them to `budget`.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] for stored topics that cannot be recovered;
    /// [`ServerError::DeclaredTopic`] for a declared topic that cannot be created.
    pub fn new(
        config: &Arc<BrokerConfig>,
        budget: Arc<StorageBudget>,
        data: Option<Arc<DataDir>>,
    ) -> Result<Self, ServerError> {
        let stored = match &data {
            Some(data) => {
                let stored = data.topics()?;
                data.set_aside_unknown_topics(&stored).map_err(|error| {
                    ServerError::data_dir_io(data.root(), "setting unknown topics aside", error)
                })?;
                data.remove_deleted().map_err(|error| {
                    ServerError::data_dir_io(data.root(), "removing deleted topics' files", error)
                })?;
                stored
            }
            None => Vec::new(),
        };
        let overrides = OverridesStore::open(data.clone(), config, &stored)?;
        let registry = Self {
            topics: RwLock::new(HashMap::new()),
            overrides,
            partition_ids: Mutex::new(PartitionIds::default()),
            budget,
            data,
            config: Arc::clone(config),
            auto_create: config.auto_create_topics,
            default_partitions: config.default_partitions,
            max_topics: config.max_topics.max(config.topics.len() + stored.len()),
            max_partitions: config.max_partitions,
            max_partitions_per_topic: config.max_partitions_per_topic,
        };
        let stored_partitions: u64 = stored.iter().map(|(_, n)| u64::from(*n)).sum();
        if let Some(max) = registry
            .data
            .as_ref()
            .and_then(|d| d.descriptors().partitions)
            && stored_partitions > max
        {
            tracing::warn!(
                partitions = stored_partitions,
                max,
                "the data directory holds more partitions than the open-file limit allows for; all are served, no topic can be created (raise the limit: ulimit -n)"
            );
        }
        for (name, partitions) in &stored {
            registry
                .insert(name, *partitions, Origin::Stored, None)
                .map_err(|source| match source {
                    BrokerError::Log(error) => ServerError::data_dir(PathBuf::from(name), error),
                    source => ServerError::DeclaredTopic {
                        name: name.clone(),
                        source,
                    },
                })?;
        }
        for topic in &config.topics {
            registry
                .create(&topic.name, topic.partitions, None)
                .map_err(|source| ServerError::DeclaredTopic {
                    name: topic.name.clone(),
                    source,
                })?;
        }
        Ok(registry)
    }

    /// The topic named `name`, if it exists.
    ///
    /// # Errors
    /// [`BrokerError::InvalidTopicName`] for a name no topic can have;
    /// [`BrokerError::UnknownTopic`] if it does not exist.
    pub fn get(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        validate_topic_name(name)?;
        self.read()
            .get(name)
            .cloned()
            .ok_or_else(|| BrokerError::UnknownTopic(name.to_owned()))
    }

    /// The topic named `name`, created with the default partition count if auto-creation is on
    /// and the request passes `check` against the topic it would create.
    ///
    /// # Errors
    /// [`BrokerError::InvalidTopicName`] for a bad name; [`BrokerError::UnknownTopic`] if it
    /// does not exist and auto-creation is off; [`BrokerError::PartitionOutOfRange`] or
    /// [`BrokerError::StoreFull`] if the request would be refused by the new topic (which is then
    /// not created); a topic or partition limit error when one is reached.
    pub fn get_or_create(&self, name: &str, check: CreateCheck) -> Result<Arc<Topic>, BrokerError> {
        validate_topic_name(name)?;
        if let Some(topic) = self.read().get(name) {
            return Ok(Arc::clone(topic));
        }
        if !self.auto_create {
            return Err(BrokerError::UnknownTopic(name.to_owned()));
        }
        let partitions = self.default_partitions;
        if check.partition >= partitions {
            return Err(BrokerError::PartitionOutOfRange {
                topic: name.to_owned(),
                partition: check.partition,
                count: partitions,
            });
        }
        if !self.budget.has_room(topic_bytes(partitions) + check.bytes) {
            return Err(self.store_full());
        }
        self.create(name, partitions, None)
    }

    fn store_full(&self) -> BrokerError {
        BrokerError::StoreFull {
            limit: self.budget.max(),
            refused: "the topic",
        }
    }

    /// Creates `name` with `partitions` partitions and `overrides` (none: the broker's
    /// settings), or returns it if it already exists.
    fn create(
        &self,
        name: &str,
        partitions: u32,
        overrides: Option<Overrides>,
    ) -> Result<Arc<Topic>, BrokerError> {
        self.insert(name, partitions, Origin::New, overrides)
    }

    /// The partitions' logs: in memory, or opened (and recovered) from the data directory. A
    /// new topic's directory is cleared first, so it never inherits files left behind.
    fn open_logs(
        &self,
        name: &str,
        partitions: u32,
        origin: Origin,
        settings: &TopicSettings,
    ) -> Result<Vec<PartitionLog>, BrokerError> {
        if origin == Origin::New
            && let Some(data) = &self.data
        {
            data.remove_topic(name)
                .map_err(|source| BrokerError::Storage {
                    what: "clearing a new topic's directory",
                    source,
                })?;
        }
        self.open_partition_logs(name, 0..partitions, settings)
    }

    /// The logs of partitions `indexes` of `name`: in memory, or opened from the data
    /// directory.
    fn open_partition_logs(
        &self,
        name: &str,
        indexes: std::ops::Range<u32>,
        settings: &TopicSettings,
    ) -> Result<Vec<PartitionLog>, BrokerError> {
        let Some(data) = &self.data else {
            return Ok(indexes
                .map(|_| PartitionLog::in_memory(settings.retention))
                .collect());
        };
        indexes
            .map(|index| {
                let opened = data.open_partition(name, index)?;
                if let Some((bytes, reason)) = opened.truncated {
                    tracing::warn!(
                        topic = name,
                        partition = index,
                        file = %opened.log.active_path().display(),
                        bytes,
                        reason,
                        "cut a torn or damaged tail from the log (a crash leaves one; anything else is lost data)"
                    );
                }
                let mut log = PartitionLog::Durable(opened.log);
                log.set_limits(settings.retention, settings.segments);
                Ok(log)
            })
            .collect()
    }

    /// Saves the topic list, for a durable broker.
    fn save(&self, topics: &HashMap<String, Arc<Topic>>) -> Result<(), BrokerError> {
        let Some(data) = &self.data else {
            return Ok(());
        };
        let mut list: Vec<(&str, u32)> = topics
            .values()
            .map(|topic| (topic.name.as_str(), topic.partition_count()))
            .collect();
        list.sort_unstable();
        data.save_topics(list)
            .map_err(|source| BrokerError::Storage {
                what: "saving the topic list",
                source,
            })
    }

    /// Creates `name` (new, or recovered from the data directory), or returns it if it exists.
    fn insert(
        &self,
        name: &str,
        partitions: u32,
        origin: Origin,
        overrides: Option<Overrides>,
    ) -> Result<Arc<Topic>, BrokerError> {
        validate_topic_name(name)?;
        let mut topics = self.topics.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(topic) = topics.get(name) {
            return Ok(Arc::clone(topic));
        }
        if topics.len() >= self.max_topics {
            return Err(BrokerError::TooManyTopics(self.max_topics));
        }
        let mut ids = self
            .partition_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Each durable partition holds its active segment open; what was stored is recovered
        // whatever the limit (a warning at start says so).
        self.room_for_partitions(&ids, partitions, origin == Origin::New)?;
        if !self.budget.try_charge(topic_bytes(partitions)) {
            return Err(self.store_full());
        }
        let settings = match &overrides {
            Some(overrides) => self.config.topic_settings(name, overrides),
            None => self.config.topic_settings(name, &self.overrides.get(name)),
        };
        let logs = match self.open_logs(name, partitions, origin, &settings) {
            Ok(logs) => logs,
            Err(error) => {
                self.budget.release(topic_bytes(partitions));
                return Err(error);
            }
        };
        ids.live += partitions;
        let partitions = logs
            .into_iter()
            .map(|log| {
                let id = ids.next;
                ids.next += 1;
                Arc::new(Partition::new(id, log))
            })
            .collect();
        let topic = Arc::new(Topic::new(name, partitions, settings));
        topics.insert(name.to_owned(), Arc::clone(&topic));
        // A new topic's settings are saved before the topic list names it (see
        // `OverridesStore`).
        let saved = match overrides {
            Some(overrides) if origin == Origin::New => self.overrides.set(name, overrides),
            _ => Ok(()),
        };
        if origin == Origin::New
            && let Err(error) = saved.and_then(|()| self.save(&topics))
        {
            self.overrides.remove(name);
            topics.remove(name);
            ids.live -= topic.partition_count();
            self.budget.release(topic_bytes(topic.partition_count()));
            return Err(error);
        }
        tracing::info!(
            topic = name,
            partitions = topic.partition_count(),
            "{}",
            match origin {
                Origin::New => "created topic",
                Origin::Stored => "opened stored topic",
            }
        );
        Ok(topic)
    }

    /// Whether `wanted` more partitions fit beside the `ids` held: `max_partitions`, the id
    /// space and, when `new_descriptors` (partitions opened now, not recovered), the open-file
    /// plan's share for partitions.
    fn room_for_partitions(
        &self,
        ids: &PartitionIds,
        wanted: u32,
        new_descriptors: bool,
    ) -> Result<(), BrokerError> {
        if ids.live.saturating_add(wanted) > self.max_partitions
            || ids.next.checked_add(wanted).is_none()
        {
            return Err(BrokerError::TooManyPartitions {
                held: ids.live,
                max: self.max_partitions,
                wanted,
            });
        }
        let descriptors = self
            .data
            .as_ref()
            .and_then(|data| data.descriptors().partitions);
        if let Some(max) = descriptors
            && new_descriptors
            && u64::from(ids.live) + u64::from(wanted) > max
        {
            return Err(BrokerError::TooManyDescriptors {
                held: ids.live,
                max,
                wanted,
            });
        }
        Ok(())
    }

    /// How many partitions exist across all topics.
    #[must_use]
    pub fn partition_count(&self) -> u32 {
        self.partition_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live
    }

    /// Creates `name` with `partitions` partitions and `overrides` (an admin request, not
    /// auto-creation).
    ///
    /// # Errors
    /// [`BrokerError::TopicAlreadyExists`]; [`BrokerError::InvalidPartitions`] outside 1 to
    /// `max_partitions_per_topic`; a bad name or a limit, as for auto-creation; a storage
    /// error saving its settings.
    pub fn create_new(
        &self,
        name: &str,
        partitions: u32,
        overrides: Overrides,
    ) -> Result<Arc<Topic>, BrokerError> {
        validate_topic_name(name)?;
        if partitions == 0 || partitions > self.max_partitions_per_topic {
            return Err(BrokerError::InvalidPartitions {
                partitions,
                max: self.max_partitions_per_topic,
            });
        }
        if self.read().contains_key(name) {
            return Err(BrokerError::TopicAlreadyExists(name.to_owned()));
        }
        self.create(name, partitions, Some(overrides))
    }

    /// Grows `name` to `partitions` partitions (CreatePartitions): the new ones start empty, the
    /// others are shared with the topic as it was, which connections that cached it then look
    /// up again. With a data directory the topic list holds the new count before this returns.
    /// With `validate_only`, everything is checked and nothing changes.
    ///
    /// # Errors
    /// [`BrokerError::UnknownTopic`]; [`BrokerError::PartitionsNotIncreased`];
    /// [`BrokerError::InvalidPartitions`] past `max_partitions_per_topic`; a partition,
    /// descriptor or storage limit; a storage error saving the topic list.
    pub fn grow(
        &self,
        name: &str,
        partitions: u32,
        validate_only: bool,
    ) -> Result<Arc<Topic>, BrokerError> {
        validate_topic_name(name)?;
        let mut topics = self.topics.write().unwrap_or_else(PoisonError::into_inner);
        let old = topics
            .get(name)
            .cloned()
            .ok_or_else(|| BrokerError::UnknownTopic(name.to_owned()))?;
        let current = old.partition_count();
        if partitions <= current {
            return Err(BrokerError::PartitionsNotIncreased {
                topic: name.to_owned(),
                current,
                asked: partitions,
            });
        }
        if partitions > self.max_partitions_per_topic {
            return Err(BrokerError::InvalidPartitions {
                partitions,
                max: self.max_partitions_per_topic,
            });
        }
        let added = partitions - current;
        let mut ids = self
            .partition_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.room_for_partitions(&ids, added, true)?;
        if validate_only {
            if !self.budget.has_room(topic_bytes(added)) {
                return Err(self.store_full());
            }
            return Ok(old);
        }
        if !self.budget.try_charge(topic_bytes(added)) {
            return Err(self.store_full());
        }
        let settings = old.settings();
        let logs = match self.open_partition_logs(name, current..partitions, &settings) {
            Ok(logs) => logs,
            Err(error) => {
                self.budget.release(topic_bytes(added));
                return Err(error);
            }
        };
        let mut shared: Vec<Arc<Partition>> = old.partitions().to_vec();
        for log in logs {
            shared.push(Arc::new(Partition::new(ids.next, log)));
            ids.next += 1;
        }
        let grown = Arc::new(Topic::new(name, shared.into_boxed_slice(), settings));
        topics.insert(name.to_owned(), Arc::clone(&grown));
        if let Err(error) = self.save(&topics) {
            topics.insert(name.to_owned(), old);
            self.budget.release(topic_bytes(added));
            return Err(error);
        }
        ids.live += added;
        old.stale.store(true, Ordering::Release);
        tracing::info!(topic = name, from = current, to = partitions, "grew topic");
        Ok(grown)
    }

    /// Deletes `name`: its records are gone, what it was charged is released, and connections
    /// that cached it find it gone.
    ///
    /// # Errors
    /// [`BrokerError::UnknownTopic`] if it does not exist.
    pub fn delete(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        validate_topic_name(name)?;
        let mut topics = self.topics.write().unwrap_or_else(PoisonError::into_inner);
        let topic = topics
            .remove(name)
            .ok_or_else(|| BrokerError::UnknownTopic(name.to_owned()))?;
        if let Err(error) = self.save(&topics) {
            topics.insert(name.to_owned(), topic);
            return Err(error);
        }
        // Before the name is free again: connections that cached the topic look it up anew,
        // and every write still under way through the old one (an append, a compaction pass,
        // a snapshot) is refused from here on, or finished before its directory moves.
        topic.stale.store(true, Ordering::Release);
        for partition in topic.partitions() {
            partition.retire();
        }
        let retired = self
            .data
            .as_ref()
            .map(|data| (data, data.retire_topic(name)));
        drop(topics);
        self.overrides.remove(name);
        // The files go outside the registry's lock: the name is free already.
        let removed = retired.map_or(Ok(()), |(data, retired)| match retired? {
            Some(dir) => data.remove_retired(&dir),
            None => Ok(()),
        });
        if let Err(error) = removed {
            // The topic is gone from the list; its files are moved aside or removed at the
            // next start.
            tracing::warn!(topic = name, %error, "could not delete the topic's files");
        }
        let mut released = topic_bytes(topic.partition_count());
        for partition in topic.partitions() {
            let mut data = partition.log();
            released += data.held + data.allowance;
            data.held = 0;
            data.allowance = 0;
        }
        self.budget.release(released);
        self.partition_ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live -= topic.partition_count();
        tracing::info!(topic = name, "deleted topic");
        Ok(topic)
    }

    /// `name`'s own settings.
    ///
    /// # Errors
    /// A bad or unknown topic name.
    pub fn overrides(&self, name: &str) -> Result<Overrides, BrokerError> {
        self.get(name)?;
        Ok(self.overrides.get(name))
    }

    /// Changes `name`'s own settings to what `change` makes of them, saved (for a durable
    /// broker) and then applied to every partition at once; with `validate_only`, only checks.
    /// Creating, growing and deleting topics wait meanwhile, so the change reaches every
    /// partition the topic has.
    ///
    /// # Errors
    /// A bad or unknown topic name; what `change` refuses ([`BrokerError::InvalidConfig`]);
    /// a storage error saving the settings (nothing changes then).
    pub fn alter_settings(
        &self,
        name: &str,
        change: impl FnOnce(&Overrides) -> Result<Overrides, BrokerError>,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        validate_topic_name(name)?;
        let topics = self.topics.write().unwrap_or_else(PoisonError::into_inner);
        let topic = topics
            .get(name)
            .ok_or_else(|| BrokerError::UnknownTopic(name.to_owned()))?;
        let next = change(&self.overrides.get(name))?;
        if validate_only {
            return Ok(());
        }
        self.overrides.set(name, next.clone())?;
        let settings = self.config.topic_settings(name, &next);
        topic.apply(settings);
        tracing::info!(topic = name, ?settings, "changed the topic's settings");
        Ok(())
    }

    /// Every topic, by name.
    #[must_use]
    pub fn list(&self) -> Vec<Arc<Topic>> {
        let mut topics: Vec<Arc<Topic>> = self.read().values().cloned().collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        topics
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Topic>>> {
        self.topics.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Kafka's rule for topic names: 1 to 249 of `[A-Za-z0-9._-]`, and not `.` or `..`.
///
/// # Errors
/// [`BrokerError::InvalidTopicName`], quoting at most a short, escaped prefix of the name.
pub fn validate_topic_name(name: &str) -> Result<(), BrokerError> {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if name.is_empty()
        || name.len() > MAX_TOPIC_NAME_LEN
        || !valid_chars
        || name == "."
        || name == ".."
    {
        return Err(BrokerError::InvalidTopicName {
            name: quote_prefix(name),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_names_are_refused_with_a_short_message() {
        for name in [
            "",
            ".",
            "..",
            "a b",
            &"x".repeat(250),
            &"\0".repeat(100_000),
        ] {
            let error = validate_topic_name(name).unwrap_err();
            assert!(error.to_string().len() < 400, "{error}");
        }
        assert!(validate_topic_name(&"x".repeat(249)).is_ok());
        assert!(validate_topic_name("orders.v1_A-b").is_ok());
    }
}
