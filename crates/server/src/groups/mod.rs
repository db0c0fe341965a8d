//! The group coordinator of this single broker: Kafka's classic consumer-group protocol and
//! committed offsets.
//!
//! A consumer that subscribes with a `group.id` finds the coordinator (this broker), joins the
//! group and then heartbeats. Every join, leave or missed session timeout starts a rebalance:
//! the group waits (up to the members' rebalance timeout) for every member to join again, then
//! opens a new generation, names a leader and hands it every member's subscription. The leader
//! computes the assignment — range, round-robin, cooperative-sticky all run in the client — and
//! sends it with SyncGroup; the coordinator only relays each member its share. Committed offsets
//! (with their metadata) are kept per group, topic and partition; with a data directory they are
//! written to disk before the commit is acknowledged (`store`).
//!
//! Everything is domain types: member ids, protocol names and opaque metadata bytes. The Kafka
//! front end decodes the requests and maps [`GroupError`] to Kafka's error codes.
//!
//! # Layout
//! - `group` — one group's state machine (Empty → PreparingRebalance → CompletingRebalance →
//!   Stable), under the coordinator's lock; waiting joins and syncs are one-shot channels.
//! - `store` — the committed offsets on disk.

mod group;
mod store;

use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::oneshot;

use crate::data_dir::DataDir;
use crate::{Config, ServerError};
use group::Group;
pub use group::GroupState;
use store::OffsetStore;

/// A group request the coordinator refuses; each maps to one Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GroupError {
    /// A first join (v4 and later) must come back with the member id it is given.
    #[error("rejoin with the member id {0:?}")]
    MemberIdRequired(String),
    /// The member is not (or no longer) in the group.
    #[error("unknown member id")]
    UnknownMemberId,
    /// The request is for another generation of the group.
    #[error("illegal generation")]
    IllegalGeneration,
    /// The group is rebalancing: join again.
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    /// The member's protocol type or protocols do not match the group's.
    #[error("inconsistent group protocol")]
    InconsistentGroupProtocol,
    /// The session timeout is outside the broker's bounds.
    #[error("the session timeout must be between {min} and {max} ms")]
    InvalidSessionTimeout {
        /// `group_min_session_timeout_ms`.
        min: u64,
        /// `group_max_session_timeout_ms`.
        max: u64,
    },
    /// An empty group id.
    #[error("invalid group id")]
    InvalidGroupId,
    /// DeleteGroups of a group with members.
    #[error("the group has members")]
    NonEmptyGroup,
    /// No such group.
    #[error("no such group")]
    GroupIdNotFound,
    /// Committed offsets could not be written to disk.
    #[error("storage error: {0}")]
    Storage(String),
    /// The group holds its maximum of members.
    #[error("the group holds its maximum of {0} members")]
    GroupFull(usize),
    /// The broker holds its maximum of groups.
    #[error("the broker holds its maximum of {0} groups")]
    TooManyGroups(usize),
}

/// A join request, in domain terms.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// The group.
    pub group_id: String,
    /// The member's id; empty on its first join.
    pub member_id: String,
    /// Static membership id, kept for describing the group.
    pub group_instance_id: Option<String>,
    /// The client's id and host, for describing the group.
    pub client_id: String,
    /// See [`Self::client_id`].
    pub client_host: String,
    /// A member not heard from for this long is removed.
    pub session_timeout: Duration,
    /// How long a rebalance waits for this member to join again.
    pub rebalance_timeout: Duration,
    /// "consumer" for consumers.
    pub protocol_type: String,
    /// The assignment strategies the member supports, in preference order, each with its
    /// subscription metadata.
    pub protocols: Vec<(String, Bytes)>,
    /// A first join must get a member id and come back with it (JoinGroup v4 and later).
    pub require_known_member: bool,
}

/// The answer to a join: the new generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The generation opened.
    pub generation: i32,
    /// The group's protocol type.
    pub protocol_type: String,
    /// The strategy every member supports, chosen for this generation.
    pub protocol: String,
    /// The leader's member id.
    pub leader: String,
    /// This member's id.
    pub member_id: String,
    /// For the leader only: every member's id, instance id and metadata for `protocol`.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The next offset the group will read.
    pub offset: i64,
    /// The client's metadata string.
    pub metadata: Option<String>,
    /// When it was committed (milliseconds since the epoch).
    pub commit_ms: i64,
}

/// One member as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// Static membership id.
    pub group_instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Its subscription metadata for the group's protocol.
    pub metadata: Bytes,
    /// Its assignment in the current generation.
    pub assignment: Bytes,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Its state.
    pub state: GroupState,
    /// The protocol type ("consumer"), empty for a group with no members.
    pub protocol_type: String,
    /// The chosen strategy, empty unless stable or completing.
    pub protocol: String,
    /// Its members.
    pub members: Vec<MemberDescription>,
}

/// The bounds the coordinator enforces.
#[derive(Debug, Clone, Copy)]
struct Limits {
    min_session: Duration,
    max_session: Duration,
    offsets_retention: Duration,
    max_groups: usize,
    max_members: usize,
}

/// Most member ids handed out by MEMBER_ID_REQUIRED answers and kept waiting for their first
/// join, across all groups; beyond it the oldest are forgotten (their join is answered
/// UNKNOWN_MEMBER_ID, and the client asks again).
const MAX_ISSUED_IDS: usize = 1000;

/// Every group of the broker.
#[derive(Debug)]
pub struct GroupCoordinator {
    groups: Mutex<HashMap<String, Group>>,
    /// (group id, member id) pairs handed out by a MEMBER_ID_REQUIRED answer and not yet used;
    /// kept here, not in a group, so that a refused join creates no group.
    issued: Mutex<HashSet<(String, String)>>,
    limits: Limits,
    store: Option<OffsetStore>,
    next_member: AtomicU64,
}

/// A topic and partition.
pub type TopicPartition = (String, i32);

/// Every group's committed offsets: what the store saves.
type OffsetsSnapshot = Vec<(String, Vec<(TopicPartition, Committed)>)>;

/// What waits for a join or sync to complete.
type Waiting<T> = oneshot::Receiver<Result<T, GroupError>>;

impl GroupCoordinator {
    /// A coordinator with the bounds of `config`, its committed offsets kept in `data` (and
    /// loaded from there) when given.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] when stored offsets cannot be read.
    pub fn new(config: &Config, data: Option<Arc<DataDir>>) -> Result<Self, ServerError> {
        let store = data.map(OffsetStore::new);
        let mut groups = HashMap::new();
        if let Some(store) = &store {
            for (group_id, offsets) in store.load()? {
                groups.insert(group_id, Group::with_offsets(offsets));
            }
        }
        Ok(Self {
            groups: Mutex::new(groups),
            issued: Mutex::default(),
            limits: Limits {
                min_session: Duration::from_millis(config.group_min_session_timeout_ms),
                max_session: Duration::from_millis(config.group_max_session_timeout_ms),
                offsets_retention: Duration::from_millis(config.offsets_retention_ms),
                max_groups: config.max_groups,
                max_members: config.max_group_members,
            },
            store,
            next_member: AtomicU64::new(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins (or rejoins) a group and waits for the rebalance to complete.
    ///
    /// # Errors
    /// [`GroupError`] for a request the group refuses.
    pub async fn join(&self, request: JoinRequest) -> Result<Joined, GroupError> {
        let waiting = self.begin_join(request)?;
        waiting
            .await
            .unwrap_or(Err(GroupError::RebalanceInProgress))
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
        // A rebalance waits for a member at most as long as the longest session allowed, so
        // one member cannot hold its group in a rebalance for weeks.
        let request = JoinRequest {
            rebalance_timeout: request.rebalance_timeout.min(self.limits.max_session),
            ..request
        };
        let mut groups = self.lock();
        let issued = !request.member_id.is_empty()
            && self
                .issued()
                .remove(&(request.group_id.clone(), request.member_id.clone()));
        let group_id = request.group_id.clone();
        let new_member_id = || {
            let n = self.next_member.fetch_add(1, Ordering::Relaxed);
            let client = if request.client_id.is_empty() {
                "member"
            } else {
                &request.client_id
            };
            format!("{client}-{n:016x}")
        };
        let joined = self.with_group(&mut groups, &group_id, |group| {
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
        let waiting = {
            let mut groups = self.lock();
            let group = groups
                .get_mut(group_id)
                .ok_or(GroupError::UnknownMemberId)?;
            group.sync(generation, member_id, assignments, Instant::now())?
        };
        waiting
            .await
            .unwrap_or(Err(GroupError::RebalanceInProgress))
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
        let mut groups = self.lock();
        let group = groups
            .get_mut(group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        group.heartbeat(generation, member_id, Instant::now())
    }

    /// Members leaving; the answer for each, in order.
    pub fn leave(&self, group_id: &str, members: &[String]) -> Vec<Result<(), GroupError>> {
        let mut groups = self.lock();
        match groups.get_mut(group_id) {
            Some(group) => group.leave(members, Instant::now()),
            None => members
                .iter()
                .map(|_| Err(GroupError::UnknownMemberId))
                .collect(),
        }
    }

    /// Commits offsets for a group: by a member of its current generation, or — with
    /// generation -1 and no member id — by a consumer outside any generation, for a group
    /// with no members. With a data directory the offsets are on disk before this returns.
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
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        let commit_ms = minibroker_records::now_millis();
        self.change_offsets(
            || self.commit_now(group_id, generation, member_id, offsets, commit_ms),
            |()| true,
        )
        .await
    }

    /// Applies `change` to the groups and, with a data directory, saves every committed offset
    /// before returning when `changed` says the change touched them.
    async fn change_offsets<T>(
        &self,
        change: impl FnOnce() -> Result<T, GroupError>,
        changed: impl FnOnce(&T) -> bool,
    ) -> Result<T, GroupError> {
        let Some(store) = &self.store else {
            return change();
        };
        // One writer at a time, each writing everything committed so far, so the file never
        // goes back to an older state.
        let _writing = store.writer.lock().await;
        let result = change()?;
        if changed(&result) {
            store.save(self.offsets_snapshot()).await?;
        }
        Ok(result)
    }

    fn commit_now(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        offsets: Vec<(String, i32, i64, Option<String>)>,
        commit_ms: i64,
    ) -> Result<(), GroupError> {
        let mut groups = self.lock();
        self.with_group(&mut groups, group_id, |group| {
            group.commit(generation, member_id, offsets, commit_ms, Instant::now())
        })
    }

    /// Applies `change` to the group named `group_id`, or to a new empty one if the broker has
    /// room for another; a new group is kept only if `change` succeeded and left it with
    /// members or offsets, so a refused request creates no group.
    fn with_group<T>(
        &self,
        groups: &mut HashMap<String, Group>,
        group_id: &str,
        change: impl FnOnce(&mut Group) -> Result<T, GroupError>,
    ) -> Result<T, GroupError> {
        if let Some(group) = groups.get_mut(group_id) {
            return change(group);
        }
        if groups.len() >= self.limits.max_groups {
            return Err(GroupError::TooManyGroups(self.limits.max_groups));
        }
        let mut group = Group::default();
        let changed = change(&mut group)?;
        if !group.is_empty() {
            groups.insert(group_id.to_owned(), group);
        }
        Ok(changed)
    }

    fn offsets_snapshot(&self) -> OffsetsSnapshot {
        self.lock()
            .iter()
            .filter(|(_, group)| !group.offsets.is_empty())
            .map(|(id, group)| {
                let offsets = group
                    .offsets
                    .iter()
                    .map(|(key, committed)| (key.clone(), committed.clone()))
                    .collect();
                (id.clone(), offsets)
            })
            .collect()
    }

    /// The committed offsets of `partitions` of the group (all of them when `None`); a
    /// partition with none is left out.
    #[must_use]
    pub fn committed(
        &self,
        group_id: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Vec<(TopicPartition, Committed)> {
        let groups = self.lock();
        let Some(group) = groups.get(group_id) else {
            return Vec::new();
        };
        match partitions {
            None => group
                .offsets
                .iter()
                .map(|(key, committed)| (key.clone(), committed.clone()))
                .collect(),
            Some(wanted) => wanted
                .iter()
                .filter_map(|key| group.offsets.get(key).map(|c| (key.clone(), c.clone())))
                .collect(),
        }
    }

    /// Every group: id, protocol type, state.
    #[must_use]
    pub fn list(&self) -> Vec<(String, String, GroupState)> {
        let mut groups: Vec<_> = self
            .lock()
            .iter()
            .map(|(id, group)| (id.clone(), group.protocol_type(), group.state()))
            .collect();
        groups.sort();
        groups
    }

    /// A group's state and members; an unknown group is `Dead` with none.
    #[must_use]
    pub fn describe(&self, group_id: &str) -> GroupDescription {
        self.lock()
            .get(group_id)
            .map_or_else(GroupDescription::dead, Group::describe)
    }

    /// Deletes a group with no members, and its committed offsets.
    ///
    /// # Errors
    /// [`GroupError::GroupIdNotFound`], [`GroupError::NonEmptyGroup`], or
    /// [`GroupError::Storage`].
    pub async fn delete(&self, group_id: &str) -> Result<(), GroupError> {
        let remove = || {
            let mut groups = self.lock();
            match groups.get(group_id) {
                None => Err(GroupError::GroupIdNotFound),
                Some(group) if group.has_members() => Err(GroupError::NonEmptyGroup),
                Some(_) => {
                    groups.remove(group_id);
                    Ok(())
                }
            }
        };
        self.change_offsets(remove, |()| true).await
    }

    /// Removes members whose session expired and completes rebalances whose time is up; the
    /// broker calls it a few times a second.
    pub fn tick(&self) {
        let now = Instant::now();
        let mut groups = self.lock();
        for group in groups.values_mut() {
            group.tick(now);
        }
        // A group whose last member left and that holds no offsets goes at once (Kafka's
        // coordinator drops such a group as it empties), so it holds no place of `max_groups`.
        groups.retain(|_, group| !group.is_empty());
    }

    /// Forgets groups that have had no members and no commit for `offsets_retention_ms`
    /// (Kafka's `offsets.retention.minutes`, 7 days); returns how many.
    pub async fn expire_offsets(&self, now_ms: i64) -> usize {
        let retention =
            i64::try_from(self.limits.offsets_retention.as_millis()).unwrap_or(i64::MAX);
        let expire = || {
            let mut groups = self.lock();
            let before = groups.len();
            groups.retain(|_, group| !group.expired(now_ms, retention));
            before - groups.len()
        };
        let mut expired = 0;
        let saved = self
            .change_offsets(
                || {
                    expired = expire();
                    Ok(expired)
                },
                |expired| *expired > 0,
            )
            .await;
        if let Err(error) = saved {
            tracing::warn!(%error, "could not save committed offsets after expiry");
        }
        expired
    }
}

impl GroupDescription {
    fn dead() -> Self {
        Self {
            state: GroupState::Dead,
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        }
    }
}
