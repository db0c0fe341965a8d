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
//! - `coordinator` — [`GroupCoordinator`], the registry of groups and what each request does.
//! - `model` — the requests, answers and refusals, in domain terms.
//! - `group` — one group's state machine (Empty → PreparingRebalance → CompletingRebalance →
//!   Stable), under its own lock; waiting joins and syncs are one-shot channels.
//! - `shared` — the seam where a cluster's brokers share groups: leased, and kept in the
//!   cluster's database.
//! - `store` — groups on disk, a file per group, each change appended.
//! - `codec` — the records of a group's file: a whole group, one change of it.
//! - `config` — [`GroupConfig`], the coordinator's section of the configuration.
//!
//! Each group has its own lock (the coordinator's registry is locked only to find, add or
//! remove one), its work per request is bounded (protocol names and metadata are capped), and
//! what it holds is charged to the broker's `max_stored_bytes`: one client's group can neither
//! stall another group nor grow the broker past its budget.

mod codec;
mod config;
mod coordinator;
mod group;
mod model;
mod shared;
mod store;

pub use config::GroupConfig;
pub use coordinator::GroupCoordinator;
pub use model::{
    Committed, GroupDescription, GroupError, GroupState, JoinRequest, Joined,
    MAX_MEMBER_METADATA_BYTES, MAX_OFFSET_METADATA_BYTES, MAX_PROTOCOLS_PER_MEMBER,
    MemberDescription, StoreFailure, TopicPartition,
};
pub use shared::{
    Claimed, SharedFuture, SharedGroups, SharedMembership, SharedWrite, describe_shared,
};
pub use store::check_files as check_offsets_files;
