//! minibroker's operations endpoint: `GET /metrics` in the Prometheus text format, `GET /health`
//! (the process answers) and `GET /ready` (recovery is done and the broker's listeners are
//! bound), on an HTTP listener of its own (`serve --metrics-listen`).
//!
//! The exposition comes from the `prometheus-client` crate and the HTTP from `axum`; the
//! figures are the broker's own counters, read on each scrape ([`BrokerCollector`]).
//!
//! # Example
//! ```no_run
//! # async fn example(node: std::sync::Arc<minibroker_net::Node>) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9100").await?;
//! minibroker_metrics::serve(listener, node, std::future::pending()).await
//! # }
//! ```

mod collect;
mod listener;

pub use collect::BrokerCollector;
pub use listener::MetricsLimits;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use minibroker_net::Node;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// The content type of the Prometheus text format.
const TEXT_FORMAT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone)]
struct Endpoint {
    broker: Arc<Node>,
    registry: Arc<Registry>,
}

fn registry(broker: &Arc<Node>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(BrokerCollector(Arc::clone(broker))));
    registry
}

/// What `/metrics` answers for `broker` now.
///
/// # Errors
/// If the exposition cannot be encoded.
pub fn render(broker: &Arc<Node>) -> Result<String, std::fmt::Error> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry(broker))?;
    Ok(text)
}

/// The router of the endpoint, for `broker`.
pub fn router(broker: Arc<Node>) -> Router {
    let registry = registry(&broker);
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .with_state(Endpoint {
            broker,
            registry: Arc::new(registry),
        })
}

/// Serves the endpoint on `listener` under the default [`MetricsLimits`] until `shutdown`
/// resolves.
///
/// # Errors
/// If the listener fails.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Node>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, broker, MetricsLimits::default(), shutdown).await
}

/// [`serve`], under `limits`.
///
/// # Errors
/// If the listener fails.
pub async fn serve_with(
    listener: TcpListener,
    broker: Arc<Node>,
    limits: MetricsLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listener::serve(listener, router(broker), limits, shutdown).await
}

async fn metrics(State(endpoint): State<Endpoint>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &endpoint.registry) {
        Ok(()) => (StatusCode::OK, [(header::CONTENT_TYPE, TEXT_FORMAT)], text),
        Err(error) => {
            tracing::warn!(%error, "could not encode the metrics");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                [(header::CONTENT_TYPE, "text/plain")],
                "could not encode the metrics\n".to_owned(),
            )
        }
    }
}

async fn health() -> &'static str {
    "ok\n"
}

async fn ready(State(endpoint): State<Endpoint>) -> (StatusCode, &'static str) {
    if endpoint.broker.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
