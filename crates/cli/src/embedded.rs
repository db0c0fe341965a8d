//! A broker served inside this process on a free loopback port, for `demo` and `bench`.

use anyhow::Result;
use minibroker_server::{Broker, Config, ServerError};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running in-process broker.
pub struct EmbeddedBroker {
    /// Where it listens.
    pub addr: String,
    /// Its core, for outcome counts.
    pub broker: Arc<Broker>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ServerError>>,
}

impl EmbeddedBroker {
    /// Starts a broker whose auto-created topics get `partitions` partitions.
    pub async fn start(partitions: u32, max_stored_bytes: u64) -> Result<Self> {
        let config = Config {
            default_partitions: partitions,
            max_partitions_per_topic: partitions.max(1024),
            max_stored_bytes,
            ..Config::default()
        };
        let broker = Arc::new(Broker::new(&config)?);
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = Arc::clone(&broker);
        let task = tokio::spawn(async move {
            minibroker_server::serve(listener, served, &config, async move {
                let _ = stopped.await;
            })
            .await
        });
        Ok(Self {
            addr,
            broker,
            stop,
            task,
        })
    }

    /// Shuts the broker down gracefully and waits for it.
    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}
