//! DescribeConfigs: a topic's settings or the broker's, under Kafka's names, each with where its
//! value comes from (`minibroker_broker::ConfigEntry`). As Kafka: DescribeConfigs on the topic,
//! or on the cluster for the broker; the keys asked for, or all. A topic's settings change by
//! AlterConfigs (`alter_configs`); the broker's are read-only (its configuration file sets
//! them), and say so.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use minibroker_broker::{ConfigEntry, ConfigSource, ConfigType};
use minibroker_security::acl::CLUSTER_NAME;
use minibroker_security::{Operation, ResourceType};

use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;

/// Kafka's resource types.
pub(crate) const TOPIC: i8 = 2;
pub(crate) const BROKER: i8 = 4;

impl KafkaFrontEnd {
    pub(crate) async fn describe_configs(
        &self,
        request: &DescribeConfigsRequest,
        version: i16,
    ) -> DescribeConfigsResponse {
        // On a broker of a cluster, a change of settings made through another broker a moment
        // ago is described too.
        self.catch_up().await;
        let results = request
            .resources
            .iter()
            .map(|resource| {
                let answer = DescribeConfigsResult::default()
                    .with_resource_type(resource.resource_type)
                    .with_resource_name(resource.resource_name.clone());
                match self.resource_configs(resource) {
                    Ok(entries) => answer.with_configs(
                        entries
                            .iter()
                            .filter(|entry| asked_for(resource, entry))
                            .map(|entry| {
                                // A topic's settings change by AlterConfigs; the broker's by
                                // its configuration file only.
                                let read_only = resource.resource_type != TOPIC;
                                described(entry, request, version, read_only)
                            })
                            .collect(),
                    ),
                    Err((error, why)) => answer
                        .with_error_code(error.code())
                        .with_error_message(Some(StrBytes::from_string(why))),
                }
            })
            .collect();
        DescribeConfigsResponse::default().with_results(results)
    }

    /// The settings of one resource, or why it cannot be described.
    fn resource_configs(
        &self,
        resource: &DescribeConfigsResource,
    ) -> Result<Vec<ConfigEntry>, (ResponseError, String)> {
        let name = resource.resource_name.as_str();
        match resource.resource_type {
            TOPIC => {
                if !self.may(Operation::DescribeConfigs, ResourceType::Topic, name) {
                    return Err((
                        ResponseError::TopicAuthorizationFailed,
                        "Topic authorization failed.".into(),
                    ));
                }
                self.broker
                    .topic_configs(name)
                    .map_err(|error| (code_of(&error), error.to_string()))
            }
            BROKER => {
                if !self.may(
                    Operation::DescribeConfigs,
                    ResourceType::Cluster,
                    CLUSTER_NAME,
                ) {
                    return Err((
                        ResponseError::ClusterAuthorizationFailed,
                        "Cluster authorization failed.".into(),
                    ));
                }
                // This broker by its id, or (an empty name) the default of every broker.
                if !name.is_empty() && name != self.node().0.to_string() {
                    return Err((
                        ResponseError::InvalidRequest,
                        format!("this is broker {}, not {name:?}", self.node().0),
                    ));
                }
                Ok(self.broker.config().broker_configs())
            }
            other => Err((
                ResponseError::InvalidRequest,
                format!("resource type {other} has no configurations here (topics 2, brokers 4)"),
            )),
        }
    }
}

/// Whether `entry` is among the keys the resource asks for (all, when it names none).
fn asked_for(resource: &DescribeConfigsResource, entry: &ConfigEntry) -> bool {
    resource
        .configuration_keys
        .as_ref()
        .is_none_or(|keys| keys.iter().any(|key| key.as_str() == entry.name))
}

/// Kafka's `ConfigSource` code.
fn source_code(source: ConfigSource) -> i8 {
    match source {
        ConfigSource::Topic => 1,
        ConfigSource::Broker => 4,
        ConfigSource::Default => 5,
    }
}

/// Kafka's `ConfigType` code.
fn type_code(kind: ConfigType) -> i8 {
    match kind {
        ConfigType::String => 2,
        ConfigType::Int => 3,
        ConfigType::Long => 5,
        ConfigType::Double => 6,
        ConfigType::List => 7,
    }
}

/// One setting as the answer says it, at `version`.
fn described(
    entry: &ConfigEntry,
    request: &DescribeConfigsRequest,
    version: i16,
    read_only: bool,
) -> DescribeConfigsResourceResult {
    let value = StrBytes::from_string(entry.value.clone());
    let mut answer = DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_static_str(entry.name))
        .with_value(Some(value.clone()))
        .with_read_only(read_only)
        .with_config_source(source_code(entry.source));
    if request.include_synonyms {
        answer = answer.with_synonyms(vec![
            DescribeConfigsSynonym::default()
                .with_name(StrBytes::from_static_str(entry.name))
                .with_value(Some(value))
                .with_source(source_code(entry.source)),
        ]);
    }
    if version >= 3 {
        answer = answer.with_config_type(type_code(entry.kind));
        if request.include_documentation {
            answer = answer.with_documentation(Some(StrBytes::from_static_str(entry.doc)));
        }
    }
    answer
}
