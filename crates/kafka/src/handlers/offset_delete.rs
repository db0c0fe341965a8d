//! OffsetDelete (KIP-496): a group's committed offsets of some partitions forgotten, so an
//! administrator can reset where a group starts without deleting the group. As Kafka: Delete on
//! the group, Read on each topic; partitions of topics the group's members are subscribed to
//! (read from their consumer-protocol subscriptions) are refused with GROUP_SUBSCRIBED_TO_TOPIC.

use bytes::{Buf, Bytes};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{
    ConsumerProtocolSubscription, OffsetDeleteRequest, OffsetDeleteResponse, TopicName,
};
use kafka_protocol::protocol::Decodable;
use minibroker_security::{Operation, ResourceType};

use crate::errors::group_code;
use crate::front_end::KafkaFrontEnd;

impl KafkaFrontEnd {
    pub(crate) async fn offset_delete(&self, request: OffsetDeleteRequest) -> OffsetDeleteResponse {
        let group = request.group_id.0.to_string();
        if !self.may(Operation::Delete, ResourceType::Group, &group) {
            return OffsetDeleteResponse::default()
                .with_error_code(ResponseError::GroupAuthorizationFailed.code());
        }
        // Each partition asked for, with the refusal it gets before the group is asked.
        let mut asked: Vec<(TopicName, i32, Option<ResponseError>)> = Vec::new();
        for topic in &request.topics {
            let readable = self.may(Operation::Read, ResourceType::Topic, &topic.name);
            for partition in &topic.partitions {
                let index = partition.partition_index;
                let exists = u32::try_from(index)
                    .ok()
                    .is_some_and(|index| self.broker.offsets(&topic.name, index).is_ok());
                let refused = if !readable {
                    Some(ResponseError::TopicAuthorizationFailed)
                } else if !exists {
                    Some(ResponseError::UnknownTopicOrPartition)
                } else {
                    None
                };
                asked.push((topic.name.clone(), index, refused));
            }
        }
        let deletable: Vec<(String, i32)> = asked
            .iter()
            .filter(|(_, _, refused)| refused.is_none())
            .map(|(topic, partition, _)| (topic.0.to_string(), *partition))
            .collect();
        let outcomes = match self
            .groups
            .delete_offsets(&group, &deletable, &subscribed_topics)
            .await
        {
            Ok(outcomes) => outcomes,
            Err(error) => {
                return OffsetDeleteResponse::default().with_error_code(group_code(&error).code());
            }
        };
        let mut outcomes = outcomes.into_iter();
        let mut topics: Vec<OffsetDeleteResponseTopic> = Vec::new();
        for (topic, partition, refused) in asked {
            let code = match refused {
                Some(error) => error.code(),
                None => outcomes
                    .next()
                    .and_then(Result::err)
                    .map_or(0, |error| group_code(&error).code()),
            };
            let answer = OffsetDeleteResponsePartition::default()
                .with_partition_index(partition)
                .with_error_code(code);
            match topics.last_mut() {
                Some(last) if last.name == topic => last.partitions.push(answer),
                _ => topics.push(
                    OffsetDeleteResponseTopic::default()
                        .with_name(topic)
                        .with_partitions(vec![answer]),
                ),
            }
        }
        OffsetDeleteResponse::default().with_topics(topics)
    }
}

/// The topics a member's consumer-protocol subscription names (none if it does not decode: a
/// member of another protocol).
fn subscribed_topics(metadata: &[u8]) -> Vec<String> {
    let mut bytes = Bytes::copy_from_slice(metadata);
    if bytes.remaining() < 2 {
        return Vec::new();
    }
    let version = bytes.get_i16();
    ConsumerProtocolSubscription::decode(&mut bytes, version)
        .map(|subscription| {
            subscription
                .topics
                .iter()
                .map(ToString::to_string)
                .collect()
        })
        .unwrap_or_default()
}
