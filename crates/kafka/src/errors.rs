//! The Kafka error code of every refusal and outcome, mapped here once.

use kafka_protocol::ResponseError;
use minibroker_broker::{BrokerError, ErrorKind, Outcome, Verdict};

/// Kafka's code for a refusal of the broker core.
pub(crate) fn code_of(error: &BrokerError) -> ResponseError {
    match error.kind() {
        ErrorKind::UnknownTopic | ErrorKind::PartitionOutOfRange => {
            ResponseError::UnknownTopicOrPartition
        }
        ErrorKind::InvalidInput if matches!(error, BrokerError::InvalidTopicName { .. }) => {
            ResponseError::InvalidTopicException
        }
        ErrorKind::InvalidInput if matches!(error, BrokerError::InvalidConfig { .. }) => {
            ResponseError::InvalidConfig
        }
        ErrorKind::InvalidInput | ErrorKind::InvalidBatch => ResponseError::InvalidRecord,
        // TRANSACTION_ABORTABLE to the Produce versions that know it (see `handlers::produce`).
        ErrorKind::InvalidTxnState | ErrorKind::NotAddedToTransaction => {
            ResponseError::InvalidTxnState
        }
        // What makes a client move to a new epoch (KIP-360), which fences the late batch.
        ErrorKind::AbortedEpoch => ResponseError::OutOfOrderSequenceNumber,
        ErrorKind::ProducerFenced => ResponseError::InvalidProducerEpoch,
        ErrorKind::CorruptBatch => ResponseError::CorruptMessage,
        ErrorKind::BatchTooLarge => ResponseError::MessageTooLarge,
        ErrorKind::OffsetOutOfRange => ResponseError::OffsetOutOfRange,
        ErrorKind::UnknownProducerId => ResponseError::UnknownProducerId,
        ErrorKind::EpochExhausted => ResponseError::InvalidProducerEpoch,
        // Not retriable: a full store does not empty itself while a producer retries.
        ErrorKind::StorageFull => ResponseError::PolicyViolation,
        ErrorKind::Storage => ResponseError::KafkaStorageError,
        ErrorKind::TopicAlreadyExists => ResponseError::TopicAlreadyExists,
        ErrorKind::InvalidPartitions => ResponseError::InvalidPartitions,
    }
}

/// How the exactly-once rule's verdict is answered to a Kafka producer: the error code (`None`
/// for success) and the base offset. `had_state` says whether the broker knew the producer on
/// this partition, which tells a gap from a producer the broker does not know.
pub(crate) fn produce_answer(
    verdict: Verdict,
    base_sequence: i32,
    had_state: bool,
) -> (Option<ResponseError>, i64) {
    match (verdict.outcome, verdict.base_offset) {
        (Outcome::Accepted, Some(offset)) => (None, offset),
        // A retry of one of the last batches: success, with where the original is stored.
        (Outcome::Duplicate, Some(offset)) => (None, offset),
        (Outcome::Duplicate, None) => (Some(ResponseError::DuplicateSequenceNumber), -1),
        // librdkafka resets its sequence and resends on UNKNOWN_PRODUCER_ID without losing data.
        (Outcome::OutOfOrder, _) if !had_state && base_sequence != 0 => {
            (Some(ResponseError::UnknownProducerId), -1)
        }
        (Outcome::OutOfOrder, _) => (Some(ResponseError::OutOfOrderSequenceNumber), -1),
        (Outcome::FencedEpoch, _) => (Some(ResponseError::InvalidProducerEpoch), -1),
        (Outcome::Accepted, None) => (Some(ResponseError::UnknownServerError), -1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(outcome: Outcome, base_offset: Option<i64>) -> Verdict {
        Verdict {
            outcome,
            base_offset,
            known_producer: false,
        }
    }

    #[test]
    fn outcomes_map_to_kafka_codes() {
        assert_eq!(
            produce_answer(verdict(Outcome::Accepted, Some(7)), 0, false),
            (None, 7)
        );
        assert_eq!(
            produce_answer(verdict(Outcome::Duplicate, Some(3)), 2, true),
            (None, 3)
        );
        assert_eq!(
            produce_answer(verdict(Outcome::Duplicate, None), 2, true).0,
            Some(ResponseError::DuplicateSequenceNumber)
        );
        assert_eq!(
            produce_answer(verdict(Outcome::OutOfOrder, None), 5, true).0,
            Some(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            produce_answer(verdict(Outcome::OutOfOrder, None), 5, false).0,
            Some(ResponseError::UnknownProducerId)
        );
        assert_eq!(
            produce_answer(verdict(Outcome::FencedEpoch, None), 0, true).0,
            Some(ResponseError::InvalidProducerEpoch)
        );
    }
}
