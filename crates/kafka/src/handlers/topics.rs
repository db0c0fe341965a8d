//! CreateTopics and DeleteTopics.

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;

impl KafkaFrontEnd {
    pub(crate) fn create_topics(
        &self,
        request: CreateTopicsRequest,
        version: i16,
    ) -> CreateTopicsResponse {
        let topics = request
            .topics
            .into_iter()
            .map(|topic| {
                let partitions = match topic.num_partitions {
                    -1 => self.config.default_partitions,
                    n => u32::try_from(n).unwrap_or(0),
                };
                let result = if request.validate_only {
                    Ok(())
                } else {
                    self.broker.create_topic(&topic.name, partitions)
                };
                let answer = CreatableTopicResult::default().with_name(topic.name);
                let answer = if version >= 5 {
                    answer
                        .with_num_partitions(i32::try_from(partitions).unwrap_or(-1))
                        .with_replication_factor(1)
                } else {
                    answer
                };
                match result {
                    Ok(()) => answer,
                    Err(error) => answer
                        .with_error_code(code_of(&error).code())
                        .with_error_message(Some(StrBytes::from_string(error.to_string()))),
                }
            })
            .collect();
        CreateTopicsResponse::default().with_topics(topics)
    }

    pub(crate) fn delete_topics(
        &self,
        request: DeleteTopicsRequest,
        version: i16,
    ) -> DeleteTopicsResponse {
        let names: Vec<TopicName> = request
            .topic_names
            .into_iter()
            .chain(request.topics.into_iter().filter_map(|t| t.name))
            .collect();
        let responses = names
            .into_iter()
            .map(|name| {
                let answer = DeletableTopicResult::default().with_name(Some(name.clone()));
                match self.broker.delete_topic(&name) {
                    Ok(()) => answer,
                    Err(error) if version >= 5 => answer
                        .with_error_code(code_of(&error).code())
                        .with_error_message(Some(StrBytes::from_string(error.to_string()))),
                    Err(error) => answer.with_error_code(code_of(&error).code()),
                }
            })
            .collect();
        DeleteTopicsResponse::default().with_responses(responses)
    }
}
