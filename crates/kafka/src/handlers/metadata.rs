//! Metadata: the broker (the only node) and each topic asked for with its partitions; a topic
//! may be created on the way (auto-creation, as Kafka does before v4 or when asked).

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use minibroker_broker::{BrokerError, TopicSummary};

use super::topic_name;
use crate::answer_room::{AnswerRoom, AnswerTooLarge};
use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;

impl KafkaFrontEnd {
    /// # Errors
    /// [`AnswerTooLarge`] when the answer would not fit in one frame.
    pub(crate) fn metadata(
        &mut self,
        request: MetadataRequest,
        version: i16,
    ) -> Result<MetadataResponse, AnswerTooLarge> {
        // Before v4 every Metadata request may create topics; after, only when it says so.
        let auto_create = version < 4 || request.allow_auto_topic_creation;
        let mut room = AnswerRoom::new(self.config.max_answer_bytes, version);
        let topics: Vec<MetadataResponseTopic> = match request.topics {
            // v0 asks for every topic with an empty list, later versions with none.
            Some(topics) if !(version == 0 && topics.is_empty()) => room
                .fill(topics.into_iter().filter_map(|topic| topic.name), |name| {
                    self.topic_metadata(&name, self.broker.topic(&name, auto_create), version)
                })?,
            // Every topic, with what the listing already says of each.
            _ => self
                .broker
                .metadata()
                .into_iter()
                .map(|topic| {
                    room.keep(self.topic_metadata(&topic.name.clone(), Ok(topic), version))
                })
                .collect::<Result<_, _>>()?,
        };
        let broker = MetadataResponseBroker::default()
            .with_node_id(self.node())
            .with_host(StrBytes::from_string(self.config.advertised_host.clone()))
            .with_port(self.config.advertised_port);
        let mut response = MetadataResponse::default()
            .with_brokers(vec![broker])
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

    /// The Metadata answer for topic `name`, found (or refused) as `found` says.
    fn topic_metadata(
        &self,
        name: &str,
        found: Result<TopicSummary, BrokerError>,
        version: i16,
    ) -> MetadataResponseTopic {
        let topic = MetadataResponseTopic::default().with_name(Some(topic_name(name)));
        match found {
            Ok(found) => {
                let partitions = (0..found.partitions)
                    .map(|index| {
                        let partition = MetadataResponsePartition::default()
                            .with_partition_index(index as i32)
                            .with_leader_id(self.node())
                            .with_replica_nodes(vec![self.node()])
                            .with_isr_nodes(vec![self.node()]);
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
