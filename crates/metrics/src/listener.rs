//! The endpoint's own listener, with its own limits: it must never take from the broker what
//! its clients need. Without them, 1,100 half-sent requests held 1,100 descriptors and Kafka
//! clients could no longer connect.
//!
//! - at most [`MetricsLimits::max_connections`] connections at once; one more is closed as it
//!   is accepted (a scraper opens one or two);
//! - a request's headers must arrive within [`MetricsLimits::header_timeout`] (hyper's
//!   `header_read_timeout`), and at most 16 KiB of them (`max_buf_size`);
//! - a connection lives at most [`MetricsLimits::connection_lifetime`]; a scraper that keeps
//!   its connection alive simply opens a new one.
//!
//! The HTTP is hyper's (the same server `axum::serve` runs, configured here), the routes
//! axum's. With [`MetricsSecurity::tls`] each connection is a TLS session (the broker's
//! certificate), its handshake bounded by the header timeout.

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long shutdown waits for requests being answered.
const DRAIN: Duration = Duration::from_secs(5);

/// Header bytes one request may send (hyper's buffer; its smallest allowed is 8 KiB).
const MAX_HEADER_BYTES: usize = 16 << 10;

/// The metrics listener's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a request's headers may take to arrive.
    pub header_timeout: Duration,
    /// How long one connection may stay open.
    pub connection_lifetime: Duration,
}

impl Default for MetricsLimits {
    fn default() -> Self {
        Self {
            max_connections: 32,
            header_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(300),
        }
    }
}

/// TLS and a bearer token for the endpoint (Prometheus' `tls_config` and
/// `authorization.credentials_file` match them).
#[derive(Debug, Clone, Default)]
pub struct MetricsSecurity {
    /// Serve HTTPS with this configuration.
    pub tls: Option<Arc<minibroker_host::rustls::ServerConfig>>,
    /// `/metrics` asks for `Authorization: Bearer <token>`.
    pub bearer_token: Option<Arc<str>>,
}

/// Serves `router` on `listener` under `limits` (in TLS sessions with `tls`) until `shutdown`
/// resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: MetricsLimits,
    tls: Option<Arc<minibroker_host::rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or a connection reset before it was accepted: the
                    // listener goes on.
                    tracing::debug!(%error, "the metrics listener could not accept");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!(%peer, "the metrics listener is full; connection closed");
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        let lifetime = limits.connection_lifetime;
        let outcome = move |result: Result<Result<(), hyper::Error>, _>| match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::debug!(%peer, %error, "a metrics connection failed"),
            Err(_) => tracing::debug!(%peer, "a metrics connection lived out its time"),
        };
        let Some(tls) = &tls else {
            let connection =
                graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                outcome(tokio::time::timeout(lifetime, connection).await);
                drop(slot);
            });
            continue;
        };
        // The handshake runs in the connection's task; only then is it watched for shutdown.
        let (tls, builder, watcher) = (tls.clone(), builder.clone(), graceful.watcher());
        let handshake_timeout = limits.header_timeout;
        tokio::spawn(async move {
            match tokio::time::timeout(handshake_timeout, tls.accept(stream)).await {
                Ok(Ok(session)) => {
                    let connection =
                        watcher.watch(builder.serve_connection(TokioIo::new(session), service));
                    outcome(tokio::time::timeout(lifetime, connection).await);
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "a metrics TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "a metrics TLS handshake took too long"),
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("metrics connections still open at shutdown were cut");
    }
    Ok(())
}
