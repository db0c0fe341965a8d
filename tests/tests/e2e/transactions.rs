//! The transactional Kafka APIs on the wire, version by version: the codes that depend on the
//! request's version (PRODUCER_FENCED where the version has it, INVALID_PRODUCER_EPOCH before),
//! FindCoordinator for a transactional id, an add for an unknown partition, a transactional batch
//! for a partition not added (KIP-890 part 1), TxnOffsetCommit invisible until EndTxn commits it,
//! and OffsetFetch's require_stable.

use anyhow::Result;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, InitProducerIdRequest, InitProducerIdResponse,
    OffsetFetchRequest, OffsetFetchResponse, ProduceRequest, ProduceResponse, ProducerId,
    TopicName, TransactionalId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_host::Config;
use minibroker_records::{NewRecord, Writer};
use minibroker_tests::KafkaConnection;

use crate::kafka::kafka;

pub(crate) fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

pub(crate) fn code(error: ResponseError) -> i16 {
    error.code()
}

pub(crate) async fn init(
    conn: &mut KafkaConnection,
    id: &str,
    version: i16,
) -> Result<(i64, i16, i16)> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(text(id))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let answer: InitProducerIdResponse =
        conn.call(ApiKey::InitProducerId, version, &request).await?;
    Ok((
        answer.producer_id.0,
        answer.producer_epoch,
        answer.error_code,
    ))
}

pub(crate) async fn add_partitions(
    conn: &mut KafkaConnection,
    (id, producer_id, epoch): (&str, i64, i16),
    topic: &str,
    partitions: Vec<i32>,
    version: i16,
) -> Result<Vec<i16>> {
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(text(id)))
        .with_v3_and_below_producer_id(ProducerId(producer_id))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(text(topic)))
                .with_partitions(partitions),
        ]);
    let answer: AddPartitionsToTxnResponse = conn
        .call(ApiKey::AddPartitionsToTxn, version, &request)
        .await?;
    Ok(answer.results_by_topic_v3_and_below[0]
        .results_by_partition
        .iter()
        .map(|r| r.partition_error_code)
        .collect())
}

pub(crate) async fn end(
    conn: &mut KafkaConnection,
    (id, producer_id, epoch): (&str, i64, i16),
    commit: bool,
    version: i16,
) -> Result<i16> {
    let request = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(text(id)))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let answer: EndTxnResponse = conn.call(ApiKey::EndTxn, version, &request).await?;
    Ok(answer.error_code)
}

async fn produce_transactional(
    conn: &mut KafkaConnection,
    producer: (&str, i64, i16),
    to: (&str, i32),
    sequence: i32,
) -> Result<i16> {
    produce_value(conn, producer, to, sequence, "v").await
}

/// A transactional batch of one record holding `value`, as Produce v9; the partition's error
/// code.
pub(crate) async fn produce_value(
    conn: &mut KafkaConnection,
    producer: (&str, i64, i16),
    to: (&str, i32),
    sequence: i32,
    value: &str,
) -> Result<i16> {
    produce_value_at(conn, 9, producer, to, (sequence, value)).await
}

/// [`produce_value`] as Produce `version`.
pub(crate) async fn produce_value_at(
    conn: &mut KafkaConnection,
    version: i16,
    (id, producer_id, epoch): (&str, i64, i16),
    (topic, partition): (&str, i32),
    (sequence, value): (i32, &str),
) -> Result<i16> {
    let writer = Writer {
        producer_id,
        epoch,
        base_sequence: sequence,
    };
    let records =
        minibroker_records::encode_transactional(writer, &[NewRecord::value(value.to_owned())], 0)?;
    let request = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(text(id))))
        .with_acks(-1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(text(topic)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ]);
    let answer: ProduceResponse = conn.call(ApiKey::Produce, version, &request).await?;
    Ok(answer.responses[0].partition_responses[0].error_code)
}

#[tokio::test]
async fn find_coordinator_answers_this_broker_for_a_transactional_id() -> Result<()> {
    let (_broker, kafka, mut conn) = kafka(Config::default()).await?;
    let request = FindCoordinatorRequest::default()
        .with_key(text("txn"))
        .with_key_type(1);
    let answer: FindCoordinatorResponse = conn.call(ApiKey::FindCoordinator, 3, &request).await?;
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.port, i32::from(kafka.addr.port()));
    let unknown: FindCoordinatorResponse = conn
        .call(ApiKey::FindCoordinator, 3, &request.with_key_type(7))
        .await?;
    assert_eq!(unknown.error_code, code(ResponseError::InvalidRequest));
    Ok(())
}

#[tokio::test]
async fn a_fenced_epoch_is_answered_by_the_code_the_version_knows() -> Result<()> {
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("t", 2)?;
    let (producer_id, old, _) = init(&mut conn, "fenced", 4).await?;
    let (_, current, _) = init(&mut conn, "fenced", 4).await?;
    assert_eq!(current, old + 1);
    let stale = ("fenced", producer_id, old);
    // AddPartitionsToTxn: 47 before v2, 90 from v2.
    for (version, expected) in [
        (0, ResponseError::InvalidProducerEpoch),
        (1, ResponseError::InvalidProducerEpoch),
        (2, ResponseError::ProducerFenced),
        (3, ResponseError::ProducerFenced),
    ] {
        let codes = add_partitions(&mut conn, stale, "t", vec![0], version).await?;
        assert_eq!(codes, vec![code(expected)], "AddPartitionsToTxn v{version}");
    }
    // AddOffsetsToTxn: the same.
    for (version, expected) in [
        (0, ResponseError::InvalidProducerEpoch),
        (2, ResponseError::ProducerFenced),
    ] {
        let request = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(text("fenced")))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(old)
            .with_group_id(GroupId(text("g")));
        let answer: AddOffsetsToTxnResponse = conn
            .call(ApiKey::AddOffsetsToTxn, version, &request)
            .await?;
        assert_eq!(
            answer.error_code,
            code(expected),
            "AddOffsetsToTxn v{version}"
        );
    }
    // EndTxn: the same.
    for (version, expected) in [
        (1, ResponseError::InvalidProducerEpoch),
        (2, ResponseError::ProducerFenced),
    ] {
        assert_eq!(
            end(&mut conn, stale, true, version).await?,
            code(expected),
            "EndTxn v{version}"
        );
    }
    // InitProducerId naming the stale pair (KIP-360): 47 at v3, 90 at v4.
    for (version, expected) in [
        (3, ResponseError::InvalidProducerEpoch),
        (4, ResponseError::ProducerFenced),
    ] {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(text("fenced"))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(old);
        let answer: InitProducerIdResponse =
            conn.call(ApiKey::InitProducerId, version, &request).await?;
        assert_eq!(
            answer.error_code,
            code(expected),
            "InitProducerId v{version}"
        );
    }
    // Another producer id than the transactional id's: INVALID_PRODUCER_ID_MAPPING.
    let codes = add_partitions(
        &mut conn,
        ("fenced", producer_id + 1, current),
        "t",
        vec![0],
        3,
    )
    .await?;
    assert_eq!(codes, vec![code(ResponseError::InvalidProducerIdMapping)]);
    Ok(())
}

#[tokio::test]
async fn a_transactional_batch_needs_its_partition_added_and_an_unknown_one_cannot_be() -> Result<()>
{
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("t", 2)?;
    let (producer_id, epoch, _) = init(&mut conn, "verified", 4).await?;
    let producer = ("verified", producer_id, epoch);
    // Not added yet: INVALID_TXN_STATE.
    assert_eq!(
        produce_transactional(&mut conn, producer, ("t", 0), 0).await?,
        code(ResponseError::InvalidTxnState)
    );
    // An unknown partition is refused; the others of the request are not attempted.
    assert_eq!(
        add_partitions(&mut conn, producer, "t", vec![0, 5], 3).await?,
        vec![
            code(ResponseError::OperationNotAttempted),
            code(ResponseError::UnknownTopicOrPartition)
        ]
    );
    assert_eq!(
        add_partitions(&mut conn, producer, "t", vec![0], 3).await?,
        vec![0]
    );
    assert_eq!(
        produce_transactional(&mut conn, producer, ("t", 0), 0).await?,
        0
    );
    // Added on partition 0 only.
    assert_eq!(
        produce_transactional(&mut conn, producer, ("t", 1), 0).await?,
        code(ResponseError::InvalidTxnState)
    );
    assert_eq!(end(&mut conn, producer, true, 3).await?, 0);
    // A retry of the same end is answered as it was; the other result is INVALID_TXN_STATE.
    assert_eq!(end(&mut conn, producer, true, 3).await?, 0);
    assert_eq!(
        end(&mut conn, producer, false, 3).await?,
        code(ResponseError::InvalidTxnState)
    );
    // The marker took offset 1.
    assert_eq!(broker.broker.last_stable_offset("t", 0)?, 2);
    Ok(())
}

/// TxnOffsetCommit of `offset` for `topic`/0 in group `g`, by the producer's transaction, with no
/// member (generation -1).
pub(crate) fn txn_offset_commit(
    (id, producer_id, epoch): (&str, i64, i16),
    (topic, offset): (&str, i64),
) -> TxnOffsetCommitRequest {
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(text(id)))
        .with_group_id(GroupId(text("g")))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(vec![
            TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(text(topic)))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset),
                ]),
        ])
}

async fn offset_fetch(conn: &mut KafkaConnection, require_stable: bool) -> Result<(i16, i64)> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(text("g")))
        .with_require_stable(require_stable)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(text("in")))
                .with_partition_indexes(vec![0]),
        ]));
    let answer: OffsetFetchResponse = conn.call(ApiKey::OffsetFetch, 7, &request).await?;
    let partition = &answer.topics[0].partitions[0];
    Ok((partition.error_code, partition.committed_offset))
}

#[tokio::test]
async fn offsets_committed_in_a_transaction_show_only_once_it_commits() -> Result<()> {
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("in", 1)?;
    let (producer_id, epoch, _) = init(&mut conn, "offsets", 4).await?;
    let add = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(text("offsets")))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(text("g")));
    let commit = txn_offset_commit(("offsets", producer_id, epoch), ("in", 42));
    // Before AddOffsetsToTxn the group is not in the transaction.
    let early: TxnOffsetCommitResponse = conn.call(ApiKey::TxnOffsetCommit, 3, &commit).await?;
    assert_eq!(
        early.topics[0].partitions[0].error_code,
        code(ResponseError::InvalidTxnState)
    );
    let added: AddOffsetsToTxnResponse = conn.call(ApiKey::AddOffsetsToTxn, 3, &add).await?;
    assert_eq!(added.error_code, 0);
    let committed: TxnOffsetCommitResponse = conn.call(ApiKey::TxnOffsetCommit, 3, &commit).await?;
    assert_eq!(committed.topics[0].partitions[0].error_code, 0);
    // Pending: invisible, and unstable to a consumer that asks for stable offsets.
    assert_eq!(offset_fetch(&mut conn, false).await?, (0, -1));
    assert_eq!(
        offset_fetch(&mut conn, true).await?.0,
        code(ResponseError::UnstableOffsetCommit)
    );
    assert_eq!(
        end(&mut conn, ("offsets", producer_id, epoch), true, 3).await?,
        0
    );
    assert_eq!(offset_fetch(&mut conn, true).await?, (0, 42));
    Ok(())
}

#[tokio::test]
async fn operators_are_told_of_unknown_ids_and_states() -> Result<()> {
    use kafka_protocol::messages::{
        DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest,
        ListTransactionsResponse,
    };
    let (_broker, _kafka, mut conn) = kafka(Config::default()).await?;
    init(&mut conn, "known", 4).await?;
    let request = DescribeTransactionsRequest::default().with_transactional_ids(vec![
        TransactionalId(text("known")),
        TransactionalId(text("unknown")),
    ]);
    let answer: DescribeTransactionsResponse =
        conn.call(ApiKey::DescribeTransactions, 0, &request).await?;
    assert_eq!(answer.transaction_states[0].error_code, 0);
    assert_eq!(
        answer.transaction_states[0].transaction_state.as_str(),
        "Empty"
    );
    assert_eq!(
        answer.transaction_states[1].error_code,
        code(ResponseError::TransactionalIdNotFound)
    );
    let request = ListTransactionsRequest::default()
        .with_state_filters(vec![text("Empty"), text("Sleeping")]);
    let answer: ListTransactionsResponse = conn.call(ApiKey::ListTransactions, 1, &request).await?;
    assert_eq!(answer.transaction_states.len(), 1);
    assert_eq!(answer.unknown_state_filters, vec![text("Sleeping")]);
    Ok(())
}
