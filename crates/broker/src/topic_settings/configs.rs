//! The settings a topic lives by, under the names Kafka gives them (`retention.ms`, ...), with
//! where each value comes from: the topic's own (set by an admin request, or `[[topics]]` in the
//! configuration file), the broker's (its configuration), or the default. DescribeConfigs shows
//! them; [`super`] checks and applies a change.

use super::{Overrides, SETTINGS, Setting, default_value};
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
    /// A fraction.
    Double,
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

impl BrokerConfig {
    /// `topic`'s settings (Kafka's topic-level names), with `overrides` its own.
    #[must_use]
    pub fn topic_configs(&self, topic: &str, overrides: &Overrides) -> Vec<ConfigEntry> {
        SETTINGS
            .iter()
            .map(|setting| {
                let (value, own) = self.setting_value(topic, overrides, setting);
                let source = if own {
                    ConfigSource::Topic
                } else {
                    self.broker_source(setting, &value)
                };
                ConfigEntry {
                    name: setting.name,
                    value,
                    source,
                    kind: setting.kind,
                    doc: setting.doc,
                }
            })
            .collect()
    }

    /// The broker's settings of the same things (Kafka's broker-level names).
    #[must_use]
    pub fn broker_configs(&self) -> Vec<ConfigEntry> {
        SETTINGS
            .iter()
            .map(|setting| {
                let value = default_value(setting, self);
                ConfigEntry {
                    name: setting.broker_name,
                    source: self.broker_source(setting, &value),
                    value,
                    kind: setting.kind,
                    doc: setting.doc,
                }
            })
            .collect()
    }

    /// Whether the broker's `value` of `setting` is its configuration's or the default.
    fn broker_source(&self, setting: &Setting, value: &str) -> ConfigSource {
        if default_value(setting, &BrokerConfig::default()) == value {
            ConfigSource::Default
        } else {
            ConfigSource::Broker
        }
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
        let own = config.topic_configs("own", &Overrides::default());
        assert_eq!(
            find(&own, "retention.ms"),
            ("50".into(), ConfigSource::Topic)
        );
        assert_eq!(
            find(&own, "retention.bytes"),
            ("-1".into(), ConfigSource::Default)
        );
        let other = config.topic_configs("other", &Overrides::default());
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
