//! The coordinator's domain types: what a request asks, what it is answered, and why it is
//! refused. The Kafka front end translates its messages to and from these.

use bytes::Bytes;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::oneshot;

/// Most assignment strategies one member may name (consumers name one to three).
pub const MAX_PROTOCOLS_PER_MEMBER: usize = 32;

/// Most bytes of subscription metadata one member may send with its protocols, all together
/// (a subscription to 10,000 topics is about 300 KB).
pub const MAX_MEMBER_METADATA_BYTES: usize = 1 << 20;

/// Most bytes of a committed offset's metadata string (Kafka's `offset.metadata.max.bytes`); a
/// partition committed with more is refused OFFSET_METADATA_TOO_LARGE.
pub const MAX_OFFSET_METADATA_BYTES: usize = 4096;

/// Where a group is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Waiting for the members to join again.
    PreparingRebalance,
    /// Waiting for the leader's assignment.
    CompletingRebalance,
    /// Assigned and running.
    Stable,
    /// No such group.
    Dead,
}

impl GroupState {
    /// The state of Kafka's name `name` (as [`fmt::Display`] writes it).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Self::Empty,
            Self::PreparingRebalance,
            Self::CompletingRebalance,
            Self::Stable,
            Self::Dead,
        ]
        .into_iter()
        .find(|state| state.to_string() == name)
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Kafka's names, which DescribeGroups and ListGroups report.
        f.write_str(match self {
            Self::Empty => "Empty",
            Self::PreparingRebalance => "PreparingRebalance",
            Self::CompletingRebalance => "CompletingRebalance",
            Self::Stable => "Stable",
            Self::Dead => "Dead",
        })
    }
}

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
    /// OffsetDelete of a partition whose topic the group's members consume.
    #[error("the group's members consume the topic")]
    GroupSubscribedToTopic,
    /// This broker does not coordinate the group (in a cluster: another broker holds its
    /// lease, or this one lost it); the client finds the coordinator again.
    #[error("this broker is not the group's coordinator")]
    NotCoordinator,
    /// TxnOffsetCommit in a cluster: the producer's transactional id moved to a newer epoch.
    #[error("the producer was fenced by a newer epoch of its transactional id")]
    ProducerFenced,
    /// TxnOffsetCommit in a cluster: no open transaction of the producer has added the group.
    #[error("no open transaction of the producer has added the group")]
    NotInTransaction,
    /// Committed offsets could not be written to disk.
    #[error("storage error: {0}")]
    Storage(#[source] StoreFailure),
    /// The group holds its maximum of members.
    #[error("the group holds its maximum of {0} members")]
    GroupFull(usize),
    /// The broker holds its maximum of groups.
    #[error("the broker holds its maximum of {0} groups")]
    TooManyGroups(usize),
    /// What groups hold would pass the broker's `max_stored_bytes`.
    #[error("the broker holds its maximum of {0} bytes")]
    StorageFull(u64),
    /// A join names too many protocols, or sends too much metadata with them.
    #[error("too much group metadata: {0}")]
    TooMuchMetadata(String),
}

/// A write of committed offsets that failed: what was being done and the I/O error, shared by
/// every request that waited on it, and compared by what failed and the error's kind.
#[derive(Debug, Clone, Error)]
#[error("{what}: {source}")]
pub struct StoreFailure {
    /// What was being done.
    pub what: &'static str,
    /// Why it failed.
    #[source]
    pub source: Arc<std::io::Error>,
}

impl StoreFailure {
    /// `what` failed with `source`.
    #[must_use]
    pub fn new(what: &'static str, source: std::io::Error) -> Self {
        Self {
            what,
            source: Arc::new(source),
        }
    }
}

impl PartialEq for StoreFailure {
    fn eq(&self, other: &Self) -> bool {
        self.what == other.what && self.source.kind() == other.source.kind()
    }
}

impl Eq for StoreFailure {}

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

/// A topic and partition.
pub type TopicPartition = (String, i32);

/// One group as the store saves it: its offsets, those committed and those of producers' open
/// transactions (TxnOffsetCommit, by producer id, which become committed only with the
/// transaction's COMMIT), and its membership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SavedGroup {
    /// Committed offsets.
    pub committed: Vec<(TopicPartition, Committed)>,
    /// Pending offsets, by producer id.
    pub pending: Vec<(i64, Vec<(TopicPartition, Committed)>)>,
    /// Its generation and members.
    pub membership: SavedMembership,
}

/// A group's generation and members, saved each time a generation opens and each time its
/// assignment is complete, so a restart neither forgets a member nor opens a generation twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SavedMembership {
    /// The current generation (0: none yet).
    pub generation: i32,
    /// Whether the generation's assignment was complete (Stable) when saved; if not, its
    /// members are asked to join again after a restart.
    pub assigned: bool,
    /// The members' protocol type ("consumer").
    pub protocol_type: Option<String>,
    /// The generation's strategy.
    pub protocol: Option<String>,
    /// The generation's leader.
    pub leader: Option<String>,
    /// The members, each with its assignment.
    pub members: Vec<SavedMember>,
}

/// One member as saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SavedMember {
    /// Its id.
    pub id: String,
    /// Its static membership id.
    pub group_instance_id: Option<String>,
    /// Its client's id.
    pub client_id: String,
    /// Its client's host.
    pub client_host: String,
    /// Its session timeout.
    pub session_timeout: Duration,
    /// Its rebalance timeout.
    pub rebalance_timeout: Duration,
    /// Its strategies, each with its subscription metadata.
    pub protocols: Vec<(String, Bytes)>,
    /// Its share of the generation's assignment.
    pub assignment: Bytes,
}

/// One change of a group, as its file appends it (see `store`): what one request changed,
/// never the whole group again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GroupChange {
    /// Offsets committed.
    Committed(Vec<(TopicPartition, Committed)>),
    /// Offsets committed in a producer's open transaction (TxnOffsetCommit), by producer id.
    Pending(i64, Vec<(TopicPartition, Committed)>),
    /// A producer's transaction ended: its pending offsets committed (`true`) or dropped.
    Ended(i64, bool),
    /// Committed offsets deleted (OffsetDelete).
    Deleted(Vec<TopicPartition>),
    /// The generation and members as they are now.
    Membership(SavedMembership),
}

/// Groups as the store saves them.
pub(crate) type GroupsSnapshot = Vec<(String, SavedGroup)>;

/// What waits for a join or sync to complete.
pub(crate) type Waiting<T> = oneshot::Receiver<Result<T, GroupError>>;

impl GroupDescription {
    /// A group that does not exist, as DescribeGroups shows it.
    #[must_use]
    pub fn dead() -> Self {
        Self {
            state: GroupState::Dead,
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        }
    }
}
