//! AlterConfigs and IncrementalAlterConfigs: a topic's own settings replaced whole, or changed a
//! step at a time (SET, DELETE, APPEND, SUBTRACT), as Kafka's `ConfigAdminManager` does. Each
//! resource is answered on its own; its changes are checked together and applied all or none,
//! and with `validate_only` only checked. The broker's settings come from its configuration file
//! and are refused here (INVALID_REQUEST), as are resource types other than topics and brokers.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, alter_configs_response, incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_broker::SettingChange;
use minibroker_security::acl::CLUSTER_NAME;
use minibroker_security::{Operation, ResourceType};

use super::configs::{BROKER, TOPIC};
use super::topics::{Refused, given_values, no_value};
use crate::front_end::KafkaFrontEnd;

/// Kafka's `AlterConfigOp.OpType` codes.
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

impl KafkaFrontEnd {
    pub(crate) fn alter_configs(&self, request: &AlterConfigsRequest) -> AlterConfigsResponse {
        let responses = request
            .resources
            .iter()
            .map(|resource| {
                let settings: Vec<(&str, Option<&str>)> = resource
                    .configs
                    .iter()
                    .map(|config| (config.name.as_str(), config.value.as_deref()))
                    .collect();
                let result = self
                    .alterable(resource.resource_type, &resource.resource_name)
                    .and_then(|()| given_values(&settings))
                    .and_then(|settings| {
                        self.broker
                            .replace_topic_settings(
                                &resource.resource_name,
                                &settings,
                                request.validate_only,
                            )
                            .map_err(Refused::Broker)
                    });
                let (code, message) = answered(result);
                alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_resource_type(resource.resource_type)
                    .with_resource_name(resource.resource_name.clone())
            })
            .collect();
        AlterConfigsResponse::default().with_responses(responses)
    }

    pub(crate) fn incremental_alter_configs(
        &self,
        request: &IncrementalAlterConfigsRequest,
    ) -> IncrementalAlterConfigsResponse {
        let responses = request
            .resources
            .iter()
            .map(|resource| {
                let result = self
                    .alterable(resource.resource_type, &resource.resource_name)
                    .and_then(|()| {
                        resource
                            .configs
                            .iter()
                            .map(|config| {
                                change(
                                    config.config_operation,
                                    &config.name,
                                    config.value.as_deref(),
                                )
                            })
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .and_then(|changes| {
                        self.broker
                            .change_topic_settings(
                                &resource.resource_name,
                                &changes,
                                request.validate_only,
                            )
                            .map_err(Refused::Broker)
                    });
                let (code, message) = answered(result);
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_resource_type(resource.resource_type)
                    .with_resource_name(resource.resource_name.clone())
            })
            .collect();
        IncrementalAlterConfigsResponse::default().with_responses(responses)
    }

    /// Whether the resource's settings may be changed here, by this principal (AlterConfigs on
    /// the topic, as Kafka asks).
    fn alterable(&self, resource_type: i8, name: &str) -> Result<(), Refused> {
        self.not_in_a_cluster("changing settings")?;
        match resource_type {
            TOPIC if self.may(Operation::AlterConfigs, ResourceType::Topic, name) => Ok(()),
            TOPIC => Err(Refused::Denied),
            BROKER if !self.may(
                Operation::AlterConfigs,
                ResourceType::Cluster,
                CLUSTER_NAME,
            ) =>
            {
                Err(Refused::Request(
                    ResponseError::ClusterAuthorizationFailed,
                    "Cluster authorization failed.".into(),
                ))
            }
            BROKER => Err(Refused::Request(
                ResponseError::InvalidRequest,
                "the broker's settings come from its configuration file; change them there and restart".into(),
            )),
            other => Err(Refused::Request(
                ResponseError::InvalidRequest,
                format!("resource type {other} has no configurations here (topics 2, brokers 4)"),
            )),
        }
    }
}

/// One IncrementalAlterConfigs step as the core takes it.
fn change<'a>(
    operation: i8,
    name: &'a str,
    value: Option<&'a str>,
) -> Result<SettingChange<'a>, Refused> {
    let needs_value = |value: Option<&'a str>| value.ok_or_else(|| no_value(name));
    Ok(match operation {
        SET => SettingChange::Set(name, needs_value(value)?),
        DELETE => SettingChange::Delete(name),
        APPEND => SettingChange::Append(name, needs_value(value)?),
        SUBTRACT => SettingChange::Subtract(name, needs_value(value)?),
        other => {
            return Err(Refused::Request(
                ResponseError::InvalidRequest,
                format!(
                    "{other} is not a config operation (SET 0, DELETE 1, APPEND 2, SUBTRACT 3)"
                ),
            ));
        }
    })
}

/// A resource's error code and message (0 and none for success).
fn answered(result: Result<(), Refused>) -> (i16, Option<StrBytes>) {
    match result {
        Ok(()) => (0, None),
        Err(refused) => (refused.code(), Some(refused.message())),
    }
}
