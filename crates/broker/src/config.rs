//! Broker configuration: every limit the server enforces, with defaults that suit a laptop.
//!
//! Read from TOML (`config/minibroker.toml` documents every key); the CLI overrides single keys
//! with flags. Unknown keys are an error, so a typo never silently falls back to a default.

use serde::Deserialize;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::ServerError;

/// Without the `always` flush policy, each segment is synced in the background every this many
/// bytes (see `minibroker_log::SegmentConfig::write_back_bytes`). Small, because appends to the
/// file can wait while a sync's writeback maps its range: the p99 latency at half load grew
/// with this size (the README's Performance section has the figures).
const WRITE_BACK_BYTES: u64 = 1 << 20;

/// The default `max_frame_bytes`: 8 MiB, as the native protocol's clients assume.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 8 << 20;

/// A topic declared up front, with its partition count.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicConfig {
    /// Topic name.
    pub name: String,
    /// Number of partitions.
    pub partitions: u32,
    /// This topic's `retention_bytes`, instead of the broker's.
    #[serde(default)]
    pub retention_bytes: Option<u64>,
    /// This topic's `retention_ms`, instead of the broker's.
    #[serde(default)]
    pub retention_ms: Option<u64>,
}

/// When a durable broker syncs what it wrote, and so when a produce is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(try_from = "String")]
pub enum FlushPolicy {
    /// Acknowledge a produce only after an fsync that covers its bytes; concurrent produces
    /// share one fsync (group commit). Survives a power loss.
    #[default]
    Always,
    /// Acknowledge after the write; sync every this many milliseconds. A process crash loses
    /// nothing acknowledged; a power loss, up to one interval.
    Interval(u64),
    /// Acknowledge after the write; leave syncing to the operating system. A process crash
    /// loses nothing acknowledged; a power loss, whatever the kernel had not written back.
    Os,
}

impl FromStr for FlushPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "always" => Ok(Self::Always),
            "os" => Ok(Self::Os),
            _ => text
                .strip_prefix("interval:")
                .and_then(|ms| ms.parse().ok())
                .filter(|ms| *ms > 0)
                .map(Self::Interval)
                .ok_or_else(|| {
                    format!("flush policy must be always, os or interval:<ms>, got {text:?}")
                }),
        }
    }
}

impl TryFrom<String> for FlushPolicy {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl fmt::Display for FlushPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Always => f.write_str("always"),
            Self::Interval(ms) => write!(f, "interval:{ms}"),
            Self::Os => f.write_str("os"),
        }
    }
}

/// Everything the broker and its listener need to know.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address of the native protocol's listener.
    pub listen: SocketAddr,
    /// Address of the Kafka protocol's listener (9092, the port every Kafka tool assumes).
    pub kafka_listen: SocketAddr,
    /// Address of the HTTP listener for `/metrics` (Prometheus), `/health` and `/ready`; off
    /// when absent.
    pub metrics_listen: Option<SocketAddr>,
    /// `HOST:PORT` that Kafka Metadata hands to clients; the bound address when absent. Needed
    /// behind a proxy, a NAT or in containers.
    pub kafka_advertise: Option<String>,
    /// This broker's Kafka node id.
    pub node_id: i32,
    /// The cluster id Kafka clients see.
    pub cluster_id: String,
    /// Connections served at once; a connection beyond it is accepted, told
    /// TOO_MANY_CONNECTIONS and closed at once.
    pub max_connections: usize,
    /// The open-file limit a durable broker shares out between connections, partitions (each
    /// holds its active segment open) and sealed segment files; when absent, the process's soft
    /// limit, which the broker first raises to the hard one. A topic whose partitions would not
    /// fit is refused.
    pub max_open_files: Option<u64>,
    /// Largest frame accepted or sent, in bytes (after the 4-byte length prefix).
    pub max_frame_bytes: usize,
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
    /// Create a topic on its first produce request.
    pub auto_create_topics: bool,
    /// Partition count of auto-created topics.
    pub default_partitions: u32,
    /// Topics created at start-up.
    pub topics: Vec<TopicConfig>,
    /// Most topics the broker will hold.
    pub max_topics: usize,
    /// Most partitions one topic may have.
    pub max_partitions_per_topic: u32,
    /// Most partitions across all topics.
    pub max_partitions: u32,
    /// Most bytes the broker keeps for clients: each batch's bytes plus a fixed overhead
    /// ([`crate::accounted_bytes`]), each producer's state entry per partition, and every topic
    /// and partition ([`crate::budget`]). Produce requests and topic
    /// creation beyond it are refused with STORAGE_FULL.
    pub max_stored_bytes: u64,
    /// Most issued producer ids remembered (to bump their epoch on a later init-producer); the
    /// least recently initialised is forgotten beyond it. Issuing new ids never stops.
    pub max_producer_ids: usize,
    /// An issued producer id not initialised again for this long is forgotten (Kafka's
    /// `producer.id.expiration.ms`, 1 day).
    pub producer_id_expiration_ms: u64,
    /// Largest fetch response's record bytes (capped further by `max_frame_bytes`).
    pub max_fetch_bytes: u32,
    /// Shards of producer state; 0 picks a small multiple of the core count.
    pub state_shards: usize,
    /// Where partitions are stored as segment files, with producer-state snapshots, the topic
    /// list and the producer-id counter; in memory (lost on exit) when absent.
    pub data_dir: Option<PathBuf>,
    /// With a data directory: when a produce is acknowledged (`always`, `interval:<ms>`, `os`).
    pub flush: FlushPolicy,
    /// A segment file rolls before it grows past this many bytes.
    pub segment_bytes: u64,
    /// A segment file rolls once its first batch is this old.
    pub segment_ms: u64,
    /// Old segments (in memory: 1 MiB chunks) are dropped while a partition would still hold
    /// this many bytes without them; unlimited when absent. Per topic in `[[topics]]`.
    pub retention_bytes: Option<u64>,
    /// Segments (chunks) whose newest record is older than this are dropped; kept forever when
    /// absent.
    /// Per topic in `[[topics]]`.
    pub retention_ms: Option<u64>,
    /// How often retention and producer-state expiry run.
    pub maintenance_interval_ms: u64,
    /// Shortest session timeout a consumer-group member may ask for (Kafka's
    /// `group.min.session.timeout.ms`).
    pub group_min_session_timeout_ms: u64,
    /// Longest session timeout a member may ask for (`group.max.session.timeout.ms`).
    pub group_max_session_timeout_ms: u64,
    /// A group with no members and no commit for this long is forgotten, with its committed
    /// offsets (Kafka's `offsets.retention.minutes`, 7 days).
    pub offsets_retention_ms: u64,
    /// Most consumer groups the broker holds (with members or committed offsets).
    pub max_groups: usize,
    /// Most members one group may have.
    pub max_group_members: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9093)),
            kafka_listen: SocketAddr::from(([127, 0, 0, 1], 9092)),
            kafka_advertise: None,
            metrics_listen: None,
            node_id: 1,
            cluster_id: "minibroker".to_owned(),
            max_connections: 1024,
            max_open_files: None,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_in_flight: 64,
            idle_timeout_ms: 600_000,
            write_timeout_ms: 30_000,
            drain_timeout_ms: 5_000,
            auto_create_topics: true,
            default_partitions: 1,
            topics: Vec::new(),
            max_topics: 10_000,
            max_partitions_per_topic: 1_024,
            max_partitions: 100_000,
            max_stored_bytes: 4 << 30,
            max_producer_ids: 1_000_000,
            producer_id_expiration_ms: 86_400_000,
            max_fetch_bytes: 1 << 20,
            state_shards: 0,
            data_dir: None,
            flush: FlushPolicy::Always,
            segment_bytes: 256 << 20,
            segment_ms: 7 * 24 * 3_600_000,
            retention_bytes: None,
            retention_ms: None,
            maintenance_interval_ms: 60_000,
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            offsets_retention_ms: 7 * 24 * 3_600_000,
            max_groups: 10_000,
            max_group_members: 1_000,
        }
    }
}

/// Bytes of record batches one answer frame of `max_frame_bytes` carries at most: the frame less
/// room for everything else in the answer (a quarter of the frame, at most 64 KiB).
///
/// It is also the largest batch a produce may carry (Kafka's `message.max.bytes`): a fetch hands
/// back at least one whole batch, so a larger one would make its partition unreadable.
#[must_use]
pub fn batch_room(max_frame_bytes: usize) -> usize {
    max_frame_bytes - (max_frame_bytes / 4).min(64 << 10)
}

impl Config {
    /// This configuration with auto-created topics of `partitions` partitions, raising
    /// `max_partitions_per_topic` to that if it is lower.
    #[must_use]
    pub fn with_default_partitions(mut self, partitions: u32) -> Self {
        self.default_partitions = partitions;
        self.max_partitions_per_topic = self.max_partitions_per_topic.max(partitions);
        self
    }

    /// Parses TOML; absent keys take their defaults.
    ///
    /// # Errors
    /// [`ServerError::ParseConfig`] for invalid TOML or unknown keys; [`ServerError::Config`] for
    /// values that fail [`Self::validate`].
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
        let config: Self = toml::from_str(text).map_err(|source| ServerError::ParseConfig {
            path: path.map(Path::to_owned),
            source,
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks that the limits make sense together.
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
        if self.max_connections == 0 {
            return fail("max_connections must be at least 1");
        }
        if self.max_frame_bytes < 64 || self.max_frame_bytes > u32::MAX as usize {
            return fail("max_frame_bytes must be between 64 and 4294967295");
        }
        if self.max_in_flight == 0 {
            return fail("max_in_flight must be at least 1");
        }
        // A year; beyond it a deadline computed from "now" could overflow.
        const MAX_TIMEOUT_MS: u64 = 365 * 24 * 3600 * 1000;
        if self.idle_timeout_ms == 0 || self.idle_timeout_ms > MAX_TIMEOUT_MS {
            return fail("idle_timeout_ms must be between 1 and 31536000000 (a year)");
        }
        if self.write_timeout_ms == 0 || self.write_timeout_ms > MAX_TIMEOUT_MS {
            return fail("write_timeout_ms must be between 1 and 31536000000 (a year)");
        }
        if self.drain_timeout_ms > MAX_TIMEOUT_MS {
            return fail("drain_timeout_ms must be at most 31536000000 (a year)");
        }
        if self.producer_id_expiration_ms > MAX_TIMEOUT_MS {
            return fail("producer_id_expiration_ms must be at most 31536000000 (a year)");
        }
        if self.max_producer_ids == 0 {
            return fail("max_producer_ids must be at least 1");
        }
        if self.default_partitions == 0 || self.default_partitions > self.max_partitions_per_topic {
            return fail("default_partitions must be between 1 and max_partitions_per_topic");
        }
        if self.segment_bytes < 4096 || self.segment_bytes > 1 << 30 {
            return fail("segment_bytes must be between 4096 and 1073741824 (1 GiB)");
        }
        if self.segment_ms == 0 || self.segment_ms > MAX_TIMEOUT_MS {
            return fail("segment_ms must be between 1 and 31536000000 (a year)");
        }
        if self.maintenance_interval_ms == 0 || self.maintenance_interval_ms > MAX_TIMEOUT_MS {
            return fail("maintenance_interval_ms must be between 1 and 31536000000 (a year)");
        }
        if self.group_min_session_timeout_ms == 0
            || self.group_min_session_timeout_ms > self.group_max_session_timeout_ms
            || self.group_max_session_timeout_ms > MAX_TIMEOUT_MS
        {
            return fail(
                "group_min_session_timeout_ms must be at least 1 and at most group_max_session_timeout_ms (at most a year)",
            );
        }
        if self.max_groups == 0 || self.max_group_members == 0 {
            return fail("max_groups and max_group_members must be at least 1");
        }
        if self.offsets_retention_ms > MAX_TIMEOUT_MS * 10 {
            return fail("offsets_retention_ms must be at most ten years");
        }
        if matches!(self.flush, FlushPolicy::Interval(ms) if ms > MAX_TIMEOUT_MS) {
            return fail("the flush interval must be at most 31536000000 ms (a year)");
        }
        for topic in &self.topics {
            if topic.partitions == 0 || topic.partitions > self.max_partitions_per_topic {
                return Err(ServerError::Config(format!(
                    "topic {:?}: partitions must be between 1 and max_partitions_per_topic",
                    topic.name
                )));
            }
        }
        Ok(())
    }

    /// [`Self::idle_timeout_ms`] as a duration.
    #[must_use]
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
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

    /// [`Self::write_timeout_ms`] as a duration.
    #[must_use]
    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms)
    }

    /// [`Self::producer_id_expiration_ms`] as a duration.
    #[must_use]
    pub fn producer_id_expiration(&self) -> Duration {
        Duration::from_millis(self.producer_id_expiration_ms)
    }

    /// How much of `topic` retention keeps: its own settings, else the broker's.
    #[must_use]
    pub fn retention(&self, topic: &str) -> minibroker_log::Retention {
        let declared = self.topics.iter().find(|t| t.name == topic);
        let ms = declared.and_then(|t| t.retention_ms).or(self.retention_ms);
        minibroker_log::Retention {
            bytes: declared
                .and_then(|t| t.retention_bytes)
                .or(self.retention_bytes),
            ms: ms.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
        }
    }

    /// When segments roll, and how often they are synced in the background.
    #[must_use]
    pub fn segments(&self) -> minibroker_log::SegmentConfig {
        minibroker_log::SegmentConfig {
            segment_bytes: self.segment_bytes,
            segment_ms: i64::try_from(self.segment_ms).unwrap_or(i64::MAX),
            // With `always` every acknowledgement syncs; otherwise a segment is synced in the
            // background every 16 MiB, so its roll does not sync it all at once.
            write_back_bytes: (self.flush != FlushPolicy::Always).then_some(WRITE_BACK_BYTES),
        }
    }

    /// [`Self::drain_timeout_ms`] as a duration.
    #[must_use]
    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
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
    fn default_partitions_raise_the_per_topic_cap_only_when_needed() {
        let few = Config::default().with_default_partitions(4);
        assert_eq!(
            (few.default_partitions, few.max_partitions_per_topic),
            (4, 1_024)
        );
        let many = Config::default().with_default_partitions(2_000);
        assert_eq!(
            (many.default_partitions, many.max_partitions_per_topic),
            (2_000, 2_000)
        );
        assert!(many.validate().is_ok());
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = Config::from_toml("max_conections = 3").unwrap_err();
        assert!(err.to_string().contains("max_conections"), "{err}");
    }

    #[test]
    fn nonsense_limits_are_errors() {
        assert!(Config::from_toml("max_connections = 0").is_err());
        assert!(Config::from_toml("idle_timeout_ms = 18446744073709551615").is_err());
        assert!(Config::from_toml("default_partitions = 0").is_err());
        assert!(Config::from_toml("write_timeout_ms = 0").is_err());
        assert!(Config::from_toml("max_producer_ids = 0").is_err());
        assert!(Config::from_toml("kafka_advertise = \"no-port\"").is_err());
        assert!(Config::from_toml("[[topics]]\nname = \"a\"\npartitions = 0").is_err());
        assert!(Config::from_toml("flush = \"sometimes\"").is_err());
        assert!(Config::from_toml("flush = \"interval:0\"").is_err());
        assert!(Config::from_toml("segment_bytes = 10").is_err());
    }

    #[test]
    fn flush_policies_parse_and_print_back() {
        for text in ["always", "os", "interval:250"] {
            let policy: FlushPolicy = text.parse().unwrap();
            assert_eq!(policy.to_string(), text);
        }
        let config = Config::from_toml("flush = \"interval:5\"\ndata_dir = \"/tmp/x\"").unwrap();
        assert_eq!(config.flush, FlushPolicy::Interval(5));
    }

    #[test]
    fn a_topic_overrides_the_brokers_retention() {
        let config = Config::from_toml(
            "retention_ms = 1000\n[[topics]]\nname = \"a\"\npartitions = 1\nretention_bytes = 5",
        )
        .unwrap();
        assert_eq!(
            config.retention("a"),
            minibroker_log::Retention {
                bytes: Some(5),
                ms: Some(1000)
            }
        );
        assert_eq!(config.retention("b").bytes, None);
    }
}
