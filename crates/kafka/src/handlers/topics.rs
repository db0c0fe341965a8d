//! CreateTopics, CreatePartitions and DeleteTopics.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;
use kafka_protocol::ResponseError;
use minibroker_broker::BrokerError;
use minibroker_security::{Operation, ResourceType};

/// Why a topic was not created, grown, deleted or changed.
pub(crate) enum Refused {
    /// The principal may not.
    Denied,
    /// The broker core refused.
    Broker(BrokerError),
    /// The request itself is wrong (Kafka's code, and why).
    Request(ResponseError, String),
}

use Refused::Denied;

impl Refused {
    pub(crate) fn code(&self) -> i16 {
        match self {
            Denied => ResponseError::TopicAuthorizationFailed.code(),
            Refused::Broker(error) => code_of(error).code(),
            Refused::Request(error, _) => error.code(),
        }
    }
}

impl Refused {
    /// What the answer's error message says.
    pub(crate) fn message(&self) -> StrBytes {
        StrBytes::from_string(self.to_string())
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Denied => f.write_str("Topic authorization failed."),
            Refused::Broker(error) => error.fmt(f),
            Refused::Request(_, why) => f.write_str(why),
        }
    }
}

/// The settings of a request as (name, value), or INVALID_CONFIG for one without a value (null
/// says "remove" only in AlterConfigs, as in Kafka).
pub(crate) fn given_values<'a>(
    settings: &[(&'a str, Option<&'a str>)],
) -> Result<Vec<(&'a str, &'a str)>, Refused> {
    settings
        .iter()
        .map(|&(name, value)| {
            value
                .map(|value| (name, value))
                .ok_or_else(|| no_value(name))
        })
        .collect()
}

/// INVALID_CONFIG for the setting `name` given without a value.
pub(crate) fn no_value(name: &str) -> Refused {
    Refused::Request(
        ResponseError::InvalidConfig,
        format!(
            "the setting {} has no value",
            minibroker_broker::quote_prefix(name)
        ),
    )
}

impl KafkaFrontEnd {
    pub(crate) async fn create_topics(
        &self,
        request: CreateTopicsRequest,
        version: i16,
    ) -> CreateTopicsResponse {
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let partitions = match topic.num_partitions {
                -1 => self.config.default_partitions,
                n => u32::try_from(n).unwrap_or(0),
            };
            let settings = topic
                .configs
                .iter()
                .map(|config| (config.name.as_str(), config.value.as_deref()))
                .collect::<Vec<_>>();
            let result = if !self.may_create_topic(&topic.name) {
                Err(Denied)
            } else {
                match given_values(&settings) {
                    Err(refused) => Err(refused),
                    Ok(settings) if request.validate_only => self
                        .check_new_topic_settings(&settings)
                        .map_err(Refused::Broker),
                    Ok(settings) => match &self.cluster {
                        Some(cluster) => {
                            self.create_shared_topic(cluster, &topic.name, partitions, &settings)
                                .await
                        }
                        None => self
                            .broker
                            .create_topic_with(&topic.name, partitions, &settings)
                            .map_err(Refused::Broker),
                    },
                }
            };
            let answer = CreatableTopicResult::default().with_name(topic.name);
            let answer = if version >= 5 {
                answer
                    .with_num_partitions(i32::try_from(partitions).unwrap_or(-1))
                    .with_replication_factor(1)
            } else {
                answer
            };
            topics.push(match result {
                Ok(()) => answer,
                Err(refused) => answer
                    .with_error_code(refused.code())
                    .with_error_message(Some(refused.message())),
            });
        }
        CreateTopicsResponse::default().with_topics(topics)
    }

    /// CreatePartitions: each topic grown to its count, if the principal may Alter it. A topic
    /// named twice is refused both times (INVALID_REQUEST), as Kafka; replica assignments may
    /// name only this broker, one list per new partition.
    pub(crate) fn create_partitions(
        &self,
        request: &CreatePartitionsRequest,
    ) -> CreatePartitionsResponse {
        let named = |name: &TopicName| request.topics.iter().filter(|t| &t.name == name).count();
        let results = request
            .topics
            .iter()
            .map(|topic| {
                let result = if named(&topic.name) > 1 {
                    Err(Refused::Request(
                        ResponseError::InvalidRequest,
                        "the topic is named more than once".into(),
                    ))
                } else if !self.may(Operation::Alter, ResourceType::Topic, &topic.name) {
                    Err(Denied)
                } else {
                    (self.not_in_a_cluster("CreatePartitions"))
                        .and_then(|()| self.check_assignments(topic))
                        .and_then(|()| {
                            self.broker
                                .create_partitions(
                                    &topic.name,
                                    u32::try_from(topic.count).unwrap_or(0),
                                    request.validate_only,
                                )
                                .map_err(Refused::Broker)
                        })
                };
                let answer = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
                match result {
                    Ok(()) => answer,
                    Err(refused) => answer
                        .with_error_code(refused.code())
                        .with_error_message(Some(refused.message())),
                }
            })
            .collect();
        CreatePartitionsResponse::default().with_results(results)
    }

    /// Replica assignments, if given: one per new partition, naming only this broker.
    fn check_assignments(
        &self,
        topic: &kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic,
    ) -> Result<(), Refused> {
        let Some(assignments) = &topic.assignments else {
            return Ok(());
        };
        let current = self
            .broker
            .topic(&topic.name, false)
            .map_err(Refused::Broker)?
            .partitions;
        let new = i64::from(topic.count) - i64::from(current);
        let only_this_broker = assignments
            .iter()
            .all(|a| !a.broker_ids.is_empty() && a.broker_ids.iter().all(|b| *b == self.node()));
        if i64::try_from(assignments.len()).ok() != Some(new) || !only_this_broker {
            return Err(Refused::Request(
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "give one replica list per new partition ({new}), naming only broker {}",
                    self.node().0
                ),
            ));
        }
        Ok(())
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
                // As Kafka: Describe first, so a topic's existence is not revealed, then Delete.
                let allowed = self.may(Operation::Describe, ResourceType::Topic, &name)
                    && self.may(Operation::Delete, ResourceType::Topic, &name);
                let deleted = if allowed {
                    (self.not_in_a_cluster("DeleteTopics"))
                        .and_then(|()| self.broker.delete_topic(&name).map_err(Refused::Broker))
                } else {
                    Err(Denied)
                };
                match deleted {
                    Ok(()) => answer,
                    Err(refused) if version >= 5 => answer
                        .with_error_code(refused.code())
                        .with_error_message(Some(refused.message())),
                    Err(refused) => answer.with_error_code(refused.code()),
                }
            })
            .collect();
        DeleteTopicsResponse::default().with_responses(responses)
    }
}
