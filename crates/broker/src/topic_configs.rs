//! The settings a topic lives by, under the names Kafka gives them (`retention.ms`, ...), with
//! where each value comes from: the topic's own (`[[topics]]` in the configuration file), the
//! broker's (its configuration), or the default. DescribeConfigs shows them. They are read-only
//! here: the configuration file sets them, and a restart applies a change.

use crate::BrokerConfig;

/// Where a setting's value comes from (Kafka's `ConfigSource`, as its codes say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set for this topic.
    Topic,
    /// Set for the broker, so for every topic without its own.
    Broker,
    /// Nobody set it.
    Default,
}

/// What kind of value a setting holds (Kafka's `ConfigType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    /// Text.
    String,
    /// A 32-bit number.
    Int,
    /// A 64-bit number.
    Long,
    /// A comma-separated list.
    List,
}

/// One setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Kafka's name for it.
    pub name: &'static str,
    /// Its value, as Kafka writes it (-1 for "no limit").
    pub value: String,
    /// Where the value comes from.
    pub source: ConfigSource,
    /// What kind of value it is.
    pub kind: ConfigType,
    /// What it does.
    pub doc: &'static str,
}

/// Kafka's "no limit".
const UNLIMITED: &str = "-1";

impl BrokerConfig {
    /// `topic`'s settings (Kafka's topic-level names).
    #[must_use]
    pub fn topic_configs(&self, topic: &str) -> Vec<ConfigEntry> {
        let own = self.topics.iter().find(|t| t.name == topic);
        let limit = |own: Option<u64>, broker: Option<u64>| match (own, broker) {
            (Some(value), _) => (value.to_string(), ConfigSource::Topic),
            (None, Some(value)) => (value.to_string(), ConfigSource::Broker),
            (None, None) => (UNLIMITED.to_owned(), ConfigSource::Default),
        };
        let (retention_ms, retention_ms_source) =
            limit(own.and_then(|t| t.retention_ms), self.retention_ms);
        let (retention_bytes, retention_bytes_source) =
            limit(own.and_then(|t| t.retention_bytes), self.retention_bytes);
        self.settings(
            [
                ("retention.ms", retention_ms, retention_ms_source),
                ("retention.bytes", retention_bytes, retention_bytes_source),
            ],
            [
                "segment.bytes",
                "segment.ms",
                "cleanup.policy",
                "message.timestamp.type",
            ],
        )
    }

    /// The broker's settings of the same things (Kafka's broker-level names).
    #[must_use]
    pub fn broker_configs(&self) -> Vec<ConfigEntry> {
        let limit = |broker: Option<u64>| match broker {
            Some(value) => (value.to_string(), ConfigSource::Broker),
            None => (UNLIMITED.to_owned(), ConfigSource::Default),
        };
        let (retention_ms, retention_ms_source) = limit(self.retention_ms);
        let (retention_bytes, retention_bytes_source) = limit(self.retention_bytes);
        self.settings(
            [
                ("log.retention.ms", retention_ms, retention_ms_source),
                (
                    "log.retention.bytes",
                    retention_bytes,
                    retention_bytes_source,
                ),
            ],
            [
                "log.segment.bytes",
                "log.roll.ms",
                "log.cleanup.policy",
                "log.message.timestamp.type",
            ],
        )
    }

    /// The two retention limits given, then the settings named in `others` (segment bytes,
    /// segment age, cleanup policy, timestamp type, in that order).
    fn settings(
        &self,
        [ms, bytes]: [(&'static str, String, ConfigSource); 2],
        [segment_bytes, segment_ms, cleanup, timestamps]: [&'static str; 4],
    ) -> Vec<ConfigEntry> {
        let defaults = BrokerConfig::default();
        let broker_or_default = |value: u64, default: u64| {
            if value == default {
                ConfigSource::Default
            } else {
                ConfigSource::Broker
            }
        };
        let entry = |name, value: String, source, kind, doc| ConfigEntry {
            name,
            value,
            source,
            kind,
            doc,
        };
        vec![
            entry(
                ms.0,
                ms.1,
                ms.2,
                ConfigType::Long,
                "Old segments whose newest record is older than this many milliseconds are deleted; -1 keeps them.",
            ),
            entry(
                bytes.0,
                bytes.1,
                bytes.2,
                ConfigType::Long,
                "Old segments are deleted while a partition would still hold this many bytes without them; -1 for no limit.",
            ),
            entry(
                segment_bytes,
                self.segment_bytes.to_string(),
                broker_or_default(self.segment_bytes, defaults.segment_bytes),
                ConfigType::Int,
                "A segment file rolls before it grows past this many bytes.",
            ),
            entry(
                segment_ms,
                self.segment_ms.to_string(),
                broker_or_default(self.segment_ms, defaults.segment_ms),
                ConfigType::Long,
                "A segment file rolls once its first batch is this many milliseconds old.",
            ),
            entry(
                cleanup,
                "delete".to_owned(),
                ConfigSource::Default,
                ConfigType::List,
                "What happens to old segments: they are deleted (compaction is not offered).",
            ),
            entry(
                timestamps,
                "CreateTime".to_owned(),
                ConfigSource::Default,
                ConfigType::String,
                "Records keep the timestamps their producers gave them.",
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TopicConfig;

    #[test]
    fn each_value_says_where_it_comes_from() {
        let config = BrokerConfig {
            retention_ms: Some(1000),
            topics: vec![TopicConfig {
                name: "own".into(),
                partitions: 1,
                retention_bytes: None,
                retention_ms: Some(50),
            }],
            ..BrokerConfig::default()
        };
        let find = |entries: &[ConfigEntry], name: &str| {
            let entry = entries.iter().find(|e| e.name == name).expect("listed");
            (entry.value.clone(), entry.source)
        };
        let own = config.topic_configs("own");
        assert_eq!(
            find(&own, "retention.ms"),
            ("50".into(), ConfigSource::Topic)
        );
        assert_eq!(
            find(&own, "retention.bytes"),
            ("-1".into(), ConfigSource::Default)
        );
        let other = config.topic_configs("other");
        assert_eq!(
            find(&other, "retention.ms"),
            ("1000".into(), ConfigSource::Broker)
        );
        assert_eq!(find(&other, "segment.bytes").1, ConfigSource::Default);
        let broker = config.broker_configs();
        assert_eq!(
            find(&broker, "log.retention.ms"),
            ("1000".into(), ConfigSource::Broker)
        );
    }
}
