//! Kafka's admin APIs on the wire, version by version (the admin clients' side is in
//! `crates/cli/tests/admin.rs`).

use anyhow::Result;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{ApiKey, DescribeClusterRequest, DescribeClusterResponse};
use minibroker_host::Config;

use crate::kafka::kafka;

/// Kafka's code bits of what the cluster lets a principal do (KIP-430): bit `code` set for each.
fn operations(codes: &[i32]) -> i32 {
    codes.iter().fold(0, |bits, code| bits | 1 << code)
}

#[tokio::test]
async fn describe_cluster_names_the_cluster_its_controller_and_its_broker() -> Result<()> {
    let (_broker, kafka, mut conn) = kafka(Config::default()).await?;
    for version in [0, 1] {
        let request = DescribeClusterRequest::default().with_endpoint_type(1);
        let answer: DescribeClusterResponse = conn
            .call(ApiKey::DescribeCluster, version, &request)
            .await?;
        assert_eq!(answer.error_code, 0, "v{version}");
        assert_eq!(answer.cluster_id.as_str(), "minibroker");
        assert_eq!(answer.brokers.len(), 1);
        let broker = &answer.brokers[0];
        assert_eq!(answer.controller_id, broker.broker_id);
        assert_eq!(
            format!("{}:{}", broker.host, broker.port),
            kafka.addr.to_string()
        );
        // Not asked for: not computed.
        assert_eq!(answer.cluster_authorized_operations, i32::MIN);
    }
    // Asked for, with nothing to deny: every operation a cluster has (Kafka's codes: create
    // 5, alter 7, describe 8, cluster action 9, describe and alter configs 10 and 11,
    // idempotent write 12).
    let request =
        DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
    let answer: DescribeClusterResponse = conn.call(ApiKey::DescribeCluster, 0, &request).await?;
    assert_eq!(
        answer.cluster_authorized_operations,
        operations(&[5, 7, 8, 9, 10, 11, 12])
    );
    Ok(())
}

#[tokio::test]
async fn describe_cluster_refuses_to_describe_controllers_on_a_broker_listener() -> Result<()> {
    let (_broker, _kafka, mut conn) = kafka(Config::default()).await?;
    let request = DescribeClusterRequest::default().with_endpoint_type(2);
    let answer: DescribeClusterResponse = conn.call(ApiKey::DescribeCluster, 1, &request).await?;
    assert_eq!(
        answer.error_code,
        ResponseError::UnsupportedEndpointType.code()
    );
    assert!(answer.brokers.is_empty());
    Ok(())
}

#[tokio::test]
async fn offset_delete_forgets_a_groups_offsets_partition_by_partition() -> Result<()> {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{
        GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest,
        OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let config = Config {
        broker: minibroker_broker::BrokerConfig {
            default_partitions: 2,
            ..minibroker_broker::BrokerConfig::default()
        },
        ..Config::default()
    };
    let (broker, _kafka, mut conn) = kafka(config).await?;
    broker.broker.topic("t", true)?;
    let group = || GroupId(StrBytes::from_static_str("g"));
    let topic = || TopicName(StrBytes::from_static_str("t"));
    // Offsets committed from outside any generation, as an administrator's tool does.
    let commit = OffsetCommitRequest::default()
        .with_group_id(group())
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(topic())
                .with_partitions(
                    (0..2)
                        .map(|p| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(7)
                        })
                        .collect(),
                ),
        ]);
    let committed: OffsetCommitResponse = conn.call(ApiKey::OffsetCommit, 7, &commit).await?;
    assert!(
        committed.topics[0]
            .partitions
            .iter()
            .all(|p| p.error_code == 0)
    );
    let delete = |partitions: Vec<i32>, group_id: GroupId| {
        OffsetDeleteRequest::default()
            .with_group_id(group_id)
            .with_topics(vec![
                OffsetDeleteRequestTopic::default()
                    .with_name(topic())
                    .with_partitions(
                        partitions
                            .into_iter()
                            .map(|p| {
                                OffsetDeleteRequestPartition::default().with_partition_index(p)
                            })
                            .collect(),
                    ),
            ])
    };
    let deleted: OffsetDeleteResponse = conn
        .call(ApiKey::OffsetDelete, 0, &delete(vec![0, 9], group()))
        .await?;
    assert_eq!(deleted.error_code, 0);
    let codes: Vec<i16> = deleted.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(
        codes,
        vec![0, ResponseError::UnknownTopicOrPartition.code()]
    );
    let fetch = OffsetFetchRequest::default()
        .with_group_id(group())
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic())
                .with_partition_indexes(vec![0, 1]),
        ]));
    let fetched: OffsetFetchResponse = conn.call(ApiKey::OffsetFetch, 7, &fetch).await?;
    let offsets: Vec<i64> = fetched.topics[0]
        .partitions
        .iter()
        .map(|p| p.committed_offset)
        .collect();
    assert_eq!(
        offsets,
        vec![-1, 7],
        "partition 0 forgotten, partition 1 kept"
    );
    let unknown: OffsetDeleteResponse = conn
        .call(
            ApiKey::OffsetDelete,
            0,
            &delete(vec![0], GroupId(StrBytes::from_static_str("nosuch"))),
        )
        .await?;
    assert_eq!(unknown.error_code, ResponseError::GroupIdNotFound.code());
    Ok(())
}

#[tokio::test]
async fn create_partitions_grows_a_topic_under_a_connection_that_cached_it() -> Result<()> {
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsAssignment, CreatePartitionsTopic,
    };
    use kafka_protocol::messages::{
        BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    use minibroker_tests::batch;
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.topic("t", true)?;
    // The connection produces to partition 0 first, so it holds the topic as it was.
    assert_eq!(
        crate::kafka::produce_to(&mut conn, "t", 0, batch(1, 0, 0, &[b"a"]))
            .await?
            .0,
        0
    );
    let grow = |topic: &str, count: i32, validate_only: bool| {
        CreatePartitionsRequest::default()
            .with_validate_only(validate_only)
            .with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_count(count)
                    .with_assignments(None),
            ])
    };
    let code = |answer: &CreatePartitionsResponse| answer.results[0].error_code;
    for version in [0, 3] {
        let checked: CreatePartitionsResponse = conn
            .call(ApiKey::CreatePartitions, version, &grow("t", 3, true))
            .await?;
        assert_eq!(code(&checked), 0);
    }
    assert_eq!(
        broker.broker.topic("t", false)?.partitions,
        1,
        "validate_only changes nothing"
    );
    let grown: CreatePartitionsResponse = conn
        .call(ApiKey::CreatePartitions, 3, &grow("t", 3, false))
        .await?;
    assert_eq!(code(&grown), 0);
    assert_eq!(broker.broker.topic("t", false)?.partitions, 3);
    // The same connection writes to a new partition, and to the old one where it left off.
    assert_eq!(
        crate::kafka::produce_to(&mut conn, "t", 2, batch(1, 0, 0, &[b"b"]))
            .await?
            .0,
        0
    );
    assert_eq!(
        crate::kafka::produce_to(&mut conn, "t", 0, batch(2, 0, 0, &[b"c"])).await?,
        (0, 1)
    );
    // Refusals, each with Kafka's code.
    let same: CreatePartitionsResponse = conn
        .call(ApiKey::CreatePartitions, 3, &grow("t", 3, false))
        .await?;
    assert_eq!(code(&same), ResponseError::InvalidPartitions.code());
    assert!(
        same.results[0]
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("only grow"))
    );
    let unknown: CreatePartitionsResponse = conn
        .call(ApiKey::CreatePartitions, 3, &grow("nosuch", 2, false))
        .await?;
    assert_eq!(
        code(&unknown),
        ResponseError::UnknownTopicOrPartition.code()
    );
    let elsewhere = CreatePartitionsRequest::default().with_topics(vec![
        CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_count(4)
            .with_assignments(Some(vec![
                CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(7)]),
            ])),
    ]);
    let elsewhere: CreatePartitionsResponse =
        conn.call(ApiKey::CreatePartitions, 3, &elsewhere).await?;
    assert_eq!(
        code(&elsewhere),
        ResponseError::InvalidReplicaAssignment.code()
    );
    assert_eq!(broker.broker.topic("t", false)?.partitions, 3);
    Ok(())
}

#[tokio::test]
async fn offset_for_leader_epoch_ends_the_one_epoch_at_the_log_end() -> Result<()> {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{
        OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    use minibroker_tests::batch;
    let (_broker, _kafka, mut conn) = kafka(Config::default()).await?;
    crate::kafka::produce_to(&mut conn, "t", 0, batch(1, 0, 0, &[b"a", b"b"])).await?;
    // (partition, current leader epoch, leader epoch) → (error, epoch, end offset).
    let cases = [
        ((0, -1, 0), (0, 0, 2)),
        ((0, 0, 0), (0, 0, 2)),
        ((0, 0, 3), (0, -1, -1)),
        (
            (0, 1, 0),
            (ResponseError::UnknownLeaderEpoch.code(), -1, -1),
        ),
        (
            (5, -1, 0),
            (ResponseError::UnknownTopicOrPartition.code(), -1, -1),
        ),
    ];
    for version in [2, 3, 4] {
        for ((partition, current, asked), expected) in cases {
            let request = OffsetForLeaderEpochRequest::default()
                .with_replica_id(kafka_protocol::messages::BrokerId(-1))
                .with_topics(vec![
                    OffsetForLeaderTopic::default()
                        .with_topic(TopicName(StrBytes::from_static_str("t")))
                        .with_partitions(vec![
                            OffsetForLeaderPartition::default()
                                .with_partition(partition)
                                .with_current_leader_epoch(current)
                                .with_leader_epoch(asked),
                        ]),
                ]);
            let answer: OffsetForLeaderEpochResponse = conn
                .call(ApiKey::OffsetForLeaderEpoch, version, &request)
                .await?;
            let got = &answer.topics[0].partitions[0];
            assert_eq!(
                (got.error_code, got.leader_epoch, got.end_offset),
                expected,
                "v{version} partition {partition} current {current} asked {asked}"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn describe_configs_answers_each_resource_or_says_why_not() -> Result<()> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
    use kafka_protocol::protocol::StrBytes;
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.topic("t", true)?;
    let resource = |kind: i8, name: &str, keys: Option<Vec<&str>>| {
        DescribeConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name.to_owned()))
            .with_configuration_keys(keys.map(|keys| {
                keys.into_iter()
                    .map(|k| StrBytes::from_string(k.to_owned()))
                    .collect()
            }))
    };
    let request = DescribeConfigsRequest::default().with_resources(vec![
        resource(2, "t", Some(vec!["retention.ms", "cleanup.policy"])),
        resource(2, "nosuch", None),
        resource(4, "1", None),
        resource(4, "7", None),
        resource(3, "g", None),
    ]);
    for version in [1, 4] {
        let answer: DescribeConfigsResponse = conn
            .call(ApiKey::DescribeConfigs, version, &request)
            .await?;
        let codes: Vec<i16> = answer.results.iter().map(|r| r.error_code).collect();
        assert_eq!(
            codes,
            vec![
                0,
                ResponseError::UnknownTopicOrPartition.code(),
                0,
                ResponseError::InvalidRequest.code(),
                ResponseError::InvalidRequest.code(),
            ],
            "v{version}"
        );
        let asked: Vec<(&str, Option<&str>, i8)> = answer.results[0]
            .configs
            .iter()
            .map(|c| (c.name.as_str(), c.value.as_deref(), c.config_source))
            .collect();
        // Only the keys asked for; nothing set, so both defaults (source 5).
        assert_eq!(
            asked,
            vec![
                ("retention.ms", Some("-1"), 5),
                ("cleanup.policy", Some("delete"), 5)
            ]
        );
        assert!(answer.results[2].configs.iter().all(|c| c.read_only));
    }
    Ok(())
}

#[tokio::test]
async fn alter_configs_replace_or_change_a_topics_settings_all_or_none() -> Result<()> {
    use kafka_protocol::messages::{
        AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse, alter_configs_request, incremental_alter_configs_request,
    };
    use kafka_protocol::protocol::StrBytes;
    let text = |s: &str| StrBytes::from_string(s.to_owned());
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.topic("t", true)?;
    let setting = |name: &str| {
        let entries = broker.broker.topic_configs("t").expect("described");
        entries
            .into_iter()
            .find(|e| e.name == name)
            .map(|e| (e.value, e.source))
            .expect("listed")
    };
    let replace = |kind: i8, name: &str, configs: &[(&str, Option<&str>)]| {
        alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(text(name))
            .with_configs(
                configs
                    .iter()
                    .map(|(n, v)| {
                        alter_configs_request::AlterableConfig::default()
                            .with_name(text(n))
                            .with_value(v.map(text))
                    })
                    .collect(),
            )
    };
    for version in [0, 2] {
        let request = AlterConfigsRequest::default().with_resources(vec![
            replace(2, "t", &[("retention.ms", Some("5000"))]),
            replace(2, "nosuch", &[("retention.ms", Some("5000"))]),
            replace(2, "t", &[("retention.ms", Some("-7"))]),
            replace(2, "t", &[("no.such.setting", Some("1"))]),
            replace(2, "t", &[("segment.ms", None)]),
            replace(4, "1", &[("log.retention.ms", Some("1"))]),
        ]);
        let answer: AlterConfigsResponse =
            conn.call(ApiKey::AlterConfigs, version, &request).await?;
        let codes: Vec<i16> = answer.responses.iter().map(|r| r.error_code).collect();
        let invalid = ResponseError::InvalidConfig.code();
        assert_eq!(
            codes,
            vec![
                0,
                ResponseError::UnknownTopicOrPartition.code(),
                invalid,
                invalid,
                invalid,
                ResponseError::InvalidRequest.code(),
            ],
            "v{version}: {answer:?}"
        );
        // The refused resources after the first changed nothing.
        assert_eq!(
            setting("retention.ms"),
            ("5000".into(), minibroker_broker::ConfigSource::Topic)
        );
    }
    let step = |name: &str, operation: i8, value: Option<&str>| {
        incremental_alter_configs_request::AlterableConfig::default()
            .with_name(text(name))
            .with_config_operation(operation)
            .with_value(value.map(text))
    };
    let resource = |configs| {
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(text("t"))
            .with_configs(configs)
    };
    for version in [0, 1] {
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            resource(vec![
                step("segment.bytes", 0, Some("8192")),
                step("retention.ms", 1, None),
                step("cleanup.policy", 2, Some("delete")),
            ]),
            // All or none: the good first step is not applied either.
            resource(vec![
                step("segment.ms", 0, Some("1000")),
                step("segment.bytes", 2, Some("1")),
            ]),
            resource(vec![step("segment.ms", 9, Some("1"))]),
        ]);
        let answer: IncrementalAlterConfigsResponse = conn
            .call(ApiKey::IncrementalAlterConfigs, version, &request)
            .await?;
        let codes: Vec<i16> = answer.responses.iter().map(|r| r.error_code).collect();
        assert_eq!(
            codes,
            vec![
                0,
                ResponseError::InvalidConfig.code(),
                ResponseError::InvalidRequest.code(),
            ],
            "v{version}: {answer:?}"
        );
        assert_eq!(setting("segment.bytes").0, "8192");
        assert_eq!(
            setting("retention.ms"),
            ("-1".into(), minibroker_broker::ConfigSource::Default)
        );
        assert_eq!(
            setting("segment.ms").1,
            minibroker_broker::ConfigSource::Default
        );
    }
    // validate_only checks and changes nothing.
    let request = IncrementalAlterConfigsRequest::default()
        .with_validate_only(true)
        .with_resources(vec![resource(vec![step("segment.bytes", 0, Some("4096"))])]);
    let answer: IncrementalAlterConfigsResponse = conn
        .call(ApiKey::IncrementalAlterConfigs, 1, &request)
        .await?;
    assert_eq!(answer.responses[0].error_code, 0);
    assert_eq!(setting("segment.bytes").0, "8192");
    Ok(())
}

#[tokio::test]
async fn delete_records_moves_the_start_and_a_retry_of_a_deleted_batch_is_still_a_duplicate()
-> Result<()> {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use minibroker_tests::batch;
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    let batches = [
        batch(1, 0, 0, &[b"a", b"b"]),
        batch(1, 0, 2, &[b"c"]),
        batch(1, 0, 3, &[b"d", b"e"]),
    ];
    for (sent, base) in batches.iter().zip([0, 2, 3]) {
        let answer = crate::kafka::produce_to(&mut conn, "t", 0, sent.clone()).await?;
        assert_eq!(answer, (0, base));
    }
    // (partition, offset) → (error, low watermark), one request after another.
    let cases = [
        ((0, 1), (0, 1)),
        // Below the start: nothing changes.
        ((0, 0), (0, 1)),
        ((0, 6), (ResponseError::OffsetOutOfRange.code(), -1)),
        ((0, -2), (ResponseError::OffsetOutOfRange.code(), -1)),
        ((4, 1), (ResponseError::UnknownTopicOrPartition.code(), -1)),
        ((-1, 1), (ResponseError::UnknownTopicOrPartition.code(), -1)),
        ((0, 3), (0, 3)),
    ];
    for (version, ((partition, offset), expected)) in [0, 1, 2].into_iter().cycle().zip(cases) {
        let request = DeleteRecordsRequest::default()
            .with_timeout_ms(1000)
            .with_topics(vec![
                DeleteRecordsTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![
                        DeleteRecordsPartition::default()
                            .with_partition_index(partition)
                            .with_offset(offset),
                    ]),
            ]);
        let answer: DeleteRecordsResponse =
            conn.call(ApiKey::DeleteRecords, version, &request).await?;
        let got = &answer.topics[0].partitions[0];
        assert_eq!(got.partition_index, partition);
        assert_eq!(
            (got.error_code, got.low_watermark),
            expected,
            "v{version} partition {partition} offset {offset}"
        );
    }
    assert_eq!(broker.broker.offsets("t", 0)?, (3, 5));
    // The retry of a deleted batch is still recognised, and so is the last one; the answers
    // carry the new log start offset.
    assert_eq!(
        crate::kafka::produce_answer(&mut conn, "t", 0, batches[1].clone()).await?,
        (0, 2, 3)
    );
    // -1: everything up to the high watermark.
    let everything = DeleteRecordsRequest::default().with_topics(vec![
        DeleteRecordsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![DeleteRecordsPartition::default().with_offset(-1)]),
    ]);
    let answer: DeleteRecordsResponse = conn.call(ApiKey::DeleteRecords, 2, &everything).await?;
    assert_eq!(answer.topics[0].partitions[0].low_watermark, 5);
    assert_eq!(
        crate::kafka::produce_to(&mut conn, "t", 0, batches[2].clone()).await?,
        (0, 3)
    );
    assert_eq!(
        crate::kafka::produce_answer(&mut conn, "t", 0, batch(1, 0, 5, &[b"f"])).await?,
        (0, 5, 5)
    );
    // A refused batch's answer carries it too.
    assert_eq!(
        crate::kafka::produce_answer(&mut conn, "t", 0, batch(1, 0, 9, &[b"g"])).await?,
        (ResponseError::OutOfOrderSequenceNumber.code(), -1, 5)
    );
    assert_eq!(broker.broker.offsets("t", 0)?, (5, 6));
    Ok(())
}

#[tokio::test]
async fn a_compacted_topic_refuses_keyless_records_keeps_offsets_and_a_retry_of_a_producers_last_batch_is_a_duplicate()
-> Result<()> {
    use bytes::Bytes;
    use kafka_protocol::messages::{FetchRequest, FetchResponse, fetch_request};
    use minibroker_records::{NewRecord, Writer, encode};
    use minibroker_tests::{TestBroker, kafka_connection, start_kafka};
    let dir = tempfile::tempdir()?;
    let mut config = Config::default();
    config.broker.data_dir = Some(dir.path().to_owned());
    let broker = TestBroker::start(config.clone()).await?;
    let addr = start_kafka(&broker).await?.addr;
    let mut conn = kafka_connection(addr).await?;
    broker.broker.create_topic_with(
        "table",
        1,
        &[("cleanup.policy", "compact"), ("segment.bytes", "4096")],
    )?;
    // Producer 7 updates keys a, b and c in batches of three; producer 8 writes one batch of
    // its own early on and nothing after, so its last batch lies in what is compacted.
    let keyed = |producer_id: i64, sequence: i32, keys: &[&str], round: usize| {
        let records: Vec<NewRecord> = keys
            .iter()
            .map(|key| NewRecord {
                key: Some(Bytes::from(key.to_string())),
                value: Some(Bytes::from(format!("{key} {round} {}", "v".repeat(200)))),
                headers: Vec::new(),
                timestamp: None,
            })
            .collect();
        let writer = Writer {
            producer_id,
            epoch: 0,
            base_sequence: sequence,
        };
        encode(writer, &records, 0).expect("a batch").to_vec()
    };
    let lonely = keyed(8, 0, &["a"], 0);
    assert_eq!(
        crate::kafka::produce_to(&mut conn, "table", 0, lonely.clone()).await?,
        (0, 0)
    );
    let mut last = Vec::new();
    for round in 0..40 {
        last = keyed(7, 3 * round as i32, &["a", "b", "c"], round);
        let (code, base) = crate::kafka::produce_to(&mut conn, "table", 0, last.clone()).await?;
        assert_eq!((code, base), (0, 1 + 3 * round as i64));
    }
    let before = broker.broker.offsets("table", 0)?;
    // A record without a key has nothing to be compacted by: refused, as Kafka refuses it.
    let keyless = minibroker_tests::batch(9, 0, 0, &[b"no key"]);
    let refused = crate::kafka::produce_to(&mut conn, "table", 0, keyless).await?;
    assert_eq!(refused.0, ResponseError::InvalidRecord.code());
    assert_eq!(broker.broker.offsets("table", 0)?, before);
    let stats = broker.broker.compact_now("table", 0)?.expect("a pass");
    assert!(stats.bytes_after * 4 < stats.bytes_before, "{stats:?}");
    assert_eq!(
        broker.broker.offsets("table", 0)?,
        before,
        "offsets never change"
    );
    // Both producers' retries are still recognised: the last batch, and the lone early one.
    assert_eq!(
        crate::kafka::produce_to(&mut conn, "table", 0, last).await?,
        (0, 1 + 3 * 39)
    );
    assert_eq!(
        crate::kafka::produce_to(&mut conn, "table", 0, lonely).await?,
        (0, 0)
    );
    // Read back from the start: every record at its offset, newest per key last.
    let fetch = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_static_str("table"),
                ))
                .with_partitions(vec![
                    fetch_request::FetchPartition::default().with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let mut offset = 0;
    let mut newest = std::collections::BTreeMap::new();
    let mut held = 0;
    while offset < before.1 {
        let request = fetch
            .clone()
            .with_topics(vec![fetch.topics[0].clone().with_partitions(vec![
                fetch.topics[0].partitions[0]
                    .clone()
                    .with_fetch_offset(offset),
            ])]);
        let answer: FetchResponse = conn.call(ApiKey::Fetch, 12, &request).await?;
        let records = answer.responses[0].partitions[0]
            .records
            .clone()
            .unwrap_or_default();
        let mut rest = records;
        while !rest.is_empty() {
            let len = minibroker_records::batch_len(&rest).expect("a whole batch");
            let batch = rest.split_to(len);
            for record in minibroker_records::decode(&batch)?.records {
                let value = record.value.expect("no tombstones here");
                let key = record.key.expect("keyed");
                let round: usize = std::str::from_utf8(&value)?
                    .split(' ')
                    .nth(1)
                    .expect("a round")
                    .parse()?;
                if key == "a" && record.offset == 0 {
                    continue;
                }
                // Records of producer 7: offset 1 + 3 * round + index of the key.
                let index = ["a", "b", "c"]
                    .iter()
                    .position(|k| *k == key)
                    .expect("a key");
                assert_eq!(record.offset, 1 + 3 * round as i64 + index as i64);
                newest.insert(key, round);
                held += 1;
            }
            offset = minibroker_records::end_offset(&batch);
        }
    }
    assert!(held < 40, "{held} of 120 records left");
    assert!(newest.values().all(|round| *round == 39), "{newest:?}");

    // Producer state rebuilt from the compacted log alone (the snapshots removed): producer 8's
    // batch is there as its header, so its retry is still a duplicate, not a new write.
    drop(conn);
    broker.stop().await?;
    let partition = dir.path().join("logs/table/0");
    for entry in std::fs::read_dir(&partition)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(path)?;
        }
    }
    let broker = TestBroker::start(config).await?;
    let mut conn = kafka_connection(start_kafka(&broker).await?.addr).await?;
    assert_eq!(
        crate::kafka::produce_to(&mut conn, "table", 0, keyed(8, 0, &["a"], 0)).await?,
        (0, 0)
    );
    assert_eq!(broker.broker.offsets("table", 0)?, before);
    Ok(())
}
