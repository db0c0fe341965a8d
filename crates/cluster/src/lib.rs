//! The shared side of the broker core's seam: brokers that keep their state in one PostgreSQL
//! database, so that several of them form one cluster and any of them may be lost. PostgreSQL is
//! the durability (its WAL) and the availability (its replication and failover); this crate
//! writes no consensus of its own.
//!
//! # Layout
//! - [`schema`] — the database's tables, created or migrated at start and versioned: a broker
//!   that finds a schema newer than it knows refuses to start.
//! - [`membership`] — each broker's lease on its node id; the live brokers are the members.
//! - [`heartbeat`] — the task that renews a broker's lease, and its coordinators' with it.
//! - [`coordinators`] — who coordinates a group or a transactional id: the live holder of its
//!   lease, taken by the broker the key hashes to and renewed with its membership.
//! - [`groups`] — consumer groups' saved generations and committed offsets, written only under
//!   the group's lease and read by any broker.
//! - [`topics`] — topics and their partitions, shared by every broker.
//! - [`produce`] — the exactly-once rule in one transaction: a window of batches judged by
//!   `minibroker_state`'s own function, with the partition rows locked, and stored; in one
//!   round trip when the producers' rows are those the broker last wrote.
//! - [`committer`] — a broker's windows: gathered over `cluster_flush_ms`, committed one after
//!   the other on a connection of their own, answered once committed.
//! - [`producer_ids`] — one sequence for the whole cluster, and who owns each id.
//! - [`transactions`] — each transactional id's state, changed only by compare-and-set under
//!   its lease; an end (markers, producers' rows, pending offsets, Complete*) in one transaction.
//! - [`trim`] — a partition's start moved up for every broker: DeleteRecords and retention.
//! - [`reads`] — what a broker reads back for its copy: partitions' ends and stored batches.
//! - [`database`] — a broker's reconnecting connection for everything but its windows.
//! - [`connect`] — one connection to the database from its URL.

pub mod committer;
pub mod coordinators;
pub mod database;
pub mod groups;
pub mod heartbeat;
pub mod membership;
pub mod produce;
pub mod producer_ids;
pub mod reads;
pub mod schema;
pub mod topics;
pub mod transactions;
pub mod trim;

pub use committer::{AppendError, Committer, Pending, WindowSettings, gather};
pub use coordinators::{KeyType, Leases};
pub use database::Database;
pub use groups::{GroupRow, GroupWriteError, StoredOffset, Tenure};
pub use heartbeat::Heartbeat;
pub use membership::{Member, MembershipError, Registration, live_members};
pub use produce::{
    Answers, Append, AppendRefused, Appended, CommitError, KnownProducers, Statements,
    commit_window,
};
pub use producer_ids::{
    issue_producer_id, next_producer_id, producer_owner, record_producer_owner,
};
pub use reads::{
    PartitionEnds, ProducerRow, StoredBatch, batch_of_max_timestamp, batches_from,
    first_batch_since, partition_ends, producer_rows, tail_start,
};
pub use schema::{SCHEMA_VERSION, SchemaError, migrate, migrate_to};
pub use topics::{
    SharedTopic, create_topic, create_topic_with, find_or_create_topic, find_topic,
    replace_settings,
};
pub use trim::{Deleted, Keep, apply_retention, delete_records};

use std::time::Duration;

/// How long [`connect`] waits for the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to the database at `url` (`postgresql://USER@HOST:PORT/DB`), its connection
/// task spawned on the current runtime (it ends when the client is dropped or the server goes).
///
/// # Errors
/// The URL does not read, or the server cannot be reached or refuses the login.
pub async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    connect_with_timeout(url, CONNECT_TIMEOUT).await
}

/// [`connect`], giving up after `timeout` (unless the URL sets its own `connect_timeout`).
///
/// # Errors
/// As [`connect`].
pub async fn connect_with_timeout(
    url: &str,
    timeout: Duration,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config: tokio_postgres::Config = url.parse()?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(timeout);
    }
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "the connection to PostgreSQL ended");
        }
    });
    Ok(client)
}
