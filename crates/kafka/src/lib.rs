//! minibroker's Kafka front end: Kafka clients (librdkafka and its bindings, kafka-python,
//! aiokafka, Java) produce idempotently to the broker core and read back, unchanged.
//!
//! Every message but Produce is decoded and encoded by the `kafka-protocol` crate (Produce, the
//! hot path, is read in place and answered directly by `produce_wire`, held to the crate by a
//! differential test); this crate only
//! translates between those messages and the broker core's domain API, and maps the core's
//! outcomes and errors to Kafka error codes once (`errors`). The connection machinery — limits,
//! pipelining, idle and write timeouts, drain — is `minibroker_net`'s, shared with the native
//! protocol; the consumer-group APIs call `minibroker_groups`.
//!
//! # Layout
//! - [`serve`] — a Kafka listener on a host; [`serve_on_loopback`] — one on a free port.
//! - `front_end` — [`KafkaFrontEnd`]: header, version check, dispatch, answer framing.
//! - `handlers` — one file per API family: `produce`, `fetch`, `metadata`, `offsets`
//!   (ListOffsets), `topics` (CreateTopics, DeleteTopics, CreatePartitions), `producer_ids`
//!   (InitProducerId), `groups` (the consumer-group APIs), `transactions` and `implicit_add`
//!   (the transactional APIs), `transaction_admin`, `security_admin` (ACLs and SCRAM users),
//!   `configs` and `alter_configs`, `delete_records`, `offset_delete`, `leader_epoch`,
//!   `log_dirs`, `cluster` (DescribeCluster), and `shared`: what a broker of a cluster
//!   serves its own way (Produce through the cluster's committer, producer ids, topics and
//!   Metadata from the cluster), with `deferred`, the Produces whose answers wait for the
//!   cluster's commit.
//! - `sasl` — the SASL handshake and logins; `authorize` — each request's ACL checks;
//!   `implicitly_added` — a connection's memory of partitions its transaction added by
//!   producing (KIP-890 part 2).
//! - `answer_room` — the bound on one answer's size, counted as it is built.
//! - `apis` — the APIs and versions implemented, which ApiVersions advertises exactly.
//! - `errors` — the Kafka code of every outcome and refusal.
//! - `preflight` — array counts checked before the decoder allocates for them.
//! - [`produce_wire`] — Produce read in place from its frame, its answer written directly.

mod answer_room;
mod apis;
mod authorize;
mod deferred;
mod errors;
mod front_end;
mod handlers;
mod implicitly_added;
mod preflight;
pub mod produce_wire;
mod sasl;

pub use front_end::KafkaFrontEnd;

use minibroker_host::Config;
use minibroker_host::{Host, HostError};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

/// What the Kafka listener tells clients about this broker, and what it asks of them.
#[derive(Debug, Clone)]
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
    /// The login a SASL listener asks for; `None` for PLAINTEXT.
    /// Whether connections log in first (`kafka_security_protocol` SASL_PLAINTEXT or
    /// SASL_SSL); the users and ACLs are the node's.
    pub login: bool,
}

impl KafkaConfig {
    /// The Kafka listener's settings from the broker's `config`, advertising `host`:`port`.
    #[must_use]
    pub fn from_config(config: &Config, host: String, port: u16) -> Self {
        Self {
            node_id: config.net.node_id,
            advertised_host: host,
            advertised_port: i32::from(port),
            cluster_id: config.net.cluster_id.clone(),
            default_partitions: config.broker.default_partitions,
            // Answers stay within the frame size the broker accepts.
            max_fetch_response_bytes: minibroker_broker::batch_room(config.broker.max_frame_bytes),
            max_answer_bytes: config.broker.max_frame_bytes,
            login: config.net.kafka_security_protocol.uses_sasl(),
        }
    }
}

/// Serves the Kafka protocol for `host` on `listener` until the host stops, advertising the
/// configuration's `kafka_advertise` or else the bound address, in TLS sessions and asking for
/// a SASL login when `kafka_security_protocol` says so; returns the bound address.
///
/// # Errors
/// [`HostError::Bind`] when the listener's address cannot be read; [`HostError::Start`] when the
/// users file, the certificate or the key cannot be read.
pub fn serve(host: &Host, listener: TcpListener) -> Result<SocketAddr, HostError> {
    let tls = minibroker_host::tls::server_config(&host.config().net)
        .map_err(|error| minibroker_broker::ServerError::Config(error.to_string()))?;
    serve_tls(host, listener, tls)
}

/// As [`serve`], in TLS sessions with `tls` whatever the configuration says (`None`: plain
/// TCP): for a second, TLS listener beside a plain one (`bench --tls`).
///
/// # Errors
/// As [`serve`].
pub fn serve_tls(
    host: &Host,
    listener: TcpListener,
    tls: Option<Arc<minibroker_host::rustls::ServerConfig>>,
) -> Result<SocketAddr, HostError> {
    let bound = Host::bound(&listener)?;
    let (advertised_host, port) = host.config().net.kafka_advertised(bound);
    let kafka = Arc::new(KafkaConfig::from_config(
        host.config(),
        advertised_host,
        port,
    ));
    host.serve_with(listener, tls, move |node, peer| {
        KafkaFrontEnd::new(node, Arc::clone(&kafka), peer)
    })
}

/// A Kafka listener for `host` on a free loopback port (what `minibroker bench --kafka` and the
/// tests add to an embedded broker); it stops with the host. Returns its address.
///
/// # Errors
/// If no port can be bound.
pub async fn serve_on_loopback(host: &Host) -> Result<SocketAddr, HostError> {
    let listener = Host::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    serve(host, listener)
}
