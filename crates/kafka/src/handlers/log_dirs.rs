//! DescribeLogDirs: where each partition's log lives and how many bytes it holds — the one log
//! directory of a durable broker (its data directory), or the broker's memory, named
//! `(memory)`. As Kafka: Describe on the cluster, or nothing is described.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use minibroker_security::acl::CLUSTER_NAME;
use minibroker_security::{Operation, ResourceType};

use super::topic_name;
use crate::front_end::KafkaFrontEnd;

/// Kafka's "unknown" for a log directory's total and usable bytes.
const UNKNOWN_BYTES: i64 = -1;

impl KafkaFrontEnd {
    pub(crate) fn describe_log_dirs(
        &self,
        request: &DescribeLogDirsRequest,
        version: i16,
    ) -> DescribeLogDirsResponse {
        if !self.may(Operation::Describe, ResourceType::Cluster, CLUSTER_NAME) {
            // Before version 3 there is no error field: an empty answer says it.
            let code = if version >= 3 {
                ResponseError::ClusterAuthorizationFailed.code()
            } else {
                0
            };
            return DescribeLogDirsResponse::default().with_error_code(code);
        }
        // Every partition of every topic, or those asked for (unknown ones left out, as Kafka).
        let asked: Vec<(String, Option<Vec<i32>>)> = match &request.topics {
            None => self
                .broker
                .metadata()
                .into_iter()
                .map(|topic| (topic.name, None))
                .collect(),
            Some(topics) => topics
                .iter()
                .map(|t| (t.topic.0.to_string(), Some(t.partitions.clone())))
                .collect(),
        };
        let topics = asked
            .into_iter()
            .filter_map(|(name, wanted)| {
                let partitions: Vec<DescribeLogDirsPartition> = self
                    .broker
                    .describe_topic(&name)
                    .ok()?
                    .into_iter()
                    .filter(|p| {
                        wanted.as_ref().is_none_or(|wanted| {
                            i32::try_from(p.partition).is_ok_and(|i| wanted.contains(&i))
                        })
                    })
                    .map(|p| {
                        DescribeLogDirsPartition::default()
                            .with_partition_index(i32::try_from(p.partition).unwrap_or(i32::MAX))
                            .with_partition_size(i64::try_from(p.stored_bytes).unwrap_or(i64::MAX))
                    })
                    .collect();
                let name: TopicName = topic_name(&name);
                (!partitions.is_empty()).then(|| {
                    DescribeLogDirsTopic::default()
                        .with_name(name)
                        .with_partitions(partitions)
                })
            })
            .collect();
        let log_dir = self.broker.data_dir().map_or_else(
            || "(memory)".to_owned(),
            |dir| dir.root().display().to_string(),
        );
        let mut result = DescribeLogDirsResult::default()
            .with_log_dir(StrBytes::from_string(log_dir))
            .with_topics(topics);
        if version >= 4 {
            result = result
                .with_total_bytes(UNKNOWN_BYTES)
                .with_usable_bytes(UNKNOWN_BYTES);
        }
        DescribeLogDirsResponse::default().with_results(vec![result])
    }
}
