//! A broker served inside this process on a free loopback port: what `minibroker demo` and
//! `bench`, and every end-to-end test, run against.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{Broker, Config, ServerError};

/// A running in-process broker, stopped gracefully by [`Self::stop`] (or, without waiting, when
/// dropped).
#[derive(Debug)]
pub struct EmbeddedBroker {
    /// Where it listens (`127.0.0.1`, a port the kernel picked).
    pub addr: SocketAddr,
    /// Its core, for inspection.
    pub broker: Arc<Broker>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServerError>>>,
}

impl EmbeddedBroker {
    /// Starts a broker with `config` on `127.0.0.1:0` (its `listen` address is ignored).
    ///
    /// # Errors
    /// An invalid configuration, or no port to bind.
    pub async fn start(config: Config) -> Result<Self, ServerError> {
        let broker = Arc::new(Broker::new(&config)?);
        let listener =
            TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|source| ServerError::Bind {
                    addr: "127.0.0.1:0".to_owned(),
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: "127.0.0.1:0".to_owned(),
            source,
        })?;
        let (stop, stopped) = oneshot::channel::<()>();
        let served = Arc::clone(&broker);
        let task = tokio::spawn(async move {
            let maintenance = served.spawn_maintenance();
            let result = crate::serve(listener, Arc::clone(&served), &config, async move {
                let _ = stopped.await;
            })
            .await;
            maintenance.abort();
            served.close();
            result
        });
        Ok(Self {
            addr,
            broker,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address as a string, for clients.
    #[must_use]
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Signals shutdown without waiting; returns the server task to await.
    pub fn begin_stop(&mut self) -> Option<JoinHandle<Result<(), ServerError>>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take()
    }

    /// Shuts the broker down gracefully and waits until it has drained.
    ///
    /// # Errors
    /// What the server stopped with, or [`ServerError::Stopped`] if its task panicked.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        match self.begin_stop() {
            Some(task) => task
                .await
                .map_err(|error| ServerError::Stopped(error.to_string()))?,
            None => Ok(()),
        }
    }
}

impl Drop for EmbeddedBroker {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
