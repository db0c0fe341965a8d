//! [`ClusterLink`]: a broker's place in a cluster of brokers sharing one PostgreSQL database
//! (`minibroker_cluster`). Where a partition's log and producer state live is the seam: on a
//! broker of its own, its memory and segment files, judged by the core's rule; in a cluster, the
//! database, judged by the same rule inside one transaction per window of batches.
//!
//! A broker of a cluster keeps nothing that cannot be lost. It commits what it is sent through
//! its committer, and copies what any broker committed into its core (`Broker::place_committed`),
//! where Fetch, ListOffsets and Metadata read it as they read a broker's own log: the copy
//! follows the database a short poll behind (`COPY_POLL`), and at once after this broker's own
//! commits. A poll rather than LISTEN/NOTIFY: one query of every partition's end per poll is
//! cheap at this scale, needs no second connection kept listening, and misses nothing across a
//! reconnection.

use minibroker_broker::{Broker, BrokerError, Placed};

pub use crate::cluster_error::ClusterError;
use minibroker_cluster::{
    Append, AppendError, Appended, Committer, Database, Deleted, Heartbeat, Keep, Leases, Member,
    MembershipError, Pending, Registration, SharedTopic, WindowSettings,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// How often a broker's copy asks the database what is new.
const COPY_POLL: Duration = Duration::from_millis(20);

/// Batches a copy takes from one partition per query.
const COPY_BATCHES: i64 = 1_000;

/// Batches a read below the copy takes from the database per query, at most.
const OLDER_BATCHES: i64 = 200;

/// How a broker joins its cluster.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The database's URL.
    pub url: String,
    /// This broker's node id, its Kafka address as clients reach it.
    pub member: Member,
    /// `cluster_flush_ms`.
    pub flush: Duration,
    /// `cluster_lease_ms`.
    pub lease: Duration,
    /// Partitions of a topic a produce or Metadata creates.
    pub default_partitions: u32,
    /// `cluster_cache_bytes`: the most a partition's copy holds; older batches are read from
    /// the database.
    pub cache_bytes: u64,
}

/// A broker's membership of its cluster, its committer and its copy.
#[derive(Debug)]
pub struct ClusterLink {
    node_id: i32,
    broker: Arc<Broker>,
    database: Database,
    committer: Committer,
    heartbeat: Mutex<Option<Heartbeat>>,
    /// Its consumer groups: leased, and kept in the database.
    groups: Arc<crate::cluster_groups::ClusterGroups>,
    /// Its transactions: leased, and kept in the database.
    transactions: Arc<crate::cluster_transactions::ClusterTransactions>,
    topics: Mutex<HashMap<String, SharedTopic>>,
    default_partitions: i32,
    cache_bytes: u64,
    /// What the copy's passes learnt of each partition, by topic and partition index.
    copied: Mutex<HashMap<String, Vec<Copied>>>,
    copy_now: Arc<Notify>,
    /// Held by a pass of the copy, and by a placement of the broker's own batch: they never
    /// interleave, so none places a batch twice.
    copying: tokio::sync::Mutex<()>,
    /// Passes of the copy begun, so a read that waited for one begun after it arrived needs
    /// no pass of its own.
    passes: std::sync::atomic::AtomicU64,
}

impl ClusterLink {
    /// Joins the cluster: brings the schema up to date, takes the node id (waiting up to one
    /// lease for a previous run of this broker to lose it), starts the committer and the copy.
    ///
    /// # Errors
    /// [`ClusterError`]: the broker must not start.
    pub async fn join(
        broker: Arc<Broker>,
        settings: ClusterSettings,
        offsets_retention: Duration,
    ) -> Result<Arc<Self>, ClusterError> {
        let mut client = minibroker_cluster::connect(&settings.url).await?;
        let found = minibroker_cluster::migrate(&mut client).await?;
        tracing::info!(
            schema_found = found,
            schema = minibroker_cluster::SCHEMA_VERSION,
            "the cluster's schema is up to date"
        );
        let leases = Arc::new(Leases::default());
        let heartbeat = register(&settings, &leases).await?;
        let window = WindowSettings {
            flush: settings.flush,
            ..WindowSettings::default()
        };
        let coordinating = Arc::new(crate::coordinating::Coordinating {
            url: settings.url.clone(),
            connect_timeout: window.connect_timeout,
            leases,
            registration: heartbeat.registration().clone(),
            lease: settings.lease,
        });
        let groups = Arc::new(crate::cluster_groups::ClusterGroups::new(Arc::clone(
            &coordinating,
        )));
        let transactions = Arc::new(crate::cluster_transactions::ClusterTransactions::new(
            coordinating,
        ));
        let link = Arc::new(Self {
            node_id: settings.member.node_id,
            broker,
            database: Database::new(&settings.url, window.connect_timeout),
            committer: Committer::start(&settings.url, window),
            heartbeat: Mutex::new(Some(heartbeat)),
            groups,
            transactions,
            topics: Mutex::default(),
            default_partitions: i32::try_from(settings.default_partitions).unwrap_or(i32::MAX),
            cache_bytes: settings.cache_bytes,
            copied: Mutex::default(),
            copy_now: Arc::new(Notify::new()),
            copying: tokio::sync::Mutex::new(()),
            passes: std::sync::atomic::AtomicU64::new(0),
        });
        // The copy catches up before the broker serves, so its first reads miss nothing old.
        link.catch_up().await?;
        tokio::spawn(copy(Arc::downgrade(&link), Arc::clone(&link.copy_now)));
        let every = Duration::from_millis(link.broker.config().maintenance_interval_ms);
        tokio::spawn(retention(Arc::downgrade(&link), every, offsets_retention));
        Ok(link)
    }

    /// This broker's node id.
    #[must_use]
    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// Its consumer groups in the cluster: who coordinates them, and what any broker reads of
    /// them.
    #[must_use]
    pub fn groups(&self) -> &Arc<crate::cluster_groups::ClusterGroups> {
        &self.groups
    }

    /// Its transactions in the cluster: what any broker reads of them.
    #[must_use]
    pub fn transactions(&self) -> &Arc<crate::cluster_transactions::ClusterTransactions> {
        &self.transactions
    }

    /// The cluster's topic `name`, created with the default partition count when `create`
    /// says so and it has none; this broker's copy holds it once found.
    ///
    /// # Errors
    /// The database could not be asked, or the copy cannot hold the topic.
    pub async fn topic(
        &self,
        name: &str,
        create: bool,
    ) -> Result<Option<TopicHandle>, ClusterError> {
        if let Some(known) = self.known_handle(name) {
            return Ok(Some(known));
        }
        let client = self.database.client().await?;
        let found = if create {
            Some(
                minibroker_cluster::find_or_create_topic(&*client, name, self.default_partitions)
                    .await?,
            )
        } else {
            minibroker_cluster::find_topic(&*client, name).await?
        };
        if let Some(topic) = &found {
            self.hold(topic)?;
        }
        Ok(found.as_ref().map(TopicHandle::of))
    }

    /// Creates topic `name` with `partitions` partitions and its own `settings` (checked by
    /// the caller): `false` when the cluster has one of
    /// that name already. This broker's copy holds it once created.
    ///
    /// # Errors
    /// The database could not be asked or refused, or the copy cannot hold the topic.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        settings: &[(String, String)],
    ) -> Result<bool, ClusterError> {
        let client = self.database.client().await?;
        match minibroker_cluster::create_topic_with(&*client, name, partitions, settings).await? {
            Some(topic) => {
                self.hold(&topic)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The live brokers, by node id.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn members(&self) -> Result<Vec<Member>, ClusterError> {
        let client = self.database.client().await?;
        Ok(minibroker_cluster::live_members(&*client).await?)
    }

    /// A producer id no broker of the cluster has given, recorded as `owner`'s when there is
    /// one (with authorisation on), so every broker knows whose it is.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn new_producer_id(&self, owner: Option<&str>) -> Result<i64, ClusterError> {
        let client = self.database.client().await?;
        Ok(match owner {
            Some(owner) => minibroker_cluster::issue_producer_id(&*client, owner).await?,
            None => minibroker_cluster::next_producer_id(&*client).await?,
        })
    }

    /// Records `owner` as the principal of `producer_id` for every broker (a transactional id's
    /// producer id, issued without one), unless it has one already.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn record_producer_owner(
        &self,
        producer_id: i64,
        owner: &str,
    ) -> Result<(), ClusterError> {
        let client = self.database.client().await?;
        Ok(minibroker_cluster::record_producer_owner(&*client, producer_id, owner).await?)
    }

    /// The principal `producer_id` was issued to, by any broker, if it was issued with one.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn producer_owner(&self, producer_id: i64) -> Result<Option<String>, ClusterError> {
        let client = self.database.client().await?;
        Ok(minibroker_cluster::producer_owner(&*client, producer_id).await?)
    }

    /// Changes topic `name`'s own settings, for every broker of the cluster, to what `change`
    /// makes of them. A compare-and-set: when another broker changed them meanwhile, they are
    /// read again and `change` asked again, so neither change is lost. This broker's copy
    /// applies them at once, the others' on their next pass. With `validate_only`, only asks
    /// `change`.
    ///
    /// # Errors
    /// [`ClusterError::UnknownTopic`]; [`ClusterError::Refused`] with `change`'s refusal; the
    /// database could not be asked.
    pub async fn change_topic_settings(
        &self,
        name: &str,
        change: impl Fn(&[(String, String)]) -> Result<Vec<(String, String)>, BrokerError>,
        validate_only: bool,
    ) -> Result<(), ClusterError> {
        let client = self.database.client().await?;
        loop {
            let Some(topic) = minibroker_cluster::find_topic(&*client, name).await? else {
                return Err(ClusterError::UnknownTopic(name.to_owned()));
            };
            let settings = change(&topic.settings).map_err(ClusterError::Refused)?;
            if validate_only {
                return Ok(());
            }
            if minibroker_cluster::replace_settings(&*client, &topic, &topic.settings, &settings)
                .await?
            {
                self.hold(&SharedTopic { settings, ..topic })?;
                return Ok(());
            }
        }
    }

    /// Deletes the records of `name`/`partition` below `before` (-1: all of them) for every
    /// broker of the cluster (DeleteRecords); this broker's copy follows at once, the others'
    /// on their next pass, and every read brings its broker's copy up to date first.
    ///
    /// # Errors
    /// The database could not be asked, or the copy cannot follow.
    pub async fn delete_records(
        &self,
        name: &str,
        partition: i32,
        before: i64,
    ) -> Result<Deleted, ClusterError> {
        let Some(topic) = self.topic(name, false).await? else {
            return Ok(Deleted::UnknownPartition);
        };
        let client = self.database.client().await?;
        let deleted =
            minibroker_cluster::delete_records(&*client, topic.id, partition, before).await?;
        if let (Deleted::Start(start), Ok(index)) = (deleted, u32::try_from(partition)) {
            let _one_placement_at_a_time = self.copying.lock().await;
            self.note_start(name, index, start);
            self.broker.follow_committed_start(name, index, start)?;
        }
        Ok(deleted)
    }

    /// Applies every topic's retention (its settings in force on this broker, which are the
    /// cluster's) to what the cluster keeps, as of now; the copies follow the new starts.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn apply_retention(&self) -> Result<(), ClusterError> {
        let topics: Vec<SharedTopic> = self
            .topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let client = self.database.client().await?;
        let now_ms = crate::access::now_ms();
        for topic in topics {
            let Ok(settings) = self.broker.topic_settings(&topic.name) else {
                continue;
            };
            let keep = Keep {
                ms: settings.retention.ms,
                bytes: settings
                    .retention
                    .bytes
                    .map(|bytes| i64::try_from(bytes).unwrap_or(i64::MAX)),
            };
            let moved =
                minibroker_cluster::apply_retention(&*client, topic.id, keep, now_ms).await?;
            for (partition, start_offset) in moved {
                tracing::info!(
                    topic = topic.name,
                    partition,
                    start_offset,
                    "retention deleted the cluster's old batches"
                );
            }
        }
        self.copy_now.notify_one();
        Ok(())
    }

    /// Forgets the cluster's groups idle for `offsets_retention` (no members, nothing waiting
    /// in a transaction, no write), with their committed offsets; returns how many.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn expire_idle_groups(
        &self,
        offsets_retention: Duration,
    ) -> Result<i64, ClusterError> {
        let client = self.database.client().await?;
        let retention_ms = i64::try_from(offsets_retention.as_millis()).unwrap_or(i64::MAX);
        Ok(minibroker_cluster::groups::expire_idle_groups(&*client, retention_ms).await?)
    }

    /// Puts `append` in this broker's next window, to be judged and stored there
    /// ([`Self::outcome`]).
    ///
    /// # Errors
    /// As [`Committer::submit`].
    pub async fn submit(&self, append: Append) -> Result<Pending, AppendError> {
        self.committer.submit(append).await
    }

    /// What the cluster answered a submitted `batch` of `topic`/`partition`, once its window
    /// has committed. An accepted batch that begins where this broker's copy ends is placed in
    /// the copy at once, rather than read back from the database; otherwise (another broker's
    /// batches come first, or a pass of the copy is under way) the copy catches up at once.
    ///
    /// # Errors
    /// As [`Pending::outcome`].
    pub async fn outcome(
        &self,
        pending: Pending,
        topic: &str,
        partition: u32,
        batch: &[u8],
    ) -> Result<Appended, AppendError> {
        let appended = pending.outcome().await;
        let placed = match &appended {
            Ok(appended) if appended.verdict.outcome == minibroker_broker::Outcome::Accepted => {
                appended
                    .verdict
                    .base_offset
                    .is_some_and(|base_offset| self.place_own(topic, partition, base_offset, batch))
            }
            // Nothing new was stored.
            _ => true,
        };
        if !placed {
            self.copy_now.notify_one();
        }
        appended
    }

    /// Places this broker's own committed batch in the copy when it begins at the copy's end
    /// and no pass of the copy is under way (placements never interleave); `false` when it
    /// was left to the copy.
    fn place_own(&self, topic: &str, partition: u32, base_offset: i64, batch: &[u8]) -> bool {
        let Ok(_one_placement_at_a_time) = self.copying.try_lock() else {
            return false;
        };
        match self.broker.offsets(topic, partition) {
            Ok((_, end)) if end == base_offset => self
                .broker
                .place_committed(topic, partition, base_offset, batch)
                .is_ok_and(|placed| placed == Placed::Appended),
            _ => false,
        }
    }

    /// The first offset of `topic`/`partition` in the cluster (Kafka's log start offset), as of
    /// the copy's last pass; `None` for a partition the copy has not seen.
    #[must_use]
    pub fn log_start(&self, topic: &str, partition: u32) -> Option<i64> {
        let copied = self.copied.lock().unwrap_or_else(PoisonError::into_inner);
        let index = usize::try_from(partition).ok()?;
        copied.get(topic)?.get(index)?.start
    }

    /// Records `change` of what the copy knows of `topic`/`partition`, returning what it knew.
    fn note(&self, topic: &str, partition: u32, change: impl FnOnce(&mut Copied)) -> Copied {
        let mut copied = self.copied.lock().unwrap_or_else(PoisonError::into_inner);
        let partitions = match copied.get_mut(topic) {
            Some(partitions) => partitions,
            None => copied.entry(topic.to_owned()).or_default(),
        };
        let index = usize::try_from(partition).unwrap_or(usize::MAX);
        if partitions.len() <= index {
            partitions.resize(index.saturating_add(1), Copied::default());
        }
        let known = partitions[index];
        change(&mut partitions[index]);
        known
    }

    fn note_start(&self, topic: &str, partition: u32, start: i64) {
        self.note(topic, partition, |copied| copied.start = Some(start));
    }

    /// Whether this broker holds `ends`' topic as the cluster has it (its id and settings).
    fn holds_as(&self, ends: &minibroker_cluster::PartitionEnds) -> bool {
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&ends.topic)
            .is_some_and(|known| known.id == ends.topic_id && known.settings == ends.settings)
    }

    /// The batches of `topic`/`partition` from `offset` on, read from the database, at most
    /// `max_bytes` of them (and at least one): for a read below what the copy still holds,
    /// and at or above the cluster's start. `None` when the copy serves the read itself (the
    /// offset is in the copy, past its end, or below the cluster's start).
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn read_older(
        &self,
        topic: &str,
        partition: u32,
        offset: i64,
        max_bytes: usize,
    ) -> Result<Option<Vec<bytes::Bytes>>, ClusterError> {
        let Some((shared, index)) = self.older_than_copy(topic, partition, offset) else {
            return Ok(None);
        };
        let client = self.database.client().await?;
        let stored =
            minibroker_cluster::batches_from(&*client, shared.id, index, offset, OLDER_BATCHES)
                .await?;
        let mut taken = 0;
        let mut batches = Vec::new();
        for batch in stored {
            if !batches.is_empty() && taken + batch.bytes.len() > max_bytes {
                break;
            }
            taken += batch.bytes.len();
            batches.push(batch.bytes);
        }
        Ok(Some(batches))
    }

    /// The aborted transactions of `topic`/`partition` with records in `from..=to`, as the
    /// cluster keeps them: (producer id, first offset), for a read_committed read below the
    /// copy.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn aborted_between(
        &self,
        topic: &str,
        partition: u32,
        from: i64,
        to: i64,
    ) -> Result<Vec<(i64, i64)>, ClusterError> {
        let (Some(shared), Ok(index)) = (self.known_handle(topic), i32::try_from(partition)) else {
            return Ok(Vec::new());
        };
        let client = self.database.client().await?;
        let key = (shared.id, index);
        Ok(minibroker_cluster::transactions::aborted_between(&*client, key, from, to).await?)
    }

    /// The producers of `topic`/`partition` as the cluster's rule holds them (DescribeProducers
    /// through any broker: a copy places batches without the rule). `None` for a partition the
    /// cluster does not have.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn producers(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Option<Vec<minibroker_cluster::ProducerRow>>, ClusterError> {
        let Some(shared) = self.topic(topic, false).await? else {
            return Ok(None);
        };
        let Ok(index) = i32::try_from(partition) else {
            return Ok(None);
        };
        if index >= shared.partitions {
            return Ok(None);
        }
        let client = self.database.client().await?;
        Ok(Some(
            minibroker_cluster::producer_rows(&*client, shared.id, index).await?,
        ))
    }

    /// The offset and timestamp of the record of `topic`/`partition` that `wanted` names
    /// (ListOffsets by time), found in the database, which holds what the copy no longer does.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn offset_by_time(
        &self,
        topic: &str,
        partition: u32,
        wanted: ByTime,
    ) -> Result<Option<(i64, i64)>, ClusterError> {
        let (Some(shared), Ok(index), Some(start)) = (
            self.known_handle(topic),
            i32::try_from(partition),
            self.log_start(topic, partition),
        ) else {
            return Ok(None);
        };
        let client = self.database.client().await?;
        // The batch holding the record, and the timestamp the record has at least.
        let found = match wanted {
            ByTime::AtOrAfter(timestamp) => {
                minibroker_cluster::first_batch_since(&*client, shared.id, index, start, timestamp)
                    .await?
                    .map(|batch| (batch, timestamp))
            }
            ByTime::Largest => {
                minibroker_cluster::batch_of_max_timestamp(&*client, shared.id, index, start)
                    .await?
            }
        };
        Ok(found.and_then(|(batch, timestamp)| {
            minibroker_log::first_record_at_or_after(&batch.bytes, timestamp)
                .map(|(offset, at)| (offset.max(start), at))
        }))
    }

    /// The topic and partition index of a read at `offset` that the copy no longer holds but
    /// the cluster does.
    fn older_than_copy(
        &self,
        topic: &str,
        partition: u32,
        offset: i64,
    ) -> Option<(TopicHandle, i32)> {
        let start = self.log_start(topic, partition)?;
        let (copy_start, _) = self.broker.offsets(topic, partition).ok()?;
        if offset < start || offset >= copy_start {
            return None;
        }
        Some((self.known_handle(topic)?, i32::try_from(partition).ok()?))
    }

    /// Gives up this broker's lease, so it leaves the members at once (a clean stop).
    pub async fn leave(&self) {
        let heartbeat = self
            .heartbeat
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(heartbeat) = heartbeat
            && let Err(error) = heartbeat.leave().await
        {
            tracing::warn!(%error, "could not leave the cluster; the lease runs out on its own");
        }
    }

    fn known_handle(&self, name: &str) -> Option<TopicHandle> {
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .map(TopicHandle::of)
    }

    /// Remembers `topic` and makes the copy hold it, with its settings.
    fn hold(&self, topic: &SharedTopic) -> Result<(), BrokerError> {
        let partitions = u32::try_from(topic.partitions).unwrap_or(0);
        self.broker.hold_topic(&topic.name, partitions)?;
        let settings_known = self
            .topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&topic.name)
            .is_some_and(|known| known.settings == topic.settings);
        if !settings_known {
            let settings: Vec<(&str, &str)> = topic
                .settings
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .collect();
            if let Err(error) = self
                .broker
                .replace_topic_settings(&topic.name, &settings, false)
            {
                tracing::warn!(topic = topic.name, %error,
                    "this broker cannot apply the topic's settings the cluster has; it keeps its own");
            }
        }
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.name.clone(), topic.clone());
        Ok(())
    }

    /// Brings this broker's copy up to what the cluster has committed now: every partition
    /// whose end is past the copy's gets the batches in between. Every read calls it first
    /// (Fetch, ListOffsets), since another broker may have acknowledged a batch a moment ago
    /// and a read's high watermark must cover it. Reads that arrive together share a pass: one
    /// that waited for a pass begun after it arrived is served by that pass.
    ///
    /// # Errors
    /// The database could not be read, or the copy cannot hold what it has.
    pub async fn catch_up(&self) -> Result<(), ClusterError> {
        use std::sync::atomic::Ordering;
        let begun_before = self.passes.load(Ordering::Acquire);
        let _one_pass_at_a_time = self.copying.lock().await;
        if self.passes.load(Ordering::Acquire) > begun_before {
            return Ok(());
        }
        self.passes.fetch_add(1, Ordering::AcqRel);
        let client = self.database.client().await?;
        let all_ends = minibroker_cluster::partition_ends(&*client).await?;
        // The copy is a cache: each partition's holds at most `cluster_cache_bytes`, and all
        // of them together at most half the broker's storage limit.
        let held = u64::try_from(all_ends.len()).unwrap_or(u64::MAX).max(1);
        let cache_bytes = self
            .cache_bytes
            .min(self.broker.config().max_stored_bytes / 2 / held);
        let cache_bytes = usize::try_from(cache_bytes).unwrap_or(usize::MAX);
        for ends in all_ends {
            if !self.holds_as(&ends) {
                self.hold(&SharedTopic {
                    id: ends.topic_id,
                    name: ends.topic.clone(),
                    partitions: ends.partitions,
                    settings: ends.settings.clone(),
                })?;
            }
            let Ok(partition) = u32::try_from(ends.partition) else {
                continue;
            };
            let known = self.note(&ends.topic, partition, |copied| {
                copied.start = Some(ends.log_start_offset);
                copied.trimmed_at = ends.high_watermark;
            });
            let (mut start, mut end) = self.broker.offsets(&ends.topic, partition)?;
            if ends.log_start_offset > start {
                start = self.broker.follow_committed_start(
                    &ends.topic,
                    partition,
                    ends.log_start_offset,
                )?;
                // A copy that ended below the new start starts again there.
                if start > end {
                    self.follow_open_transactions(&client, &ends, partition, start)
                        .await?;
                }
                end = end.max(start);
            }
            if start == end && ends.high_watermark - end > COPY_BATCHES {
                // A copy that holds nothing (a broker joining, or one left far behind) starts
                // at the newest batches its bound keeps, not at the cluster's first.
                end = self
                    .start_copy_near_end(&client, &ends, partition, end, cache_bytes)
                    .await?;
            }
            while end < ends.high_watermark {
                let batches = minibroker_cluster::batches_from(
                    &*client,
                    ends.topic_id,
                    ends.partition,
                    end,
                    COPY_BATCHES,
                )
                .await?;
                if batches.is_empty() {
                    break;
                }
                for batch in batches {
                    // Appended, or held already (the copy's start may have moved past it).
                    self.broker.place_committed(
                        &ends.topic,
                        partition,
                        batch.base_offset,
                        &batch.bytes,
                    )?;
                    end = end.max(batch.last_offset + 1);
                }
                self.broker.trim_copy(&ends.topic, partition, cache_bytes)?;
            }
            // This broker's own batches are placed outside a pass: trimmed here too, once the
            // partition has grown since the last trim.
            if known.trimmed_at != ends.high_watermark {
                self.broker.trim_copy(&ends.topic, partition, cache_bytes)?;
            }
        }
        Ok(())
    }
}

/// The record a lookup by time asks for ([`ClusterLink::offset_by_time`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByTime {
    /// The first written at this timestamp or later.
    AtOrAfter(i64),
    /// The first with the largest timestamp (KIP-734).
    Largest,
}

/// A cluster topic's id and partition count: what a produce or a read needs of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicHandle {
    /// The cluster's id of the topic.
    pub id: i64,
    /// Its partition count.
    pub partitions: i32,
}

impl TopicHandle {
    fn of(topic: &SharedTopic) -> Self {
        Self {
            id: topic.id,
            partitions: topic.partitions,
        }
    }
}

/// What the copy's passes learnt of one partition.
#[derive(Debug, Clone, Copy, Default)]
struct Copied {
    /// Its first offset in the cluster: below the copy's own start, reads go to the database.
    start: Option<i64>,
    /// The cluster's high watermark when the copy was last trimmed to its bound.
    trimmed_at: i64,
}

impl ClusterLink {
    /// Tells the copy of `ends`' partition, started again (empty) at `start`, which of the
    /// cluster's transactions begun before it are open.
    async fn follow_open_transactions(
        &self,
        client: &tokio_postgres::Client,
        ends: &minibroker_cluster::PartitionEnds,
        partition: u32,
        start: i64,
    ) -> Result<(), ClusterError> {
        let key = (ends.topic_id, ends.partition);
        let open = minibroker_cluster::transactions::open_before(client, key, start).await?;
        self.broker
            .follow_open_transactions(&ends.topic, partition, &open)?;
        Ok(())
    }

    /// Starts an empty copy of `ends`' partition at the newest batches `cache_bytes` holds,
    /// and returns its end there (`end` when it stays where it is).
    async fn start_copy_near_end(
        &self,
        client: &tokio_postgres::Client,
        ends: &minibroker_cluster::PartitionEnds,
        partition: u32,
        end: i64,
        cache_bytes: usize,
    ) -> Result<i64, ClusterError> {
        let bytes = i64::try_from(cache_bytes).unwrap_or(i64::MAX);
        let tail =
            minibroker_cluster::tail_start(client, ends.topic_id, ends.partition, end, bytes)
                .await?;
        match tail {
            Some(tail) if tail > end => {
                tracing::info!(
                    topic = ends.topic,
                    partition,
                    start_offset = tail,
                    "the copy starts at the newest batches it keeps; older reads go to the database"
                );
                self.broker
                    .follow_committed_start(&ends.topic, partition, tail)?;
                self.follow_open_transactions(client, ends, partition, tail)
                    .await?;
                Ok(tail)
            }
            _ => Ok(end),
        }
    }
}

/// Takes the node id, waiting while a previous run of this broker (killed, so it never gave
/// its lease up) still holds it.
async fn register(
    settings: &ClusterSettings,
    leases: &Arc<Leases>,
) -> Result<Heartbeat, MembershipError> {
    let deadline = tokio::time::Instant::now() + settings.lease + settings.lease / 2;
    loop {
        let registration = Registration::new(settings.member.clone());
        let leases = Arc::clone(leases);
        match Heartbeat::start(&settings.url, registration, settings.lease, leases).await {
            Err(MembershipError::NodeIdTaken { .. }) if tokio::time::Instant::now() < deadline => {
                tracing::info!(
                    node_id = settings.member.node_id,
                    "the node id is held by a live broker; waiting for its lease to run out"
                );
                tokio::time::sleep(settings.lease / 4).await;
            }
            started => return started,
        }
    }
}

/// Retention over what the cluster keeps, every `every` (the broker's
/// `maintenance_interval_ms`): the partitions' old batches, and the groups idle past
/// `offsets_retention`; it ends with the link. Every broker runs it: a second run moves
/// nothing further.
async fn retention(link: Weak<ClusterLink>, every: Duration, offsets_retention: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(strong) = link.upgrade() else { return };
        if let Err(error) = strong.apply_retention().await {
            tracing::warn!(%error, "retention of the cluster's partitions could not run");
        }
        match strong.expire_idle_groups(offsets_retention).await {
            Ok(0) => {}
            Ok(groups) => tracing::info!(groups, "forgot idle groups and their committed offsets"),
            Err(error) => tracing::warn!(%error, "retention of the cluster's groups could not run"),
        }
    }
}

/// The copy's loop: a pass every [`COPY_POLL`], or at once after this broker commits; it ends
/// with the link.
async fn copy(link: Weak<ClusterLink>, copy_now: Arc<Notify>) {
    loop {
        let Some(strong) = link.upgrade() else { return };
        if let Err(error) = strong.catch_up().await {
            tracing::warn!(%error, "the copy of the cluster's partitions could not catch up");
        }
        drop(strong);
        let _polled = tokio::time::timeout(COPY_POLL, copy_now.notified()).await;
    }
}
