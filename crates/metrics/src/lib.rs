//! minibroker's operations endpoint: `GET /metrics` in the Prometheus text format, `GET /health`
//! (the process answers) and `GET /ready` (recovery is done and the broker's listeners are
//! bound), on an HTTP listener of its own (`serve --metrics-listen`).
//!
//! The exposition comes from the `prometheus-client` crate and the HTTP from `axum`; the
//! figures are the broker's own counters, read on each scrape ([`BrokerCollector`]).
//!
//! # Example
//! ```no_run
//! # async fn example(node: std::sync::Arc<minibroker_host::Node>) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9100").await?;
//! minibroker_metrics::serve(listener, node, std::future::pending()).await
//! # }
//! ```

mod collect;
mod listener;

pub use collect::BrokerCollector;
pub use listener::{MetricsLimits, MetricsSecurity};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use minibroker_host::Node;
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
    /// What `/metrics` asks for in `Authorization: Bearer …`, when set.
    token: Option<Arc<str>>,
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

/// The router of the endpoint, for `broker`; `/metrics` asks for `token` when given (`/health`
/// and `/ready` never do: container health checks carry no credentials).
pub fn router(broker: Arc<Node>, token: Option<Arc<str>>) -> Router {
    let registry = registry(&broker);
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .with_state(Endpoint {
            broker,
            registry: Arc::new(registry),
            token,
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

/// [`serve`], under `limits`, with TLS and a bearer token as `security` says.
///
/// # Errors
/// If the listener fails.
pub async fn serve_secured(
    listener: TcpListener,
    broker: Arc<Node>,
    limits: MetricsLimits,
    security: MetricsSecurity,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = router(broker, security.bearer_token.clone());
    listener::serve(listener, router, limits, security.tls, shutdown).await
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
    serve_secured(
        listener,
        broker,
        limits,
        MetricsSecurity::default(),
        shutdown,
    )
    .await
}

/// Whether `headers` carry the endpoint's bearer token (or none is asked for), compared in
/// constant time.
fn authorized(endpoint: &Endpoint, headers: &axum::http::HeaderMap) -> bool {
    let Some(token) = &endpoint.token else {
        return true;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    bool::from(subtle::ConstantTimeEq::ct_eq(
        given.as_bytes(),
        token.as_bytes(),
    ))
}

async fn metrics(
    State(endpoint): State<Endpoint>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    if !authorized(&endpoint, &headers) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a bearer token is needed\n".to_owned(),
        );
    }
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
