//! The proxy run inside the caller's process, on an ephemeral loopback port, for the demo and
//! the tests: one way to start it, find it and stop it.

use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{FaultConfig, FaultCounts, Proxy};

/// A [`Proxy`] running on `127.0.0.1`, relaying to one upstream; stopped when dropped.
pub struct EmbeddedProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    /// The proxy, for its counts and its held frames.
    pub proxy: Proxy,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<FaultCounts>>,
}

impl EmbeddedProxy {
    /// Starts a proxy with `faults` on an ephemeral loopback port, relaying to `upstream`.
    ///
    /// # Errors
    /// If the port cannot be bound.
    pub async fn start(upstream: impl ToString, faults: FaultConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let proxy = Proxy::new(faults);
        let (shutdown, stop) = oneshot::channel::<()>();
        let running = proxy.clone();
        let upstream = upstream.to_string();
        let task = tokio::spawn(async move {
            running
                .run(listener, upstream, async move {
                    let _ = stop.await;
                })
                .await
        });
        Ok(Self {
            addr,
            proxy,
            shutdown: Some(shutdown),
            task: Some(task),
        })
    }

    /// The address as a string, for clients.
    #[must_use]
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Stops the proxy, closing every connection, and returns what it did.
    ///
    /// # Errors
    /// If the proxy's task panicked.
    pub async fn stop(mut self) -> Result<FaultCounts, tokio::task::JoinError> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        match self.task.take() {
            Some(task) => task.await,
            None => Ok(self.proxy.counts()),
        }
    }
}

impl Drop for EmbeddedProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}
