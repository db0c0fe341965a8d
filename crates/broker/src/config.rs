//! The broker core's section of the configuration ([`BrokerConfig`]): every limit the core
//! enforces, with defaults that suit a laptop.
//!
//! The file is flat TOML (`config/minibroker.toml` documents every key); each crate owns the
//! section of keys it reads, and `minibroker_host::Config` gathers them, refusing a key that no
//! section owns.

use serde::Deserialize;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::ServerError;

/// Without the `always` flush policy, each segment is synced in the background every this many
/// bytes (see `minibroker_log::SegmentConfig::write_back_bytes`). Small, because appends to the
/// file can wait while a sync's writeback maps its range: the p99 latency at half load grew
/// with this size (the README's Performance section has the figures).
const WRITE_BACK_BYTES: u64 = 1 << 20;

/// The longest timeout or interval any section accepts: a year (beyond it a deadline computed
/// from "now" could overflow).
pub const MAX_TIMEOUT_MS: u64 = 365 * 24 * 3600 * 1000;

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

/// A flush policy written in none of the forms it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("flush policy must be always, os or interval:<ms>, got {0:?}")]
pub struct BadFlushPolicy(pub String);

impl FromStr for FlushPolicy {
    type Err = BadFlushPolicy;

    fn from_str(text: &str) -> Result<Self, BadFlushPolicy> {
        match text {
            "always" => Ok(Self::Always),
            "os" => Ok(Self::Os),
            _ => text
                .strip_prefix("interval:")
                .and_then(|ms| ms.parse().ok())
                .filter(|ms| *ms > 0)
                .map(Self::Interval)
                .ok_or_else(|| BadFlushPolicy(text.to_owned())),
        }
    }
}

impl TryFrom<String> for FlushPolicy {
    type Error = BadFlushPolicy;

    fn try_from(text: String) -> Result<Self, BadFlushPolicy> {
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

/// The broker core's section of the configuration: topics, limits, durability. The file is flat
/// (`config/minibroker.toml`); `minibroker_host::Config` gathers this section with the others.
///
/// `max_connections`, `max_open_files` and `max_frame_bytes` are here because the core plans
/// around them (the open-file plan shares descriptors between connections and segment files; no
/// batch may be larger than an answer frame can hand back); the host and the front ends read
/// them from this section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct BrokerConfig {
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
    /// How often the cleaner looks for compacted partitions dirty enough to compact (Kafka's
    /// `log.cleaner.backoff.ms`).
    pub cleaner_interval_ms: u64,
    /// Bytes of keys the cleaner's offset map holds at most (Kafka's
    /// `log.cleaner.dedupe.buffer.size`): a pass maps as much of a partition as fits, the next
    /// goes on from there.
    pub cleaner_offset_map_bytes: u64,
    /// Bytes per second the cleaner reads and writes at most (Kafka's
    /// `log.cleaner.io.max.bytes.per.second`); unlimited when absent.
    pub cleaner_io_max_bytes_per_second: Option<u64>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_open_files: None,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
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
            cleaner_interval_ms: 15_000,
            cleaner_offset_map_bytes: 64 << 20,
            cleaner_io_max_bytes_per_second: None,
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

impl BrokerConfig {
    /// This configuration with auto-created topics of `partitions` partitions, raising
    /// `max_partitions_per_topic` to that if it is lower.
    #[must_use]
    pub fn with_default_partitions(mut self, partitions: u32) -> Self {
        self.default_partitions = partitions;
        self.max_partitions_per_topic = self.max_partitions_per_topic.max(partitions);
        self
    }

    /// Checks that the limits make sense together.
    ///
    /// # Errors
    /// [`ServerError::Config`] naming the first offending key.
    pub fn validate(&self) -> Result<(), ServerError> {
        let fail = |msg: &str| Err(ServerError::Config(msg.to_owned()));
        if self.max_connections == 0 {
            return fail("max_connections must be at least 1");
        }
        if self.max_frame_bytes < 64 || self.max_frame_bytes > u32::MAX as usize {
            return fail("max_frame_bytes must be between 64 and 4294967295");
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
        if self.cleaner_interval_ms == 0 || self.cleaner_interval_ms > MAX_TIMEOUT_MS {
            return fail("cleaner_interval_ms must be between 1 and 31536000000 (a year)");
        }
        if self.cleaner_offset_map_bytes < 1 << 20 {
            return fail("cleaner_offset_map_bytes must be at least 1048576 (1 MiB)");
        }
        if self.cleaner_io_max_bytes_per_second == Some(0) {
            return fail("cleaner_io_max_bytes_per_second must be at least 1 (or absent)");
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

    /// [`Self::producer_id_expiration_ms`] as a duration.
    #[must_use]
    pub fn producer_id_expiration(&self) -> Duration {
        Duration::from_millis(self.producer_id_expiration_ms)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<BrokerConfig, ServerError> {
        let config: BrokerConfig = toml::from_str(text)
            .map_err(|source| ServerError::ParseConfig { path: None, source })?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn default_partitions_raise_the_per_topic_cap_only_when_needed() {
        let few = BrokerConfig::default().with_default_partitions(4);
        assert_eq!(
            (few.default_partitions, few.max_partitions_per_topic),
            (4, 1_024)
        );
        let many = BrokerConfig::default().with_default_partitions(2_000);
        assert_eq!(
            (many.default_partitions, many.max_partitions_per_topic),
            (2_000, 2_000)
        );
        assert!(many.validate().is_ok());
    }

    #[test]
    fn nonsense_limits_are_errors() {
        assert!(parse("max_connections = 0").is_err());
        assert!(parse("default_partitions = 0").is_err());
        assert!(parse("max_producer_ids = 0").is_err());
        assert!(parse("[[topics]]\nname = \"a\"\npartitions = 0").is_err());
        assert!(parse("flush = \"sometimes\"").is_err());
        assert!(parse("flush = \"interval:0\"").is_err());
        assert!(parse("segment_bytes = 10").is_err());
    }

    #[test]
    fn flush_policies_parse_and_print_back() {
        for text in ["always", "os", "interval:250"] {
            let policy: FlushPolicy = text.parse().unwrap();
            assert_eq!(policy.to_string(), text);
        }
        let config = parse("flush = \"interval:5\"\ndata_dir = \"/tmp/x\"").unwrap();
        assert_eq!(config.flush, FlushPolicy::Interval(5));
    }

    #[test]
    fn a_topic_overrides_the_brokers_retention() {
        let config = parse(
            "retention_ms = 1000\n[[topics]]\nname = \"a\"\npartitions = 1\nretention_bytes = 5",
        )
        .unwrap();
        assert_eq!(
            config
                .topic_settings("a", &crate::Overrides::default())
                .retention,
            minibroker_log::Retention {
                bytes: Some(5),
                ms: Some(1000)
            }
        );
        let other = config.topic_settings("b", &crate::Overrides::default());
        assert_eq!(other.retention.bytes, None);
    }
}
