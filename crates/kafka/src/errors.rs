//! The Kafka error code of every refusal and outcome, mapped here once.

use kafka_protocol::ResponseError;
use minibroker_broker::{BrokerError, ErrorKind, Outcome, Verdict};
use minibroker_groups::GroupError;
use minibroker_host::access::ProducerUse;
use minibroker_transactions::{AddPartitionsError, CoordinatorError, OffsetCommitError, TxnError};

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

/// The code of a coordinator's refusal, for a request whose version `fenced_is_90` says whether
/// it knows PRODUCER_FENCED.
pub(crate) fn coordinator_code(error: &CoordinatorError, fenced_is_90: bool) -> ResponseError {
    match error {
        CoordinatorError::Refused(refusal) => match refusal {
            TxnError::ProducerFenced if fenced_is_90 => ResponseError::ProducerFenced,
            TxnError::ProducerFenced => ResponseError::InvalidProducerEpoch,
            TxnError::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
            TxnError::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
            TxnError::InvalidTxnState { .. } | TxnError::LateEnd => ResponseError::InvalidTxnState,
            TxnError::InvalidTransactionTimeout { .. } => ResponseError::InvalidTransactionTimeout,
        },
        CoordinatorError::EmptyTransactionalId | CoordinatorError::TransactionalIdTooLong(_) => {
            ResponseError::InvalidRequest
        }
        // As for groups: a bound of the broker's, which no retry passes.
        CoordinatorError::TooManyGroups | CoordinatorError::StorageFull(_) => {
            ResponseError::PolicyViolation
        }
        // An add or end before any InitProducerId: the id maps to no producer.
        CoordinatorError::UnknownTransactionalId(_) => ResponseError::InvalidProducerIdMapping,
        // Retriable: the client asks again (a full disk or a failed write heals, or not).
        CoordinatorError::Log(_)
        | CoordinatorError::ProducerId(_)
        | CoordinatorError::Shared(_) => ResponseError::CoordinatorNotAvailable,
        // In a cluster: the client finds the coordinator again, or asks again.
        CoordinatorError::NotCoordinator => ResponseError::NotCoordinator,
        CoordinatorError::Changed => ResponseError::ConcurrentTransactions,
    }
}

/// The code of a refused add that a request made itself (KIP-890 part 2: Produce v12,
/// TxnOffsetCommit v5): a transaction that cannot take it is TRANSACTION_ABORTABLE (the client
/// aborts and goes on), the rest as [`coordinator_code`].
pub(crate) fn implicit_add_code(error: &CoordinatorError, fenced_is_90: bool) -> ResponseError {
    match error {
        CoordinatorError::Refused(TxnError::InvalidTxnState { .. } | TxnError::LateEnd) => {
            ResponseError::TransactionAbortable
        }
        other => coordinator_code(other, fenced_is_90),
    }
}

/// How a Produce v12 answers the refusal of the add it made, as Kafka's broker answers its own
/// AddPartitionsToTxn to the coordinator: a fence is INVALID_PRODUCER_EPOCH, an unavailable
/// coordinator the retriable NOT_ENOUGH_REPLICAS.
pub(crate) fn produce_add_code(error: &AddPartitionsError) -> ResponseError {
    match error {
        AddPartitionsError::Unknown(_) => ResponseError::UnknownTopicOrPartition,
        AddPartitionsError::Coordinator(
            CoordinatorError::Log(_)
            | CoordinatorError::ProducerId(_)
            | CoordinatorError::Shared(_),
        ) => ResponseError::NotEnoughReplicas,
        AddPartitionsError::Coordinator(error) => implicit_add_code(error, false),
    }
}

/// Kafka's code for a group refusal.
pub(crate) fn group_code(error: &GroupError) -> ResponseError {
    match error {
        GroupError::MemberIdRequired(_) => ResponseError::MemberIdRequired,
        GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
        GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
        GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
        GroupError::InvalidSessionTimeout { .. } => ResponseError::InvalidSessionTimeout,
        GroupError::InvalidGroupId => ResponseError::InvalidGroupId,
        GroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
        GroupError::GroupIdNotFound => ResponseError::GroupIdNotFound,
        GroupError::GroupSubscribedToTopic => ResponseError::GroupSubscribedToTopic,
        GroupError::NotCoordinator => ResponseError::NotCoordinator,
        GroupError::ProducerFenced => ResponseError::InvalidProducerEpoch,
        GroupError::NotInTransaction => ResponseError::InvalidTxnState,
        // Retriable: the client commits again.
        GroupError::Storage(_) => ResponseError::CoordinatorNotAvailable,
        GroupError::GroupFull(_) => ResponseError::GroupMaxSizeReached,
        // Not retriable, like a full store (a produce past `max_stored_bytes` gets the same).
        GroupError::TooManyGroups(_) | GroupError::StorageFull(_) => ResponseError::PolicyViolation,
        GroupError::TooMuchMetadata(_) => ResponseError::InvalidRequest,
    }
}

/// The first Produce version that knows TRANSACTION_ABORTABLE: a batch its transaction cannot
/// take is answered with it (the client aborts and goes on), not INVALID_TXN_STATE (fatal).
pub(crate) const ABORTABLE_VERSION: i16 = 11;

/// The code of a transactional request's outcome: 0, or its refusal's.
pub(crate) fn code_of_result(result: Result<(), CoordinatorError>, fenced_is_90: bool) -> i16 {
    match result {
        Ok(()) => 0,
        Err(error) => {
            tracing::debug!(%error, "transactional request refused");
            coordinator_code(&error, fenced_is_90).code()
        }
    }
}

/// Kafka's code for a TxnOffsetCommit refused by the coordinator or the group (it has no
/// PRODUCER_FENCED at the versions served).
pub(crate) fn txn_offset_commit_code(error: &OffsetCommitError) -> ResponseError {
    match error {
        OffsetCommitError::Coordinator(error) => coordinator_code(error, false),
        OffsetCommitError::Group(error) => group_code(error),
    }
}

/// The code of a group request's outcome: 0, or its refusal's.
pub(crate) fn code_or_none(result: &Result<(), GroupError>) -> i16 {
    result
        .as_ref()
        .err()
        .map_or(0, |error| group_code(error).code())
}

/// Kafka's code for a produce the broker core refused: a batch for a partition its transaction
/// has not added is TRANSACTION_ABORTABLE to the versions that know it.
pub(crate) fn produce_code(error: &BrokerError, version: i16) -> ResponseError {
    match error.kind() {
        ErrorKind::NotAddedToTransaction if version >= ABORTABLE_VERSION => {
            ResponseError::TransactionAbortable
        }
        _ => code_of(error),
    }
}

/// The refusal of a batch by whom its producer id was issued to (see `authorize`): none for an
/// id of this principal's.
pub(crate) fn producer_use_code(used: ProducerUse) -> Option<ResponseError> {
    match used {
        ProducerUse::Allowed => None,
        ProducerUse::Refused => Some(ResponseError::ClusterAuthorizationFailed),
        ProducerUse::Forgotten => Some(ResponseError::UnknownProducerId),
        ProducerUse::StorageFailed => Some(ResponseError::KafkaStorageError),
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

    #[test]
    fn each_refusal_has_its_code_and_a_fence_the_one_its_version_knows() {
        let refused = |error: TxnError| CoordinatorError::Refused(error);
        let cases = [
            (
                refused(TxnError::ProducerFenced),
                true,
                ResponseError::ProducerFenced,
            ),
            (
                refused(TxnError::ProducerFenced),
                false,
                ResponseError::InvalidProducerEpoch,
            ),
            (
                refused(TxnError::InvalidProducerIdMapping),
                true,
                ResponseError::InvalidProducerIdMapping,
            ),
            (
                refused(TxnError::ConcurrentTransactions),
                false,
                ResponseError::ConcurrentTransactions,
            ),
            (
                refused(TxnError::InvalidTxnState {
                    state: minibroker_transactions::TxnState::Empty,
                }),
                true,
                ResponseError::InvalidTxnState,
            ),
            (
                refused(TxnError::InvalidTransactionTimeout { asked: 2, max: 1 }),
                true,
                ResponseError::InvalidTransactionTimeout,
            ),
            (
                CoordinatorError::EmptyTransactionalId,
                true,
                ResponseError::InvalidRequest,
            ),
            (
                CoordinatorError::UnknownTransactionalId("t".into()),
                true,
                ResponseError::InvalidProducerIdMapping,
            ),
        ];
        for (error, fenced_is_90, expected) in cases {
            assert_eq!(coordinator_code(&error, fenced_is_90), expected, "{error}");
        }
    }
}
