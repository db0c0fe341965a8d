//! [`Node`]: what one broker process serves — its core, its group and transaction coordinators —
//! and the state of
//! its listeners: connection slots and counts, request timings, readiness. Front ends are made
//! from it, and the metrics read it.

use minibroker_broker::Broker;
use minibroker_groups::GroupCoordinator;
use minibroker_transactions::TransactionService;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::access::{AccessControl, Guard};
use crate::config::Config;
use crate::login::{LoginCounts, SaslSettings, Session};
use crate::timings::RequestTimings;
use minibroker_broker::ServerError;
use minibroker_net::quotas::Quota;
use minibroker_net::{ConnectionCounts, Peer, Slots};

/// One broker process's core, coordinator and listener state; see the module docs.
#[derive(Debug)]
pub struct Node {
    broker: Arc<Broker>,
    groups: Arc<GroupCoordinator>,
    transactions: Arc<TransactionService>,
    /// Connection slots and counts, shared by every listener: `max_connections` is one limit
    /// whatever the protocols (and `max_connections_per_ip` one per address).
    slots: Arc<Slots>,
    /// Every connection's request latencies, when metrics are on.
    timings: Option<Arc<RequestTimings>>,
    /// SASL logins, on every listener.
    logins: Arc<LoginCounts>,
    /// Set once the listeners are bound (and recovery, done when the broker was built, is over).
    ready: AtomicBool,
    /// Open logged-in connections per principal (`max_connections_per_principal`).
    per_principal: Arc<Quota<String>>,
    /// The logins' settings, when a listener asks for logins.
    sasl: Option<Arc<SaslSettings>>,
    /// The ACLs and producer-id owners, when `acls_file` is set.
    access: Option<Arc<AccessControl>>,
    cluster: OnceLock<Arc<crate::ClusterLink>>,
}

impl Node {
    /// The node serving `broker`, `groups` and `transactions` under the limits of `config`,
    /// with its users and ACLs files read.
    ///
    /// # Errors
    /// [`ServerError::Config`] when the users, ACLs or producer-owners file cannot be read.
    pub fn new(
        broker: Arc<Broker>,
        groups: Arc<GroupCoordinator>,
        transactions: Arc<TransactionService>,
        config: &Config,
    ) -> Result<Self, ServerError> {
        let unreadable =
            |error: minibroker_security::FileError| ServerError::Config(error.to_string());
        let sasl = SaslSettings::from_config(config).map_err(unreadable)?;
        let access = AccessControl::from_config(config).map_err(unreadable)?;
        Ok(Self {
            sasl: sasl.map(Arc::new),
            access: access.map(Arc::new),
            broker,
            groups,
            transactions,
            slots: Arc::new(Slots::new(
                config.broker.max_connections,
                config.net.max_connections_per_ip,
            )),
            timings: config
                .net
                .metrics_listen
                .map(|_| Arc::new(RequestTimings::default())),
            logins: Arc::default(),
            ready: AtomicBool::new(false),
            per_principal: Quota::new(config.net.max_connections_per_principal),
            cluster: OnceLock::new(),
        })
    }

    /// The logins' settings, when a listener asks for logins.
    #[must_use]
    pub fn sasl(&self) -> Option<&Arc<SaslSettings>> {
        self.sasl.as_ref()
    }

    /// The ACLs and producer-id owners, when authorisation is on.
    #[must_use]
    pub fn access(&self) -> Option<&Arc<AccessControl>> {
        self.access.as_ref()
    }

    /// A connection's login session, for a listener that asks for logins when `asks` is set.
    #[must_use]
    pub fn session(&self, asks: bool) -> Session {
        Session::new(
            self.sasl.clone().filter(|_| asks),
            Arc::clone(&self.logins),
            Arc::clone(&self.per_principal),
        )
    }

    /// A connection's guard, from `peer`.
    #[must_use]
    pub fn guard(&self, peer: &Peer) -> Guard {
        Guard::new(self.access.clone(), peer)
    }

    /// The broker core.
    #[must_use]
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The broker's cluster, when it is one of a cluster's brokers (set once, before it serves).
    #[must_use]
    pub fn cluster(&self) -> Option<&Arc<crate::ClusterLink>> {
        self.cluster.get()
    }

    pub(crate) fn set_cluster(&self, link: Arc<crate::ClusterLink>) {
        let _already = self.cluster.set(link);
    }

    /// The consumer-group coordinator.
    #[must_use]
    pub fn groups(&self) -> &Arc<GroupCoordinator> {
        &self.groups
    }

    /// The transaction coordinator.
    #[must_use]
    pub fn transactions(&self) -> &Arc<TransactionService> {
        &self.transactions
    }

    /// Every connection's request latencies, when metrics are on (`metrics_listen`).
    #[must_use]
    pub fn timings(&self) -> Option<&Arc<RequestTimings>> {
        self.timings.as_ref()
    }

    /// SASL logins, counted by the listeners that ask for them.
    #[must_use]
    pub fn logins(&self) -> &Arc<LoginCounts> {
        &self.logins
    }

    /// Logged-in connections per principal: a login takes a slot for the connection's life.
    #[must_use]
    pub fn per_principal(&self) -> &Arc<Quota<String>> {
        &self.per_principal
    }

    /// How many connections were accepted and refused, and how many are open.
    #[must_use]
    pub fn connection_counts(&self) -> ConnectionCounts {
        self.slots.counts()
    }

    /// The connection slots every listener shares.
    #[must_use]
    pub fn slots(&self) -> &Arc<Slots> {
        &self.slots
    }

    /// Marks the node ready: its listeners are bound.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Whether the node is ready to serve (`/ready`).
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}
