//! [`GroupCoordinator`]: every group of the broker, each behind its own lock.

use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

use minibroker_broker::data_dir::DataDir;
use minibroker_broker::{BrokerConfig, ServerError, StorageBudget};

use crate::config::GroupConfig;

use crate::group::{self, Group};
use crate::model::{
    Committed, GroupChange, GroupDescription, GroupError, GroupState, JoinRequest, Joined,
    MAX_MEMBER_METADATA_BYTES, MAX_PROTOCOLS_PER_MEMBER, SavedGroup, TopicPartition, Waiting,
};
use crate::shared::{self, SharedGroups, SharedWrite};
use crate::store::{self, FileState, OffsetStore};

/// The bounds the coordinator enforces.
#[derive(Debug, Clone, Copy)]
struct Limits {
    min_session: Duration,
    max_session: Duration,
    offsets_retention: Duration,
    max_groups: usize,
    max_members: usize,
    /// How often idle groups are looked for (the broker's `maintenance_interval_ms`).
    expiry_interval: Duration,
}

/// How often members' sessions and rebalance deadlines are checked.
const TICK: Duration = Duration::from_millis(100);

/// Most member ids handed out by MEMBER_ID_REQUIRED answers and kept waiting for their first
/// join, across all groups; beyond it the oldest are forgotten (their join is answered
/// UNKNOWN_MEMBER_ID, and the client asks again).
const MAX_ISSUED_IDS: usize = 1000;

/// Bytes charged for each group besides its members and offsets.
const GROUP_BYTES: u64 = 512;

/// One group, with its own locks: a request for one group never waits for another's.
#[derive(Debug)]
struct Slot {
    /// The group's id (also its key in the registry).
    id: String,
    group: Mutex<Group>,
    /// Held while the group is changed and its file written, so its file is written in the
    /// order of its changes (with a data directory); it holds what is known of the file.
    writer: tokio::sync::Mutex<FileState>,
    /// The name of its file (with a data directory).
    file: String,
    /// In a cluster, the epoch of the lease under which this broker took the group over; every
    /// write of it names the epoch, and is refused once the lease is another's.
    epoch: i64,
}

impl Slot {
    fn new(id: String, group: Group, file: String, state: FileState) -> Arc<Self> {
        Self::with_epoch(id, group, file, state, 0)
    }

    fn with_epoch(
        id: String,
        group: Group,
        file: String,
        state: FileState,
        epoch: i64,
    ) -> Arc<Self> {
        Arc::new(Self {
            id,
            group: Mutex::new(group),
            writer: tokio::sync::Mutex::new(state),
            file,
            epoch,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Group> {
        self.group.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The groups by id, and the offsets files they use.
#[derive(Debug, Default)]
struct Registry {
    groups: HashMap<String, Arc<Slot>>,
    /// Every group's file name, and those of removed groups until their file is gone.
    files: HashSet<String>,
}

/// Every group of the broker.
///
/// The registry's lock is held only to find, add or remove a group; each group has its own
/// lock for the work of a request. A group is removed only while nobody else holds it (its
/// `Arc` is the registry's alone), always under the registry's lock and then the group's, so a
/// request never works on a group that is no longer there.
#[derive(Debug)]
pub struct GroupCoordinator {
    registry: Mutex<Registry>,
    /// (group id, member id) pairs handed out by a MEMBER_ID_REQUIRED answer and not yet used;
    /// kept here, not in a group, so that a refused join creates no group.
    issued: Mutex<HashSet<(String, String)>>,
    limits: Limits,
    store: Option<OffsetStore>,
    /// In a cluster: where groups are leased and kept (set once, before the broker serves).
    shared: OnceLock<Arc<dyn SharedGroups>>,
    /// What groups hold is charged here, with everything else the broker keeps.
    budget: Arc<StorageBudget>,
}

impl GroupCoordinator {
    /// A coordinator with the bounds of `config` and a budget of its own of the broker's
    /// default `max_stored_bytes`, its committed offsets kept in `data` (and loaded from there)
    /// when given.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] when stored offsets cannot be read.
    pub fn new(config: &GroupConfig, data: Option<Arc<DataDir>>) -> Result<Self, ServerError> {
        let limit = BrokerConfig::default().max_stored_bytes;
        Self::with_budget(config, data, Arc::new(StorageBudget::new(limit)))
    }

    /// The coordinator of `broker` with the bounds of `config`: its committed offsets kept in
    /// the broker's data directory (if durable) and charged to the broker's storage budget,
    /// idle groups looked for at the broker's `maintenance_interval_ms`.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] when stored offsets cannot be read.
    pub fn for_broker(
        broker: &minibroker_broker::Broker,
        config: &GroupConfig,
    ) -> Result<Self, ServerError> {
        let mut coordinator = Self::with_budget(
            config,
            broker.data_dir().cloned(),
            Arc::clone(broker.budget()),
        )?;
        coordinator.limits.expiry_interval =
            Duration::from_millis(broker.config().maintenance_interval_ms);
        Ok(coordinator)
    }

    /// [`Self::new`], charging what groups hold to `budget`.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] when stored offsets cannot be read.
    pub fn with_budget(
        config: &GroupConfig,
        data: Option<Arc<DataDir>>,
        budget: Arc<StorageBudget>,
    ) -> Result<Self, ServerError> {
        let store = data.map(OffsetStore::new);
        let mut registry = Registry::default();
        if let Some(store) = &store {
            let now = Instant::now();
            for (group_id, file, saved, state) in store.load()? {
                let group = Group::restored(saved, now);
                // What is on disk is kept whatever the budget: it was accepted once.
                budget.charge(GROUP_BYTES + group.bytes());
                registry.files.insert(file.clone());
                let slot = Slot::new(group_id.clone(), group, file, state);
                registry.groups.insert(group_id, slot);
            }
        }
        Ok(Self {
            registry: Mutex::new(registry),
            issued: Mutex::default(),
            limits: Limits {
                min_session: Duration::from_millis(config.group_min_session_timeout_ms),
                max_session: Duration::from_millis(config.group_max_session_timeout_ms),
                offsets_retention: Duration::from_millis(config.offsets_retention_ms),
                max_groups: config.max_groups,
                max_members: config.max_group_members,
                expiry_interval: Duration::from_millis(
                    BrokerConfig::default().maintenance_interval_ms,
                ),
            },
            store,
            shared: OnceLock::new(),
            budget,
        })
    }

    /// Makes this the group coordinator of a broker of a cluster: a group is served only under
    /// its lease, and kept in `shared` (see `shared`). Set before the broker serves; a second
    /// call changes nothing.
    pub fn share(&self, shared: Arc<dyn SharedGroups>) {
        let _already = self.shared.set(shared);
    }

    /// In a cluster, makes sure this broker holds `group_id`'s lease and has the group as the
    /// cluster keeps it: taken over afresh (a new generation, the committed offsets) when the
    /// lease is newly this broker's. Nothing to do on a broker of its own.
    ///
    /// # Errors
    /// [`GroupError::NotCoordinator`] when another broker holds the lease; a storage error.
    pub async fn ensure_coordinator(&self, group_id: &str) -> Result<(), GroupError> {
        let Some(shared) = self.shared.get() else {
            return Ok(());
        };
        if let Some(slot) = self.find(group_id)
            && shared.epoch(group_id) == Some(slot.epoch)
        {
            return Ok(());
        }
        let claimed = shared.claim(group_id).await?;
        let epoch = claimed.epoch;
        let mut registry = self.registry();
        if let Some(slot) = registry.groups.get(group_id)
            && slot.epoch == epoch
        {
            // Taken by a request that came meanwhile.
            return Ok(());
        }
        let group = shared::taken_over(claimed, Instant::now());
        let bytes = GROUP_BYTES + group.bytes();
        if let Some(old) = registry.groups.get(group_id) {
            self.budget.release(GROUP_BYTES + old.lock().bytes());
        } else if registry.groups.len() >= self.limits.max_groups {
            return Err(GroupError::TooManyGroups(self.limits.max_groups));
        }
        // What the cluster keeps is taken whatever the budget: it was accepted once.
        self.budget.charge(bytes);
        let slot = Slot::with_epoch(
            group_id.to_owned(),
            group,
            group_id.to_owned(),
            FileState::default(),
            epoch,
        );
        registry.groups.insert(group_id.to_owned(), slot);
        Ok(())
    }

    /// In a cluster, whether this broker still holds `group_id`'s lease, for the requests of
    /// members that do not wait for the database (syncs, heartbeats, leaves). Under a lease it
    /// took again, no member of the group it held before is known: they join again.
    fn coordinates(&self, group_id: &str) -> Result<(), GroupError> {
        let Some(shared) = self.shared.get() else {
            return Ok(());
        };
        let Some(epoch) = shared.epoch(group_id) else {
            return Err(GroupError::NotCoordinator);
        };
        match self.find(group_id) {
            Some(slot) if slot.epoch != epoch => Err(GroupError::UnknownMemberId),
            _ => Ok(()),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The group `group_id`, if there is one.
    fn find(&self, group_id: &str) -> Option<Arc<Slot>> {
        self.registry().groups.get(group_id).cloned()
    }

    /// The group `group_id`, or a new empty one if the broker has room for another.
    fn find_or_add(&self, group_id: &str) -> Result<Arc<Slot>, GroupError> {
        let mut registry = self.registry();
        if let Some(slot) = registry.groups.get(group_id) {
            return Ok(Arc::clone(slot));
        }
        if registry.groups.len() >= self.limits.max_groups {
            return Err(GroupError::TooManyGroups(self.limits.max_groups));
        }
        if !self.budget.try_charge(GROUP_BYTES) {
            return Err(GroupError::StorageFull(self.budget.max()));
        }
        let file = if self.store.is_some() {
            let file = store::file_name(group_id, &registry.files);
            registry.files.insert(file.clone());
            file
        } else {
            String::new()
        };
        let slot = Slot::new(
            group_id.to_owned(),
            Group::default(),
            file,
            FileState::new_group(),
        );
        registry
            .groups
            .insert(group_id.to_owned(), Arc::clone(&slot));
        Ok(slot)
    }

    /// Removes the group `group_id` if nobody else holds it and `gone` says so of it; returns
    /// where it was kept if it had offsets kept (the caller removes them, then
    /// [`Self::forget_file`]s the name).
    fn remove_if(&self, group_id: &str, gone: impl Fn(&Group) -> bool) -> Option<Option<Kept>> {
        let mut registry = self.registry();
        let slot = registry.groups.get(group_id)?;
        if Arc::strong_count(slot) > 1 {
            return None;
        }
        let group = slot.lock();
        if !gone(&group) {
            return None;
        }
        let had_offsets = !group.offsets.is_empty() || group.saved;
        self.budget.release(GROUP_BYTES + group.bytes());
        drop(group);
        let slot = registry.groups.remove(group_id)?;
        if had_offsets {
            Some(Some(Kept {
                file: slot.file.clone(),
                epoch: slot.epoch,
            }))
        } else {
            registry.files.remove(&slot.file);
            Some(None)
        }
    }

    fn forget_file(&self, file: &str) {
        self.registry().files.remove(file);
    }

    /// Applies `change` to `slot`'s group, charging what it added to the budget (which
    /// `needs` bytes must fit first) and releasing what it freed.
    fn apply<T>(
        &self,
        slot: &Slot,
        needs: u64,
        change: impl FnOnce(&mut Group) -> Result<T, GroupError>,
    ) -> Result<T, GroupError> {
        if needs > 0 && !self.budget.has_room(needs) {
            return Err(GroupError::StorageFull(self.budget.max()));
        }
        let mut group = slot.lock();
        let before = group.bytes();
        let result = change(&mut group);
        let after = group.bytes();
        if after > before {
            self.budget.charge(after - before);
        } else {
            self.budget.release(before - after);
        }
        result
    }

    /// Applies `change` to the group `group_id`, or to a new empty one if the broker has room
    /// for another; a group left with neither members nor offsets goes at once, so a refused
    /// request creates no group.
    fn with_group<T>(
        &self,
        group_id: &str,
        needs: u64,
        change: impl FnOnce(&mut Group) -> Result<T, GroupError>,
    ) -> Result<T, GroupError> {
        let slot = self.find_or_add(group_id)?;
        let result = self.apply(&slot, needs, change);
        drop(slot);
        self.remove_if(group_id, Group::is_empty_unsaved);
        result
    }

    /// Applies `change` to the group `group_id`, if there is one.
    fn with_existing<T>(
        &self,
        group_id: &str,
        change: impl FnOnce(&mut Group) -> Result<T, GroupError>,
    ) -> Option<Result<T, GroupError>> {
        let slot = self.find(group_id)?;
        let result = self.apply(&slot, 0, change);
        drop(slot);
        self.remove_if(group_id, Group::is_empty_unsaved);
        Some(result)
    }

    /// Joins (or rejoins) a group and waits for the rebalance to complete.
    ///
    /// # Errors
    /// [`GroupError`] for a request the group refuses.
    pub async fn join(&self, request: JoinRequest) -> Result<Joined, GroupError> {
        let group_id = request.group_id.clone();
        if !group_id.is_empty() {
            self.ensure_coordinator(&group_id).await?;
        }
        let waiting = self.begin_join(request)?;
        let joined = waiting
            .await
            .unwrap_or(Err(GroupError::RebalanceInProgress))?;
        // The generation is on disk before anyone learns it: a restart never opens it again.
        self.save_membership_of(&group_id).await?;
        Ok(joined)
    }

    fn begin_join(&self, request: JoinRequest) -> Result<Waiting<Joined>, GroupError> {
        if request.group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        let session = request.session_timeout;
        if session < self.limits.min_session || session > self.limits.max_session {
            return Err(GroupError::InvalidSessionTimeout {
                min: self.limits.min_session.as_millis() as u64,
                max: self.limits.max_session.as_millis() as u64,
            });
        }
        if request.protocols.len() > MAX_PROTOCOLS_PER_MEMBER {
            return Err(GroupError::TooMuchMetadata(format!(
                "{} protocols (at most {MAX_PROTOCOLS_PER_MEMBER})",
                request.protocols.len()
            )));
        }
        let metadata: usize = request.protocols.iter().map(|(_, m)| m.len()).sum();
        if metadata > MAX_MEMBER_METADATA_BYTES {
            return Err(GroupError::TooMuchMetadata(format!(
                "{metadata} bytes of protocol metadata (at most {MAX_MEMBER_METADATA_BYTES})"
            )));
        }
        // A rebalance waits for a member at most as long as the longest session allowed, so
        // one member cannot hold its group in a rebalance for weeks.
        let request = JoinRequest {
            rebalance_timeout: request.rebalance_timeout.min(self.limits.max_session),
            ..request
        };
        let issued = !request.member_id.is_empty()
            && self
                .issued()
                .remove(&(request.group_id.clone(), request.member_id.clone()));
        let group_id = request.group_id.clone();
        // As Kafka: the client's id and a random UUID, so an id is never handed out twice, not
        // even across a restart that kept the group's members.
        let new_member_id = || {
            let client = if request.client_id.is_empty() {
                "member"
            } else {
                &request.client_id
            };
            format!("{client}-{}", uuid::Uuid::new_v4())
        };
        let needs = group::join_bytes(&request);
        let joined = self.with_group(&group_id, needs, |group| {
            if group.member_count() >= self.limits.max_members
                && !group.is_member(&request.member_id)
            {
                return Err(GroupError::GroupFull(self.limits.max_members));
            }
            group.join(request.clone(), issued, new_member_id, Instant::now())
        });
        if let Err(GroupError::MemberIdRequired(member_id)) = &joined {
            let mut pending = self.issued();
            if pending.len() >= MAX_ISSUED_IDS {
                pending.clear();
            }
            pending.insert((group_id, member_id.clone()));
        }
        joined
    }

    fn issued(&self) -> MutexGuard<'_, HashSet<(String, String)>> {
        self.issued.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends the leader's assignment (or, for the others, waits for it) and returns this
    /// member's share.
    ///
    /// # Errors
    /// [`GroupError`] for a request the group refuses.
    pub async fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
    ) -> Result<Bytes, GroupError> {
        let needs = assignments.iter().map(|(_, a)| a.len() as u64).sum();
        self.coordinates(group_id)?;
        let slot = self.find(group_id).ok_or(GroupError::UnknownMemberId)?;
        let waiting = self.apply(&slot, needs, |group| {
            group.sync(generation, member_id, assignments, Instant::now())
        })?;
        drop(slot);
        let assignment = waiting
            .await
            .unwrap_or(Err(GroupError::RebalanceInProgress))?;
        // The assignment is on disk before any member acts on it, as in Kafka.
        self.save_membership_of(group_id).await?;
        Ok(assignment)
    }

    /// Writes `group_id`'s file if a generation opened or an assignment completed since it
    /// was last written (one write serves every member waiting for it).
    async fn save_membership_of(&self, group_id: &str) -> Result<(), GroupError> {
        match self.find(group_id) {
            Some(slot) => self.save_membership(&slot).await,
            None => Ok(()),
        }
    }

    /// [`Self::save_membership_of`] for `slot`'s group.
    async fn save_membership(&self, slot: &Slot) -> Result<(), GroupError> {
        if let Some(shared) = self.shared.get() {
            return self.share_membership(shared.as_ref(), slot).await;
        }
        let Some(store) = &self.store else {
            return Ok(());
        };
        let mut file = slot.writer.lock().await;
        let write = {
            let mut group = slot.lock();
            if !group.membership_unsaved() {
                return Ok(());
            }
            let membership = GroupChange::Membership(group.membership_for_file());
            Write::of(&file, &mut group, membership)
        };
        self.write(store, slot, &mut file, write).await
    }

    /// [`Self::save_membership`] in a cluster: the membership goes to the cluster's database.
    async fn share_membership(
        &self,
        shared: &dyn SharedGroups,
        slot: &Slot,
    ) -> Result<(), GroupError> {
        let _writer = slot.writer.lock().await;
        let (membership, changes) = {
            let mut group = slot.lock();
            if !group.membership_unsaved() {
                return Ok(());
            }
            group.mark_saved();
            (shared::membership_of(&group), group.membership_changes())
        };
        self.share_write(shared, slot, SharedWrite::Membership(membership))
            .await?;
        slot.lock().membership_saved(changes);
        Ok(())
    }

    /// Writes `write` of `slot`'s group to the cluster's database; when the lease turns out to
    /// be another's, the group is dropped from this broker (its members find the new one).
    async fn share_write(
        &self,
        shared: &dyn SharedGroups,
        slot: &Slot,
        write: SharedWrite,
    ) -> Result<(), GroupError> {
        let written = shared.write(&slot.id, slot.epoch, write).await;
        if written == Err(GroupError::NotCoordinator) {
            self.drop_group(&slot.id, slot.epoch);
        }
        written
    }

    /// Drops group `group_id` taken over at `epoch` from this broker, whoever holds it: its
    /// lease is another's, and what this broker still holds of it must not be served.
    fn drop_group(&self, group_id: &str, epoch: i64) {
        let mut registry = self.registry();
        if let Some(slot) = registry.groups.get(group_id)
            && slot.epoch == epoch
        {
            self.budget.release(GROUP_BYTES + slot.lock().bytes());
            registry.groups.remove(group_id);
            tracing::info!(group = group_id, "another broker coordinates the group now");
        }
    }

    /// Writes `write` to `slot`'s file, whose state `file` is (its writer lock, which the
    /// caller holds), and notes what membership the file now holds.
    async fn write(
        &self,
        store: &OffsetStore,
        slot: &Slot,
        file: &mut FileState,
        write: Write,
    ) -> Result<(), GroupError> {
        let membership = match write {
            Write::Whole(saved, changes) => {
                let bytes = store.save_whole(&slot.file, slot.id.clone(), saved).await?;
                *file = FileState {
                    bytes,
                    whole_needed: false,
                };
                Some(changes)
            }
            Write::Change(change, changes) => {
                match store.append(&slot.file, file.bytes, &change).await {
                    Ok(added) => file.bytes += added,
                    Err(error) => {
                        // What the file holds past its last whole record is unknown: the next
                        // write replaces it.
                        file.whole_needed = true;
                        return Err(error);
                    }
                }
                changes
            }
        };
        if let Some(changes) = membership {
            slot.lock().membership_saved(changes);
        }
        Ok(())
    }

    /// A member's heartbeat.
    ///
    /// # Errors
    /// [`GroupError::RebalanceInProgress`] tells the member to join again.
    pub fn heartbeat(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
    ) -> Result<(), GroupError> {
        self.coordinates(group_id)?;
        let slot = self.find(group_id).ok_or(GroupError::UnknownMemberId)?;
        slot.lock().heartbeat(generation, member_id, Instant::now())
    }

    /// Members leaving; the answer for each, in order.
    pub fn leave(&self, group_id: &str, members: &[String]) -> Vec<Result<(), GroupError>> {
        if let Err(error) = self.coordinates(group_id) {
            return members.iter().map(|_| Err(error.clone())).collect();
        }
        self.with_existing(group_id, |group| Ok(group.leave(members, Instant::now())))
            .and_then(Result::ok)
            .unwrap_or_else(|| {
                members
                    .iter()
                    .map(|_| Err(GroupError::UnknownMemberId))
                    .collect()
            })
    }

    /// Commits offsets for a group: by a member of its current generation, or — with
    /// generation -1 and no member id — by a consumer outside any generation, for a group
    /// with no members. With a data directory the group's offsets are on disk before this
    /// returns.
    ///
    /// # Errors
    /// [`GroupError`] for a commit the group refuses, or [`GroupError::Storage`].
    pub async fn commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        offsets: Vec<(String, i32, i64, Option<String>)>,
    ) -> Result<(), GroupError> {
        let member =
            (generation >= 0 || !member_id.is_empty()).then(|| (generation, member_id.to_owned()));
        self.commit_with(group_id, member, offsets, |group, offsets, commit_ms| {
            let change = GroupChange::Committed(committed(&offsets, commit_ms));
            group.commit(generation, member_id, offsets, commit_ms, Instant::now())?;
            Ok(((), Some(change)))
        })
        .await
    }

    /// What both commits do: `commit` the offsets to the group (created if need be, within the
    /// budget), durably, and the group goes at once if that left it empty.
    async fn commit_with<T>(
        &self,
        group_id: &str,
        member: Option<(i32, String)>,
        offsets: Vec<(String, i32, i64, Option<String>)>,
        commit: impl FnOnce(
            &mut Group,
            Vec<(String, i32, i64, Option<String>)>,
            i64,
        ) -> Result<(T, Option<GroupChange>), GroupError>,
    ) -> Result<T, GroupError> {
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        self.ensure_coordinator(group_id).await?;
        let commit_ms = minibroker_records::now_millis();
        let needs = offsets
            .iter()
            .map(|(topic, _, _, metadata)| group::offset_bytes(topic, metadata.as_deref()))
            .sum();
        let slot = self.find_or_add(group_id)?;
        let result = self
            .change_offsets(&slot, needs, member, |group| {
                commit(group, offsets, commit_ms)
            })
            .await;
        drop(slot);
        self.remove_if_empty(group_id).await?;
        result
    }

    /// Applies `change` to `slot`'s group and, with a data directory, writes what it changed
    /// (the [`GroupChange`] it returns, if any) to the group's file before returning. One
    /// writer per group at a time, each writing its change in the order the changes were made,
    /// so the file never goes back to an older state; other groups' commits go on meanwhile.
    async fn change_offsets<T>(
        &self,
        slot: &Slot,
        needs: u64,
        member: Option<(i32, String)>,
        change: impl FnOnce(&mut Group) -> Result<(T, Option<GroupChange>), GroupError>,
    ) -> Result<T, GroupError> {
        if let Some(shared) = self.shared.get() {
            return self
                .share_offsets(shared.as_ref(), slot, needs, member, change)
                .await;
        }
        let Some(store) = &self.store else {
            return self.apply(slot, needs, |group| Ok(change(group)?.0));
        };
        let mut file = slot.writer.lock().await;
        let (result, write) = self.apply(slot, needs, |group| {
            let (result, change) = change(group)?;
            Ok((result, change.map(|change| Write::of(&file, group, change))))
        })?;
        if let Some(write) = write {
            self.write(store, slot, &mut file, write).await?;
        }
        Ok(result)
    }

    /// [`Self::change_offsets`] in a cluster: what the change made is written to the cluster's
    /// database (with the committing `member`, which it checks too) before this returns. A
    /// write that fails drops the group from this broker, so that it never serves what the
    /// database does not hold: the next request takes it over again from the database.
    async fn share_offsets<T>(
        &self,
        shared: &dyn SharedGroups,
        slot: &Slot,
        needs: u64,
        member: Option<(i32, String)>,
        change: impl FnOnce(&mut Group) -> Result<(T, Option<GroupChange>), GroupError>,
    ) -> Result<T, GroupError> {
        let _writer = slot.writer.lock().await;
        let (result, write) = self.apply(slot, needs, |group| {
            let (result, made) = change(group)?;
            let write = match made {
                None => Ok(None),
                Some(GroupChange::Committed(offsets)) => {
                    Ok(Some(SharedWrite::Commit { member, offsets }))
                }
                Some(GroupChange::Deleted(partitions)) => Ok(Some(SharedWrite::Forget(partitions))),
                Some(GroupChange::Membership(_)) => {
                    Ok(Some(SharedWrite::Membership(shared::membership_of(group))))
                }
                Some(GroupChange::Pending(..) | GroupChange::Ended(..)) => {
                    Err(GroupError::Storage(crate::model::StoreFailure::new(
                        "keeping a transaction's offsets",
                        std::io::Error::other("transactions are not served by a cluster yet"),
                    )))
                }
            };
            if matches!(write, Ok(Some(_))) {
                group.mark_saved();
            }
            Ok((result, write))
        })?;
        let written = match write {
            Ok(None) => Ok(()),
            Ok(Some(write)) => self.share_write(shared, slot, write).await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            self.drop_group(&slot.id, slot.epoch);
            return Err(error);
        }
        Ok(result)
    }

    /// TxnOffsetCommit: offsets committed in `producer_id`'s open transaction, which the group
    /// shows only once [`Self::end_transaction`] commits them. With a data directory they are on
    /// disk before this returns, so a crash before the transaction ends loses none.
    ///
    /// # Errors
    /// [`GroupError`] for a member or generation the group refuses, or [`GroupError::Storage`].
    pub async fn commit_in_transaction(
        &self,
        group_id: &str,
        producer_id: i64,
        (generation, member_id): (i32, &str),
        offsets: Vec<(String, i32, i64, Option<String>)>,
    ) -> Result<(), GroupError> {
        let allowed = || Ok::<(), std::convert::Infallible>(());
        let committed = self
            .commit_in_transaction_if(
                group_id,
                producer_id,
                (generation, member_id),
                offsets,
                allowed,
            )
            .await?;
        match committed {
            Ok(()) => Ok(()),
            Err(never) => match never {},
        }
    }

    /// [`Self::commit_in_transaction`], if `allowed` (asked under the group's lock, just before
    /// the offsets are kept) says the transaction may still commit them; its refusal otherwise,
    /// with nothing changed.
    ///
    /// The transaction coordinator asks here whether the producer is still current: an end of
    /// the transaction settles the group's offsets under the same lock, so a check made before
    /// a fence has its offsets kept before the fence's abort drops them, and a check after it
    /// is refused. Checked any earlier, a zombie's offsets could wait for the group's writer
    /// through a fence and land in its successor's transaction.
    ///
    /// # Errors
    /// As [`Self::commit_in_transaction`].
    pub async fn commit_in_transaction_if<E>(
        &self,
        group_id: &str,
        producer_id: i64,
        (generation, member_id): (i32, &str),
        offsets: Vec<(String, i32, i64, Option<String>)>,
        allowed: impl FnOnce() -> Result<(), E>,
    ) -> Result<Result<(), E>, GroupError> {
        let member = Some((generation, member_id.to_owned()));
        self.commit_with(group_id, member, offsets, |group, offsets, commit_ms| {
            if let Err(refused) = allowed() {
                return Ok((Err(refused), None));
            }
            let member = (generation, member_id);
            let change = GroupChange::Pending(producer_id, committed(&offsets, commit_ms));
            group.commit_in_transaction(producer_id, member, offsets, commit_ms, Instant::now())?;
            Ok((Ok(()), Some(change)))
        })
        .await
    }

    /// TxnOffsetCommit in a cluster: the offsets wait in the cluster's database for the end of
    /// the transaction `(transactional id, producer id, epoch)`, which the database checks is
    /// open and has added the group (this broker may coordinate the group and not the
    /// transaction). The member, when given, must be current here and in the database. The
    /// group's memory is not changed: an end settles the offsets in the database, where every
    /// broker reads them.
    ///
    /// # Errors
    /// [`GroupError::NotCoordinator`]; the member's refusal; the transaction's refusal (as a
    /// storage error naming it when the database refused for another reason).
    pub async fn commit_in_shared_transaction(
        &self,
        group_id: &str,
        (transactional_id, producer_id, epoch): (&str, i64, i16),
        (generation, member_id): (i32, &str),
        offsets: Vec<(String, i32, i64, Option<String>)>,
    ) -> Result<(), GroupError> {
        let Some(shared) = self.shared.get() else {
            return Err(GroupError::NotCoordinator);
        };
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        self.ensure_coordinator(group_id).await?;
        let slot = self.find(group_id).ok_or(GroupError::NotCoordinator)?;
        let checked = generation >= 0 || !member_id.is_empty();
        if checked {
            slot.lock()
                .check_member(generation, member_id, Instant::now())?;
        }
        let write = SharedWrite::Pending {
            transaction: (transactional_id.to_owned(), producer_id, epoch),
            member: checked.then(|| (generation, member_id.to_owned())),
            offsets: committed(&offsets, minibroker_records::now_millis()),
        };
        self.share_write(shared.as_ref(), &slot, write).await
    }

    /// The end of `producer_id`'s transaction for the group: the offsets it committed in it
    /// become the group's (`commit`) or are dropped, durably before this returns. A group the
    /// transaction left nothing in is not touched.
    ///
    /// # Errors
    /// [`GroupError::Storage`]: the offsets file could not be written (the end is retried).
    pub async fn end_transaction(
        &self,
        group_id: &str,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), GroupError> {
        let Some(slot) = self.find(group_id) else {
            return Ok(());
        };
        if !slot.lock().has_transaction(producer_id) {
            return Ok(());
        }
        let result = self
            .change_offsets(&slot, 0, None, |group| {
                group.end_transaction(producer_id, commit);
                Ok(((), Some(GroupChange::Ended(producer_id, commit))))
            })
            .await;
        drop(slot);
        // An abort may leave the group with nothing: it goes, with its file.
        self.remove_if_empty(group_id).await?;
        result
    }

    /// Whether an open transaction holds an offset of `partition` for the group (OffsetFetch
    /// with `require_stable` answers UNSTABLE_OFFSET_COMMIT then).
    #[must_use]
    pub fn has_pending(&self, group_id: &str, partition: &TopicPartition) -> bool {
        self.find(group_id)
            .is_some_and(|slot| slot.lock().has_pending(partition))
    }

    /// The committed offsets of `partitions` of the group (all of them when `None`); a
    /// partition with none is left out.
    #[must_use]
    pub fn committed(
        &self,
        group_id: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Vec<(TopicPartition, Committed)> {
        let Some(slot) = self.find(group_id) else {
            return Vec::new();
        };
        let group = slot.lock();
        match partitions {
            None => group.all_offsets(),
            Some(wanted) => wanted
                .iter()
                .filter_map(|key| group.offsets.get(key).map(|c| (key.clone(), c.clone())))
                .collect(),
        }
    }

    /// Every group (references only: the ticks walk them several times a second).
    fn slots(&self) -> Vec<Arc<Slot>> {
        self.registry().groups.values().cloned().collect()
    }

    /// Every group: id, protocol type, state.
    #[must_use]
    pub fn list(&self) -> Vec<(String, String, GroupState)> {
        let mut groups: Vec<_> = self
            .slots()
            .into_iter()
            .map(|slot| {
                let group = slot.lock();
                (slot.id.clone(), group.protocol_type(), group.state())
            })
            .collect();
        groups.sort();
        groups
    }

    /// A group's state and members; an unknown group is `Dead` with none.
    #[must_use]
    pub fn describe(&self, group_id: &str) -> GroupDescription {
        self.find(group_id)
            .map_or_else(GroupDescription::dead, |slot| slot.lock().describe())
    }

    /// Deletes a group with no members, and its committed offsets.
    ///
    /// # Errors
    /// [`GroupError::GroupIdNotFound`], [`GroupError::NonEmptyGroup`] (also while a request
    /// for the group is being served), or [`GroupError::Storage`].
    pub async fn delete(&self, group_id: &str) -> Result<(), GroupError> {
        self.ensure_coordinator(group_id).await?;
        if self.find(group_id).is_none() {
            return Err(GroupError::GroupIdNotFound);
        }
        let removed = self
            .remove_if(group_id, |group| !group.has_members())
            .ok_or(GroupError::NonEmptyGroup)?;
        self.remove_file(removed, Removal::Deleted).await
    }

    /// OffsetDelete: forgets `group_id`'s committed offsets of `partitions` (durably, with a
    /// data directory), but not those of topics its members consume (see `Group`); each
    /// partition's outcome in order. `subscribed` reads the topics from a member's metadata.
    ///
    /// # Errors
    /// [`GroupError::GroupIdNotFound`], [`GroupError::NonEmptyGroup`] for a non-consumer group
    /// with members, or [`GroupError::Storage`].
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
        subscribed: &(dyn Fn(&[u8]) -> Vec<String> + Sync),
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        self.ensure_coordinator(group_id).await?;
        let slot = self.find(group_id).ok_or(GroupError::GroupIdNotFound)?;
        let outcomes = self
            .change_offsets(&slot, 0, None, |group| {
                let outcomes = group.delete_offsets(partitions, subscribed)?;
                let deleted: Vec<TopicPartition> = partitions
                    .iter()
                    .zip(&outcomes)
                    .filter(|(_, outcome)| outcome.is_ok())
                    .map(|(partition, _)| partition.clone())
                    .collect();
                let change = (!deleted.is_empty()).then_some(GroupChange::Deleted(deleted));
                Ok((outcomes, change))
            })
            .await;
        drop(slot);
        // A group left with no members and no offsets goes, as after a commit.
        self.remove_if_empty(group_id).await?;
        outcomes
    }

    /// Removes the group `group_id` if it holds nothing (and nobody else holds it), with its
    /// file.
    async fn remove_if_empty(&self, group_id: &str) -> Result<(), GroupError> {
        let file = self.remove_if(group_id, Group::is_empty).flatten();
        self.remove_file(file, Removal::Emptied).await
    }

    /// Removes a removed group's file, if it had one, then frees its name. In a cluster, a
    /// group DeleteGroups removed goes from the cluster's database too; one that only emptied
    /// here stays there: what this broker holds of it may not be all the database does (its
    /// transactions' offsets are settled there).
    async fn remove_file(&self, kept: Option<Kept>, removal: Removal) -> Result<(), GroupError> {
        let Some(Kept { file, epoch }) = kept else {
            return Ok(());
        };
        if let Some(shared) = self.shared.get() {
            // In a cluster the group's "file" is its id.
            let removed = match removal {
                Removal::Deleted => shared.write(&file, epoch, SharedWrite::Remove).await,
                Removal::Emptied => Ok(()),
            };
            self.forget_file(&file);
            return removed;
        }
        let Some(store) = &self.store else {
            return Ok(());
        };
        let removed = store.remove(&file).await;
        if removed.is_ok() {
            self.forget_file(&file);
        }
        removed
    }

    /// The coordinator's clock, for as long as the returned future runs (the host spawns it,
    /// and drops it at shutdown): [`Self::tick`] every 100 ms, and [`Self::expire_offsets`]
    /// every `maintenance_interval_ms`.
    pub async fn run(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_expiry = Instant::now();
        loop {
            ticks.tick().await;
            self.tick();
            self.save_changes().await;
            if last_expiry.elapsed() >= self.limits.expiry_interval {
                last_expiry = Instant::now();
                let groups = self.expire_offsets(minibroker_records::now_millis()).await;
                if groups > 0 {
                    tracing::info!(groups, "forgot idle groups and their committed offsets");
                }
            }
        }
    }

    /// Removes members whose session expired and completes rebalances whose time is up;
    /// [`Self::run`] calls it ten times a second.
    pub fn tick(&self) {
        let now = Instant::now();
        for slot in self.slots() {
            let empty = self
                .apply(&slot, 0, |group| {
                    group.tick(now);
                    Ok(group.is_empty())
                })
                .unwrap_or(false);
            // A group whose last member left and that holds no offsets goes at once (Kafka's
            // coordinator drops such a group as it empties), so it holds no place of
            // `max_groups`; one with a file goes in [`Self::save_changes`], with its file.
            if empty {
                let id = slot.id.clone();
                drop(slot);
                self.remove_if(&id, Group::is_empty_unsaved);
            }
        }
    }

    /// Writes the membership of groups whose generation opened or emptied outside a member's
    /// request (a session expired, a rebalance timed out, the last member left), and removes
    /// groups left with nothing, with their files; [`Self::run`] calls it after each tick.
    pub async fn save_changes(&self) {
        if let Some(shared) = self.shared.get() {
            for slot in self.slots() {
                if shared.epoch(&slot.id) != Some(slot.epoch) {
                    // The lease lapsed (the broker was paused, or could not renew it): its
                    // members find the coordinator again, which may be this broker.
                    self.drop_group(&slot.id, slot.epoch);
                }
            }
        }
        for slot in self.slots() {
            let (unsaved, empty) = {
                let group = slot.lock();
                (group.membership_unsaved(), group.is_empty())
            };
            if empty {
                let id = slot.id.clone();
                drop(slot);
                if let Err(error) = self.remove_if_empty(&id).await {
                    tracing::warn!(%error, group = id, "could not remove an empty group's file");
                }
            } else if unsaved && let Err(error) = self.save_membership(&slot).await {
                tracing::warn!(%error, group = slot.id, "could not save a group's members");
            }
        }
    }

    /// Forgets groups that have had no members and no commit for `offsets_retention_ms`
    /// (Kafka's `offsets.retention.minutes`, 7 days), and their files; returns how many.
    pub async fn expire_offsets(&self, now_ms: i64) -> usize {
        let retention =
            i64::try_from(self.limits.offsets_retention.as_millis()).unwrap_or(i64::MAX);
        let expired: Vec<String> = self
            .slots()
            .into_iter()
            .filter(|slot| slot.lock().expired(now_ms, retention))
            .map(|slot| slot.id.clone())
            .collect();
        let mut count = 0;
        for id in expired {
            let Some(file) = self.remove_if(&id, |group| group.expired(now_ms, retention)) else {
                continue;
            };
            count += 1;
            if let Err(error) = self.remove_file(file, Removal::Emptied).await {
                tracing::warn!(%error, group = id, "could not remove an expired group's offsets");
            }
        }
        count
    }
}

/// Why a group was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    /// DeleteGroups.
    Deleted,
    /// It held nothing more here (or sat idle past the offsets' retention).
    Emptied,
}

/// Where a removed group's offsets were kept: its file (in a cluster, its id) and the epoch of
/// the lease it was taken over under (0 on a broker of its own).
#[derive(Debug)]
struct Kept {
    file: String,
    epoch: i64,
}

/// Offsets as a commit's request gives them, as the group keeps them.
fn committed(
    offsets: &[(String, i32, i64, Option<String>)],
    commit_ms: i64,
) -> Vec<(TopicPartition, Committed)> {
    offsets
        .iter()
        .map(|(topic, partition, offset, metadata)| {
            let committed = Committed {
                offset: *offset,
                metadata: metadata.clone(),
                commit_ms,
            };
            ((topic.clone(), *partition), committed)
        })
        .collect()
}

/// What a change writes to its group's file: the whole group, with the membership changes it
/// holds, or the change alone (with them, for a membership change).
enum Write {
    Whole(SavedGroup, u64),
    Change(GroupChange, Option<u64>),
}

impl Write {
    /// What `change`, just made to `group`, writes to a file in state `file`: the whole group
    /// when the file is due to be replaced, the change otherwise.
    fn of(file: &FileState, group: &mut Group, change: GroupChange) -> Self {
        if file.whole_due(group.bytes()) {
            let (saved, changes) = group.snapshot_for_file();
            return Self::Whole(saved, changes);
        }
        group.mark_saved();
        let changes =
            matches!(change, GroupChange::Membership(_)).then(|| group.membership_changes());
        Self::Change(change, changes)
    }
}
