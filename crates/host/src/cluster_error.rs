//! [`ClusterError`]: why a broker could not join its cluster, or a question to it failed.

use minibroker_broker::BrokerError;
use minibroker_cluster::{MembershipError, SchemaError};
use thiserror::Error;

/// Why a broker could not join its cluster, or a question to it failed.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// The schema could not be created or is newer than this broker.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The node id is held by a live broker, or membership failed.
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// The database could not be reached or refused.
    #[error("the cluster's database: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// This broker's copy could not hold what the cluster has.
    #[error(transparent)]
    Copy(#[from] BrokerError),
    /// The cluster has no topic of that name.
    #[error("topic {0:?} is not in the cluster")]
    UnknownTopic(String),
    /// A topic's settings were refused.
    #[error(transparent)]
    Refused(BrokerError),
    /// A transactional id's record in the database does not read.
    #[error(
        "the cluster's record of transactional id {transactional_id:?} does not read: {reason}"
    )]
    Record {
        /// The transactional id.
        transactional_id: String,
        /// Why.
        reason: String,
    },
}
