//! [`EmbeddedBroker`]: a broker served inside this process on a free loopback port — what
//! `minibroker demo` and `bench`, and every end-to-end test, run against. It is a [`Host`] with a
//! native listener; more listeners (Kafka's) can be added to its host.

use minibroker_broker::Broker;
use minibroker_host::Config;
use minibroker_host::{Host, HostError};
use std::net::SocketAddr;
use std::sync::Arc;

/// A running in-process broker, stopped gracefully by [`Self::stop`] (or, without waiting, when
/// dropped).
#[derive(Debug)]
pub struct EmbeddedBroker {
    /// Where its native listener listens (`127.0.0.1`, a port the kernel picked).
    pub addr: SocketAddr,
    /// Its core, for inspection.
    pub broker: Arc<Broker>,
    /// Its lifecycle, its other listeners and its group coordinator.
    pub host: Host,
}

impl EmbeddedBroker {
    /// Starts a broker with `config` on `127.0.0.1:0` (its `listen` address is ignored).
    ///
    /// # Errors
    /// An invalid configuration, or no port to bind.
    pub async fn start(config: Config) -> Result<Self, HostError> {
        Self::around(Host::start(&config)?).await
    }

    /// Serves `host` natively on `127.0.0.1:0`.
    ///
    /// # Errors
    /// No port to bind.
    pub async fn around(host: Host) -> Result<Self, HostError> {
        let listener = Host::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = crate::serve(&host, listener)?;
        Ok(Self {
            addr,
            broker: Arc::clone(host.broker()),
            host,
        })
    }

    /// The address as a string, for clients.
    #[must_use]
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Begins a graceful stop without waiting: new connections are refused, and those open
    /// finish what they have read.
    pub fn begin_stop(&self) {
        self.host.begin_stop();
    }

    /// Shuts the broker down gracefully and waits until it has drained and closed.
    ///
    /// # Errors
    /// [`HostError::Stopped`] if a listener's task panicked.
    pub async fn stop(self) -> Result<(), HostError> {
        self.host.stop().await
    }
}
