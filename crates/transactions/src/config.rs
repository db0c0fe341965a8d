//! The transaction coordinator's section of the configuration ([`TransactionConfig`]); the file
//! is flat, and `minibroker_host::Config` gathers every section.

use minibroker_broker::{MAX_TIMEOUT_MS, ServerError};
use serde::Deserialize;

use crate::Limits;

/// The transaction coordinator's section of the configuration (flat in the file, like every
/// section).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct TransactionConfig {
    /// The longest `transaction.timeout.ms` a producer may ask for (Kafka's
    /// `transaction.max.timeout.ms`, 15 minutes); a longer one is refused at InitProducerId.
    pub transaction_max_timeout_ms: u64,
    /// A transactional id with no transaction open and no change for this long is forgotten
    /// (Kafka's `transactional.id.expiration.ms`, 7 days).
    pub transactional_id_expiration_ms: u64,
}

impl Default for TransactionConfig {
    fn default() -> Self {
        let limits = Limits::default();
        Self {
            transaction_max_timeout_ms: limits.max_timeout_ms,
            transactional_id_expiration_ms: limits.expiration_ms,
        }
    }
}

impl TransactionConfig {
    /// Checks the bounds.
    ///
    /// # Errors
    /// [`ServerError::Config`] naming the first offending key.
    pub fn validate(&self) -> Result<(), ServerError> {
        if self.transaction_max_timeout_ms == 0 || self.transaction_max_timeout_ms > MAX_TIMEOUT_MS
        {
            return Err(ServerError::Config(
                "transaction_max_timeout_ms must be at least 1 and at most a year".into(),
            ));
        }
        if self.transactional_id_expiration_ms == 0
            || self.transactional_id_expiration_ms > MAX_TIMEOUT_MS * 10
        {
            return Err(ServerError::Config(
                "transactional_id_expiration_ms must be at least 1 and at most ten years".into(),
            ));
        }
        Ok(())
    }

    /// The coordinator's bounds.
    #[must_use]
    pub fn limits(&self) -> Limits {
        Limits {
            max_timeout_ms: self.transaction_max_timeout_ms,
            expiration_ms: self.transactional_id_expiration_ms,
        }
    }
}
