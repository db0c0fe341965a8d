//! A topic's own settings, changeable while the broker runs (Kafka's dynamic topic configs).
//!
//! A topic may override the broker's settings under Kafka's names (`retention.ms`, ...). Its
//! overrides come from `[[topics]]` in the configuration file (retention only) and from
//! CreateTopics, AlterConfigs and IncrementalAlterConfigs (or `minibroker topic create|alter
//! --config`); the latter win, are saved in the data directory (`topic-configs`, see
//! [`crate::data_dir`]) and take effect at once: the next append's segment roll and size check
//! and the next retention pass use them. Only settings the broker enforces are accepted; an
//! unknown name or a value out of range is refused with the reason, as Kafka refuses it
//! (INVALID_CONFIG), and nothing changes then.

pub(crate) mod configs;
pub(crate) mod store;

use std::collections::BTreeMap;

use crate::config::{MAX_TIMEOUT_MS, batch_room};
use crate::error::quote_prefix;
use crate::{BrokerConfig, BrokerError};
use configs::ConfigType;

/// One setting a topic may override.
#[derive(Debug)]
pub(crate) struct Setting {
    /// Kafka's topic-level name.
    pub(crate) name: &'static str,
    /// Kafka's broker-level name of the same setting.
    pub(crate) broker_name: &'static str,
    pub(crate) kind: ConfigType,
    pub(crate) doc: &'static str,
}

/// Every setting a topic may override, in the order they are described.
pub(crate) const SETTINGS: [Setting; 10] = [
    Setting {
        name: "retention.ms",
        broker_name: "log.retention.ms",
        kind: ConfigType::Long,
        doc: "Old segments whose newest record is older than this many milliseconds are deleted; -1 keeps them.",
    },
    Setting {
        name: "retention.bytes",
        broker_name: "log.retention.bytes",
        kind: ConfigType::Long,
        doc: "Old segments are deleted while a partition would still hold this many bytes without them; -1 for no limit.",
    },
    Setting {
        name: "segment.bytes",
        broker_name: "log.segment.bytes",
        kind: ConfigType::Int,
        doc: "A segment file rolls before it grows past this many bytes (4096 to 1073741824).",
    },
    Setting {
        name: "segment.ms",
        broker_name: "log.roll.ms",
        kind: ConfigType::Long,
        doc: "A segment file rolls once its first batch is this many milliseconds old.",
    },
    Setting {
        name: "max.message.bytes",
        broker_name: "message.max.bytes",
        kind: ConfigType::Int,
        doc: "The largest record batch the topic accepts, in bytes (at most what the broker's frame limit leaves room for).",
    },
    Setting {
        name: "cleanup.policy",
        broker_name: "log.cleanup.policy",
        kind: ConfigType::List,
        doc: "What happens to old segments: delete (retention deletes them), compact (the newest record of each key is kept), or both.",
    },
    Setting {
        name: "min.compaction.lag.ms",
        broker_name: "log.cleaner.min.compaction.lag.ms",
        kind: ConfigType::Long,
        doc: "Records stay uncompacted for at least this many milliseconds (by their timestamps).",
    },
    Setting {
        name: "delete.retention.ms",
        broker_name: "log.cleaner.delete.retention.ms",
        kind: ConfigType::Long,
        doc: "Compaction keeps a tombstone (a null value) for this many milliseconds after the cleaning that first saw it, so readers see the delete.",
    },
    Setting {
        name: "min.cleanable.dirty.ratio",
        broker_name: "log.cleaner.min.cleanable.ratio",
        kind: ConfigType::Double,
        doc: "Compaction runs once this fraction of what it may clean has not been compacted yet.",
    },
    Setting {
        name: "message.timestamp.type",
        broker_name: "log.message.timestamp.type",
        kind: ConfigType::String,
        doc: "Records keep the timestamps their producers gave them (CreateTime; LogAppendTime is not offered).",
    },
];

/// The setting named `name`, or why there is none.
pub(crate) fn setting(name: &str) -> Result<&'static Setting, BrokerError> {
    SETTINGS
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| BrokerError::InvalidConfig {
            name: quote_prefix(name),
            reason: format!(
                "not a topic setting this broker knows; it knows {}",
                SETTINGS.map(|s| s.name).join(", ")
            ),
        })
}

/// A topic's overrides: setting name to value, each checked and written as Kafka writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides(BTreeMap<&'static str, String>);

/// One change of IncrementalAlterConfigs (Kafka's `AlterConfigOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingChange<'a> {
    /// Set `name` to a value.
    Set(&'a str, &'a str),
    /// Remove the topic's own value: the broker's (or the default) applies again.
    Delete(&'a str),
    /// Add items to a list setting.
    Append(&'a str, &'a str),
    /// Remove items from a list setting.
    Subtract(&'a str, &'a str),
}

impl Overrides {
    /// Overrides from (name, value) pairs, each checked against `config` (a name given twice,
    /// unknown, or with a bad value is refused).
    ///
    /// # Errors
    /// [`BrokerError::InvalidConfig`].
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
        config: &BrokerConfig,
    ) -> Result<Self, BrokerError> {
        let mut overrides = Self::default();
        for (name, value) in pairs {
            let setting = setting(name)?;
            if overrides.0.contains_key(setting.name) {
                return Err(BrokerError::InvalidConfig {
                    name: setting.name.into(),
                    reason: "given more than once".into(),
                });
            }
            let value = checked(setting, value, config)?;
            overrides.0.insert(setting.name, value);
        }
        Ok(overrides)
    }

    /// These overrides with `changes` applied in order, checked as [`Self::parse`] checks.
    ///
    /// # Errors
    /// [`BrokerError::InvalidConfig`]: an unknown name, a bad value, or APPEND / SUBTRACT on a
    /// setting that is not a list.
    pub fn changed(
        &self,
        changes: &[SettingChange<'_>],
        config: &BrokerConfig,
    ) -> Result<Self, BrokerError> {
        let mut next = self.clone();
        for change in changes {
            match *change {
                SettingChange::Set(name, value) => {
                    let setting = setting(name)?;
                    next.0
                        .insert(setting.name, checked(setting, value, config)?);
                }
                SettingChange::Delete(name) => {
                    next.0.remove(setting(name)?.name);
                }
                SettingChange::Append(name, items) | SettingChange::Subtract(name, items) => {
                    let setting = setting(name)?;
                    if setting.kind != ConfigType::List {
                        return Err(BrokerError::InvalidConfig {
                            name: setting.name.into(),
                            reason: "not a list: only SET and DELETE change it".into(),
                        });
                    }
                    let current = next
                        .0
                        .get(setting.name)
                        .map_or_else(|| default_value(setting, config), std::clone::Clone::clone);
                    let mut list: Vec<&str> = split_list(&current).collect();
                    if matches!(change, SettingChange::Append(..)) {
                        for item in split_list(items) {
                            if !list.contains(&item) {
                                list.push(item);
                            }
                        }
                    } else {
                        list.retain(|item| !split_list(items).any(|gone| gone == *item));
                    }
                    let value = checked(setting, &list.join(","), config)?;
                    next.0.insert(setting.name, value);
                }
            }
        }
        Ok(next)
    }

    /// The topic's own value of `name`, if it has one.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Every override, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.0.iter().map(|(name, value)| (*name, value.as_str()))
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The items of a comma-separated list, trimmed, empty ones left out.
fn split_list(list: &str) -> impl Iterator<Item = &str> {
    list.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
}

/// `value` for `setting`, checked and written as Kafka writes it, or why not.
fn checked(setting: &Setting, value: &str, config: &BrokerConfig) -> Result<String, BrokerError> {
    let refuse = |reason: String| BrokerError::InvalidConfig {
        name: setting.name.into(),
        reason,
    };
    let number = |min: i64, max: i64| -> Result<String, BrokerError> {
        match value.trim().parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n.to_string()),
            _ => Err(refuse(format!(
                "{} is not a whole number from {min} to {max}",
                quote_prefix(value)
            ))),
        }
    };
    let max_ms = i64::try_from(MAX_TIMEOUT_MS).unwrap_or(i64::MAX);
    match setting.name {
        "retention.ms" => number(-1, i64::MAX),
        "retention.bytes" => number(-1, i64::MAX),
        "segment.bytes" => number(4096, 1 << 30),
        "segment.ms" => number(1, max_ms),
        "max.message.bytes" => number(
            0,
            i64::try_from(batch_room(config.max_frame_bytes)).unwrap_or(i64::MAX),
        ),
        "cleanup.policy" => {
            let items: Vec<&str> = split_list(value).collect();
            let known = !items.is_empty()
                && items
                    .iter()
                    .all(|item| matches!(*item, "delete" | "compact"));
            if !known {
                return Err(refuse(format!(
                    "{} is not a cleanup policy; use delete, compact or compact,delete",
                    quote_prefix(value)
                )));
            }
            let policy = Cleanup {
                delete: items.contains(&"delete"),
                compact: items.contains(&"compact"),
            };
            Ok(policy.to_string())
        }
        "min.compaction.lag.ms" => number(0, i64::MAX),
        "delete.retention.ms" => number(0, i64::MAX),
        "min.cleanable.dirty.ratio" => match value.trim().parse::<f64>() {
            Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio.to_string()),
            _ => Err(refuse(format!(
                "{} is not a fraction from 0 to 1",
                quote_prefix(value)
            ))),
        },
        "message.timestamp.type" => match value.trim() {
            "CreateTime" => Ok("CreateTime".into()),
            "LogAppendTime" => Err(refuse(
                "LogAppendTime is not offered; use CreateTime".into(),
            )),
            other => Err(refuse(format!(
                "{} is not a timestamp type; use CreateTime",
                quote_prefix(other)
            ))),
        },
        _ => Err(refuse("not a topic setting".into())),
    }
}

/// What `setting` is for a topic without its own value: the broker's, else the default.
pub(crate) fn default_value(setting: &Setting, config: &BrokerConfig) -> String {
    let limit = |value: Option<u64>| value.map_or_else(|| "-1".to_owned(), |v| v.to_string());
    match setting.name {
        "retention.ms" => limit(config.retention_ms),
        "retention.bytes" => limit(config.retention_bytes),
        "segment.bytes" => config.segment_bytes.to_string(),
        "segment.ms" => config.segment_ms.to_string(),
        "max.message.bytes" => batch_room(config.max_frame_bytes).to_string(),
        "cleanup.policy" => "delete".into(),
        "min.compaction.lag.ms" => "0".into(),
        "delete.retention.ms" => "86400000".into(),
        "min.cleanable.dirty.ratio" => "0.5".into(),
        _ => "CreateTime".into(),
    }
}

/// A topic's `cleanup.policy`: whether retention deletes old segments, and whether the cleaner
/// compacts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleanup {
    /// Retention deletes old segments (`delete`).
    pub delete: bool,
    /// The newest record of each key is kept (`compact`).
    pub compact: bool,
}

impl std::fmt::Display for Cleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            _ => "delete",
        })
    }
}

/// How a compacted topic is compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// Records newer than this (ms, by their timestamps) are not compacted.
    pub min_lag_ms: i64,
    /// Tombstones are kept this long (ms, after the pass that first saw them: KIP-534).
    pub delete_retention_ms: i64,
    /// A pass runs once this share (per mille) of the cleanable bytes is dirty.
    pub min_dirty_per_mille: u16,
}

impl Compaction {
    /// The newest record timestamp a compactable piece may hold as of `now_ms`.
    #[must_use]
    pub fn cutoff(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.min_lag_ms)
    }
}

/// What a topic lives by: its overrides over the broker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicSettings {
    /// How much history is kept (only with `cleanup.policy` `delete`).
    pub retention: minibroker_log::Retention,
    /// Whether and how it is compacted (`cleanup.policy` `compact`).
    pub compaction: Option<Compaction>,
    /// When segments roll (and how often they are synced in the background).
    pub segments: minibroker_log::SegmentConfig,
    /// The largest batch accepted.
    pub max_message_bytes: usize,
}

impl BrokerConfig {
    /// `topic`'s value of `setting` and whether it is the topic's own: an override, else its
    /// `[[topics]]` entry (retention only), else the broker's.
    pub(crate) fn setting_value(
        &self,
        topic: &str,
        overrides: &Overrides,
        setting: &Setting,
    ) -> (String, bool) {
        if let Some(value) = overrides.get(setting.name) {
            return (value.to_owned(), true);
        }
        let declared = self.topics.iter().find(|t| t.name == topic);
        let own = match setting.name {
            "retention.ms" => declared.and_then(|t| t.retention_ms),
            "retention.bytes" => declared.and_then(|t| t.retention_bytes),
            _ => None,
        };
        match own {
            Some(value) => (value.to_string(), true),
            None => (default_value(setting, self), false),
        }
    }

    /// What `topic` lives by, with `overrides` over its `[[topics]]` entry and the broker's
    /// settings.
    #[must_use]
    pub fn topic_settings(&self, topic: &str, overrides: &Overrides) -> TopicSettings {
        let text = |name: &str| {
            SETTINGS
                .iter()
                .find(|s| s.name == name)
                .map(|s| self.setting_value(topic, overrides, s).0)
                .unwrap_or_default()
        };
        let number = |name: &str| text(name).parse::<i64>().unwrap_or(-1);
        // Every value was checked on its way in, so each parses and is in range.
        let limit = |n: i64| u64::try_from(n).ok();
        let base = self.segments();
        let retention_ms = number("retention.ms");
        let policy = text("cleanup.policy");
        let compact = policy.contains("compact");
        let retention = if policy.contains("delete") {
            minibroker_log::Retention {
                bytes: limit(number("retention.bytes")),
                ms: (retention_ms >= 0).then_some(retention_ms),
            }
        } else {
            minibroker_log::Retention::default()
        };
        let ratio = text("min.cleanable.dirty.ratio")
            .parse::<f64>()
            .unwrap_or(0.5);
        TopicSettings {
            retention,
            compaction: compact.then(|| Compaction {
                min_lag_ms: number("min.compaction.lag.ms").max(0),
                delete_retention_ms: number("delete.retention.ms").max(0),
                min_dirty_per_mille: (ratio * 1000.0).round() as u16,
            }),
            segments: minibroker_log::SegmentConfig {
                segment_bytes: limit(number("segment.bytes")).unwrap_or(base.segment_bytes),
                segment_ms: Some(number("segment.ms"))
                    .filter(|ms| *ms > 0)
                    .unwrap_or(base.segment_ms),
                write_back_bytes: base.write_back_bytes,
            },
            max_message_bytes: usize::try_from(number("max.message.bytes"))
                .unwrap_or_else(|_| batch_room(self.max_frame_bytes)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BrokerConfig {
        BrokerConfig {
            retention_ms: Some(1000),
            ..BrokerConfig::default()
        }
    }

    fn refused(result: Result<Overrides, BrokerError>) -> String {
        match result {
            Err(BrokerError::InvalidConfig { name, reason }) => format!("{name}: {reason}"),
            other => panic!("expected INVALID_CONFIG, got {other:?}"),
        }
    }

    #[test]
    fn values_are_checked_and_written_as_kafka_writes_them() {
        let config = config();
        let overrides = Overrides::parse(
            [("retention.ms", " 50 "), ("segment.bytes", "8192")],
            &config,
        )
        .expect("valid");
        assert_eq!(overrides.get("retention.ms"), Some("50"));
        let settings = config.topic_settings("t", &overrides);
        assert_eq!(settings.retention.ms, Some(50));
        assert_eq!(settings.segments.segment_bytes, 8192);
        assert!(refused(Overrides::parse([("retention.ms", "soon")], &config)).contains("soon"));
        assert!(refused(Overrides::parse([("segment.bytes", "10")], &config)).contains("4096"));
        assert!(refused(Overrides::parse([("no.such", "1")], &config)).contains("knows"));
        assert!(
            refused(Overrides::parse(
                [("retention.ms", "1"), ("retention.ms", "2")],
                &config
            ))
            .contains("more than once")
        );
        assert!(
            refused(Overrides::parse([("cleanup.policy", "shred")], &config)).contains("shred")
        );
        let both = Overrides::parse([("cleanup.policy", "delete, compact")], &config).unwrap();
        assert_eq!(both.get("cleanup.policy"), Some("compact,delete"));
        let settings = config.topic_settings("t", &both);
        assert_eq!(settings.retention.ms, Some(1000), "delete keeps retention");
        assert_eq!(
            settings.compaction,
            Some(Compaction {
                min_lag_ms: 0,
                delete_retention_ms: 86_400_000,
                min_dirty_per_mille: 500
            })
        );
        let compact = Overrides::parse(
            [
                ("cleanup.policy", "compact"),
                ("min.cleanable.dirty.ratio", "0.25"),
            ],
            &config,
        )
        .unwrap();
        let settings = config.topic_settings("t", &compact);
        assert_eq!(settings.retention, minibroker_log::Retention::default());
        assert_eq!(settings.compaction.unwrap().min_dirty_per_mille, 250);
        assert!(
            refused(Overrides::parse(
                [("min.cleanable.dirty.ratio", "2")],
                &config
            ))
            .contains("fraction")
        );
        let too_big = (batch_room(config.max_frame_bytes) + 1).to_string();
        assert!(
            refused(Overrides::parse(
                [("max.message.bytes", too_big.as_str())],
                &config
            ))
            .contains("max.message.bytes")
        );
    }

    #[test]
    fn minus_one_means_no_limit_and_deleting_falls_back_to_the_broker() {
        let config = config();
        let own = Overrides::parse([("retention.ms", "-1")], &config).expect("valid");
        assert_eq!(config.topic_settings("t", &own).retention.ms, None);
        let back = own
            .changed(&[SettingChange::Delete("retention.ms")], &config)
            .expect("valid");
        assert!(back.is_empty());
        assert_eq!(config.topic_settings("t", &back).retention.ms, Some(1000));
    }

    #[test]
    fn lists_take_append_and_subtract_and_others_refuse_them() {
        let config = config();
        let none = Overrides::default();
        let appended = none
            .changed(
                &[SettingChange::Append("cleanup.policy", "delete")],
                &config,
            )
            .expect("delete is already there");
        assert_eq!(appended.get("cleanup.policy"), Some("delete"));
        assert!(
            refused(none.changed(
                &[SettingChange::Subtract("cleanup.policy", "delete")],
                &config
            ))
            .contains("cleanup policy")
        );
        assert!(
            refused(none.changed(&[SettingChange::Append("retention.ms", "5")], &config))
                .contains("not a list")
        );
        // A refused change leaves nothing half done: the first change is not kept either.
        let before = Overrides::parse([("retention.ms", "7")], &config).expect("valid");
        assert!(
            before
                .changed(
                    &[
                        SettingChange::Set("retention.ms", "8"),
                        SettingChange::Set("segment.ms", "0"),
                    ],
                    &config
                )
                .is_err()
        );
        assert_eq!(before.get("retention.ms"), Some("7"));
    }

    #[test]
    fn a_declared_topic_keeps_its_retention_under_an_override_of_something_else() {
        let mut config = config();
        config.topics.push(crate::TopicConfig {
            name: "declared".into(),
            partitions: 1,
            retention_bytes: Some(99),
            retention_ms: None,
        });
        let overrides = Overrides::parse([("retention.ms", "5")], &config).expect("valid");
        let settings = config.topic_settings("declared", &overrides);
        assert_eq!(settings.retention.bytes, Some(99));
        assert_eq!(settings.retention.ms, Some(5));
    }
}
