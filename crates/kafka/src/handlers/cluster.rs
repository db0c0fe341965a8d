//! DescribeCluster (KIP-700): the cluster's id, its controller and its brokers — here the one
//! broker, at the address Metadata hands out. As Kafka, anyone may ask; the cluster's authorized
//! operations are computed only when asked for, and are none without Describe on the cluster.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;
use minibroker_security::acl::CLUSTER_NAME;
use minibroker_security::{Operation, ResourceType};

use crate::front_end::KafkaFrontEnd;

/// DescribeCluster's endpoint type for brokers (v1; 2 asks for controllers).
const BROKERS: i8 = 1;

/// What a client left unasked: Kafka's "not computed" for authorized operations.
const NOT_COMPUTED: i32 = i32::MIN;

/// The operations a cluster has, in Kafka's codes.
const CLUSTER_OPERATIONS: [Operation; 7] = [
    Operation::Create,
    Operation::Alter,
    Operation::Describe,
    Operation::ClusterAction,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
    Operation::IdempotentWrite,
];

impl KafkaFrontEnd {
    pub(crate) fn describe_cluster(
        &self,
        request: &DescribeClusterRequest,
        version: i16,
    ) -> DescribeClusterResponse {
        let mut answer = DescribeClusterResponse::default()
            .with_cluster_id(StrBytes::from_string(self.config.cluster_id.clone()))
            .with_controller_id(self.node())
            .with_cluster_authorized_operations(NOT_COMPUTED);
        if version >= 1 {
            answer = answer.with_endpoint_type(request.endpoint_type);
            if request.endpoint_type != BROKERS {
                let error = ResponseError::UnsupportedEndpointType;
                return answer
                    .with_error_code(error.code())
                    .with_error_message(Some(StrBytes::from_static_str(
                        "this listener describes brokers only (endpoint type 1)",
                    )));
            }
        }
        let broker = DescribeClusterBroker::default()
            .with_broker_id(self.node())
            .with_host(StrBytes::from_string(self.config.advertised_host.clone()))
            .with_port(self.config.advertised_port);
        answer = answer.with_brokers(vec![broker]);
        if request.include_cluster_authorized_operations {
            answer = answer.with_cluster_authorized_operations(self.cluster_operations());
        }
        answer
    }

    /// The bit field of what the principal may do to the cluster (bit `code` per operation);
    /// none without Describe.
    fn cluster_operations(&self) -> i32 {
        if !self.may(Operation::Describe, ResourceType::Cluster, CLUSTER_NAME) {
            return 0;
        }
        CLUSTER_OPERATIONS
            .iter()
            .filter(|&&operation| self.may(operation, ResourceType::Cluster, CLUSTER_NAME))
            .fold(0, |bits, operation| bits | 1 << operation.code())
    }
}
