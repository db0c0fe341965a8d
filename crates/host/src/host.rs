//! [`Host`]: the lifecycle of one broker process, the same for `minibroker serve`, the embedded
//! brokers of the tests, `demo` and `bench`.
//!
//! Starting builds the broker core (recovering its data directory), its group coordinator and
//! its transaction coordinator, and spawns their clocks: the broker's maintenance (retention,
//! expiry, the interval flush), its compaction cleaner, and each coordinator's ticks. Listeners are added one by one, each with its protocol's front end; all
//! share the node's connection slots. Stopping stops every listener (each drains its
//! connections within `drain_timeout_ms`), then the clocks, then closes the broker (a durable
//! one syncs and snapshots, so the next start replays nothing). Dropping a host that was not
//! stopped does the same in the background.

use minibroker_broker::{Broker, ServerError};
use minibroker_groups::GroupCoordinator;
use minibroker_transactions::TransactionService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::task::{JoinError, JoinHandle};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::config::Config;
use crate::node::Node;
use minibroker_net::{FrontEnd, Peer};

/// Why a host could not start, listen or stop cleanly.
#[derive(Debug, Error)]
pub enum HostError {
    /// The broker or its coordinator could not be built (configuration, data directory).
    #[error(transparent)]
    Start(#[from] ServerError),
    /// A listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A listener's task ended abnormally.
    #[error("a listener task failed: {0}")]
    Stopped(#[from] JoinError),
    /// The broker could not join its cluster.
    #[error("joining the cluster: {0}")]
    Cluster(#[from] crate::ClusterError),
}

/// One running broker process; see the module docs.
#[derive(Debug)]
pub struct Host {
    node: Arc<Node>,
    config: Arc<Config>,
    /// Fires when the host stops: every listener drains and ends.
    stop: CancellationToken,
    listeners: Mutex<Vec<JoinHandle<()>>>,
    /// The broker's maintenance and the coordinator's ticks.
    clocks: Vec<JoinHandle<()>>,
    stopped: bool,
}

impl Host {
    /// Builds the broker and its group and transaction coordinators from `config` and starts
    /// their clocks (call it inside a tokio runtime). No listener yet: see [`Self::serve`].
    ///
    /// # Errors
    /// An invalid configuration, or a data directory that cannot be used.
    pub fn start(config: &Config) -> Result<Self, HostError> {
        config.validate()?;
        Self::with_broker(Broker::new(&config.broker)?, config)
    }

    /// As [`Self::start`], around a broker the caller built (tests build one on a storage that
    /// can crash), with the other sections of `sections` (its broker section is the broker's
    /// own).
    ///
    /// # Errors
    /// Invalid sections, or stored committed offsets or transactions that cannot be read.
    pub fn with_broker(broker: Broker, sections: &Config) -> Result<Self, HostError> {
        let config = Arc::new(Config {
            broker: broker.config().clone(),
            ..sections.clone()
        });
        config.validate()?;
        let groups = Arc::new(GroupCoordinator::for_broker(&broker, &config.groups)?);
        let broker = Arc::new(broker);
        let transactions = Arc::new(TransactionService::for_broker(
            Arc::clone(&broker),
            Arc::clone(&groups),
            &config.transactions,
        )?);
        let node = Arc::new(Node::new(broker, groups, transactions, &config)?);
        let clocks = vec![
            tokio::spawn(Arc::clone(node.broker()).maintain()),
            tokio::spawn(Arc::clone(node.broker()).clean()),
            tokio::spawn(Arc::clone(node.groups()).run()),
            tokio::spawn(Arc::clone(node.transactions()).run()),
        ];
        Ok(Self {
            node,
            config,
            stop: CancellationToken::new(),
            listeners: Mutex::default(),
            clocks,
            stopped: false,
        })
    }

    /// What the host serves: the core, the coordinator and the listeners' state.
    #[must_use]
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// The broker core.
    #[must_use]
    pub fn broker(&self) -> &Arc<Broker> {
        self.node.broker()
    }

    /// The configuration the host runs with.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Binds `addr` (port 0 picks a free port), with an error that names it.
    ///
    /// # Errors
    /// [`HostError::Bind`].
    pub async fn bind(addr: SocketAddr) -> Result<TcpListener, HostError> {
        TcpListener::bind(addr)
            .await
            .map_err(|source| HostError::Bind { addr, source })
    }

    /// The address `listener` is bound to.
    ///
    /// # Errors
    /// [`HostError::Bind`] when the socket cannot say.
    pub fn bound(listener: &TcpListener) -> Result<SocketAddr, HostError> {
        listener.local_addr().map_err(|source| HostError::Bind {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })
    }

    /// Serves `listener` with the front end `new_front_end` makes for each connection, until the
    /// host stops; returns the address it listens on.
    ///
    /// # Errors
    /// [`HostError::Bind`] when the listener's address cannot be read.
    pub fn serve<F: FrontEnd>(
        &self,
        listener: TcpListener,
        new_front_end: impl Fn(&Arc<Node>, &Peer) -> F + Send + Sync + 'static,
    ) -> Result<SocketAddr, HostError> {
        self.serve_with(listener, None, new_front_end)
    }

    /// As [`Self::serve`], each connection a TLS session with `tls` (`None`: plain TCP).
    ///
    /// # Errors
    /// As [`Self::serve`].
    pub fn serve_with<F: FrontEnd>(
        &self,
        listener: TcpListener,
        tls: Option<Arc<ServerConfig>>,
        new_front_end: impl Fn(&Arc<Node>, &Peer) -> F + Send + Sync + 'static,
    ) -> Result<SocketAddr, HostError> {
        let addr = Self::bound(&listener)?;
        let node = Arc::clone(&self.node);
        let slots = Arc::clone(node.slots());
        let limits = self.config.limits();
        let stop = self.stop.clone().cancelled_owned();
        let task = tokio::spawn(async move {
            let tls = tls.map(TlsAcceptor::from);
            let new_front_end = move |peer: &Peer| new_front_end(&node, peer);
            minibroker_net::serve(listener, tls, slots, limits, stop, new_front_end).await;
        });
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
        Ok(addr)
    }

    /// Runs a listener that is no front end's (the metrics endpoint) as part of the host:
    /// `serve` gets the node and a future that resolves when the host begins to stop, and the
    /// host waits for it with the other listeners. A failure is logged, naming `what`.
    pub fn serve_side<S, E>(
        &self,
        what: &'static str,
        serve: impl FnOnce(Arc<Node>, WaitForCancellationFutureOwned) -> S,
    ) where
        S: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let served = serve(Arc::clone(&self.node), self.stop.clone().cancelled_owned());
        let task = tokio::spawn(async move {
            if let Err(error) = served.await {
                tracing::warn!(%error, listener = what, "a listener failed");
            }
        });
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
    }

    /// Makes this broker one of the cluster `settings` names, before it serves: its produces
    /// are judged and stored by the cluster's database, and its reads served from its copy of
    /// what the cluster committed ([`crate::ClusterLink`]).
    ///
    /// # Errors
    /// [`HostError::Cluster`]: the database cannot be reached, its schema is newer than this
    /// broker's, or the node id stays held by a live broker.
    pub async fn join_cluster(&self, settings: crate::ClusterSettings) -> Result<(), HostError> {
        let offsets_retention = Duration::from_millis(self.config.groups.offsets_retention_ms);
        let link =
            crate::ClusterLink::join(Arc::clone(self.node.broker()), settings, offsets_retention)
                .await?;
        self.node.groups().share(Arc::clone(link.groups()) as _);
        self.node
            .transactions()
            .coordinator()
            .share(Arc::clone(link.transactions()) as _);
        self.node.set_cluster(link);
        Ok(())
    }

    /// Marks the node ready (`/ready`): call it once every listener is bound.
    pub fn set_ready(&self) {
        self.node.set_ready();
    }

    /// Begins the stop without waiting: listeners refuse new connections and drain.
    pub fn begin_stop(&self) {
        self.stop.cancel();
    }

    /// Stops the host gracefully and waits until every listener has drained and the broker is
    /// closed.
    ///
    /// # Errors
    /// [`HostError::Stopped`] if a listener's task panicked (the broker is closed all the same).
    pub async fn stop(mut self) -> Result<(), HostError> {
        self.stopped = true;
        let (listeners, clocks, node) = self.take_parts();
        finish(listeners, clocks, node).await
    }

    /// Stops serving as [`Self::stop`] does, but leaves the broker unclosed: no final sync, no
    /// snapshot — its data directory as a crash would leave it (for recovery benchmarks).
    ///
    /// # Errors
    /// As [`Self::stop`].
    pub async fn halt(mut self) -> Result<(), HostError> {
        self.stopped = true;
        let (listeners, clocks, _) = self.take_parts();
        drain(listeners, clocks).await
    }

    fn take_parts(&mut self) -> (Vec<JoinHandle<()>>, Vec<JoinHandle<()>>, Arc<Node>) {
        self.stop.cancel();
        let listeners = std::mem::take(
            &mut *self
                .listeners
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        (
            listeners,
            std::mem::take(&mut self.clocks),
            Arc::clone(&self.node),
        )
    }
}

/// Waits for the listeners to drain, stops the clocks, and closes the broker (on a blocking
/// thread: its syncs and snapshots are file work).
async fn finish(
    listeners: Vec<JoinHandle<()>>,
    clocks: Vec<JoinHandle<()>>,
    node: Arc<Node>,
) -> Result<(), HostError> {
    let drained = drain(listeners, clocks).await;
    if let Some(cluster) = node.cluster() {
        cluster.leave().await;
    }
    let broker = Arc::clone(node.broker());
    drop(node);
    let closed = tokio::task::spawn_blocking(move || broker.close()).await;
    drained.and(closed.map_err(HostError::from))
}

/// Waits for the listeners to drain, then stops the clocks.
async fn drain(
    listeners: Vec<JoinHandle<()>>,
    clocks: Vec<JoinHandle<()>>,
) -> Result<(), HostError> {
    let mut result = Ok(());
    for listener in listeners {
        if let Err(error) = listener.await {
            tracing::error!(%error, "a listener task failed");
            result = result.and(Err(error.into()));
        }
    }
    for clock in clocks {
        clock.abort();
        let _ = clock.await;
    }
    result
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let (listeners, clocks, node) = self.take_parts();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(error) = finish(listeners, clocks, node).await {
                        tracing::warn!(%error, "the dropped host did not stop cleanly");
                    }
                });
            }
            Err(_) => {
                for task in clocks.iter().chain(&listeners) {
                    task.abort();
                }
            }
        }
    }
}
