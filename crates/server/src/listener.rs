//! The accept loop and graceful shutdown.
//!
//! A connection permit is taken *before* `accept`, so at most `max_connections` are served and the
//! rest wait in the kernel's queue. On shutdown the listener is dropped first (new connections
//! are refused), every connection finishes the requests it has read, and the whole drain is bounded
//! by a deadline after which the stragglers are aborted.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::connection::Connection;
use crate::{Broker, Config, ServerError};

/// Serves a broker built from `config` on an already-bound `listener` until `shutdown` resolves.
///
/// # Errors
/// [`ServerError::Config`] when the configuration is invalid.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let broker = Broker::new(&config).map_err(|e| ServerError::Config(e.to_string()))?;
    serve(listener, Arc::new(broker), &config, shutdown).await
}

/// Like [`run`], with a broker the caller built (and may inspect afterwards).
///
/// # Errors
/// [`ServerError::Config`] when the configuration is invalid.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: &Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    config.validate()?;
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let stop_connections = CancellationToken::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // the semaphore is never closed
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener) => accepted,
        };
        let connection = Connection {
            broker: Arc::clone(&broker),
            shutdown: stop_connections.clone(),
            max_frame_bytes: config.max_frame_bytes,
            max_in_flight: config.max_in_flight,
            idle_timeout: config.idle_timeout(),
        };
        let span = tracing::info_span!("connection", %peer);
        connections.spawn(
            async move {
                tracing::debug!("accepted");
                connection.run(stream).await;
                drop(permit);
            }
            .instrument(span),
        );
    }

    drop(listener);
    while connections.try_join_next().is_some() {}
    tracing::info!(
        connections = connections.len(),
        "shutting down: no new connections, draining"
    );
    stop_connections.cancel();
    let drained = tokio::time::timeout(config.drain_timeout(), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            remaining = connections.len(),
            "drain deadline passed; aborting remaining connections"
        );
        connections.shutdown().await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Accepts one connection, backing off on errors (such as running out of file descriptors)
/// instead of spinning.
async fn accept(listener: &TcpListener) -> (TcpStream, std::net::SocketAddr) {
    let mut backoff = Duration::from_millis(10);
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                tracing::warn!(%error, backoff_ms = backoff.as_millis() as u64, "accept failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}
