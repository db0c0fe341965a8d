//! Authorisation on the Kafka listener, on the wire: every API refuses what the ACLs do not
//! allow with Kafka's code (29 topic, 30 group, 31 cluster, 53 transactional id) and acts on
//! nothing it refused; Metadata leaves out what may not be described and creates only for whom
//! Create allows; a producer id is its principal's — another principal's batches with it are
//! refused and its epoch bump gets a new id, across a restart; the ACLs file is read again when
//! it changes.

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use minibroker_host::{Config, SecurityProtocol};
use minibroker_security::{ScramCredential, ScramMechanism, Users};
use minibroker_tests::{KafkaConnection, TestBroker, batch, kafka_connection, start_kafka};
use std::net::SocketAddr;
use std::path::Path;

use crate::sasl::{authenticate_as, handshake};

const ALICE_ACLS: &str = "User:alice ALLOW ALL TOPIC LITERAL * *\n\
     User:alice ALLOW ALL GROUP LITERAL * *\n\
     User:alice ALLOW ALL TRANSACTIONAL_ID LITERAL * *\n\
     User:alice ALLOW ALL CLUSTER LITERAL kafka-cluster *\n\
     User:mallory ALLOW WRITE TOPIC LITERAL shared *\n\
     User:bob ALLOW DESCRIBE TOPIC LITERAL visible *\n\
     User:bob ALLOW DESCRIBE TOPIC LITERAL fresh *\n";

/// A SASL_PLAINTEXT broker with PLAIN users alice, bob and mallory (password `pw`) and the
/// ACLs `acls`, durable in `dir`.
fn secured(dir: &Path, acls: &str) -> Config {
    let mut users = Users::default();
    let mechanism = ScramMechanism::Sha256;
    for name in ["alice", "bob", "mallory"] {
        users.set(
            name,
            mechanism,
            ScramCredential::generate(mechanism, b"pw", 4096).unwrap(),
        );
    }
    let users_path = dir.join("users");
    users.save(&users_path).unwrap();
    let acls_path = dir.join("acls");
    std::fs::write(&acls_path, acls).unwrap();
    let mut config = Config::default();
    config.net.kafka_security_protocol = SecurityProtocol::SaslPlaintext;
    config.net.sasl_enabled_mechanisms = vec!["PLAIN".into()];
    config.net.users_file = Some(users_path);
    config.net.acls_file = Some(acls_path);
    config.net.auth_failure_delay_ms = 1;
    config.broker.data_dir = Some(dir.join("data"));
    config
}

async fn login(addr: SocketAddr, user: &str) -> Result<KafkaConnection> {
    let mut conn = kafka_connection(addr).await?;
    assert_eq!(handshake(&mut conn, "PLAIN").await?.error_code, 0);
    assert_eq!(authenticate_as(&mut conn, user, "pw").await?.error_code, 0);
    Ok(conn)
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn topic(name: &str) -> TopicName {
    TopicName(text(name))
}

fn code(error: ResponseError) -> i16 {
    error.code()
}

async fn produce(conn: &mut KafkaConnection, name: &str, records: Vec<u8>) -> Result<i16> {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(topic(name))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(Bytes::from(records))),
                ]),
        ]);
    let answer: ProduceResponse = conn.call(ApiKey::Produce, 9, &request).await?;
    Ok(answer.responses[0].partition_responses[0].error_code)
}

async fn metadata(conn: &mut KafkaConnection, names: Option<&[&str]>) -> Result<MetadataResponse> {
    let request = MetadataRequest::default()
        .with_topics(names.map(|names| {
            names
                .iter()
                .map(|n| {
                    metadata_request::MetadataRequestTopic::default().with_name(Some(topic(n)))
                })
                .collect()
        }))
        .with_allow_auto_topic_creation(true);
    Ok(conn.call(ApiKey::Metadata, 9, &request).await?)
}

async fn init_producer(
    conn: &mut KafkaConnection,
    transactional: Option<&str>,
    known: i64,
) -> Result<InitProducerIdResponse> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(transactional.map(|id| TransactionalId(text(id))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(known))
        .with_producer_epoch(if known < 0 { -1 } else { 0 });
    Ok(conn.call(ApiKey::InitProducerId, 4, &request).await?)
}

#[tokio::test]
async fn every_api_refuses_what_the_acls_do_not_allow_with_kafkas_code() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = TestBroker::start(secured(dir.path(), ALICE_ACLS)).await?;
    let addr = start_kafka(&broker).await?.addr;
    let mut alice = login(addr, "alice").await?;
    for name in ["hidden", "visible"] {
        assert_eq!(
            produce(&mut alice, name, batch(-1, -1, -1, &[b"alice's"])).await?,
            0
        );
    }
    let mut bob = login(addr, "bob").await?;

    // Metadata: the full listing leaves out what bob may not describe; a named hidden topic is
    // 29; a topic he may describe but not create is 29 and not created.
    let listed = metadata(&mut bob, None).await?;
    let names: Vec<&str> = listed
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.as_str()))
        .collect();
    assert_eq!(names, ["visible"]);
    let named = metadata(&mut bob, Some(&["hidden", "fresh", "visible"])).await?;
    let codes: Vec<i16> = named.topics.iter().map(|t| t.error_code).collect();
    let denied = code(ResponseError::TopicAuthorizationFailed);
    assert_eq!(codes, [denied, denied, 0]);
    assert!(named.topics[0].partitions.is_empty());
    assert!(
        broker.broker.topic("fresh", false).is_err(),
        "created without Create"
    );

    // Produce, Fetch and ListOffsets of a topic bob may not touch.
    assert_eq!(
        produce(&mut bob, "hidden", batch(-1, -1, -1, &[b"bob's"])).await?,
        denied
    );
    let fetch = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(topic("hidden"))
                .with_partitions(vec![
                    fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let fetched: FetchResponse = bob.call(ApiKey::Fetch, 12, &fetch).await?;
    let partition = &fetched.responses[0].partitions[0];
    assert_eq!(partition.error_code, denied);
    assert!(partition.records.as_ref().is_none_or(Bytes::is_empty));
    let offsets = ListOffsetsRequest::default().with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic("hidden"))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default().with_timestamp(-1),
            ]),
    ]);
    let listed: ListOffsetsResponse = bob.call(ApiKey::ListOffsets, 7, &offsets).await?;
    assert_eq!(listed.topics[0].partitions[0].error_code, denied);

    // Producer ids: idempotent needs IdempotentWrite or Write somewhere; a transactional id,
    // Write on it.
    let idempotent = init_producer(&mut bob, None, -1).await?;
    assert_eq!(
        idempotent.error_code,
        code(ResponseError::ClusterAuthorizationFailed)
    );
    let transactional = init_producer(&mut bob, Some("tx"), -1).await?;
    assert_eq!(
        transactional.error_code,
        code(ResponseError::TransactionalIdAuthorizationFailed)
    );

    // Groups and coordinators.
    let group_denied = code(ResponseError::GroupAuthorizationFailed);
    for (key_type, expected) in [
        (0, group_denied),
        (1, code(ResponseError::TransactionalIdAuthorizationFailed)),
    ] {
        let find = FindCoordinatorRequest::default()
            .with_key(text("g"))
            .with_key_type(key_type);
        let found: FindCoordinatorResponse = bob.call(ApiKey::FindCoordinator, 3, &find).await?;
        assert_eq!(found.error_code, expected);
    }
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(text("g")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(text("range"))
                .with_metadata(Bytes::from_static(b"meta")),
        ]);
    let joined: JoinGroupResponse = bob.call(ApiKey::JoinGroup, 5, &join).await?;
    assert_eq!(joined.error_code, group_denied);
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(text("g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(topic("visible"))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_committed_offset(1),
                ]),
        ]);
    let committed: OffsetCommitResponse = bob.call(ApiKey::OffsetCommit, 7, &commit).await?;
    assert_eq!(committed.topics[0].partitions[0].error_code, group_denied);
    assert!(broker.host.node().groups().committed("g", None).is_empty());
    let describe = DescribeGroupsRequest::default().with_groups(vec![GroupId(text("g"))]);
    let described: DescribeGroupsResponse = bob.call(ApiKey::DescribeGroups, 4, &describe).await?;
    assert_eq!(described.groups[0].error_code, group_denied);
    let delete = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(text("g"))]);
    let deleted: DeleteGroupsResponse = bob.call(ApiKey::DeleteGroups, 1, &delete).await?;
    assert_eq!(deleted.results[0].error_code, group_denied);

    // Topics: no creation without Create, no deletion without Delete.
    let create = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(topic("made"))
            .with_num_partitions(1)
            .with_replication_factor(1),
    ]);
    let created: CreateTopicsResponse = bob.call(ApiKey::CreateTopics, 7, &create).await?;
    assert_eq!(created.topics[0].error_code, denied);
    assert!(broker.broker.topic("made", false).is_err());
    let delete = DeleteTopicsRequest::default().with_topic_names(vec![topic("visible")]);
    let deleted: DeleteTopicsResponse = bob.call(ApiKey::DeleteTopics, 5, &delete).await?;
    assert_eq!(deleted.responses[0].error_code, denied);
    assert!(broker.broker.topic("visible", false).is_ok());
    let delete_records = DeleteRecordsRequest::default().with_topics(vec![
        delete_records_request::DeleteRecordsTopic::default()
            .with_name(topic("visible"))
            .with_partitions(vec![
                delete_records_request::DeleteRecordsPartition::default().with_offset(-1),
            ]),
    ]);
    let answer: DeleteRecordsResponse = bob.call(ApiKey::DeleteRecords, 2, &delete_records).await?;
    assert_eq!(answer.topics[0].partitions[0].error_code, denied);
    assert_eq!(broker.broker.offsets("visible", 0)?, (0, 1));

    // Nothing bob sent was stored: hidden holds alice's one record.
    assert_eq!(broker.broker.offsets("hidden", 0)?, (0, 1));
    // Alice, allowed everything, was never refused.
    assert_eq!(init_producer(&mut alice, None, -1).await?.error_code, 0);
    assert_eq!(
        init_producer(&mut alice, Some("tx"), -1).await?.error_code,
        0
    );
    Ok(())
}

#[tokio::test]
async fn another_principals_producer_id_is_refused_and_cannot_be_fenced_even_after_a_restart()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = secured(dir.path(), ALICE_ACLS);
    let broker = TestBroker::start(config.clone()).await?;
    let addr = start_kafka(&broker).await?.addr;
    let mut alice = login(addr, "alice").await?;
    let issued = init_producer(&mut alice, None, -1).await?;
    assert_eq!(issued.error_code, 0);
    let id = issued.producer_id.0;
    assert_eq!(
        produce(&mut alice, "shared", batch(id, 0, 0, &[b"a0"])).await?,
        0
    );

    let mut mallory = login(addr, "mallory").await?;
    let cluster_denied = code(ResponseError::ClusterAuthorizationFailed);
    // Writing as alice's producer, at her next sequence or as a fencing higher epoch: refused.
    assert_eq!(
        produce(&mut mallory, "shared", batch(id, 0, 1, &[b"m1"])).await?,
        cluster_denied
    );
    assert_eq!(
        produce(&mut mallory, "shared", batch(id, 5, 0, &[b"m2"])).await?,
        cluster_denied
    );
    // An id issued to no one: refused too (no squatting on ids yet to be issued).
    assert_eq!(
        produce(&mut mallory, "shared", batch(id + 1, 0, 0, &[b"m3"])).await?,
        cluster_denied
    );
    // Bumping alice's id gets mallory an id of her own, not alice's next epoch.
    let bumped = init_producer(&mut mallory, None, id).await?;
    assert_eq!(bumped.error_code, 0);
    assert_ne!(bumped.producer_id.0, id);
    let own = bumped.producer_id.0;
    assert_eq!(
        produce(&mut mallory, "shared", batch(own, 0, 0, &[b"m4"])).await?,
        0
    );
    // Alice was not fenced: her next batch goes on.
    assert_eq!(
        produce(&mut alice, "shared", batch(id, 0, 1, &[b"a1"])).await?,
        0
    );
    assert_eq!(broker.broker.offsets("shared", 0)?, (0, 3));
    drop((alice, mallory));
    broker.stop().await?;

    // After a restart the owners are remembered.
    let broker = TestBroker::start(config).await?;
    let addr = start_kafka(&broker).await?.addr;
    let mut mallory = login(addr, "mallory").await?;
    assert_eq!(
        produce(&mut mallory, "shared", batch(id, 0, 2, &[b"m5"])).await?,
        cluster_denied
    );
    let mut alice = login(addr, "alice").await?;
    assert_eq!(
        produce(&mut alice, "shared", batch(id, 0, 2, &[b"a2"])).await?,
        0
    );
    assert_eq!(broker.broker.offsets("shared", 0)?, (0, 4));
    Ok(())
}

#[tokio::test]
async fn the_acls_file_is_read_again_when_it_changes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = secured(dir.path(), ALICE_ACLS);
    let acls = config.net.acls_file.clone().unwrap();
    let broker = TestBroker::start(config).await?;
    let addr = start_kafka(&broker).await?.addr;
    let mut bob = login(addr, "bob").await?;
    let denied = code(ResponseError::TopicAuthorizationFailed);
    assert_eq!(
        produce(&mut bob, "later", batch(-1, -1, -1, &[b"x"])).await?,
        denied
    );
    std::fs::write(
        &acls,
        format!(
            "{ALICE_ACLS}User:bob ALLOW WRITE TOPIC LITERAL later *\nUser:bob ALLOW CREATE TOPIC LITERAL later *\n"
        ),
    )?;
    // Noticed within a second, on the same connection.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        produce(&mut bob, "later", batch(-1, -1, -1, &[b"x"])).await?,
        0
    );
    // A file that no longer reads keeps the ACLs it held.
    std::fs::write(&acls, "User:bob ALLOW NONSENSE\n")?;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        produce(&mut bob, "later", batch(-1, -1, -1, &[b"y"])).await?,
        0
    );
    Ok(())
}

#[tokio::test]
async fn host_acls_hold_for_ipv4_clients_of_a_dual_stack_listener() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let acls = "User:alice ALLOW ALL TOPIC LITERAL * *\n\
         User:alice ALLOW ALL CLUSTER LITERAL kafka-cluster *\n\
         User:bob ALLOW DESCRIBE TOPIC LITERAL * *\n\
         User:bob DENY DESCRIBE TOPIC LITERAL hidden 127.0.0.1\n";
    let broker = TestBroker::start(secured(dir.path(), acls)).await?;
    // One listener on [::]: IPv4 clients arrive on it as ::ffff:127.0.0.1.
    let listener = minibroker_host::Host::bind("[::]:0".parse()?).await?;
    let port = minibroker_kafka::serve(&broker.host, listener)?.port();
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let mut alice = login(v4, "alice").await?;
    metadata(&mut alice, Some(&["hidden", "open"])).await?;
    let names = |answer: MetadataResponse| -> Vec<String> {
        let mut names: Vec<String> = answer
            .topics
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect();
        names.sort();
        names
    };
    let mut bob = login(v4, "bob").await?;
    assert_eq!(
        names(metadata(&mut bob, None).await?),
        ["open"],
        "the DENY for 127.0.0.1 holds on the dual-stack listener"
    );
    // From ::1, another host, the DENY does not apply.
    let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    let mut bob_v6 = login(v6, "bob").await?;
    assert_eq!(
        names(metadata(&mut bob_v6, None).await?),
        ["hidden", "open"]
    );
    Ok(())
}

#[tokio::test]
async fn describe_transactions_names_only_the_topics_the_asker_may_describe() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let acls = "User:alice ALLOW ALL TOPIC LITERAL * *\n\
         User:alice ALLOW ALL TRANSACTIONAL_ID LITERAL * *\n\
         User:alice ALLOW ALL CLUSTER LITERAL kafka-cluster *\n\
         User:bob ALLOW DESCRIBE TRANSACTIONAL_ID LITERAL app *\n\
         User:bob ALLOW DESCRIBE TOPIC LITERAL visible *\n";
    let broker = TestBroker::start(secured(dir.path(), acls)).await?;
    let kafka = start_kafka(&broker).await?;
    let mut alice = login(kafka.addr, "alice").await?;
    metadata(&mut alice, Some(&["visible", "secret"])).await?;
    let inited = init_producer(&mut alice, Some("app"), -1).await?;
    assert_eq!(inited.error_code, 0);
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(text("app")))
        .with_v3_and_below_producer_id(inited.producer_id)
        .with_v3_and_below_producer_epoch(inited.producer_epoch)
        .with_v3_and_below_topics(
            ["visible", "secret"]
                .into_iter()
                .map(|name| {
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(topic(name))
                        .with_partitions(vec![0])
                })
                .collect(),
        );
    let added: AddPartitionsToTxnResponse = alice.call(ApiKey::AddPartitionsToTxn, 3, &add).await?;
    assert!(added.results_by_topic_v3_and_below.iter().all(|topic| {
        topic
            .results_by_partition
            .iter()
            .all(|p| p.partition_error_code == 0)
    }));
    let describe = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![TransactionalId(text("app"))]);
    let topics_seen = |answer: DescribeTransactionsResponse| -> Vec<String> {
        assert_eq!(answer.transaction_states[0].error_code, 0);
        answer.transaction_states[0]
            .topics
            .iter()
            .map(|t| t.topic.0.to_string())
            .collect()
    };
    let mut bob = login(kafka.addr, "bob").await?;
    let answer = bob.call(ApiKey::DescribeTransactions, 0, &describe).await?;
    assert_eq!(topics_seen(answer), ["visible"]);
    let answer = alice
        .call(ApiKey::DescribeTransactions, 0, &describe)
        .await?;
    assert_eq!(topics_seen(answer), ["secret", "visible"]);
    Ok(())
}

#[tokio::test]
async fn a_principal_taking_a_thousand_ids_forgets_its_own_not_another_principals() -> Result<()> {
    // Before, the oldest-issued ids went beyond max_producer_ids whoever owned them: mallory's
    // 1,000 InitProducerIds made the broker forget alice's id used moments before, and her next
    // batch got CLUSTER_AUTHORIZATION_FAILED, fatal to a Kafka producer.
    let dir = tempfile::tempdir()?;
    let mut config = secured(dir.path(), ALICE_ACLS);
    config.broker.max_producer_ids = 1000;
    let broker = TestBroker::start(config).await?;
    let addr = start_kafka(&broker).await?.addr;
    let mut alice = login(addr, "alice").await?;
    let alices = init_producer(&mut alice, None, -1).await?.producer_id.0;
    assert_eq!(
        produce(&mut alice, "shared", batch(alices, 0, 0, &[b"a0"])).await?,
        0
    );
    let mut mallory = login(addr, "mallory").await?;
    let mut mallorys = Vec::new();
    for _ in 0..1000 {
        let issued = init_producer(&mut mallory, None, -1).await?;
        assert_eq!(issued.error_code, 0);
        mallorys.push(issued.producer_id.0);
    }
    assert_eq!(
        produce(&mut alice, "shared", batch(alices, 0, 1, &[b"a1"])).await?,
        0,
        "alice's id is still hers"
    );
    // Mallory's own oldest was forgotten: her producer is told to ask for a new id.
    assert_eq!(
        produce(&mut mallory, "shared", batch(mallorys[0], 0, 0, &[b"m0"])).await?,
        code(ResponseError::UnknownProducerId)
    );
    let newest = *mallorys.last().unwrap();
    assert_eq!(
        produce(&mut mallory, "shared", batch(newest, 0, 0, &[b"m1"])).await?,
        0
    );
    Ok(())
}
