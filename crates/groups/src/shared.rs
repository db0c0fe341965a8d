//! The seam where a cluster's brokers share their groups ([`SharedGroups`]): a broker of a
//! cluster coordinates a group only while it holds the group's lease, and keeps what the group
//! must not lose (its generation and members, its committed offsets) in the cluster's database,
//! each write refused there unless the lease is still this broker's. Membership and rebalances
//! stay in the coordinator's memory, as in Kafka; a broker that takes a group over starts it at
//! a fresh generation with the group's committed offsets, and its members join again.
//!
//! The coordinator knows nothing of the database: the host implements this trait with the
//! cluster's crate.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use tokio::time::Instant;

use crate::codec;
use crate::group::Group;
use crate::model::{
    Committed, GroupDescription, GroupError, GroupState, SavedGroup, SavedMembership,
    TopicPartition,
};

/// A future a [`SharedGroups`] returns.
pub type SharedFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, GroupError>> + Send + 'a>>;

/// A group as its coordinator takes it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The lease's epoch: every write for the group names it.
    pub epoch: i64,
    /// The generation the group starts at (its members of an earlier tenure join again).
    pub generation: i32,
    /// Its committed offsets.
    pub offsets: Vec<(TopicPartition, Committed)>,
}

/// A group's generation and members as a cluster keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedMembership {
    /// The generation.
    pub generation: i32,
    /// Its members' ids.
    pub members: Vec<String>,
    /// The group's state.
    pub state: GroupState,
    /// Its protocol type.
    pub protocol_type: String,
    /// The whole membership, sealed (read back by [`describe_shared`]).
    pub record: Vec<u8>,
}

/// One write of a group to the cluster's database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedWrite {
    /// Offsets committed by a member (its generation and id, which the database checks too),
    /// or outside any generation (`None`).
    Commit {
        /// The committing member.
        member: Option<(i32, String)>,
        /// The offsets.
        offsets: Vec<(TopicPartition, Committed)>,
    },
    /// Committed offsets forgotten (OffsetDelete).
    Forget(Vec<TopicPartition>),
    /// Offsets committed in a transaction, kept pending until it ends: the database checks the
    /// member (when given) and that the transaction `(transactional id, producer id, epoch)` is
    /// open and has added the group.
    Pending {
        /// The transactional id, its producer id and epoch.
        transaction: (String, i64, i16),
        /// The committing member.
        member: Option<(i32, String)>,
        /// The offsets.
        offsets: Vec<(TopicPartition, Committed)>,
    },
    /// A new generation, or its assignment, or members gone.
    Membership(SharedMembership),
    /// The group is gone, with its offsets.
    Remove,
}

/// Where a cluster keeps its groups; see the module docs.
pub trait SharedGroups: Send + Sync + fmt::Debug {
    /// Takes group `group_id`'s lease for this broker (or keeps it), with what the group holds.
    ///
    /// # Errors
    /// [`GroupError::NotCoordinator`] when another broker holds it; a storage error when the
    /// database cannot be asked.
    fn claim<'a>(&'a self, group_id: &'a str) -> SharedFuture<'a, Claimed>;

    /// The epoch of this broker's live lease of `group_id`, as far as it knows without asking
    /// the database (it may know it lost it; the database has the last word).
    fn epoch(&self, group_id: &str) -> Option<i64>;

    /// Writes `write` for `group_id` if this broker still holds its lease at `epoch`.
    ///
    /// # Errors
    /// [`GroupError::NotCoordinator`] when it no longer does; for a member's commit, the
    /// refusal of a generation or member that is not the group's; a storage error.
    fn write<'a>(
        &'a self,
        group_id: &'a str,
        epoch: i64,
        write: SharedWrite,
    ) -> SharedFuture<'a, ()>;
}

/// The group a coordinator starts from when it takes `claimed` over: its offsets, at its
/// generation, with no members.
pub(crate) fn taken_over(claimed: Claimed, now: Instant) -> Group {
    let saved = SavedGroup {
        committed: claimed.offsets,
        pending: Vec::new(),
        membership: SavedMembership {
            generation: claimed.generation,
            ..SavedMembership::default()
        },
    };
    Group::restored(saved, now)
}

/// What a cluster keeps of `group`'s membership now.
pub(crate) fn membership_of(group: &Group) -> SharedMembership {
    let saved = group.membership_for_file();
    SharedMembership {
        generation: saved.generation,
        members: saved.members.iter().map(|m| m.id.clone()).collect(),
        state: group.state(),
        protocol_type: group.protocol_type(),
        record: codec::encode_membership_record(&saved),
    }
}

/// DescribeGroups' answer from what a cluster keeps of a group: its `state` and its sealed
/// membership `record` (none before the group's first generation). `None` when the record
/// does not read.
#[must_use]
pub fn describe_shared(state: GroupState, record: Option<&[u8]>) -> Option<GroupDescription> {
    let membership = match record {
        Some(record) => codec::decode_membership_record(record)?,
        None => SavedMembership::default(),
    };
    let saved = SavedGroup {
        membership,
        ..SavedGroup::default()
    };
    let described = Group::restored(saved, Instant::now()).describe();
    Some(GroupDescription { state, ..described })
}
