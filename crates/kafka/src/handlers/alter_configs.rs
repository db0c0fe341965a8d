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
use minibroker_broker::{BrokerError, Overrides, SettingChange};
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
    pub(crate) async fn alter_configs(
        &self,
        request: &AlterConfigsRequest,
    ) -> AlterConfigsResponse {
        let config = self.broker.config();
        let mut responses = Vec::with_capacity(request.resources.len());
        for resource in &request.resources {
            let settings: Vec<(&str, Option<&str>)> = resource
                .configs
                .iter()
                .map(|config| (config.name.as_str(), config.value.as_deref()))
                .collect();
            let result = match self
                .alterable(resource.resource_type, &resource.resource_name)
                .and_then(|()| given_values(&settings))
            {
                Ok(settings) => {
                    let replaced =
                        |_: &Overrides| Overrides::parse(settings.iter().copied(), config);
                    self.alter_topic_settings(
                        &resource.resource_name,
                        replaced,
                        request.validate_only,
                    )
                    .await
                }
                Err(refused) => Err(refused),
            };
            let (code, message) = answered(result);
            responses.push(
                alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_resource_type(resource.resource_type)
                    .with_resource_name(resource.resource_name.clone()),
            );
        }
        AlterConfigsResponse::default().with_responses(responses)
    }

    pub(crate) async fn incremental_alter_configs(
        &self,
        request: &IncrementalAlterConfigsRequest,
    ) -> IncrementalAlterConfigsResponse {
        let config = self.broker.config();
        let mut responses = Vec::with_capacity(request.resources.len());
        for resource in &request.resources {
            let changes = self
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
                });
            let result = match changes {
                Ok(changes) => {
                    let changed = |current: &Overrides| current.changed(&changes, config);
                    self.alter_topic_settings(
                        &resource.resource_name,
                        changed,
                        request.validate_only,
                    )
                    .await
                }
                Err(refused) => Err(refused),
            };
            let (code, message) = answered(result);
            responses.push(
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_resource_type(resource.resource_type)
                    .with_resource_name(resource.resource_name.clone()),
            );
        }
        IncrementalAlterConfigsResponse::default().with_responses(responses)
    }

    /// Changes topic `name`'s own settings to what `change` makes of them: the cluster's topic
    /// on a broker of a cluster, else this broker's.
    async fn alter_topic_settings(
        &self,
        name: &str,
        change: impl Fn(&Overrides) -> Result<Overrides, BrokerError>,
        validate_only: bool,
    ) -> Result<(), Refused> {
        match &self.cluster {
            Some(cluster) => {
                self.alter_shared_settings(cluster, name, change, validate_only)
                    .await
            }
            None => self
                .broker
                .alter_topic_settings(name, change, validate_only)
                .map_err(Refused::Broker),
        }
    }

    /// Whether the resource's settings may be changed here, by this principal (AlterConfigs on
    /// the topic, as Kafka asks).
    fn alterable(&self, resource_type: i8, name: &str) -> Result<(), Refused> {
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
