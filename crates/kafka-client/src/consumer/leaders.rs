//! Who leads each partition of the consumer's topic (from Metadata through the bootstrap
//! broker, asked again whenever a leader stops answering), and one connection to each leader.

use kafka_protocol::messages::{ApiKey, MetadataResponse};
use kafka_protocol::protocol::{Decodable, Encodable};
use std::collections::HashMap;
use std::time::Duration;

use super::KafkaConsumerError;
use crate::KafkaConnection;

/// The Metadata version asked.
const METADATA: i16 = 9;

/// The topic's partitions, their leaders, and connections to them.
#[derive(Debug)]
pub(super) struct Leaders {
    bootstrap: String,
    topic: String,
    answer_timeout: Duration,
    /// Broker id → `host:port`.
    brokers: HashMap<i32, String>,
    /// Partition → its leader's broker id.
    leaders: HashMap<i32, i32>,
    connections: HashMap<i32, KafkaConnection>,
}

impl Leaders {
    pub(super) fn new(bootstrap: &str, topic: &str, answer_timeout: Duration) -> Self {
        Self {
            bootstrap: bootstrap.to_owned(),
            topic: topic.to_owned(),
            answer_timeout,
            brokers: HashMap::new(),
            leaders: HashMap::new(),
            connections: HashMap::new(),
        }
    }

    /// The topic's partitions, in index order, as Metadata names them now.
    pub(super) async fn partitions(&mut self) -> Result<Vec<i32>, KafkaConsumerError> {
        self.refresh().await?;
        let mut partitions: Vec<i32> = self.leaders.keys().copied().collect();
        partitions.sort_unstable();
        Ok(partitions)
    }

    /// The broker leading `partition`.
    pub(super) async fn leader(&mut self, partition: i32) -> Result<i32, KafkaConsumerError> {
        if !self.leaders.contains_key(&partition) {
            self.refresh().await?;
        }
        self.leaders.get(&partition).copied().ok_or_else(|| {
            KafkaConsumerError::Protocol(format!("no leader named for {}/{partition}", self.topic))
        })
    }

    /// Forgets every leader and connection: the next use asks Metadata again.
    pub(super) fn forget(&mut self) {
        self.leaders.clear();
        self.connections.clear();
    }

    /// Sends `request` to broker `leader` and reads its answer (a connection that fails is
    /// dropped).
    pub(super) async fn call<R: Encodable, T: Decodable>(
        &mut self,
        leader: i32,
        api: ApiKey,
        version: i16,
        request: &R,
    ) -> Result<T, KafkaConsumerError> {
        let addr = self.brokers.get(&leader).cloned().ok_or_else(|| {
            KafkaConsumerError::Protocol(format!("broker {leader} is not named in Metadata"))
        })?;
        let conn = match self.connections.entry(leader) {
            std::collections::hash_map::Entry::Occupied(open) => open.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => slot.insert(
                KafkaConnection::connect(addr.as_str())
                    .await?
                    .with_client_id("minibroker-consumer")
                    .with_answer_timeout(self.answer_timeout),
            ),
        };
        let answer = conn.call(api, version, request).await;
        if answer.is_err() {
            self.connections.remove(&leader);
        }
        Ok(answer?)
    }

    async fn refresh(&mut self) -> Result<(), KafkaConsumerError> {
        let request = crate::metadata_request(&self.topic, false);
        let mut conn = KafkaConnection::connect(self.bootstrap.as_str())
            .await?
            .with_client_id("minibroker-consumer")
            .with_answer_timeout(self.answer_timeout);
        let answer: MetadataResponse = conn.call(ApiKey::Metadata, METADATA, &request).await?;
        for broker in &answer.brokers {
            let addr = format!("{}:{}", broker.host, broker.port);
            if self.brokers.insert(broker.node_id.0, addr.clone()) != Some(addr) {
                self.connections.remove(&broker.node_id.0);
            }
        }
        let found = answer.topics.first().ok_or_else(|| {
            KafkaConsumerError::Protocol("no topic in the Metadata answer".into())
        })?;
        if found.error_code != 0 {
            return Err(KafkaConsumerError::Broker {
                code: found.error_code,
                what: format!("topic {:?}", self.topic),
            });
        }
        self.leaders = found
            .partitions
            .iter()
            .filter(|p| p.leader_id.0 >= 0)
            .map(|p| (p.partition_index, p.leader_id.0))
            .collect();
        Ok(())
    }
}
