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
//! - `handlers` — one file per API family: `produce`, `fetch`, `metadata`, `offsets`
//!   (ListOffsets), `topics` (CreateTopics, DeleteTopics), `producer_ids` (InitProducerId),
//!   `groups` (the consumer-group APIs).
//! - `answer_room` — the bound on one answer's size, counted as it is built.
//! - `apis` — the APIs and versions implemented, which ApiVersions advertises exactly.
//! - `errors` — the Kafka code of every outcome and refusal.
//! - `preflight` — array counts checked before the decoder allocates for them.

mod answer_room;
mod apis;
mod errors;
mod front_end;
mod handlers;
mod preflight;

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
    /// Most record bytes in one Fetch answer, whatever the client asks (Kafka's
    /// `fetch.max.bytes`); at least one batch is always returned.
    pub max_fetch_response_bytes: usize,
    /// Most bytes of any one answer (`max_frame_bytes`): a request whose answer would be larger
    /// is refused by closing the connection.
    pub max_answer_bytes: usize,
}

impl KafkaConfig {
    /// The Kafka listener's settings from the broker's `config`, advertising `host`:`port`.
    #[must_use]
    pub fn from_config(config: &Config, host: String, port: u16) -> Self {
        Self {
            node_id: config.node_id,
            advertised_host: host,
            advertised_port: i32::from(port),
            cluster_id: config.cluster_id.clone(),
            default_partitions: config.default_partitions,
            // Answers stay within the frame size the broker accepts.
            max_fetch_response_bytes: minibroker_server::batch_room(config.max_frame_bytes),
            max_answer_bytes: config.max_frame_bytes,
        }
    }
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

/// A Kafka listener inside this process on a free loopback port, for an existing broker core:
/// what `minibroker bench --kafka` and the tests run against. Stopped when dropped.
#[derive(Debug)]
pub struct EmbeddedKafka {
    /// Where Kafka clients connect.
    pub addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl EmbeddedKafka {
    /// Serves the Kafka protocol for `broker` on `127.0.0.1:0`, under `config`'s limits.
    ///
    /// # Errors
    /// If no port can be bound.
    pub async fn start(broker: Arc<Broker>, config: Config) -> Result<Self, ServerError> {
        let bind_error = |source| ServerError::Bind {
            addr: "127.0.0.1:0".to_owned(),
            source,
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let kafka = KafkaConfig::from_config(&config, addr.ip().to_string(), addr.port());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let stopped = async move {
                let _ = stopped.await;
            };
            if let Err(error) = serve(listener, broker, &config, kafka, stopped).await {
                tracing::warn!(%error, "the embedded Kafka listener stopped");
            }
        });
        Ok(Self {
            addr,
            stop: Some(stop),
        })
    }

    /// The address as a string, for clients.
    #[must_use]
    pub fn address(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for EmbeddedKafka {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
