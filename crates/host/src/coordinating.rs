//! [`Coordinating`]: what a cluster broker's group and transaction coordinators share: the
//! leases this run holds (renewed by its heartbeat), the run, and how long a lease lasts; and
//! how each opens its connection to the cluster's database. Each coordinator has a connection
//! of its own: statements on one connection run one after the other, and an end of a
//! transaction waiting for a partition's lock must not hold up a group's FindCoordinator.

use minibroker_cluster::{Database, Leases, Registration};
use std::sync::Arc;
use std::time::Duration;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Coordinating {
    pub(crate) url: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) leases: Arc<Leases>,
    pub(crate) registration: Registration,
    pub(crate) lease: Duration,
}

impl Coordinating {
    /// A connection of a coordinator's own (it connects on first use).
    pub(crate) fn database(&self) -> Database {
        Database::new(&self.url, self.connect_timeout)
    }
}
