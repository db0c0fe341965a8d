//! minibroker's Kafka front end: Kafka clients (librdkafka and its bindings, kafka-python,
//! aiokafka, Java) produce idempotently to the broker core and read back, unchanged.
//!
//! Every message is decoded and encoded by the `kafka-protocol` crate; this crate only
//! translates between those messages and the broker core's domain API, and maps the core's
//! outcomes and errors to Kafka error codes once (`errors`). The connection machinery — limits,
//! pipelining, idle and write timeouts, drain — is the server's, shared with the native protocol.
//!
//! # Layout
//! - [`serve`] — a Kafka listener on the shared machinery.
//! - `front_end` — [`KafkaFrontEnd`]: header, version check, dispatch, answer framing.
//! - `handlers` — one function per API.
//! - `apis` — the APIs and versions implemented, which ApiVersions advertises exactly.
//! - `errors` — the Kafka code of every outcome and refusal.

mod apis;
mod errors;
mod front_end;
mod handlers;

pub use front_end::KafkaFrontEnd;

use minibroker_server::{Broker, Config, ServerError};
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// What the Kafka listener tells clients about this broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// This broker's node id: the only node, and every partition's leader.
    pub node_id: i32,
    /// The host Metadata hands to clients (behind a proxy or NAT, not the bound one).
    pub advertised_host: String,
    /// The port Metadata hands to clients.
    pub advertised_port: i32,
    /// A stable cluster id.
    pub cluster_id: String,
    /// Partitions of a topic created with `num_partitions = -1`.
    pub default_partitions: u32,
}

/// Serves the Kafka protocol for `broker` on `listener` until `shutdown` resolves, under the
/// limits of `config`.
///
/// # Errors
/// [`ServerError::Config`] when the configuration is invalid.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: &Config,
    kafka: KafkaConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let kafka = Arc::new(kafka);
    minibroker_server::serve_front_end(listener, broker, config, shutdown, move |broker| {
        KafkaFrontEnd::new(broker, Arc::clone(&kafka))
    })
    .await
}
