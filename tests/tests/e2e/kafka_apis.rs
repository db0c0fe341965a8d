//! Every Kafka API ApiVersions advertises is answered at every version it advertises: a
//! request with every field at its default, sent alone on a fresh connection, gets an answer
//! that decodes at that version. An API listed in the broker's `apis.rs` but not dispatched to a
//! handler closes the connection instead, and fails here; so does one this test does not know
//! (add its request and answer types to `every_request!` below).

use anyhow::{Context, Result, bail};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};
use minibroker_host::Config;
use minibroker_tests::{KafkaConnection, kafka_connection};
use std::collections::BTreeSet;
use std::net::SocketAddr;

use crate::kafka::kafka;

/// Produce's versions below this are advertised (as Kafka 4 advertises them, so that older
/// librdkafka compresses) but refused with a close, as Kafka 4 refuses them.
const PRODUCE_FIRST_SERVED: i16 = 3;

/// Sends `R::default()` (with `adjust` applied) at `version` on a new connection and decodes
/// the answer as `T`.
async fn answered<R: Encodable + Default, T: Decodable>(
    addr: SocketAddr,
    api: ApiKey,
    version: i16,
    adjust: impl FnOnce(&mut R),
) -> Result<()> {
    let mut request = R::default();
    adjust(&mut request);
    let mut conn: KafkaConnection = kafka_connection(addr).await?;
    conn.call::<R, T>(api, version, &request)
        .await
        .with_context(|| format!("{api:?} v{version}"))?;
    Ok(())
}

/// Calls [`answered`] with the request and answer types of `api`; `false` for an API this test
/// does not know.
macro_rules! every_request {
    ($addr:expr, $api:expr, $version:expr; $($key:ident => $request:ty, $answer:ty;)*) => {
        match $api {
            ApiKey::Produce => {
                // acks 0 gets no answer: ask for one.
                answered::<ProduceRequest, ProduceResponse>($addr, $api, $version, |r| r.acks = -1)
                    .await?;
                true
            }
            $(ApiKey::$key => {
                answered::<$request, $answer>($addr, $api, $version, |_| ()).await?;
                true
            })*
            _ => false,
        }
    };
}

#[tokio::test]
async fn every_advertised_api_answers_a_default_request_at_every_advertised_version() -> Result<()>
{
    let (_broker, kafka, mut conn) = kafka(Config::default()).await?;
    let versions: ApiVersionsResponse = conn
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await?;
    assert_eq!(versions.error_code, 0);
    let mut unknown = BTreeSet::new();
    let mut calls = 0;
    for advertised in &versions.api_keys {
        let api = ApiKey::try_from(advertised.api_key)
            .map_err(|()| anyhow::anyhow!("advertised key {}", advertised.api_key))?;
        let first = if api == ApiKey::Produce {
            PRODUCE_FIRST_SERVED
        } else {
            advertised.min_version
        };
        for version in first..=advertised.max_version {
            calls += 1;
            let known = every_request!(kafka.addr, api, version;
                Fetch => FetchRequest, FetchResponse;
                ListOffsets => ListOffsetsRequest, ListOffsetsResponse;
                Metadata => MetadataRequest, MetadataResponse;
                ApiVersions => ApiVersionsRequest, ApiVersionsResponse;
                CreateTopics => CreateTopicsRequest, CreateTopicsResponse;
                DeleteTopics => DeleteTopicsRequest, DeleteTopicsResponse;
                InitProducerId => InitProducerIdRequest, InitProducerIdResponse;
                FindCoordinator => FindCoordinatorRequest, FindCoordinatorResponse;
                JoinGroup => JoinGroupRequest, JoinGroupResponse;
                SyncGroup => SyncGroupRequest, SyncGroupResponse;
                Heartbeat => HeartbeatRequest, HeartbeatResponse;
                LeaveGroup => LeaveGroupRequest, LeaveGroupResponse;
                OffsetCommit => OffsetCommitRequest, OffsetCommitResponse;
                OffsetFetch => OffsetFetchRequest, OffsetFetchResponse;
                ListGroups => ListGroupsRequest, ListGroupsResponse;
                DescribeGroups => DescribeGroupsRequest, DescribeGroupsResponse;
                DeleteGroups => DeleteGroupsRequest, DeleteGroupsResponse;
                AddPartitionsToTxn => AddPartitionsToTxnRequest, AddPartitionsToTxnResponse;
                AddOffsetsToTxn => AddOffsetsToTxnRequest, AddOffsetsToTxnResponse;
                EndTxn => EndTxnRequest, EndTxnResponse;
                TxnOffsetCommit => TxnOffsetCommitRequest, TxnOffsetCommitResponse;
                DescribeProducers => DescribeProducersRequest, DescribeProducersResponse;
                DescribeTransactions => DescribeTransactionsRequest, DescribeTransactionsResponse;
                ListTransactions => ListTransactionsRequest, ListTransactionsResponse;
                CreateAcls => CreateAclsRequest, CreateAclsResponse;
                DescribeAcls => DescribeAclsRequest, DescribeAclsResponse;
                DeleteAcls => DeleteAclsRequest, DeleteAclsResponse;
                DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
                    DescribeUserScramCredentialsResponse;
                AlterUserScramCredentials => AlterUserScramCredentialsRequest,
                    AlterUserScramCredentialsResponse;
                SaslHandshake => SaslHandshakeRequest, SaslHandshakeResponse;
                SaslAuthenticate => SaslAuthenticateRequest, SaslAuthenticateResponse;
                DescribeCluster => DescribeClusterRequest, DescribeClusterResponse;
                OffsetDelete => OffsetDeleteRequest, OffsetDeleteResponse;
                CreatePartitions => CreatePartitionsRequest, CreatePartitionsResponse;
                DescribeLogDirs => DescribeLogDirsRequest, DescribeLogDirsResponse;
                OffsetForLeaderEpoch => OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse;
                DescribeConfigs => DescribeConfigsRequest, DescribeConfigsResponse;
                AlterConfigs => AlterConfigsRequest, AlterConfigsResponse;
                IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
                    IncrementalAlterConfigsResponse;
                DeleteRecords => DeleteRecordsRequest, DeleteRecordsResponse;
            );
            if !known {
                unknown.insert(format!("{api:?}"));
            }
        }
    }
    if !unknown.is_empty() {
        bail!("advertised, but this test sends no request of it: {unknown:?}");
    }
    assert!(calls > 100, "{calls} requests");
    Ok(())
}
