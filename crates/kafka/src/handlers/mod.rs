//! One file per Kafka API family: each translates the request into broker-core calls and the
//! results into the response. No rule lives here; every decision is the core's.

mod alter_configs;
mod cluster;
mod configs;
mod delete_records;
mod fetch;
mod groups;
mod implicit_add;
mod leader_epoch;
mod log_dirs;
mod metadata;
mod offset_delete;
mod offsets;
mod produce;
mod producer_ids;
mod security_admin;
mod shared;
mod shared_groups;
mod topics;
mod transaction_admin;
mod transactions;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use minibroker_broker::BrokerError;

use crate::front_end::KafkaFrontEnd;

/// Kafka's marker for "no such offset/timestamp".
const NONE: i64 = -1;

fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// A Kafka partition index as the broker's: a negative one is out of range of every topic.
fn partition_index(topic: &str, index: i32) -> Result<u32, BrokerError> {
    u32::try_from(index).map_err(|_| BrokerError::PartitionOutOfRange {
        topic: topic.to_owned(),
        partition: u32::MAX,
        count: 0,
    })
}

impl KafkaFrontEnd {
    fn node(&self) -> BrokerId {
        BrokerId(self.config.node_id)
    }
}
