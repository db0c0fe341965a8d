//! The coordinator's section of the configuration ([`GroupConfig`]); the file is flat, and
//! `minibroker_host::Config` gathers every section.

use minibroker_broker::{MAX_TIMEOUT_MS, ServerError};
use serde::Deserialize;

/// The group coordinator's section of the configuration (flat in the file, like every section).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GroupConfig {
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

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            offsets_retention_ms: 7 * 24 * 3_600_000,
            max_groups: 10_000,
            max_group_members: 1_000,
        }
    }
}

impl GroupConfig {
    /// Checks that the bounds make sense together.
    ///
    /// # Errors
    /// [`ServerError::Config`] naming the first offending key.
    pub fn validate(&self) -> Result<(), ServerError> {
        let fail = |msg: &str| Err(ServerError::Config(msg.to_owned()));
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
        Ok(())
    }
}
