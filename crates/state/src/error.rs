//! Input the rule refuses to look at. These are the caller's mistakes, never a state change.

use thiserror::Error;

/// A request field outside the ranges Kafka allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum StateError {
    /// Producer ids are non-negative.
    #[error("producer id must not be negative, got {0}")]
    NegativeProducerId(i64),
    /// Epochs are non-negative.
    #[error("producer epoch must not be negative, got {0}")]
    NegativeEpoch(i16),
    /// Sequence numbers are non-negative.
    #[error("sequence number must not be negative, got {0}")]
    NegativeSequence(i32),
    /// A batch occupies between 1 and 2^31 sequences.
    #[error("a batch must span between 1 and 2^31 sequences, got {0}")]
    BadSequenceCount(u32),
}
