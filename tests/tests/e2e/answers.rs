//! Bounded answers: what one request can make the broker build and send. Repeated names are
//! answered once, a request whose answer would pass `max_frame_bytes` is refused by closing its
//! connection (the broker keeps serving everyone else), and lookups cost one per partition.

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, DescribeGroupsRequest, DescribeGroupsResponse, GroupId, JoinGroupRequest,
    JoinGroupResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_broker::BrokerConfig;
use minibroker_host::Config;
use minibroker_tests::{KafkaConnection, kafka_connection};

use crate::kafka::{closed_and_others_served, kafka};

const METADATA: i16 = 9;
const DESCRIBE_GROUPS: i16 = 4;
const OFFSET_FETCH: i16 = 7;
const LIST_OFFSETS: i16 = 5;

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn metadata_of(names: impl IntoIterator<Item = String>) -> MetadataRequest {
    MetadataRequest::default().with_topics(Some(
        names
            .into_iter()
            .map(|name| MetadataRequestTopic::default().with_name(Some(TopicName(text(&name)))))
            .collect(),
    ))
}

#[tokio::test]
async fn a_topic_named_again_and_again_is_answered_once() -> Result<()> {
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("wide", 1_000)?;
    // 1.2 KB of the same name was answered with its thousand partitions each time (10.6 MB);
    // 90 KB of it aborted the broker on a failed allocation.
    for repeats in [200, 15_000] {
        let request = metadata_of(std::iter::repeat_n("wide".to_owned(), repeats));
        let answer: MetadataResponse = conn.call(ApiKey::Metadata, METADATA, &request).await?;
        assert_eq!(answer.topics.len(), 1);
        assert_eq!(answer.topics[0].partitions.len(), 1_000);
    }
    // Distinct names keep their order.
    broker.broker.create_topic("narrow", 1)?;
    let names = ["narrow", "wide", "narrow", "missing", "wide"].map(str::to_owned);
    let answer: MetadataResponse = conn
        .call(ApiKey::Metadata, METADATA, &metadata_of(names))
        .await?;
    let answered: Vec<_> = answer
        .topics
        .iter()
        .map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect();
    assert_eq!(
        answered,
        ["narrow", "wide", "missing"].map(|n| Some(n.to_owned()))
    );
    Ok(())
}

#[tokio::test]
async fn a_metadata_answer_past_the_frame_closes_only_its_connection() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            max_frame_bytes: 64 << 10,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let (broker, kafka, mut conn) = kafka(config).await?;
    // 4,000 partitions take some 100 KB to describe: more than one frame of 64 KiB.
    for topic in 0..4 {
        broker.broker.create_topic(&format!("t{topic}"), 1_000)?;
    }
    let every_topic = MetadataRequest::default().with_topics(None);
    conn.send(ApiKey::Metadata, METADATA, &every_topic).await?;
    closed_and_others_served(conn, &kafka).await?;
    // One of them fits.
    let mut conn = kafka_connection(kafka.addr).await?;
    let answer: MetadataResponse = conn
        .call(ApiKey::Metadata, METADATA, &metadata_of(["t1".to_owned()]))
        .await?;
    assert_eq!(answer.topics[0].partitions.len(), 1_000);
    Ok(())
}

/// Joins `group` alone (JoinGroup v3 needs no second round) with `metadata` for "range".
async fn join_alone(conn: &mut KafkaConnection, group: &str, metadata: Bytes) -> Result<()> {
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(text("range"))
                .with_metadata(metadata),
        ]);
    let joined: JoinGroupResponse = conn.call(ApiKey::JoinGroup, 3, &join).await?;
    assert_eq!(joined.error_code, 0);
    Ok(())
}

#[tokio::test]
async fn a_group_named_again_and_again_is_described_once() -> Result<()> {
    let (_broker, kafka, mut conn) = kafka(Config::default()).await?;
    join_alone(&mut conn, "g", Bytes::from(vec![7; 500 << 10])).await?;
    // A 78-byte request naming it 21 times was answered with 21 copies of its member (21 MB).
    let describe = DescribeGroupsRequest::default()
        .with_groups(std::iter::repeat_n(GroupId(text("g")), 21).collect());
    let mut other = kafka_connection(kafka.addr).await?;
    let answer: DescribeGroupsResponse = other
        .call(ApiKey::DescribeGroups, DESCRIBE_GROUPS, &describe)
        .await?;
    assert_eq!(answer.groups.len(), 1);
    assert_eq!(answer.groups[0].members.len(), 1);
    assert_eq!(answer.groups[0].members[0].member_metadata.len(), 500 << 10);
    Ok(())
}

#[tokio::test]
async fn a_describe_groups_answer_past_the_frame_closes_only_its_connection() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            max_frame_bytes: 64 << 10,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let (_broker, kafka, mut conn) = kafka(config).await?;
    for group in ["a", "b", "c"] {
        let mut member = kafka_connection(kafka.addr).await?;
        join_alone(&mut member, group, Bytes::from(vec![7; 30 << 10])).await?;
    }
    let describe = DescribeGroupsRequest::default()
        .with_groups(["a", "b", "c"].map(|g| GroupId(text(g))).to_vec());
    conn.send(ApiKey::DescribeGroups, DESCRIBE_GROUPS, &describe)
        .await?;
    closed_and_others_served(conn, &kafka).await
}

#[tokio::test]
async fn offset_fetch_of_fifty_thousand_topics_answers_each_once() -> Result<()> {
    let (_broker, _kafka, mut conn) = kafka(Config::default()).await?;
    // 50,000 distinct names, each twice, for a group that does not exist: the answer was built
    // by a linear search per name (5 s at this scale), and repeated every repeat.
    let names: Vec<String> = (0..50_000).map(|i| format!("topic-{i}")).collect();
    let topics = names
        .iter()
        .chain(&names)
        .map(|name| {
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(text(name)))
                .with_partition_indexes(vec![0, 1, 0])
        })
        .collect();
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(text("nobody")))
        .with_topics(Some(topics));
    let answer: OffsetFetchResponse = conn
        .call(ApiKey::OffsetFetch, OFFSET_FETCH, &request)
        .await?;
    assert_eq!(answer.topics.len(), names.len());
    for (topic, name) in answer.topics.iter().zip(&names) {
        assert_eq!(topic.name.0.as_str(), name);
        let partitions: Vec<(i32, i64)> = topic
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.committed_offset))
            .collect();
        assert_eq!(partitions, [(0, -1), (1, -1)]);
    }
    Ok(())
}

#[tokio::test]
async fn list_offsets_looks_a_partition_up_once_and_refuses_it_named_twice() -> Result<()> {
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("t", 2)?;
    let partition = |index: i32| {
        ListOffsetsPartition::default()
            .with_partition_index(index)
            .with_timestamp(1_000)
    };
    // Partition 0 is named 3,000 times (each a full lookup by time before); partition 1 once.
    let mut partitions: Vec<ListOffsetsPartition> = (0..3_000).map(|_| partition(0)).collect();
    partitions.push(partition(1));
    let request = ListOffsetsRequest::default().with_topics(vec![
        ListOffsetsTopic::default()
            .with_name(TopicName(text("t")))
            .with_partitions(partitions),
    ]);
    let answer: ListOffsetsResponse = conn
        .call(ApiKey::ListOffsets, LIST_OFFSETS, &request)
        .await?;
    let partitions = &answer.topics[0].partitions;
    assert_eq!(partitions.len(), 3_001);
    let invalid = ResponseError::InvalidRequest.code();
    assert!(
        partitions[..3_000]
            .iter()
            .all(|p| p.partition_index == 0 && p.error_code == invalid)
    );
    assert_eq!(
        (
            partitions[3_000].partition_index,
            partitions[3_000].error_code
        ),
        (1, 0)
    );
    // No record at or after the time: -1.
    assert_eq!(partitions[3_000].offset, -1);
    Ok(())
}

#[tokio::test]
async fn offset_metadata_past_kafkas_limit_is_refused_per_partition() -> Result<()> {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    broker.broker.create_topic("t", 2)?;
    let partition = |index: i32, metadata: usize| {
        OffsetCommitRequestPartition::default()
            .with_partition_index(index)
            .with_committed_offset(5)
            .with_committed_metadata(Some(text(&"m".repeat(metadata))))
    };
    // 32 KB per partition grew the broker past its budget; Kafka refuses more than 4096 bytes.
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(text("g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(text("t")))
                .with_partitions(vec![partition(0, 32_000), partition(1, 4096)]),
        ]);
    let answer: OffsetCommitResponse = conn.call(ApiKey::OffsetCommit, 7, &commit).await?;
    let codes: Vec<i16> = answer.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(codes, [ResponseError::OffsetMetadataTooLarge.code(), 0]);
    let committed = broker.host.node().groups().committed("g", None);
    assert_eq!(committed.len(), 1);
    assert_eq!(committed[0].0, ("t".to_owned(), 1));
    Ok(())
}

#[tokio::test]
async fn a_join_naming_fifty_thousand_protocols_is_an_invalid_request() -> Result<()> {
    let (broker, _kafka, mut conn) = kafka(Config::default()).await?;
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(text("g")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(text("consumer"))
        .with_protocols(
            (0..50_000)
                .map(|i| {
                    JoinGroupRequestProtocol::default()
                        .with_name(text(&format!("p{i}")))
                        .with_metadata(Bytes::from_static(b"m"))
                })
                .collect(),
        );
    let joined: JoinGroupResponse = conn.call(ApiKey::JoinGroup, 3, &join).await?;
    assert_eq!(joined.error_code, ResponseError::InvalidRequest.code());
    assert!(broker.host.node().groups().list().is_empty());
    Ok(())
}
