//! The configuration: one flat TOML file (`config/minibroker.toml` documents every key), whose
//! keys each belong to the section of the crate that reads them — [`BrokerConfig`] (the core),
//! [`GroupConfig`] (the group coordinator), [`TransactionConfig`] (the transaction coordinator)
//! and [`NetConfig`] (this crate: listeners and connections). [`Config`] gathers them; a key that no section owns is an error, so a typo never
//! silently falls back to a default. The CLI overrides single keys with flags.

use minibroker_broker::{BrokerConfig, MAX_TIMEOUT_MS, ServerError};
use minibroker_groups::GroupConfig;
use minibroker_transactions::TransactionConfig;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every section, as one broker process runs with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The broker core's keys.
    pub broker: BrokerConfig,
    /// The group coordinator's keys.
    pub groups: GroupConfig,
    /// The transaction coordinator's keys.
    pub transactions: TransactionConfig,
    /// The listeners' and connections' keys.
    pub net: NetConfig,
}

/// The file as read: every section's keys, and whatever no section owns.
#[derive(Deserialize)]
struct File {
    #[serde(flatten)]
    broker: BrokerConfig,
    #[serde(flatten)]
    groups: GroupConfig,
    #[serde(flatten)]
    transactions: TransactionConfig,
    #[serde(flatten)]
    net: NetConfig,
    #[serde(flatten)]
    unknown: BTreeMap<String, serde::de::IgnoredAny>,
}

impl Config {
    /// The limits every listener serves its connections under.
    #[must_use]
    pub fn limits(&self) -> minibroker_net::Limits {
        minibroker_net::Limits {
            max_connections: self.broker.max_connections,
            max_frame_bytes: self.broker.max_frame_bytes,
            max_in_flight: self.net.max_in_flight,
            idle_timeout: self.net.idle_timeout(),
            write_timeout: self.net.write_timeout(),
            authentication_timeout: self.net.authentication_timeout(),
            drain_timeout: self.net.drain_timeout(),
        }
    }

    /// Parses TOML; absent keys take their defaults.
    ///
    /// # Errors
    /// [`ServerError::ParseConfig`] for invalid TOML; [`ServerError::Config`] for a key no
    /// section owns, or values that fail [`Self::validate`].
    pub fn from_toml(text: &str) -> Result<Self, ServerError> {
        Self::parse(text, None)
    }

    /// Reads and parses a TOML file.
    ///
    /// # Errors
    /// [`ServerError::ReadConfig`] if the file cannot be read; otherwise as [`Self::from_toml`].
    pub fn from_file(path: &Path) -> Result<Self, ServerError> {
        let text = std::fs::read_to_string(path).map_err(|source| ServerError::ReadConfig {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, Some(path))
    }

    fn parse(text: &str, path: Option<&Path>) -> Result<Self, ServerError> {
        let file: File = toml::from_str(text).map_err(|source| ServerError::ParseConfig {
            path: path.map(Path::to_owned),
            source,
        })?;
        if let Some(key) = file.unknown.keys().next() {
            let file = path
                .map(|p| format!(" in {}", p.display()))
                .unwrap_or_default();
            return Err(ServerError::Config(format!(
                "unknown key `{key}`{file} (config/minibroker.toml lists every key)"
            )));
        }
        let config = Self {
            broker: file.broker,
            groups: file.groups,
            transactions: file.transactions,
            net: file.net,
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks that every section's values make sense.
    ///
    /// # Errors
    /// [`ServerError::Config`] naming the first offending key.
    pub fn validate(&self) -> Result<(), ServerError> {
        self.broker.validate()?;
        self.groups.validate()?;
        self.transactions.validate()?;
        self.net.validate()
    }

    /// This configuration with auto-created topics of `partitions` partitions (see
    /// [`BrokerConfig::with_default_partitions`]).
    #[must_use]
    pub fn with_default_partitions(mut self, partitions: u32) -> Self {
        self.broker = self.broker.with_default_partitions(partitions);
        self
    }
}

/// The host's section of the configuration: where its listeners listen and what they tell
/// clients, and how each connection is served (flat in the file, like every section).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct NetConfig {
    /// Address of the native protocol's listener.
    pub listen: SocketAddr,
    /// Address of the Kafka protocol's listener (9092, the port every Kafka tool assumes).
    pub kafka_listen: SocketAddr,
    /// Address of the HTTP listener for `/metrics` (Prometheus), `/health` and `/ready`; off
    /// when absent.
    pub metrics_listen: Option<SocketAddr>,
    /// Serve the metrics listener over TLS, with `tls_cert` and `tls_key`.
    pub metrics_tls: bool,
    /// A file whose first line is the bearer token `/metrics` asks for (`/health` and `/ready`
    /// stay open, for container health checks).
    pub metrics_bearer_token_file: Option<PathBuf>,
    /// `HOST:PORT` that Kafka Metadata hands to clients; the bound address when absent. Needed
    /// behind a proxy, a NAT or in containers.
    pub kafka_advertise: Option<String>,
    /// This broker's Kafka node id.
    pub node_id: i32,
    /// The cluster id Kafka clients see.
    pub cluster_id: String,
    /// The PostgreSQL database (`postgresql://USER@HOST:PORT/DB`) of the cluster this broker
    /// is one of; a broker on its own when absent.
    pub cluster: Option<String>,
    /// In a cluster: how long a broker gathers produced batches before it commits them together.
    pub cluster_flush_ms: u64,
    /// In a cluster: how long a broker stays a member after its last heartbeat.
    pub cluster_lease_ms: u64,
    /// In a cluster: the most of one partition a broker's copy keeps in memory; older batches
    /// are read from the database.
    pub cluster_cache_bytes: u64,
    /// Responses a connection may buffer before they are flushed to the socket.
    pub max_in_flight: usize,
    /// A connection with no request for this long (up to twice as long, as the timer is checked
    /// once per period) is closed.
    pub idle_timeout_ms: u64,
    /// A write of answers that does not complete within this (the client is not reading them)
    /// closes the connection, freeing its slot.
    pub write_timeout_ms: u64,
    /// On shutdown, how long connections get to finish their requests before they are aborted.
    pub drain_timeout_ms: u64,
    /// What the Kafka listener asks of a client before it serves it, in Kafka's words:
    /// `PLAINTEXT` (nothing), `SSL` (TLS), `SASL_PLAINTEXT` (a SASL login with a user of
    /// `users_file`) or `SASL_SSL` (both).
    pub kafka_security_protocol: SecurityProtocol,
    /// What the native listener asks of a client, in the same words: `PLAINTEXT`, `SSL`,
    /// `SASL_PLAINTEXT` or `SASL_SSL` (the same certificate, users and ACLs as Kafka's).
    pub listen_security_protocol: SecurityProtocol,
    /// The server's certificate chain (PEM, leaf first), for TLS.
    pub tls_cert: Option<PathBuf>,
    /// The server's private key (PEM: PKCS#8, SEC1 or PKCS#1), for TLS.
    pub tls_key: Option<PathBuf>,
    /// Whether TLS clients are asked for a certificate: `none`, `requested` or `required` (then
    /// `tls_client_ca` is what it must be signed by, and its common name is the principal).
    pub tls_client_auth: ClientAuth,
    /// The CA(s) client certificates must chain to (PEM).
    pub tls_client_ca: Option<PathBuf>,
    /// A connection that has not finished its TLS handshake and SASL login within this is
    /// closed, so clients that never log in cannot hold the connection slots.
    pub authentication_timeout_ms: u64,
    /// Connections one client address may hold open (Kafka's `max.connections.per.ip`); no
    /// limit but `max_connections` when absent.
    pub max_connections_per_ip: Option<usize>,
    /// Logged-in connections one principal may hold open; a login past it is refused.
    pub max_connections_per_principal: Option<usize>,
    /// How long a SASL login lasts (Kafka's `connections.max.reauth.ms`, KIP-368): a client
    /// re-authenticates on the same connection before it ends, or the connection is closed at
    /// its next request. 0: for the connection's life.
    pub sasl_session_lifetime_ms: u64,
    /// The ACLs (`minibroker acl add`): when set, every Kafka request is authorised against
    /// them, as Kafka's authoriser does. Read again when it changes.
    pub acls_file: Option<PathBuf>,
    /// Principals (`User:NAME`) allowed everything.
    pub super_users: Vec<String>,
    /// Whether a resource no ACL names is open to everyone (Kafka's default: false).
    pub allow_everyone_if_no_acl_found: bool,
    /// The SASL mechanisms offered: SCRAM-SHA-256, SCRAM-SHA-512 and (asked for by name) PLAIN.
    pub sasl_enabled_mechanisms: Vec<String>,
    /// The users and their SCRAM credentials (`minibroker user add`), needed for SASL.
    pub users_file: Option<PathBuf>,
    /// How long a failed login waits before its answer (Kafka's
    /// `connection.failed.authentication.delay.ms`), so a guessing client gets few guesses.
    pub auth_failure_delay_ms: u64,
}

/// Kafka's `security.protocol` of a listener.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum SecurityProtocol {
    /// No TLS, no login.
    #[default]
    #[serde(rename = "PLAINTEXT")]
    Plaintext,
    /// A SASL login, without TLS.
    #[serde(rename = "SASL_PLAINTEXT")]
    SaslPlaintext,
    /// TLS.
    #[serde(rename = "SSL")]
    Ssl,
    /// TLS and a SASL login.
    #[serde(rename = "SASL_SSL")]
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether connections speak TLS.
    #[must_use]
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Whether connections log in with SASL.
    #[must_use]
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// Whether a TLS listener asks clients for a certificate (Kafka's `ssl.client.auth`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// No client certificate is asked for.
    #[default]
    None,
    /// A certificate is asked for; a client without one is served as `User:ANONYMOUS`.
    Requested,
    /// A certificate signed by `tls_client_ca` is required.
    Required,
}

/// The mechanisms a listener may offer.
pub const SASL_MECHANISMS: [&str; 3] = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"];

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9093)),
            kafka_listen: SocketAddr::from(([127, 0, 0, 1], 9092)),
            metrics_listen: None,
            metrics_tls: false,
            metrics_bearer_token_file: None,
            kafka_advertise: None,
            node_id: 1,
            cluster_id: "minibroker".to_owned(),
            cluster: None,
            cluster_flush_ms: 2,
            cluster_lease_ms: 9_000,
            cluster_cache_bytes: 64 << 20,
            max_in_flight: 64,
            idle_timeout_ms: 600_000,
            write_timeout_ms: 30_000,
            drain_timeout_ms: 5_000,
            kafka_security_protocol: SecurityProtocol::Plaintext,
            listen_security_protocol: SecurityProtocol::Plaintext,
            tls_cert: None,
            tls_key: None,
            tls_client_auth: ClientAuth::None,
            tls_client_ca: None,
            authentication_timeout_ms: 10_000,
            sasl_session_lifetime_ms: 0,
            max_connections_per_ip: None,
            max_connections_per_principal: None,
            acls_file: None,
            super_users: Vec::new(),
            allow_everyone_if_no_acl_found: false,
            sasl_enabled_mechanisms: vec!["SCRAM-SHA-256".to_owned(), "SCRAM-SHA-512".to_owned()],
            users_file: None,
            auth_failure_delay_ms: 100,
        }
    }
}

impl NetConfig {
    /// Checks that the limits make sense.
    ///
    /// # Errors
    /// [`ServerError::Config`] naming the first offending key.
    pub fn validate(&self) -> Result<(), ServerError> {
        let fail = |msg: &str| Err(ServerError::Config(msg.to_owned()));
        if let Some(advertise) = &self.kafka_advertise
            && advertise_parts(advertise).is_none()
        {
            return Err(ServerError::Config(format!(
                "kafka_advertise must be HOST:PORT, got {advertise:?}"
            )));
        }
        if self.max_in_flight == 0 {
            return fail("max_in_flight must be at least 1");
        }
        if self.cluster_flush_ms == 0 || self.cluster_flush_ms > 1_000 {
            return fail("cluster_flush_ms must be 1 to 1000");
        }
        if !(300..=60_000).contains(&self.cluster_lease_ms) {
            return fail("cluster_lease_ms must be 300 to 60000");
        }
        if self.cluster_cache_bytes == 0 {
            return fail("cluster_cache_bytes must be at least 1");
        }
        if self.idle_timeout_ms == 0 || self.idle_timeout_ms > MAX_TIMEOUT_MS {
            return fail("idle_timeout_ms must be between 1 and 31536000000 (a year)");
        }
        if self.write_timeout_ms == 0 || self.write_timeout_ms > MAX_TIMEOUT_MS {
            return fail("write_timeout_ms must be between 1 and 31536000000 (a year)");
        }
        if self.drain_timeout_ms > MAX_TIMEOUT_MS {
            return fail("drain_timeout_ms must be at most 31536000000 (a year)");
        }
        self.validate_security()
    }

    /// The security keys: a protocol this broker offers, known mechanisms, and a users file when
    /// logins are asked for.
    fn validate_security(&self) -> Result<(), ServerError> {
        let fail = |msg: String| Err(ServerError::Config(msg));
        let protocol = self.kafka_security_protocol;
        let native = self.listen_security_protocol;
        let secured = protocol != SecurityProtocol::Plaintext || self.acls_file.is_some();
        if secured && native == SecurityProtocol::Plaintext && !self.listen.ip().is_loopback() {
            return fail(format!(
                "listen = \"{}\": with the Kafka listener secured (kafka_security_protocol, acls_file), a PLAINTEXT native listener would let anyone around it; set listen_security_protocol or keep listen on a loopback address",
                self.listen
            ));
        }
        let tls = protocol.uses_tls() || native.uses_tls();
        let sasl = protocol.uses_sasl() || native.uses_sasl();
        if tls && (self.tls_cert.is_none() || self.tls_key.is_none()) {
            return fail(
                "a security protocol of \"SSL\" or \"SASL_SSL\" needs tls_cert and tls_key".into(),
            );
        }
        if tls && self.tls_client_auth != ClientAuth::None && self.tls_client_ca.is_none() {
            return fail(
                "tls_client_auth = \"requested\" or \"required\" needs tls_client_ca".into(),
            );
        }
        if self.metrics_tls && (self.tls_cert.is_none() || self.tls_key.is_none()) {
            return fail("metrics_tls needs tls_cert and tls_key".into());
        }
        if sasl && self.users_file.is_none() {
            return fail("a SASL security protocol needs users_file".into());
        }
        if let Some(bad) = self
            .super_users
            .iter()
            .find(|user| minibroker_security::acl::check_principal(user).is_err())
        {
            return fail(format!("super_users: {bad:?} is not User:NAME"));
        }
        if (protocol != SecurityProtocol::Plaintext || native != SecurityProtocol::Plaintext)
            && self.super_users.iter().any(|user| user == "User:ANONYMOUS")
        {
            return fail(
                "super_users names User:ANONYMOUS: on a secured listener that makes every unauthenticated connection a super user"
                    .into(),
            );
        }
        if self.max_connections_per_ip == Some(0) || self.max_connections_per_principal == Some(0) {
            return fail(
                "max_connections_per_ip and max_connections_per_principal must be at least 1"
                    .into(),
            );
        }
        if self.sasl_session_lifetime_ms > MAX_TIMEOUT_MS {
            return fail("sasl_session_lifetime_ms must be at most 31536000000 (a year)".into());
        }
        if self.authentication_timeout_ms == 0 || self.authentication_timeout_ms > 600_000 {
            return fail("authentication_timeout_ms must be between 1 and 600000".into());
        }
        if let Some(unknown) = self
            .sasl_enabled_mechanisms
            .iter()
            .find(|m| !SASL_MECHANISMS.contains(&m.as_str()))
        {
            return fail(format!(
                "sasl_enabled_mechanisms: unknown mechanism {unknown:?} (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN)"
            ));
        }
        if sasl && self.sasl_enabled_mechanisms.is_empty() {
            return fail("sasl_enabled_mechanisms must name at least one mechanism".into());
        }
        if self.auth_failure_delay_ms > 60_000 {
            return fail("auth_failure_delay_ms must be at most 60000".into());
        }
        Ok(())
    }

    /// [`Self::idle_timeout_ms`] as a duration.
    #[must_use]
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }

    /// [`Self::authentication_timeout_ms`] as a duration.
    #[must_use]
    pub fn authentication_timeout(&self) -> Duration {
        Duration::from_millis(self.authentication_timeout_ms)
    }

    /// [`Self::write_timeout_ms`] as a duration.
    #[must_use]
    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms)
    }

    /// [`Self::drain_timeout_ms`] as a duration.
    #[must_use]
    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
    }

    /// The host and port Kafka clients are told to connect to: `kafka_advertise`, or `bound` (the
    /// Kafka listener's address).
    #[must_use]
    pub fn kafka_advertised(&self, bound: SocketAddr) -> (String, u16) {
        self.kafka_advertise
            .as_deref()
            .and_then(advertise_parts)
            .unwrap_or_else(|| (bound.ip().to_string(), bound.port()))
    }
}

/// `HOST:PORT` split, if it is that.
fn advertise_parts(advertise: &str) -> Option<(String, u16)> {
    let (host, port) = advertise.rsplit_once(':')?;
    let port = port.parse().ok()?;
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_config_file_parses() {
        let text = include_str!("../../../config/minibroker.toml");
        let config = Config::from_toml(text).unwrap();
        // The file documents the defaults: it must say exactly what the code does.
        assert_eq!(config, Config::default());
    }

    #[test]
    fn empty_text_gives_defaults() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn every_section_reads_its_keys_from_the_flat_file() {
        let config = Config::from_toml(
            "max_connections = 7\nmax_groups = 3\nidle_timeout_ms = 5\n[[topics]]\nname = \"a\"\npartitions = 2",
        )
        .unwrap();
        assert_eq!(config.broker.max_connections, 7);
        assert_eq!(config.broker.topics[0].partitions, 2);
        assert_eq!(config.groups.max_groups, 3);
        assert_eq!(config.net.idle_timeout_ms, 5);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = Config::from_toml("max_conections = 3").unwrap_err();
        assert!(err.to_string().contains("max_conections"), "{err}");
        let err = Config::from_toml("[[topics]]\nname = \"a\"\npartitons = 1").unwrap_err();
        assert!(err.to_string().contains("partitons"), "{err}");
    }

    #[test]
    fn nonsense_limits_are_errors_in_every_section() {
        assert!(Config::from_toml("max_connections = 0").is_err());
        assert!(Config::from_toml("idle_timeout_ms = 18446744073709551615").is_err());
        assert!(Config::from_toml("write_timeout_ms = 0").is_err());
        assert!(Config::from_toml("kafka_advertise = \"no-port\"").is_err());
        assert!(Config::from_toml("max_groups = 0").is_err());
        assert!(Config::from_toml("segment_bytes = 10").is_err());
    }

    #[test]
    fn security_keys_are_checked() {
        let sasl = Config::from_toml(
            "kafka_security_protocol = \"SASL_PLAINTEXT\"\nusers_file = \"users\"\nsasl_enabled_mechanisms = [\"PLAIN\"]",
        )
        .unwrap();
        assert_eq!(
            sasl.net.kafka_security_protocol,
            SecurityProtocol::SaslPlaintext
        );
        let without_users = Config::from_toml("kafka_security_protocol = \"SASL_PLAINTEXT\"");
        assert!(
            without_users
                .unwrap_err()
                .to_string()
                .contains("users_file")
        );
        let tls = Config::from_toml("kafka_security_protocol = \"SSL\"");
        assert!(tls.unwrap_err().to_string().contains("tls_cert"));
        let sasl_ssl = "kafka_security_protocol = \"SASL_SSL\"\ntls_cert = \"c\"\ntls_key = \"k\"";
        assert!(
            Config::from_toml(sasl_ssl)
                .unwrap_err()
                .to_string()
                .contains("users_file")
        );
        let with_users = format!("{sasl_ssl}\nusers_file = \"u\"");
        assert!(Config::from_toml(&with_users).is_ok());
        let exposed = format!("{with_users}\nlisten = \"0.0.0.0:9093\"");
        assert!(
            Config::from_toml(&exposed)
                .unwrap_err()
                .to_string()
                .contains("loopback")
        );
        let client_auth = format!("{with_users}\ntls_client_auth = \"required\"");
        assert!(
            Config::from_toml(&client_auth)
                .unwrap_err()
                .to_string()
                .contains("tls_client_ca")
        );
        assert!(Config::from_toml("kafka_security_protocol = \"TLS\"").is_err());
        let mechanism = Config::from_toml("sasl_enabled_mechanisms = [\"GSSAPI\"]");
        assert!(mechanism.unwrap_err().to_string().contains("GSSAPI"));
    }
}
