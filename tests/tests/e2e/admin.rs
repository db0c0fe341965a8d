//! Kafka's admin APIs on the wire, version by version (the admin clients' side is in
//! `crates/cli/tests/admin.rs`).

use anyhow::Result;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{ApiKey, DescribeClusterRequest, DescribeClusterResponse};
use minibroker_net::Config;

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
