//! The topics' own settings ([`Overrides`]), kept beside the topic registry: in memory, and for
//! a durable broker saved in the data directory's `topic-configs` (what changed appended and
//! synced, see `keyed_lines`) before a change is applied, so a change that was answered
//! survives a crash.
//!
//! The file is written before the topic list when a topic is created with settings, and after
//! it when a topic is deleted, so a crash in between leaves settings of a topic that does not
//! exist, never a topic whose settings are lost; settings of unknown topics are dropped when the
//! broker opens the directory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::Overrides;
use crate::data_dir::DataDir;
use crate::{BrokerConfig, BrokerError, ServerError};

/// Every topic's overrides.
#[derive(Debug)]
pub(crate) struct OverridesStore {
    by_topic: Mutex<BTreeMap<String, Overrides>>,
    data: Option<Arc<DataDir>>,
}

impl OverridesStore {
    /// The overrides saved in `data` for the topics in `known` (checked again against
    /// `config`: a value a newer broker wrote, or one this configuration no longer allows,
    /// stops the broker with the file's name rather than be misread).
    pub(crate) fn open(
        data: Option<Arc<DataDir>>,
        config: &BrokerConfig,
        known: &[(String, u32)],
    ) -> Result<Self, ServerError> {
        let mut by_topic: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        if let Some(data) = &data {
            for (topic, name, value) in data.topic_settings()? {
                if known.iter().any(|(t, _)| *t == topic) {
                    by_topic.entry(topic).or_default().push((name, value));
                }
            }
        }
        let path = || data.as_ref().map(|d| d.root().join("topic-configs"));
        let by_topic = by_topic
            .into_iter()
            .map(|(topic, pairs)| {
                let pairs = pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()));
                let overrides = Overrides::parse(pairs, config).map_err(|error| {
                    ServerError::data_dir(
                        path().unwrap_or_default(),
                        format!("topic {topic:?}: {error}"),
                    )
                })?;
                Ok((topic, overrides))
            })
            .collect::<Result<_, ServerError>>()?;
        Ok(Self {
            by_topic: Mutex::new(by_topic),
            data,
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Overrides>> {
        self.by_topic.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `topic`'s overrides (none if it has none).
    pub(crate) fn get(&self, topic: &str) -> Overrides {
        self.lock().get(topic).cloned().unwrap_or_default()
    }

    /// Makes `overrides` `topic`'s, saved first; nothing changes if the save fails.
    pub(crate) fn set(&self, topic: &str, overrides: Overrides) -> Result<(), BrokerError> {
        let mut by_topic = self.lock();
        let mut next = by_topic.clone();
        if overrides.is_empty() {
            next.remove(topic);
        } else {
            next.insert(topic.to_owned(), overrides);
        }
        if next == *by_topic {
            return Ok(());
        }
        self.save(&next)?;
        *by_topic = next;
        Ok(())
    }

    /// Forgets `topic`'s overrides (a deleted topic). A failed save is only logged: the
    /// leftover settings name no topic and are dropped at the next start.
    pub(crate) fn remove(&self, topic: &str) {
        if let Err(error) = self.set(topic, Overrides::default()) {
            tracing::warn!(topic, %error, "could not forget a deleted topic's settings");
        }
    }

    fn save(&self, by_topic: &BTreeMap<String, Overrides>) -> Result<(), BrokerError> {
        let Some(data) = &self.data else {
            return Ok(());
        };
        let lines = by_topic.iter().flat_map(|(topic, overrides)| {
            overrides
                .iter()
                .map(move |(name, value)| (topic.as_str(), name, value))
        });
        data.save_topic_settings(lines)
            .map_err(|source| BrokerError::Storage {
                what: "saving the topics' settings",
                source,
            })
    }
}
