//! Requests of one transaction that arrive late, after their client has moved on to the next
//! (KAFKA-17754), as raw frames in the order a network can deliver them: none may land in the
//! next transaction. Judged by what `read_committed` and `read_uncommitted` reads serve.

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::TransactionalId;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use minibroker_broker::{Broker, Isolation};
use minibroker_host::Config;
use minibroker_tests::{KafkaConnection, kafka_connection};

use crate::kafka::kafka;
use crate::transactions::{
    add_partitions, code, end, init, produce_value, produce_value_at, text, txn_offset_commit,
};

/// Every record value of `topic`'s partition 0 a consumer reading at `isolation` keeps
/// (markers, and at `read_committed` aborted transactions, left out).
pub(crate) fn values(broker: &Broker, topic: &str, isolation: Isolation) -> Vec<String> {
    let (_, end) = broker.offsets(topic, 0).unwrap();
    let mut values = Vec::new();
    let mut next = 0;
    while next < end {
        let fetched = broker.fetch(topic, 0, next, 1 << 20, 0, isolation).unwrap();
        if fetched.batches.is_empty() {
            break;
        }
        for stored in &fetched.batches {
            next = minibroker_records::end_offset(stored);
            let batch = minibroker_records::decode(stored).unwrap();
            let aborted = fetched.aborted.iter().any(|txn| {
                txn.producer_id == batch.info.producer_id
                    && (txn.first_offset..=txn.last_offset).contains(&batch.base_offset)
            });
            if batch.info.control || aborted {
                continue;
            }
            let text = |bytes: &Bytes| String::from_utf8_lossy(bytes).into_owned();
            values.extend(
                batch
                    .records
                    .iter()
                    .filter_map(|r| r.value.as_ref().map(text)),
            );
        }
    }
    values
}

/// InitProducerId v4 naming the producer's current pair (KIP-360): its new epoch.
async fn bump(
    conn: &mut KafkaConnection,
    (id, producer_id, epoch): (&str, i64, i16),
) -> Result<i16> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(text(id))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch);
    let answer: InitProducerIdResponse = conn.call(ApiKey::InitProducerId, 4, &request).await?;
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.producer_id.0, producer_id);
    Ok(answer.producer_epoch)
}

#[tokio::test]
async fn a_late_batch_of_an_aborted_transaction_never_lands_in_the_next() -> Result<()> {
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("t", 1)?;
    let (producer_id, epoch, _) = init(&mut conn, "late", 4).await?;
    let producer = ("late", producer_id, epoch);
    // Transaction N adds the partition; its only batch, N-a at sequence 0, is held in the
    // network. The client gives up on it and aborts N.
    assert_eq!(
        add_partitions(&mut conn, producer, "t", vec![0], 3).await?,
        [0]
    );
    assert_eq!(end(&mut conn, producer, false, 3).await?, 0);
    // N+1 adds the partition at the same epoch (a client without KIP-890 part 2 keeps it).
    assert_eq!(
        add_partitions(&mut conn, producer, "t", vec![0], 3).await?,
        [0]
    );
    // The held batch arrives now: refused with the code that makes the client bump its epoch.
    let out_of_order = code(ResponseError::OutOfOrderSequenceNumber);
    assert_eq!(
        produce_value(&mut conn, producer, ("t", 0), 0, "N-a").await?,
        out_of_order,
        "the late batch of the aborted transaction"
    );
    // So is N+1's own first batch at that epoch, which could not be told from it.
    assert_eq!(
        produce_value(&mut conn, producer, ("t", 0), 0, "N1-a").await?,
        out_of_order
    );
    // The client moves on (KIP-360): its open transaction is aborted and the epoch bumped.
    let moved_on = bump(&mut conn, producer).await?;
    assert!(moved_on > epoch);
    let current = ("late", producer_id, moved_on);
    assert_eq!(
        add_partitions(&mut conn, current, "t", vec![0], 3).await?,
        [0]
    );
    assert_eq!(
        produce_value(&mut conn, current, ("t", 0), 0, "N1-a").await?,
        0
    );
    // The held batch again, at its old epoch: fenced.
    assert_ne!(
        produce_value(&mut conn, producer, ("t", 0), 0, "N-a").await?,
        0
    );
    assert_eq!(
        produce_value(&mut conn, current, ("t", 0), 1, "N1-b").await?,
        0
    );
    assert_eq!(end(&mut conn, current, true, 3).await?, 0);
    assert_eq!(
        values(&broker.broker, "t", Isolation::ReadCommitted),
        ["N1-a", "N1-b"]
    );
    assert_eq!(
        values(&broker.broker, "t", Isolation::ReadUncommitted),
        ["N1-a", "N1-b"]
    );
    Ok(())
}

#[tokio::test]
async fn a_late_end_of_a_transaction_never_ends_the_next() -> Result<()> {
    for commit in [false, true] {
        let (broker, kafka, mut first) = kafka(Config::default()).await?;
        broker.broker.create_topic("t", 1)?;
        let (producer_id, epoch, _) = init(&mut first, "ends", 4).await?;
        let producer = ("ends", producer_id, epoch);
        assert_eq!(
            add_partitions(&mut first, producer, "t", vec![0], 3).await?,
            [0]
        );
        assert_eq!(
            produce_value(&mut first, producer, ("t", 0), 0, "N-a").await?,
            0
        );
        // N's EndTxn on the first connection is held in the network; the client gives up on
        // it, and its retry on a new connection ends N.
        let mut second = kafka_connection(kafka.addr).await?;
        assert_eq!(end(&mut second, producer, commit, 3).await?, 0);
        // N+1 begins on the new connection, at the same epoch.
        assert_eq!(
            add_partitions(&mut second, producer, "t", vec![0], 3).await?,
            [0]
        );
        assert_eq!(
            produce_value(&mut second, producer, ("t", 0), 1, "N1-a").await?,
            0
        );
        // The held end arrives: it must not end N+1.
        assert_eq!(
            end(&mut first, producer, commit, 3).await?,
            code(ResponseError::InvalidTxnState),
            "the late end (commit: {commit})"
        );
        assert_eq!(
            produce_value(&mut second, producer, ("t", 0), 2, "N1-b").await?,
            0
        );
        assert_eq!(end(&mut second, producer, true, 3).await?, 0);
        let n = if commit { vec!["N-a"] } else { vec![] };
        let committed: Vec<&str> = n.into_iter().chain(["N1-a", "N1-b"]).collect();
        assert_eq!(
            values(&broker.broker, "t", Isolation::ReadCommitted),
            committed
        );
        assert_eq!(
            values(&broker.broker, "t", Isolation::ReadUncommitted),
            ["N-a", "N1-a", "N1-b"]
        );
    }
    Ok(())
}

/// A transactional batch of one record holding `value` to `t`/0, sent as Produce v12 (its
/// partition is added by the batch itself); the partition's error code.
async fn produce_v12(
    conn: &mut KafkaConnection,
    producer: (&str, i64, i16),
    sequence: i32,
    value: &str,
) -> Result<i16> {
    produce_value_at(conn, 12, producer, ("t", 0), (sequence, value)).await
}

/// EndTxn v5: (error code, the producer id and epoch it answers).
async fn end_v5(
    conn: &mut KafkaConnection,
    (id, producer_id, epoch): (&str, i64, i16),
    commit: bool,
) -> Result<(i16, i64, i16)> {
    use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse};
    let request = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(text(id)))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let answer: EndTxnResponse = conn.call(ApiKey::EndTxn, 5, &request).await?;
    Ok((
        answer.error_code,
        answer.producer_id.0,
        answer.producer_epoch,
    ))
}

#[tokio::test]
async fn part_2_is_finalized_in_api_versions() -> Result<()> {
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    let (_broker, _kafka, mut conn) = kafka(Config::default()).await?;
    let request = ApiVersionsRequest::default()
        .with_client_software_name(text("test"))
        .with_client_software_version(text("1"));
    for version in 0..=4 {
        let answer: ApiVersionsResponse = conn.call(ApiKey::ApiVersions, version, &request).await?;
        let max = |api: ApiKey| {
            answer
                .api_keys
                .iter()
                .find(|k| k.api_key == api as i16)
                .map(|k| k.max_version)
        };
        assert_eq!(max(ApiKey::Produce), Some(12));
        assert_eq!(max(ApiKey::EndTxn), Some(5));
        let finalized: Vec<_> = answer
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
            .collect();
        let supported: Vec<_> = answer
            .supported_features
            .iter()
            .map(|f| (f.name.to_string(), f.min_version, f.max_version))
            .collect();
        if version >= 3 {
            assert_eq!(
                finalized,
                [("transaction.version".to_owned(), 2, 2)],
                "v{version}"
            );
        } else {
            assert!(finalized.is_empty(), "v{version}");
        }
        if version >= 4 {
            assert_eq!(
                supported,
                [("transaction.version".to_owned(), 0, 2)],
                "v{version}"
            );
        } else {
            assert!(supported.is_empty(), "v{version}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn with_part_2_late_requests_of_a_transaction_are_fenced_in_the_next() -> Result<()> {
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("t", 1)?;
    let (producer_id, epoch, _) = init(&mut conn, "part-2", 5).await?;
    let first = ("part-2", producer_id, epoch);
    // N: its batch adds the partition itself (no AddPartitionsToTxn).
    assert_eq!(produce_v12(&mut conn, first, 0, "N-a").await?, 0);
    let (ended, answered_id, next_epoch) = end_v5(&mut conn, first, true).await?;
    assert_eq!((ended, answered_id), (0, producer_id));
    assert_eq!(next_epoch, epoch + 1, "every end bumps the epoch");
    // A retry of that end is answered as it was, with the new epoch.
    assert_eq!(
        end_v5(&mut conn, first, true).await?,
        (0, producer_id, next_epoch)
    );
    let second = ("part-2", producer_id, next_epoch);
    // N+1 at the new epoch, from sequence 0.
    assert_eq!(produce_v12(&mut conn, second, 0, "N1-a").await?, 0);
    // N's late requests arrive now: a batch, and an end of either kind. All are fenced.
    assert_eq!(
        produce_v12(&mut conn, first, 1, "N-b").await?,
        code(ResponseError::InvalidProducerEpoch)
    );
    for commit in [false, true] {
        assert_eq!(
            end_v5(&mut conn, first, commit).await?.0,
            code(ResponseError::ProducerFenced),
            "the late end (commit: {commit})"
        );
    }
    assert_eq!(produce_v12(&mut conn, second, 1, "N1-b").await?, 0);
    let (ended, _, third_epoch) = end_v5(&mut conn, second, true).await?;
    assert_eq!((ended, third_epoch), (0, next_epoch + 1));
    assert_eq!(
        values(&broker.broker, "t", Isolation::ReadCommitted),
        ["N-a", "N1-a", "N1-b"]
    );
    assert_eq!(
        values(&broker.broker, "t", Isolation::ReadUncommitted),
        ["N-a", "N1-a", "N1-b"]
    );
    Ok(())
}

#[tokio::test]
async fn part_2_offsets_join_the_transaction_with_their_first_commit() -> Result<()> {
    use kafka_protocol::messages::TxnOffsetCommitResponse;
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("t", 1)?;
    let (producer_id, epoch, _) = init(&mut conn, "offsets-2", 5).await?;
    let producer = ("offsets-2", producer_id, epoch);
    let request = txn_offset_commit(producer, ("t", 7));
    // Before v5 the group must have been added (AddOffsetsToTxn); at v5 the commit adds it.
    let refused: TxnOffsetCommitResponse = conn.call(ApiKey::TxnOffsetCommit, 3, &request).await?;
    assert_eq!(
        refused.topics[0].partitions[0].error_code,
        code(ResponseError::InvalidTxnState)
    );
    let added: TxnOffsetCommitResponse = conn.call(ApiKey::TxnOffsetCommit, 5, &request).await?;
    assert_eq!(added.topics[0].partitions[0].error_code, 0);
    let described = broker
        .host
        .node()
        .transactions()
        .coordinator()
        .describe("offsets-2")
        .expect("the id");
    assert_eq!(described.groups().cloned().collect::<Vec<_>>(), ["g"]);
    assert_eq!(end_v5(&mut conn, producer, true).await?.0, 0);
    Ok(())
}

#[tokio::test]
async fn a_brokers_batched_add_verifies_or_adds_each_transaction() -> Result<()> {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TopicName,
    };
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("t", 2)?;
    let (producer_id, epoch, _) = init(&mut conn, "batched", 5).await?;
    let transaction = |partition: i32, verify_only: bool| {
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(text("batched")))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
            .with_verify_only(verify_only)
            .with_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(text("t")))
                    .with_partitions(vec![partition]),
            ])
    };
    let codes = |answer: &AddPartitionsToTxnResponse| -> Vec<i16> {
        answer
            .results_by_transaction
            .iter()
            .flat_map(|txn| &txn.topic_results)
            .flat_map(|topic| &topic.results_by_partition)
            .map(|p| p.partition_error_code)
            .collect()
    };
    // Add partition 0, then verify 0 (added) and 1 (not added).
    let add = AddPartitionsToTxnRequest::default().with_transactions(vec![transaction(0, false)]);
    let added: AddPartitionsToTxnResponse = conn.call(ApiKey::AddPartitionsToTxn, 5, &add).await?;
    assert_eq!((added.error_code, codes(&added)), (0, vec![0]));
    let verify = AddPartitionsToTxnRequest::default()
        .with_transactions(vec![transaction(0, true), transaction(1, true)]);
    let verified: AddPartitionsToTxnResponse =
        conn.call(ApiKey::AddPartitionsToTxn, 5, &verify).await?;
    assert_eq!(
        codes(&verified),
        [0, code(ResponseError::TransactionAbortable)]
    );
    let at_v4: AddPartitionsToTxnResponse =
        conn.call(ApiKey::AddPartitionsToTxn, 4, &verify).await?;
    assert_eq!(codes(&at_v4), [0, code(ResponseError::InvalidTxnState)]);
    Ok(())
}
