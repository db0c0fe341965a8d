//! Metadata: the broker (the only node) and each topic asked for with its partitions; a topic
//! may be created on the way (auto-creation, as Kafka does before v4 or when asked).

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use minibroker_broker::{BrokerError, TopicSummary};

use super::topic_name;
use crate::answer_room::{AnswerRoom, AnswerTooLarge};
use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;
use kafka_protocol::ResponseError;
use minibroker_security::{Operation, ResourceType};

impl KafkaFrontEnd {
    /// Metadata, with the brokers it lists: this broker alone, or a cluster's live brokers,
    /// over which the partitions' leadership is spread (every broker takes every partition's
    /// produce all the same, so a client with an older view never fails a write).
    ///
    /// # Errors
    /// [`AnswerTooLarge`] when the answer would not fit in one frame.
    pub(crate) async fn metadata(
        &mut self,
        request: MetadataRequest,
        version: i16,
    ) -> Result<MetadataResponse, AnswerTooLarge> {
        // Before v4 every Metadata request may create topics; after, only when it says so.
        let auto_create = version < 4 || request.allow_auto_topic_creation;
        let brokers = match self.cluster.clone() {
            Some(cluster) => {
                let names: Vec<String> = (request.topics.iter().flatten())
                    .filter_map(|topic| Some(topic.name.as_ref()?.to_string()))
                    .collect();
                self.hold_shared_topics(&cluster, &names, auto_create).await;
                self.shared_brokers(&cluster).await
            }
            None => vec![self.this_broker()],
        };
        self.metadata_of(request, version, auto_create, brokers)
    }

    /// This broker, as Metadata lists it.
    pub(crate) fn this_broker(&self) -> MetadataResponseBroker {
        MetadataResponseBroker::default()
            .with_node_id(self.node())
            .with_host(StrBytes::from_string(self.config.advertised_host.clone()))
            .with_port(self.config.advertised_port)
    }

    fn metadata_of(
        &mut self,
        request: MetadataRequest,
        version: i16,
        auto_create: bool,
        brokers: Vec<MetadataResponseBroker>,
    ) -> Result<MetadataResponse, AnswerTooLarge> {
        let leaders: Vec<BrokerId> = brokers.iter().map(|broker| broker.node_id).collect();
        let mut room = AnswerRoom::new(self.config.max_answer_bytes, version);
        let topics: Vec<MetadataResponseTopic> = match request.topics {
            // v0 asks for every topic with an empty list, later versions with none.
            Some(topics) if !(version == 0 && topics.is_empty()) => room
                .fill(topics.into_iter().filter_map(|topic| topic.name), |name| {
                    self.named_topic_metadata(&name, auto_create, version, &leaders)
                })?,
            // Every topic the principal may describe, with what the listing already says of
            // each: the others are left out, as if they did not exist.
            _ => self
                .broker
                .metadata()
                .into_iter()
                .filter(|topic| self.may_see(Operation::Describe, ResourceType::Topic, &topic.name))
                .map(|topic| {
                    room.keep(self.topic_metadata(
                        &topic.name.clone(),
                        Ok(topic),
                        version,
                        &leaders,
                    ))
                })
                .collect::<Result<_, _>>()?,
        };
        let mut response = MetadataResponse::default()
            .with_brokers(brokers)
            .with_topics(topics);
        // Fields a version does not have must keep their defaults.
        if version >= 1 {
            response = response.with_controller_id(self.node());
        }
        if version >= 2 {
            response = response
                .with_cluster_id(Some(StrBytes::from_string(self.config.cluster_id.clone())));
        }
        Ok(response)
    }

    /// The Metadata answer for the topic `name` asked for by name. As Kafka: one the principal
    /// may not describe is TOPIC_AUTHORIZATION_FAILED whether or not it exists; one it may
    /// describe but not create is not created, and TOPIC_AUTHORIZATION_FAILED if missing.
    fn named_topic_metadata(
        &self,
        name: &str,
        auto_create: bool,
        version: i16,
        leaders: &[BrokerId],
    ) -> MetadataResponseTopic {
        if !self.may(Operation::Describe, ResourceType::Topic, name) {
            return denied(name);
        }
        // A broker of a cluster creates topics in the cluster (`hold_shared_topics`), never in
        // its copy alone: a topic made here would differ from the cluster's.
        let may_create = auto_create && self.may_create_topic(name);
        let create = may_create && self.cluster.is_none();
        match self.broker.topic(name, create) {
            Err(error)
                if auto_create
                    && !may_create
                    && error.kind() == minibroker_broker::ErrorKind::UnknownTopic =>
            {
                denied(name)
            }
            found => self.topic_metadata(name, found, version, leaders),
        }
    }

    /// The Metadata answer for topic `name`, found (or refused) as `found` says.
    fn topic_metadata(
        &self,
        name: &str,
        found: Result<TopicSummary, BrokerError>,
        version: i16,
        leaders: &[BrokerId],
    ) -> MetadataResponseTopic {
        // Each topic's partitions take the brokers in turn from a place of the topic's own.
        let first = name.bytes().map(usize::from).sum::<usize>();
        let leader = |index: usize| {
            leaders
                .get((first + index) % leaders.len().max(1))
                .copied()
                .unwrap_or(self.node())
        };
        let topic = MetadataResponseTopic::default().with_name(Some(topic_name(name)));
        match found {
            Ok(found) => {
                let partitions = (0..found.partitions)
                    .map(|index| {
                        let leader = leader(index as usize);
                        let partition = MetadataResponsePartition::default()
                            .with_partition_index(index as i32)
                            .with_leader_id(leader)
                            .with_replica_nodes(vec![leader])
                            .with_isr_nodes(vec![leader]);
                        if version >= 7 {
                            partition.with_leader_epoch(minibroker_records::LEADER_EPOCH)
                        } else {
                            partition
                        }
                    })
                    .collect();
                topic.with_partitions(partitions)
            }
            Err(error) => topic.with_error_code(code_of(&error).code()),
        }
    }
}

/// A topic the principal may not see: TOPIC_AUTHORIZATION_FAILED, no partitions.
fn denied(name: &str) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(name)))
        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
}
