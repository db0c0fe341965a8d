//! A topic's own settings through the broker: created with them, described, replaced whole
//! (AlterConfigs) or changed a step at a time (IncrementalAlterConfigs). The settings' model
//! and checks are `crate::topic_settings`; the registry saves and applies them.

use crate::topic_settings::{Overrides, SettingChange, TopicSettings};
use crate::{Broker, BrokerError, ConfigEntry};

impl Broker {
    /// Creates `topic` with `partitions` partitions and its own `settings` (Kafka's names and
    /// values, as CreateTopics carries them); every setting is checked before anything is made.
    ///
    /// # Errors
    /// As [`Self::create_topic`]; [`BrokerError::InvalidConfig`] for a setting refused.
    pub fn create_topic_with(
        &self,
        topic: &str,
        partitions: u32,
        settings: &[(&str, &str)],
    ) -> Result<(), BrokerError> {
        let overrides = Overrides::parse(settings.iter().copied(), &self.config)?;
        self.topics
            .create_new(topic, partitions, overrides)
            .map(|_| ())
    }

    /// `topic`'s settings under Kafka's names, each with its source (DescribeConfigs).
    ///
    /// # Errors
    /// A bad or unknown topic name.
    pub fn topic_configs(&self, topic: &str) -> Result<Vec<ConfigEntry>, BrokerError> {
        let overrides = self.topics.overrides(topic)?;
        Ok(self.config.topic_configs(topic, &overrides))
    }

    /// `topic`'s settings in force: its own, else the broker's.
    ///
    /// # Errors
    /// A bad or unknown topic name.
    pub fn topic_settings(&self, topic: &str) -> Result<TopicSettings, BrokerError> {
        Ok(self.topics.get(topic)?.settings())
    }

    /// `settings` checked and written as the broker keeps them (Kafka's names and values),
    /// without a topic: whether they could be a new topic's (CreateTopics with
    /// `validate_only`), and what a new topic of a cluster is created with.
    ///
    /// # Errors
    /// [`BrokerError::InvalidConfig`] for the first setting refused.
    pub fn parse_topic_settings(
        &self,
        settings: &[(&str, &str)],
    ) -> Result<Overrides, BrokerError> {
        Overrides::parse(settings.iter().copied(), &self.config)
    }

    /// Changes `topic`'s own settings to what `change` makes of them, checked, saved and
    /// applied to every partition at once; with `validate_only`, only checks.
    ///
    /// # Errors
    /// A bad or unknown topic; what `change` refuses; a storage error saving them.
    pub fn alter_topic_settings(
        &self,
        topic: &str,
        change: impl FnOnce(&Overrides) -> Result<Overrides, BrokerError>,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        self.topics.alter_settings(topic, change, validate_only)
    }

    /// Replaces `topic`'s own settings with `settings` (AlterConfigs: what it does not name
    /// goes back to the broker's); with `validate_only`, only checks.
    ///
    /// # Errors
    /// A bad or unknown topic; [`BrokerError::InvalidConfig`]; a storage error saving them.
    pub fn replace_topic_settings(
        &self,
        topic: &str,
        settings: &[(&str, &str)],
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        let config = &self.config;
        self.topics.alter_settings(
            topic,
            |_| Overrides::parse(settings.iter().copied(), config),
            validate_only,
        )
    }

    /// Applies `changes` to `topic`'s own settings, in order, all or none
    /// (IncrementalAlterConfigs); with `validate_only`, only checks.
    ///
    /// # Errors
    /// As [`Self::replace_topic_settings`].
    pub fn change_topic_settings(
        &self,
        topic: &str,
        changes: &[SettingChange<'_>],
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        let config = &self.config;
        self.topics.alter_settings(
            topic,
            |current| current.changed(changes, config),
            validate_only,
        )
    }
}
