//! Structure-aware fuzzing of every decoder, in process: native request frames, Kafka requests
//! (through the Kafka front end, as a connection feeds it), record batches, and every file of a
//! data directory (topic list, producer-id reservation, groups' offsets, segments, indexes,
//! producer-state snapshots, each through a broker starting on it; the transaction log and the
//! producer-owners file, any principal in it, each through its own reader).
//!
//! Each target starts from real encodings, mutates them (bits flipped, bytes set to edge values,
//! big-endian integers overwritten, bytes cut, cloned or inserted) and then, where the format
//! carries a checksum, fixes the checksum, so the mutation reaches the parser behind it instead
//! of stopping at the CRC. Nothing may panic; a batch `validate` accepts must decode; a broker
//! that starts on mutated files serves every partition it says it has.
//!
//! Seeded and counted: `MINIBROKER_FUZZ_ITERATIONS` (default 1,500 per target, what CI runs)
//! and `MINIBROKER_FUZZ_SEED` replay or lengthen a run, e.g.
//! `MINIBROKER_FUZZ_ITERATIONS=200000 cargo test --release -p minibroker-tests --test decoders`.

use bytes::{Bytes, BytesMut};
use minibroker_broker::Isolation;
use minibroker_broker::{Broker, BrokerConfig, Unacknowledged};
use minibroker_faults::SplitMix64;
use minibroker_groups::GroupConfig;
use minibroker_groups::GroupCoordinator;
use minibroker_host::Config;
use minibroker_net::FrontEnd;
use minibroker_records::{NewRecord, Writer};
use minibroker_storage::sim::SimStorage;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn iterations() -> usize {
    std::env::var("MINIBROKER_FUZZ_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_500)
}

fn rng(target: u64) -> SplitMix64 {
    let seed = std::env::var("MINIBROKER_FUZZ_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    SplitMix64::new(seed ^ target.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn below(rng: &mut SplitMix64, n: usize) -> usize {
    (rng.next_u64() % n.max(1) as u64) as usize
}

/// One to four mutations of `bytes`, of the kinds a decoder must survive.
fn mutate(rng: &mut SplitMix64, bytes: &mut Vec<u8>) {
    for _ in 0..1 + below(rng, 4) {
        if bytes.is_empty() {
            bytes.push(rng.next_u64() as u8);
            continue;
        }
        let at = below(rng, bytes.len());
        match below(rng, 7) {
            0 => bytes[at] ^= 1 << below(rng, 8),
            1 => bytes[at] = [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff][below(rng, 6)],
            2 => {
                // A length or count field: a big-endian integer set to an edge value.
                let value: u32 =
                    [0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0xffff, 64][below(rng, 7)];
                for (i, byte) in value.to_be_bytes().iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = *byte;
                    }
                }
            }
            3 => bytes.truncate(at),
            4 => {
                let len = below(rng, 16).min(bytes.len() - at);
                let copy = bytes[at..at + len].to_vec();
                let to = below(rng, bytes.len());
                bytes.splice(to..to, copy);
            }
            5 => {
                let extra: Vec<u8> = (0..1 + below(rng, 8))
                    .map(|_| rng.next_u64() as u8)
                    .collect();
                bytes.splice(at..at, extra);
            }
            _ => {
                let end = (at + 1 + below(rng, 8)).min(bytes.len());
                bytes.drain(at..end);
            }
        }
    }
}

fn batch(producer_id: i64, sequence: i32, records: usize) -> Bytes {
    let writer = Writer {
        producer_id,
        epoch: 0,
        base_sequence: sequence,
    };
    let records: Vec<NewRecord> = (0..records)
        .map(|i| NewRecord {
            key: Some(Bytes::from(format!("k{i}"))),
            headers: vec![("h".into(), Some(Bytes::from_static(b"v")))],
            ..NewRecord::value(format!("value-{sequence}-{i}"))
        })
        .collect();
    minibroker_records::encode(writer, &records, 1_000).expect("encodes")
}

/// Makes a v2 batch's CRC-32C match its (mutated) bytes, so the records behind it are parsed.
fn fix_batch_crc(batch: &mut [u8]) {
    if batch.len() > 21 {
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

/// The SASL exchange's tokens, mutated: SCRAM's client-first and client-final and PLAIN's
/// message never panic, and a mutated client-final never logs in.
#[test]
fn sasl_tokens() {
    use minibroker_security::{ScramCredential, ScramExchange, ScramMechanism, parse_plain};
    let mut rng = rng(7);
    let mechanism = ScramMechanism::Sha256;
    let credential = ScramCredential::derive(mechanism, b"pw", b"salt", 4096).unwrap();
    let firsts = [
        &b"n,,n=alice,r=abc"[..],
        b"n,a=alice,n=alice,r=x,ext=1",
        b"y,,n=a=2Cb,r=z",
    ];
    for round in 0..iterations() {
        let mut first = firsts[round % firsts.len()].to_vec();
        mutate(&mut rng, &mut first);
        let _ = parse_plain(&first);
        let started = ScramExchange::start(
            mechanism,
            &first,
            |_| Some(credential.clone()),
            b"secret",
            "servernonce",
        );
        let Ok((exchange, _)) = started else { continue };
        let mut last =
            b"c=biws,r=abcservernonce,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".to_vec();
        mutate(&mut rng, &mut last);
        assert!(
            exchange.finish(&last).is_err(),
            "round {round}: a guessed proof logged in"
        );
    }
}

#[test]
fn record_batches() {
    let mut rng = rng(1);
    let seeds = [batch(1, 0, 1), batch(2, 5, 7), batch(3, 9, 40)];
    for round in 0..iterations() {
        let mut bytes = seeds[round % seeds.len()].to_vec();
        mutate(&mut rng, &mut bytes);
        if rng.chance(0.8) {
            fix_batch_crc(&mut bytes);
        }
        let bytes = Bytes::from(bytes);
        let _ = minibroker_records::inspect(&bytes);
        if minibroker_records::validate(&bytes).is_ok() {
            // What the produce path accepts, every consumer can read.
            minibroker_records::decode(&bytes)
                .unwrap_or_else(|error| panic!("round {round}: validated but {error}"));
        }
    }
}

#[test]
fn native_request_frames() {
    use minibroker_protocol::{
        AlterTopicConfigsRequest, AuthenticateRequest, CreateTopicWithRequest, FetchRequest,
        InitProducerRequest, Request, TopicConfigChange, TopicSetting, codec, serde_bytes,
    };
    let setting = TopicSetting {
        name: "retention.ms",
        value: "60000",
    };
    let mut rng = rng(2);
    let batch = batch(7, 0, 2);
    let requests = [
        Request::Authenticate(AuthenticateRequest {
            mechanism: "SCRAM-SHA-256",
            token: serde_bytes::Bytes::new(b"n,,n=alice,r=abc"),
        }),
        Request::Fetch(FetchRequest {
            topic: "t",
            partition: 0,
            offset: 0,
            max_bytes: 1 << 20,
        }),
        Request::InitProducer(InitProducerRequest { producer_id: None }),
        Request::Metadata,
        Request::CreateTopicWith(CreateTopicWithRequest {
            topic: "t",
            partitions: 2,
            settings: vec![setting],
        }),
        Request::AlterTopicConfigs(AlterTopicConfigsRequest {
            topic: "t",
            changes: vec![
                TopicConfigChange::Set(setting),
                TopicConfigChange::Delete("segment.bytes"),
            ],
        }),
    ];
    let mut seeds: Vec<Vec<u8>> = requests
        .iter()
        .map(|request| minibroker_tests::frame(1, request).expect("encodes")[4..].to_vec())
        .collect();
    let produce = minibroker_tests::produce("t", 0, 7, 0, 0, &[b"a", b"b"]);
    seeds.push(minibroker_tests::frame(2, &produce).expect("encodes")[4..].to_vec());
    drop(batch);
    for round in 0..iterations() * 4 {
        let mut body = seeds[round % seeds.len()].clone();
        mutate(&mut rng, &mut body);
        let _ = codec::decode_request(&body);
    }
}

#[tokio::test]
async fn kafka_requests_through_the_front_end() {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let config = Config::default();
    let host = minibroker_host::Host::start(&config).expect("a broker");
    let broker = Arc::clone(host.broker());
    let kafka_config = Arc::new(minibroker_kafka::KafkaConfig::from_config(
        &config,
        "127.0.0.1".into(),
        9092,
    ));
    let name = |n: &str| TopicName(StrBytes::from_string(n.into()));
    let text = |n: &str| StrBytes::from_string(n.into());
    // One batch to fz/0, acks -1.
    let produce_one = |transactional_id: Option<&str>, batch: Bytes| {
        ProduceRequest::default()
            .with_transactional_id(transactional_id.map(|id| TransactionalId(text(id))))
            .with_acks(-1)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(name("fz"))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default().with_records(Some(batch)),
                    ]),
            ])
    };
    let produce = produce_one(None, batch(9, 0, 3));
    // Produce is read in place (`produce_wire`): seeds with what its reader walks — a
    // transactional id, two topics, several partitions, a null batch.
    let produce_many = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(text("fz-txn"))))
        .with_acks(1)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(name("fz"))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_records(Some(batch(10, 0, 2))),
                    produce_request::PartitionProduceData::default()
                        .with_index(1)
                        .with_records(None),
                ]),
            produce_request::TopicProduceData::default()
                .with_name(name("fz2"))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_records(Some(batch(11, 0, 1))),
                ]),
        ]);
    let fetch = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(name("fz"))
                .with_partitions(vec![fetch_request::FetchPartition::default()]),
        ]);
    let list = ListOffsetsRequest::default().with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(name("fz"))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default().with_timestamp(1_000),
            ]),
    ]);
    let metadata = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default().with_name(Some(name("fz"))),
    ]));
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(text("g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(name("fz"))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_committed_offset(1)
                        .with_committed_metadata(Some(text("m"))),
                ]),
        ]);
    let offset_fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(text("g")))
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(name("fz"))
                .with_partition_indexes(vec![0, 1]),
        ]));
    let describe = DescribeGroupsRequest::default().with_groups(vec![GroupId(text("g"))]);
    let create = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(name("made"))
            .with_num_partitions(2)
            .with_replication_factor(1),
    ]);
    let create_acls = CreateAclsRequest::default().with_creations(vec![
        create_acls_request::AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(text("fz"))
            .with_resource_pattern_type(3)
            .with_principal(text("User:fz"))
            .with_host(text("*"))
            .with_operation(3)
            .with_permission_type(3),
    ]);
    let describe_acls = DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_pattern_type_filter(2)
        .with_resource_name_filter(Some(text("fz")))
        .with_operation(1)
        .with_permission_type(1);
    let delete_acls = DeleteAclsRequest::default().with_filters(vec![
        delete_acls_request::DeleteAclsFilter::default()
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_principal_filter(Some(text("User:fz")))
            .with_operation(1)
            .with_permission_type(1),
    ]);
    let describe_users = DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
        describe_user_scram_credentials_request::UserName::default().with_name(text("fz")),
    ]));
    let alter_users = AlterUserScramCredentialsRequest::default()
        .with_upsertions(vec![
            alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                .with_name(text("fz"))
                .with_mechanism(1)
                .with_iterations(4096)
                .with_salt(bytes::Bytes::from_static(b"salt"))
                .with_salted_password(bytes::Bytes::from(vec![7u8; 32])),
        ])
        .with_deletions(vec![
            alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                .with_name(text("gone"))
                .with_mechanism(2),
        ]);
    let offset_delete = OffsetDeleteRequest::default()
        .with_group_id(GroupId(text("g")))
        .with_topics(vec![
            offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(name("fz"))
                .with_partitions(vec![
                    offset_delete_request::OffsetDeleteRequestPartition::default(),
                ]),
        ]);
    let describe_cluster =
        DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
    let configs = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(text("fz"))
                .with_configuration_keys(None),
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(text("1")),
        ]);
    let alter = AlterConfigsRequest::default().with_resources(vec![
        alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(text("fz"))
            .with_configs(vec![
                alter_configs_request::AlterableConfig::default()
                    .with_name(text("retention.ms"))
                    .with_value(Some(text("60000"))),
            ]),
    ]);
    let incremental = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(text("fz"))
            .with_configs(vec![
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(text("cleanup.policy"))
                    .with_config_operation(2)
                    .with_value(Some(text("delete"))),
            ]),
    ]);
    let epochs = OffsetForLeaderEpochRequest::default().with_topics(vec![
        offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
            .with_topic(name("fz"))
            .with_partitions(vec![
                offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                    .with_current_leader_epoch(0),
            ]),
    ]);
    let grow = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default()
            .with_name(name("fz"))
            .with_count(3)
            .with_assignments(None),
    ]);
    let delete_records = DeleteRecordsRequest::default().with_topics(vec![
        delete_records_request::DeleteRecordsTopic::default()
            .with_name(name("fz"))
            .with_partitions(vec![
                delete_records_request::DeleteRecordsPartition::default().with_offset(1),
            ]),
    ]);
    // KIP-890 part 2: a transactional batch that adds its own partition (Produce v12), the
    // end that bumps the epoch, a broker's batched add and verification, offsets that add their
    // group.
    let transactional_batch = minibroker_records::encode_transactional(
        Writer {
            producer_id: 11,
            epoch: 0,
            base_sequence: 0,
        },
        &[NewRecord::value("t")],
        0,
    )
    .expect("a batch");
    let produce_implicit = produce_one(Some("fz-txn"), transactional_batch);
    let init_transactional = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(text("fz-txn"))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(text("fz-txn")))
        .with_producer_id(ProducerId(11))
        .with_committed(true);
    let add_batched = AddPartitionsToTxnRequest::default().with_transactions(
        [true, false]
            .map(|verify_only| {
                add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(TransactionalId(text("fz-txn")))
                    .with_producer_id(ProducerId(11))
                    .with_verify_only(verify_only)
                    .with_topics(vec![
                        add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                            .with_name(name("fz"))
                            .with_partitions(vec![0, 7]),
                    ])
            })
            .to_vec(),
    );
    let txn_offsets = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(text("fz-txn")))
        .with_group_id(GroupId(text("fz-group")))
        .with_producer_id(ProducerId(11))
        .with_generation_id(-1)
        .with_topics(vec![
            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(name("fz"))
                .with_partitions(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_committed_offset(1),
                ]),
        ]);
    fn encoded<R: kafka_protocol::protocol::Encodable>(
        api: ApiKey,
        version: i16,
        request: &R,
    ) -> Vec<u8> {
        let mut frame = BytesMut::new();
        minibroker_kafka_client::encode_request(&mut frame, api, version, 1, Some("fz"), request)
            .expect("encodes");
        frame[4..].to_vec()
    }
    let seeds = [
        encoded(ApiKey::Produce, 9, &produce),
        encoded(ApiKey::Produce, 3, &produce),
        encoded(ApiKey::Produce, 9, &produce_many),
        encoded(ApiKey::Produce, 5, &produce_many),
        encoded(ApiKey::Fetch, 12, &fetch),
        encoded(ApiKey::Fetch, 4, &fetch),
        encoded(ApiKey::ListOffsets, 5, &list),
        encoded(ApiKey::Metadata, 9, &metadata),
        encoded(ApiKey::Metadata, 1, &metadata),
        encoded(ApiKey::OffsetCommit, 7, &commit),
        encoded(ApiKey::OffsetFetch, 7, &offset_fetch),
        encoded(ApiKey::DescribeGroups, 4, &describe),
        encoded(ApiKey::CreateTopics, 5, &create),
        encoded(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()),
        encoded(ApiKey::CreateAcls, 3, &create_acls),
        encoded(ApiKey::CreateAcls, 1, &create_acls),
        encoded(ApiKey::DescribeAcls, 3, &describe_acls),
        encoded(ApiKey::DeleteAcls, 2, &delete_acls),
        encoded(ApiKey::DescribeUserScramCredentials, 0, &describe_users),
        encoded(ApiKey::AlterUserScramCredentials, 0, &alter_users),
        encoded(ApiKey::OffsetDelete, 0, &offset_delete),
        encoded(ApiKey::DescribeCluster, 1, &describe_cluster),
        encoded(ApiKey::CreatePartitions, 3, &grow),
        encoded(ApiKey::CreatePartitions, 1, &grow),
        encoded(ApiKey::DeleteRecords, 2, &delete_records),
        encoded(ApiKey::DeleteRecords, 0, &delete_records),
        encoded(
            ApiKey::DescribeLogDirs,
            4,
            &DescribeLogDirsRequest::default().with_topics(None),
        ),
        encoded(ApiKey::OffsetForLeaderEpoch, 4, &epochs),
        encoded(ApiKey::DescribeConfigs, 4, &configs),
        encoded(ApiKey::DescribeConfigs, 1, &configs),
        encoded(ApiKey::AlterConfigs, 0, &alter),
        encoded(ApiKey::AlterConfigs, 2, &alter),
        encoded(ApiKey::IncrementalAlterConfigs, 0, &incremental),
        encoded(ApiKey::IncrementalAlterConfigs, 1, &incremental),
        encoded(ApiKey::OffsetForLeaderEpoch, 2, &epochs),
        encoded(ApiKey::InitProducerId, 5, &init_transactional),
        encoded(ApiKey::Produce, 12, &produce_implicit),
        encoded(ApiKey::Produce, 10, &produce_many),
        encoded(ApiKey::TxnOffsetCommit, 5, &txn_offsets),
        encoded(ApiKey::AddPartitionsToTxn, 5, &add_batched),
        encoded(ApiKey::AddPartitionsToTxn, 4, &add_batched),
        encoded(ApiKey::EndTxn, 5, &end),
        encoded(ApiKey::ApiVersions, 4, &ApiVersionsRequest::default()),
    ];
    // Once as a plain listener, once with authorisation on (everything allowed, as no ACL
    // names anything), so the security admin APIs act too.
    front_end_fuzz(&host, kafka_config, &seeds, 3).await;
    let dir = tempfile::tempdir().expect("a directory");
    let secured = Config {
        net: minibroker_host::NetConfig {
            acls_file: Some(dir.path().join("acls")),
            allow_everyone_if_no_acl_found: true,
            ..config.net.clone()
        },
        ..config.clone()
    };
    let secured_host = minibroker_host::Host::start(&secured).expect("a secured broker");
    let secured_kafka = Arc::new(minibroker_kafka::KafkaConfig::from_config(
        &secured,
        "127.0.0.1".into(),
        9092,
    ));
    front_end_fuzz(&secured_host, secured_kafka, &seeds, 4).await;
    // The broker still serves.
    let mut topics = Unacknowledged::default();
    broker
        .produce_stored(&mut topics, "after", 0, &batch(11, 0, 1))
        .await
        .expect("a produce after the fuzzing");
}

#[tokio::test]
async fn native_logins_through_the_front_end() {
    // Mutated login steps through a native front end that asks for a login: answers or a
    // clean close, never a panic, and no mutated step logs in.
    use minibroker_protocol::{AuthenticateRequest, Request, serde_bytes};
    use minibroker_security::{ScramCredential, ScramMechanism, Users};
    let dir = tempfile::tempdir().expect("a directory");
    let mut users = Users::default();
    let mechanism = ScramMechanism::Sha256;
    users.set(
        "alice",
        mechanism,
        ScramCredential::generate(mechanism, b"pw", 4096).expect("a credential"),
    );
    users.save(&dir.path().join("users")).expect("saved");
    let mut config = Config::default();
    config.net.listen_security_protocol = minibroker_host::SecurityProtocol::SaslPlaintext;
    config.net.sasl_enabled_mechanisms = vec!["SCRAM-SHA-256".into(), "PLAIN".into()];
    config.net.users_file = Some(dir.path().join("users"));
    config.net.auth_failure_delay_ms = 0;
    let host = minibroker_host::Host::start(&config).expect("a broker");
    let step = |mechanism: &'static str, token: &'static [u8]| {
        let request = Request::Authenticate(AuthenticateRequest {
            mechanism,
            token: serde_bytes::Bytes::new(token),
        });
        minibroker_tests::frame(1, &request).expect("encodes")[4..].to_vec()
    };
    let seeds = [
        step("PLAIN", b"\0alice\0guess"),
        step("SCRAM-SHA-256", b"n,,n=alice,r=abcdefgh"),
        step("SCRAM-SHA-256", b"c=biws,r=abcdefgh,p=AAAA"),
    ];
    let peer = minibroker_net::Peer::plain(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let new = || {
        minibroker_native::NativeFrontEnd::new(
            host.node(),
            config.broker.max_frame_bytes,
            &peer,
            true,
        )
    };
    let mut rng = rng(5);
    let mut front_end = new();
    for round in 0..iterations() {
        let mut body = seeds[round % seeds.len()].clone();
        mutate(&mut rng, &mut body);
        let mut out = BytesMut::new();
        if front_end.answer(body.into(), &mut out).await == minibroker_net::Next::Close {
            front_end = new();
        }
        assert!(
            !front_end.authenticated(),
            "round {round}: a mutated step logged in"
        );
    }
    let logins = host.node().logins();
    assert_eq!(
        logins.succeeded.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// Mutated `seeds` through one Kafka front end after another (a refused request closes its
/// connection: the next one is a new connection); none may panic.
async fn front_end_fuzz(
    host: &minibroker_host::Host,
    kafka_config: Arc<minibroker_kafka::KafkaConfig>,
    seeds: &[Vec<u8>],
    seed: u64,
) {
    let mut rng = rng(seed);
    let peer = minibroker_net::Peer::plain(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let new =
        || minibroker_kafka::KafkaFrontEnd::new(host.node(), Arc::clone(&kafka_config), &peer);
    let mut front_end = new();
    for round in 0..iterations() {
        let mut body = seeds[round % seeds.len()].clone();
        mutate(&mut rng, &mut body);
        let mut out = BytesMut::new();
        // A request may wait (a fetch for data): that is an answer too, not a failure.
        let answered = tokio::time::timeout(
            Duration::from_millis(50),
            front_end.answer(body.into(), &mut out),
        )
        .await;
        if matches!(answered, Ok(minibroker_net::Next::Close)) {
            front_end = new();
        }
    }
}

/// The files of a real data directory: topics, producer ids, groups' offsets, several sealed
/// segments with their indexes, producer-state snapshots.
async fn data_directory() -> (Config, BTreeMap<PathBuf, Vec<u8>>) {
    let config = Config {
        broker: BrokerConfig {
            data_dir: Some("/data".into()),
            segment_bytes: 4096,
            ..BrokerConfig::default()
        },
        groups: GroupConfig {
            group_min_session_timeout_ms: 1,
            ..GroupConfig::default()
        },
        ..Config::default()
    };
    let storage = SimStorage::new();
    let broker = Broker::with_storage(&config.broker, Arc::new(storage.clone())).expect("opens");
    broker.create_topic("t", 2).expect("creates");
    let mut topics = Unacknowledged::default();
    for sequence in 0..60 {
        let producer = 100 + i64::from(sequence % 3);
        broker
            .produce_stored(&mut topics, "t", 0, &batch(producer, sequence / 3 * 10, 10))
            .await
            .expect("produces");
    }
    broker.init_producer(None).expect("an id");
    let groups = GroupCoordinator::for_broker(&broker, &config.groups).expect("opens");
    groups
        .commit("g", -1, "", vec![("t".into(), 0, 12, Some("meta".into()))])
        .await
        .expect("commits");
    // A group with a member and its assignment: its file holds its membership too.
    let joined = groups
        .join(minibroker_groups::JoinRequest {
            group_id: "members".into(),
            member_id: String::new(),
            group_instance_id: Some("static".into()),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(30),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"\0\x01subscription"))],
            require_known_member: false,
        })
        .await
        .expect("joins");
    let assignment = vec![(joined.member_id.clone(), Bytes::from_static(b"\0\x01mine"))];
    groups
        .sync("members", joined.generation, &joined.member_id, assignment)
        .await
        .expect("syncs");
    broker.close();
    drop((groups, broker));
    let files = storage
        .paths()
        .into_iter()
        .filter_map(|path| storage.contents(&path).map(|bytes| (path, bytes)))
        .collect();
    (config, files)
}

/// Fixes the checksum a mutated file of `path`'s kind carries, so its parser sees the mutation.
fn reseal(path: &Path, bytes: &mut [u8]) {
    if path.to_string_lossy().ends_with(".log") {
        // Each batch carries its own: fix the first one's.
        fix_batch_crc(bytes);
    } else if bytes.len() >= 4 {
        // Every other file is in the shared envelope: a CRC-32C of everything before it, at
        // the end.
        let at = bytes.len() - 4;
        let crc = crc32c::crc32c(&bytes[..at]);
        bytes[at..].copy_from_slice(&crc.to_be_bytes());
    }
}

#[tokio::test]
async fn data_directory_files_through_a_starting_broker() {
    let (config, files) = data_directory().await;
    let kinds = [
        "/topics",
        "/producer-ids",
        ".offsets",
        ".log",
        ".index",
        ".snapshot",
    ];
    for kind in kinds {
        assert!(
            files
                .keys()
                .any(|path| path.to_string_lossy().ends_with(kind)),
            "no {kind} file in {:?}",
            files.keys().collect::<Vec<_>>()
        );
    }
    let mut rng = rng(4);
    let paths: Vec<&PathBuf> = files.keys().collect();
    let (mut started, mut refused) = (0, 0);
    for round in 0..iterations() {
        let path = paths[round % paths.len()];
        let original = &files[path];
        let mut bytes = original.clone();
        mutate(&mut rng, &mut bytes);
        if rng.chance(0.8) {
            reseal(path, &mut bytes);
        }
        let storage = SimStorage::new();
        for (other, content) in &files {
            let content = if other == path { &bytes } else { content };
            storage.set_contents(other, content.clone());
        }
        let opened = Broker::with_storage(&config.broker, Arc::new(storage)).and_then(|broker| {
            Ok((
                GroupCoordinator::for_broker(&broker, &config.groups)?,
                broker,
            ))
        });
        match opened {
            Ok((groups, broker)) => {
                started += 1;
                // Every partition it says it has can be read from its start: an answer or a
                // storage error, never a panic.
                for topic in broker.metadata() {
                    for partition in 0..topic.partitions {
                        if let Ok((start, _)) = broker.offsets(&topic.name, partition) {
                            let _ = broker.fetch(
                                &topic.name,
                                partition,
                                start,
                                1 << 20,
                                0,
                                Isolation::ReadUncommitted,
                            );
                        }
                    }
                }
                let _ = groups.committed("g", None);
            }
            Err(_) => refused += 1,
        }
    }
    assert!(
        started > 0 && refused > 0,
        "started {started}, refused {refused}"
    );
}

#[test]
fn producer_state_snapshots() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (_, files) = runtime.block_on(data_directory());
    let snapshots: Vec<&Vec<u8>> = files
        .iter()
        .filter(|(path, _)| path.to_string_lossy().ends_with(".snapshot"))
        .map(|(_, bytes)| bytes)
        .collect();
    assert!(!snapshots.is_empty());
    let mut rng = rng(5);
    for round in 0..iterations() * 4 {
        let original = snapshots[round % snapshots.len()];
        let mut bytes = original.clone();
        mutate(&mut rng, &mut bytes);
        reseal(Path::new("x.snapshot"), &mut bytes);
        let _ = minibroker_state::decode_snapshot(&bytes);
    }
}

/// A transaction log of several ids in every state, as the coordinator writes it.
fn transaction_log() -> Vec<u8> {
    use minibroker_transactions::{Limits, TransactionCoordinator};
    let storage = SimStorage::new();
    let coordinator = TransactionCoordinator::open(
        Limits::default(),
        Arc::new(storage.clone()),
        Path::new("/data"),
    )
    .expect("a new log");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let issue = |id| move || Ok::<i64, std::convert::Infallible>(id);
        for (n, id) in [
            "ongoing",
            "prepared",
            "committed",
            "a name with spaces",
            "é",
        ]
        .iter()
        .enumerate()
        {
            let producer_id = 1000 + n as i64;
            coordinator
                .init_producer(id, None, 60_000, issue(producer_id), 1)
                .await
                .unwrap();
            let partitions = vec![("out".to_owned(), 0), ("other topic".to_owned(), 7)];
            coordinator
                .add_partitions(id, producer_id, 0, &partitions, 2)
                .await
                .unwrap();
            coordinator
                .add_group(id, producer_id, 0, "group", 3)
                .await
                .unwrap();
            if n >= 1 {
                // Some ends bump the epoch (KIP-890 part 2): their records are version 2.
                let (commit, bump) = (n % 2 == 0, n >= 2);
                coordinator
                    .end(id, (producer_id, 0), (commit, bump), issue(0), 4)
                    .await
                    .unwrap();
            }
            if n >= 2 {
                coordinator.complete(id, 5).await.unwrap();
            }
        }
    });
    drop(coordinator);
    storage
        .contents(&Path::new("/data").join(minibroker_transactions::FILE_NAME))
        .expect("the log")
}

#[test]
fn transaction_log_records_through_its_reader() {
    use minibroker_transactions::TransactionLog;
    let original = transaction_log();
    let path = Path::new("/data").join(minibroker_transactions::FILE_NAME);
    // The framed records: a u32 length, then a sealed record (its CRC-32C last).
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 4 <= original.len() {
        let len = u32::from_be_bytes(original[at..at + 4].try_into().unwrap()) as usize;
        frames.push(original[at + 4..at + 4 + len].to_vec());
        at += 4 + len;
    }
    assert!(frames.len() >= 5, "{} records", frames.len());
    assert!(
        frames.iter().any(|record| record.starts_with(b"MBTA")),
        "an add to an open transaction is an addition record, fuzzed with the whole ones"
    );
    let mut rng = rng(6);
    let (mut opened, mut refused) = (0, 0);
    for _ in 0..iterations() {
        let bytes = if rng.chance(0.3) {
            // The file as a whole: lengths, cuts, records spliced.
            let mut bytes = original.clone();
            mutate(&mut rng, &mut bytes);
            bytes
        } else {
            // One record, its checksum fixed so the mutation reaches the record's reader.
            let mut records = frames.clone();
            let pick = below(&mut rng, records.len());
            mutate(&mut rng, &mut records[pick]);
            reseal(Path::new("x.record"), &mut records[pick]);
            records
                .iter()
                .flat_map(|record| {
                    let mut framed = (record.len() as u32).to_be_bytes().to_vec();
                    framed.extend_from_slice(record);
                    framed
                })
                .collect()
        };
        let storage = SimStorage::new();
        storage.set_contents(&path, bytes);
        let _ = TransactionLog::check(&storage, Path::new("/data"));
        match TransactionLog::open(Arc::new(storage), Path::new("/data")) {
            Ok(_) => opened += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        opened > 0 && refused > 0,
        "opened {opened}, refused {refused}"
    );
}

#[test]
fn producer_owners_files_with_any_principal_through_their_reader() {
    use minibroker_security::ProducerOwners;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("producer-owners");
    let mut rng = rng(7);
    let (mut opened, mut refused) = (0, 0);
    for round in 0..iterations() {
        // Principals of any characters a certificate or a login could give.
        let principal: String = (0..1 + below(&mut rng, 12))
            .map(|_| {
                let pick = [
                    ' ',
                    '%',
                    '\n',
                    '\t',
                    'é',
                    '\u{0}',
                    'a',
                    '=',
                    ',',
                    '\u{1F600}',
                ];
                pick[below(&mut rng, pick.len())]
            })
            .collect();
        let principal = format!("User:{principal}");
        let _ = std::fs::remove_file(&path);
        let owners = ProducerOwners::open(Some(path.clone()), 100, 86_400_000, 1).unwrap();
        owners.record(1000, &principal, 1).unwrap();
        owners.record(1001, "User:alice", 1).unwrap();
        drop(owners);
        assert_eq!(ProducerOwners::check(&path).unwrap(), 2, "{principal:?}");
        let reopened = ProducerOwners::open(Some(path.clone()), 100, 86_400_000, 1).unwrap();
        assert_eq!(reopened.owner(1000), Some(principal.clone()));
        drop(reopened);
        // Then the file damaged, each line's checksum fixed half of the time.
        let text = std::fs::read(&path).unwrap();
        let mut lines: Vec<Vec<u8>> = text
            .split_inclusive(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect();
        let pick = 1 + below(&mut rng, lines.len() - 1);
        mutate(&mut rng, &mut lines[pick]);
        if round % 2 == 0
            && let Ok(line) = std::str::from_utf8(&lines[pick])
            && let Some((content, _)) = line.trim_end_matches('\n').rsplit_once(' ')
        {
            let crc = crc32c::crc32c(content.as_bytes());
            lines[pick] = format!("{content} {crc:08x}\n").into_bytes();
        }
        std::fs::write(&path, lines.concat()).unwrap();
        let _ = ProducerOwners::check(&path);
        match ProducerOwners::open(Some(path.clone()), 100, 86_400_000, 1) {
            Ok(_) => opened += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        opened > 0 && refused > 0,
        "opened {opened}, refused {refused}"
    );
}
