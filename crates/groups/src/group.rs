//! One group's state machine, as in Kafka's `GroupCoordinator` (classic protocol):
//!
//! - **Empty**: no members (committed offsets may remain).
//! - **PreparingRebalance**: waiting for every member to join again, until each has or the
//!   longest rebalance timeout passes (the members that did not are removed).
//! - **CompletingRebalance**: a new generation is open; waiting for the leader's assignment.
//! - **Stable**: every member has its assignment and heartbeats.
//!
//! A join, a leave or an expired session moves a group with members to PreparingRebalance; its
//! members learn it from their next heartbeat (REBALANCE_IN_PROGRESS) and join again. Waiting
//! joins and syncs hold a one-shot sender here and are answered when the phase completes.

use bytes::Bytes;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::model::{
    Committed, GroupDescription, GroupError, GroupState, JoinRequest, Joined, MemberDescription,
    SavedGroup, SavedMember, SavedMembership, Waiting,
};

#[derive(Debug)]
struct Member {
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    last_seen: Instant,
    /// A join waiting for the rebalance to complete.
    joining: Option<oneshot::Sender<Result<Joined, GroupError>>>,
    /// A sync waiting for the leader's assignment.
    syncing: Option<oneshot::Sender<Result<Bytes, GroupError>>>,
}

/// Bytes charged for each member besides what it sent: its entry, timers and channels.
const MEMBER_BYTES: u64 = 256;

/// Bytes charged for each committed offset besides its topic name and metadata.
const OFFSET_BYTES: u64 = 96;

/// What one committed offset of `topic` with `metadata` costs the broker's memory.
/// What a set of offsets costs ([`offset_bytes`] each).
fn offsets_bytes(offsets: &BTreeMap<(String, i32), Committed>) -> u64 {
    offsets
        .iter()
        .map(|((topic, _), c)| offset_bytes(topic, c.metadata.as_deref()))
        .sum()
}

pub(super) fn offset_bytes(topic: &str, metadata: Option<&str>) -> u64 {
    offset_len_bytes(topic.len(), metadata)
}

fn offset_len_bytes(topic_len: usize, metadata: Option<&str>) -> u64 {
    OFFSET_BYTES + (topic_len + metadata.map_or(0, str::len)) as u64
}

/// What a member with these fields costs the broker's memory.
fn member_bytes(
    id_len: usize,
    instance: Option<&String>,
    client: (&str, &str),
    protocols: &[(String, Bytes)],
    assignment_len: usize,
) -> u64 {
    let protocols: usize = protocols
        .iter()
        .map(|(name, metadata)| name.len() + metadata.len())
        .sum();
    let (client_id, client_host) = client;
    let fields = id_len + instance.map_or(0, String::len) + client_id.len() + client_host.len();
    MEMBER_BYTES + (fields + protocols + assignment_len) as u64
}

/// What a member joining with `request` costs (before its assignment; a new member's id is
/// made by the coordinator: its client id, a dash and a UUID).
pub(super) fn join_bytes(request: &JoinRequest) -> u64 {
    let client = (request.client_id.as_str(), request.client_host.as_str());
    let id_len = request.member_id.len().max(request.client_id.len() + 37);
    member_bytes(
        id_len,
        request.group_instance_id.as_ref(),
        client,
        &request.protocols,
        0,
    ) + request.protocol_type.len() as u64
}

impl Member {
    /// What the member costs the broker's memory, its id of `id_len` bytes included.
    fn bytes(&self, id_len: usize) -> u64 {
        let client = (self.client_id.as_str(), self.client_host.as_str());
        let instance = self.group_instance_id.as_ref();
        member_bytes(
            id_len,
            instance,
            client,
            &self.protocols,
            self.assignment.len(),
        )
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }
}

/// One group.
#[derive(Debug)]
pub(super) struct Group {
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    /// By member id, so the leader of a new group and every listing are deterministic.
    members: BTreeMap<String, Member>,
    rebalance_deadline: Option<Instant>,
    pub(super) offsets: BTreeMap<(String, i32), Committed>,
    /// What `offsets` cost the broker's memory ([`offset_bytes`] each).
    offsets_bytes: u64,
    /// Offsets committed in producers' open transactions, by producer id: not visible until the
    /// transaction commits, dropped if it aborts.
    pending: BTreeMap<i64, BTreeMap<(String, i32), Committed>>,
    /// Whether the group was ever saved (its file must go with it, even once an abort or its
    /// last member's leaving left it empty).
    pub(super) saved: bool,
    /// Counts the changes of membership a restart must not lose: a generation opened, an
    /// assignment completed.
    membership_changes: u64,
    /// `membership_changes` as last written to the group's file.
    membership_saved: u64,
    /// When the group last had a member or a commit (milliseconds), for offset expiry.
    last_active_ms: i64,
}

impl Default for Group {
    fn default() -> Self {
        Self {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            rebalance_deadline: None,
            offsets: BTreeMap::new(),
            offsets_bytes: 0,
            pending: BTreeMap::new(),
            saved: false,
            membership_changes: 0,
            membership_saved: 0,
            last_active_ms: minibroker_records::now_millis(),
        }
    }
}

impl Group {
    /// A group as it was saved, its members' sessions starting again at `now`. A generation
    /// saved before its assignment was complete is not resumed: its members are asked to join
    /// again (with the ids they hold) within their rebalance timeout.
    pub(super) fn restored(saved: SavedGroup, now: Instant) -> Self {
        let last_active_ms = saved.committed.iter().map(|(_, c)| c.commit_ms).max();
        let offsets: BTreeMap<_, _> = saved.committed.into_iter().collect();
        let offsets_bytes = offsets_bytes(&offsets);
        let membership = saved.membership;
        let members: BTreeMap<String, Member> = membership
            .members
            .into_iter()
            .map(|m| {
                let member = Member {
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout: m.session_timeout,
                    rebalance_timeout: m.rebalance_timeout,
                    protocols: m.protocols,
                    assignment: m.assignment,
                    last_seen: now,
                    joining: None,
                    syncing: None,
                };
                (m.id, member)
            })
            .collect();
        let mut group = Self {
            generation: membership.generation,
            protocol_type: membership.protocol_type,
            protocol: membership.protocol,
            leader: membership.leader,
            state: GroupState::Stable,
            members,
            offsets,
            offsets_bytes,
            pending: saved
                .pending
                .into_iter()
                .map(|(producer_id, offsets)| (producer_id, offsets.into_iter().collect()))
                .collect(),
            saved: true,
            last_active_ms: last_active_ms.unwrap_or_else(minibroker_records::now_millis),
            ..Self::default()
        };
        if group.members.is_empty() {
            group.state = GroupState::Empty;
        } else if !membership.assigned {
            group.prepare_rebalance(now);
        }
        group
    }

    /// The group as its file keeps it, copied out of the group's lock, and the count of
    /// membership changes it includes (for [`Self::membership_saved`]).
    pub(super) fn snapshot_for_file(&mut self) -> (SavedGroup, u64) {
        self.saved = true;
        let saved = SavedGroup {
            committed: self.all_offsets(),
            pending: self
                .pending
                .iter()
                .map(|(producer_id, offsets)| {
                    let offsets = offsets.iter().map(|(k, c)| (k.clone(), c.clone()));
                    (*producer_id, offsets.collect())
                })
                .collect(),
            membership: self.membership_for_file(),
        };
        (saved, self.membership_changes)
    }

    /// The group's generation and members as its file keeps them.
    pub(super) fn membership_for_file(&self) -> SavedMembership {
        SavedMembership {
            generation: self.generation,
            assigned: self.state == GroupState::Stable,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| SavedMember {
                    id: id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout: m.session_timeout,
                    rebalance_timeout: m.rebalance_timeout,
                    protocols: m.protocols.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// How many membership changes the group has had (see [`Self::membership_saved`]).
    pub(super) fn membership_changes(&self) -> u64 {
        self.membership_changes
    }

    /// Notes that the group is about to be written to its file (its removal must remove it).
    pub(super) fn mark_saved(&mut self) {
        self.saved = true;
    }

    /// The group's file now holds its membership as of `changes` ([`Self::to_save`]).
    pub(super) fn membership_saved(&mut self, changes: u64) {
        self.membership_saved = self.membership_saved.max(changes);
    }

    /// Whether a generation opened or an assignment completed since the group's file was last
    /// written.
    pub(super) fn membership_unsaved(&self) -> bool {
        self.membership_changes != self.membership_saved
    }

    /// What the group costs the broker's memory: its members (with their subscriptions and
    /// assignments) and its committed offsets (with their metadata). Members are few (at most
    /// `max_group_members`) and summed; offsets are many and counted as they change.
    pub(super) fn bytes(&self) -> u64 {
        let members: u64 = self
            .members
            .iter()
            .map(|(id, member)| member.bytes(id.len()))
            .sum();
        // Pending offsets are few (one transaction's) and summed.
        let pending: u64 = self.pending.values().map(offsets_bytes).sum();
        members + self.offsets_bytes + pending
    }

    /// Every committed offset, copied out of the group's lock.
    pub(super) fn all_offsets(&self) -> Vec<((String, i32), Committed)> {
        self.offsets
            .iter()
            .map(|(key, committed)| (key.clone(), committed.clone()))
            .collect()
    }

    pub(super) fn state(&self) -> GroupState {
        self.state
    }

    pub(super) fn protocol_type(&self) -> String {
        self.protocol_type.clone().unwrap_or_default()
    }

    pub(super) fn has_members(&self) -> bool {
        !self.members.is_empty()
    }

    pub(super) fn member_count(&self) -> usize {
        self.members.len()
    }

    pub(super) fn is_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    /// Joins a member. `issued` says that the coordinator handed out the request's member id in
    /// a MEMBER_ID_REQUIRED answer for this group (the coordinator keeps those ids: a refused
    /// join leaves no group behind).
    pub(super) fn join(
        &mut self,
        request: JoinRequest,
        issued: bool,
        new_member_id: impl FnOnce() -> String,
        now: Instant,
    ) -> Result<Waiting<Joined>, GroupError> {
        // A protocol named twice counts once (its first metadata is kept); the coordinator has
        // capped how many a member names, so matching costs names × members, never more.
        let mut named = HashSet::new();
        let request = JoinRequest {
            protocols: request
                .protocols
                .into_iter()
                .filter(|(name, _)| named.insert(name.clone()))
                .collect(),
            ..request
        };
        if self.has_members() {
            let same_type = self.protocol_type.as_deref() == Some(&request.protocol_type);
            let common = request
                .protocols
                .iter()
                .any(|(name, _)| self.members.values().all(|m| m.supports(name)));
            // A member rejoining alone may change its protocols.
            let alone = self.members.len() == 1 && self.members.contains_key(&request.member_id);
            if !alone && (!same_type || !common) {
                return Err(GroupError::InconsistentGroupProtocol);
            }
        }
        if request.protocols.is_empty() {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let member_id = if request.member_id.is_empty() {
            let id = new_member_id();
            if request.require_known_member {
                return Err(GroupError::MemberIdRequired(id));
            }
            id
        } else if issued || self.members.contains_key(&request.member_id) {
            request.member_id.clone()
        } else {
            return Err(GroupError::UnknownMemberId);
        };
        let (answer, waiting) = oneshot::channel();
        let assignment = self
            .members
            .get(&member_id)
            .map(|m| m.assignment.clone())
            .unwrap_or_default();
        self.members.insert(
            member_id,
            Member {
                group_instance_id: request.group_instance_id,
                client_id: request.client_id,
                client_host: request.client_host,
                session_timeout: request.session_timeout,
                rebalance_timeout: request.rebalance_timeout,
                protocols: request.protocols,
                assignment,
                last_seen: now,
                joining: Some(answer),
                syncing: None,
            },
        );
        self.protocol_type = Some(request.protocol_type);
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now);
        }
        self.complete_join_if_ready(now);
        Ok(waiting)
    }

    /// Starts a rebalance: waiting syncs are told to join again.
    fn prepare_rebalance(&mut self, now: Instant) {
        self.state = GroupState::PreparingRebalance;
        let longest = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default();
        self.rebalance_deadline = Some(now + longest);
        for member in self.members.values_mut() {
            if let Some(syncing) = member.syncing.take() {
                let _ = syncing.send(Err(GroupError::RebalanceInProgress));
            }
        }
    }

    fn complete_join_if_ready(&mut self, now: Instant) {
        if self.state == GroupState::PreparingRebalance
            && self.members.values().all(|m| m.joining.is_some())
        {
            self.complete_join(now);
        }
    }

    /// Opens the next generation with the members that joined; the others are removed.
    fn complete_join(&mut self, now: Instant) {
        self.members.retain(|_, m| m.joining.is_some());
        self.generation = self.generation.wrapping_add(1).max(1);
        self.membership_changes += 1;
        self.rebalance_deadline = None;
        let Some(first) = self.members.keys().next().cloned() else {
            self.state = GroupState::Empty;
            self.protocol = None;
            self.protocol_type = None;
            self.leader = None;
            self.last_active_ms = minibroker_records::now_millis();
            return;
        };
        let leader = self
            .leader
            .clone()
            .filter(|leader| self.members.contains_key(leader))
            .unwrap_or(first);
        let protocol = self.members[&leader]
            .protocols
            .iter()
            .map(|(name, _)| name.clone())
            .find(|name| self.members.values().all(|m| m.supports(name)))
            .unwrap_or_default();
        let everyone: Vec<(String, Option<String>, Bytes)> = self
            .members
            .iter()
            .map(|(id, m)| {
                (
                    id.clone(),
                    m.group_instance_id.clone(),
                    m.metadata(&protocol),
                )
            })
            .collect();
        self.state = GroupState::CompletingRebalance;
        self.protocol = Some(protocol.clone());
        self.leader = Some(leader.clone());
        let protocol_type = self.protocol_type();
        for (id, member) in &mut self.members {
            member.assignment = Bytes::new();
            member.last_seen = now;
            if let Some(joining) = member.joining.take() {
                let _ = joining.send(Ok(Joined {
                    generation: self.generation,
                    protocol_type: protocol_type.clone(),
                    protocol: protocol.clone(),
                    leader: leader.clone(),
                    member_id: id.clone(),
                    members: if *id == leader {
                        everyone.clone()
                    } else {
                        Vec::new()
                    },
                }));
            }
        }
    }

    fn member(&mut self, member_id: &str, generation: i32) -> Result<&mut Member, GroupError> {
        let current = self.generation;
        let member = self
            .members
            .get_mut(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if generation != current {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(member)
    }

    pub(super) fn sync(
        &mut self,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
    ) -> Result<Waiting<Bytes>, GroupError> {
        let state = self.state;
        let leader = self.leader.clone();
        let member = self.member(member_id, generation)?;
        member.last_seen = now;
        let (answer, waiting) = oneshot::channel();
        match state {
            GroupState::PreparingRebalance => return Err(GroupError::RebalanceInProgress),
            GroupState::Empty | GroupState::Dead => return Err(GroupError::UnknownMemberId),
            GroupState::Stable => {
                let _ = answer.send(Ok(member.assignment.clone()));
            }
            GroupState::CompletingRebalance => {
                member.syncing = Some(answer);
                if leader.as_deref() == Some(member_id) {
                    for (id, assignment) in assignments {
                        if let Some(member) = self.members.get_mut(&id) {
                            member.assignment = assignment;
                        }
                    }
                    self.state = GroupState::Stable;
                    self.membership_changes += 1;
                    for member in self.members.values_mut() {
                        if let Some(syncing) = member.syncing.take() {
                            let _ = syncing.send(Ok(member.assignment.clone()));
                        }
                    }
                }
            }
        }
        Ok(waiting)
    }

    pub(super) fn heartbeat(
        &mut self,
        generation: i32,
        member_id: &str,
        now: Instant,
    ) -> Result<(), GroupError> {
        let state = self.state;
        let member = self.member(member_id, generation)?;
        member.last_seen = now;
        match state {
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
            GroupState::CompletingRebalance | GroupState::Stable => Ok(()),
        }
    }

    pub(super) fn leave(
        &mut self,
        members: &[String],
        now: Instant,
    ) -> Vec<Result<(), GroupError>> {
        let answers: Vec<_> = members
            .iter()
            .map(|id| {
                self.members
                    .remove(id)
                    .map(|_| ())
                    .ok_or(GroupError::UnknownMemberId)
            })
            .collect();
        if answers.iter().any(Result::is_ok) {
            self.members_changed(now);
        }
        answers
    }

    /// After members left or expired: rebalance the rest, or settle empty.
    fn members_changed(&mut self, now: Instant) {
        if matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(now);
        }
        self.complete_join_if_ready(now);
    }

    pub(super) fn commit(
        &mut self,
        generation: i32,
        member_id: &str,
        offsets: Vec<(String, i32, i64, Option<String>)>,
        commit_ms: i64,
        now: Instant,
    ) -> Result<(), GroupError> {
        if generation < 0 && member_id.is_empty() {
            // A consumer that assigns its partitions itself: only while nobody is a member.
            if self.has_members() {
                return Err(GroupError::IllegalGeneration);
            }
        } else {
            self.check_member(generation, member_id, now)?;
        }
        for (topic, partition, offset, metadata) in offsets {
            self.put(
                (topic, partition),
                Committed {
                    offset,
                    metadata,
                    commit_ms,
                },
            );
        }
        self.last_active_ms = commit_ms;
        Ok(())
    }

    /// A commit's member must be of the current generation, outside a rebalance's sync.
    pub(super) fn check_member(
        &mut self,
        generation: i32,
        member_id: &str,
        now: Instant,
    ) -> Result<(), GroupError> {
        let state = self.state;
        let member = self.member(member_id, generation)?;
        member.last_seen = now;
        if state == GroupState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }

    /// OffsetDelete: forgets the committed offsets of `partitions`, each one's outcome in
    /// order. As Kafka: a group with members that is not a consumer group refuses as a whole
    /// ([`GroupError::NonEmptyGroup`]); a consumer group keeps the offsets of the topics its
    /// members are subscribed to ([`GroupError::GroupSubscribedToTopic`]), which `subscribed`
    /// reads from a member's metadata for the group's protocol.
    pub(super) fn delete_offsets(
        &mut self,
        partitions: &[(String, i32)],
        subscribed: &dyn Fn(&[u8]) -> Vec<String>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let consumed: std::collections::BTreeSet<String> = match &self.protocol {
            _ if self.members.is_empty() => std::collections::BTreeSet::new(),
            _ if self.protocol_type.as_deref() != Some("consumer") => {
                return Err(GroupError::NonEmptyGroup);
            }
            Some(protocol) => self
                .members
                .values()
                .flat_map(|member| subscribed(&member.metadata(protocol)))
                .collect(),
            // No protocol chosen yet (a first rebalance): nothing is consumed yet.
            None => std::collections::BTreeSet::new(),
        };
        Ok(partitions
            .iter()
            .map(|(topic, partition)| {
                if consumed.contains(topic) {
                    return Err(GroupError::GroupSubscribedToTopic);
                }
                if let Some(old) = self.offsets.remove(&(topic.clone(), *partition)) {
                    self.offsets_bytes -= offset_len_bytes(topic.len(), old.metadata.as_deref());
                }
                Ok(())
            })
            .collect())
    }

    /// Makes `committed` the committed offset of `key`.
    fn put(&mut self, key: (String, i32), committed: Committed) {
        let added = offset_bytes(&key.0, committed.metadata.as_deref());
        let topic_len = key.0.len();
        if let Some(old) = self.offsets.insert(key, committed) {
            self.offsets_bytes -= offset_len_bytes(topic_len, old.metadata.as_deref());
        }
        self.offsets_bytes += added;
    }

    /// TxnOffsetCommit: `offsets` wait in `producer_id`'s transaction for its end. A member and
    /// generation, when given (KIP-447), must be current; a client that sends neither (the
    /// older versions) is not checked, as in Kafka.
    pub(super) fn commit_in_transaction(
        &mut self,
        producer_id: i64,
        (generation, member_id): (i32, &str),
        offsets: Vec<(String, i32, i64, Option<String>)>,
        commit_ms: i64,
        now: Instant,
    ) -> Result<(), GroupError> {
        if generation >= 0 || !member_id.is_empty() {
            self.check_member(generation, member_id, now)?;
        }
        self.saved = true;
        let pending = self.pending.entry(producer_id).or_default();
        for (topic, partition, offset, metadata) in offsets {
            let committed = Committed {
                offset,
                metadata,
                commit_ms,
            };
            pending.insert((topic, partition), committed);
        }
        self.last_active_ms = commit_ms;
        Ok(())
    }

    /// The end of `producer_id`'s transaction: its pending offsets become committed (`commit`)
    /// or are dropped.
    pub(super) fn end_transaction(&mut self, producer_id: i64, commit: bool) {
        let Some(pending) = self.pending.remove(&producer_id) else {
            return;
        };
        if commit {
            for (key, committed) in pending {
                self.put(key, committed);
            }
        }
    }

    /// Whether `producer_id`'s open transaction holds offsets of the group.
    pub(super) fn has_transaction(&self, producer_id: i64) -> bool {
        self.pending.contains_key(&producer_id)
    }

    /// Whether an open transaction holds an offset of `key` (OffsetFetch's `require_stable`).
    pub(super) fn has_pending(&self, key: &(String, i32)) -> bool {
        self.pending
            .values()
            .any(|offsets| offsets.contains_key(key))
    }

    pub(super) fn tick(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.joining.is_none() && now.duration_since(m.last_seen) > m.session_timeout
            })
            .map(|(id, _)| id.clone())
            .collect();
        if !expired.is_empty() {
            tracing::info!(members = ?expired, "group members' sessions expired");
            for id in &expired {
                self.members.remove(id);
            }
            self.members_changed(now);
        }
        if self.state == GroupState::PreparingRebalance
            && self
                .rebalance_deadline
                .is_some_and(|deadline| now >= deadline)
        {
            self.complete_join(now);
        }
        if self.has_members() {
            self.last_active_ms = minibroker_records::now_millis();
        }
    }

    /// Neither members nor offsets, committed or pending: nothing to keep the group for.
    pub(super) fn is_empty(&self) -> bool {
        !self.has_members() && self.offsets.is_empty() && self.pending.is_empty()
    }

    /// [`Self::is_empty`], and never written to a file: it may go without a file to remove.
    pub(super) fn is_empty_unsaved(&self) -> bool {
        self.is_empty() && !self.saved
    }

    /// Idle past the retention, with no member and no transaction waiting to commit to it.
    pub(super) fn expired(&self, now_ms: i64, retention_ms: i64) -> bool {
        !self.has_members()
            && self.pending.is_empty()
            && now_ms.saturating_sub(self.last_active_ms) > retention_ms
    }

    pub(super) fn describe(&self) -> GroupDescription {
        let protocol = self.protocol.clone().unwrap_or_default();
        GroupDescription {
            state: self.state,
            protocol_type: self.protocol_type(),
            protocol: protocol.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| MemberDescription {
                    member_id: id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }
}
