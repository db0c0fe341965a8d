//! minibroker's composition root: the lifecycle of one broker process. It builds the broker
//! core, the group and transaction coordinators and their clocks from the gathered
//! configuration, serves them on listeners of `minibroker_net` (the connection machinery, which
//! knows nothing of the broker) through a protocol's front end (`minibroker_native`,
//! `minibroker_kafka`), and holds what every connection is judged by: the logins and the ACLs.
//!
//! # Layout
//! - [`Host`] — start (the broker core, its group and transaction coordinators, and their
//!   clocks), add listeners, mark ready, stop: one lifecycle for `serve`, the embedded brokers,
//!   demo and bench.
//! - [`Node`] — what a front end is made from and the metrics read: the core, the coordinators,
//!   connection slots and counts, request timings, readiness.
//! - [`ClusterLink`] — a broker's place in a cluster on PostgreSQL: its committer, and its copy of
//!   what the cluster committed, which the core serves reads from.
//! - [`ClusterGroups`] — a cluster broker's consumer groups: coordinated under their leases,
//!   kept in the cluster's database.
//! - [`ClusterTransactions`] — a cluster broker's transactions: each id under its lease, each
//!   change a compare-and-set in the database, an end one database transaction.
//! - [`Config`] — every section of the configuration file, gathered, and the connections'
//!   [`minibroker_net::Limits`] read from it.
//! - [`timings`] — request latencies per connection, summed for the metrics.
//! - [`login`] — SASL logins: the settings and one connection's [`login::Session`].
//! - [`access`] — authorisation: the ACLs and producer-id owners, and one connection's
//!   [`access::Guard`].
//! - [`tls`] — TLS on a listener: certificates and client certificates, from the files the
//!   configuration names.

pub mod access;
mod cluster_error;
mod cluster_groups;
mod cluster_link;
mod cluster_transactions;
mod config;
mod coordinating;
mod host;
pub mod login;
mod node;
pub mod timings;
pub mod tls;

pub use cluster_groups::ClusterGroups;
pub use cluster_link::{ByTime, ClusterError, ClusterLink, ClusterSettings, TopicHandle};
pub use cluster_transactions::ClusterTransactions;
pub use config::{ClientAuth, Config, NetConfig, SASL_MECHANISMS, SecurityProtocol};
pub use host::{Host, HostError};
pub use login::LoginCounts;
pub use node::Node;
/// The TLS library the listeners use (its configuration types appear in [`Host::serve_with`]).
pub use tokio_rustls::rustls;
