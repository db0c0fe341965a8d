//! OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ends, so a client can check
//! that its position is still on the log after a leader change. This broker is every
//! partition's only leader, at one epoch ([`LEADER_EPOCH`]) that never changes: that epoch ends
//! at the log end offset, any other is unknown here (-1, -1), and a client that names a current
//! epoch other than it is told it is fenced (older) or ahead (newer), as Kafka tells it.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use minibroker_records::LEADER_EPOCH;
use minibroker_security::{Operation, ResourceType};

use super::partition_index;
use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;

/// Kafka's "no such epoch" answer: UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
const UNDEFINED: (i32, i64) = (-1, -1);

/// A client's "no current epoch to check".
const NO_CURRENT_EPOCH: i32 = -1;

impl KafkaFrontEnd {
    pub(crate) fn offset_for_leader_epoch(
        &self,
        request: &OffsetForLeaderEpochRequest,
    ) -> OffsetForLeaderEpochResponse {
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                let described = self.may(Operation::Describe, ResourceType::Topic, &topic.topic);
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|asked| {
                        let answer = EpochEndOffset::default().with_partition(asked.partition);
                        let end = if described {
                            self.epoch_end(&topic.topic, asked.partition, asked)
                        } else {
                            Err(ResponseError::TopicAuthorizationFailed.code())
                        };
                        match end {
                            Ok((epoch, offset)) => {
                                answer.with_leader_epoch(epoch).with_end_offset(offset)
                            }
                            Err(code) => answer
                                .with_error_code(code)
                                .with_leader_epoch(UNDEFINED.0)
                                .with_end_offset(UNDEFINED.1),
                        }
                    })
                    .collect();
                OffsetForLeaderTopicResult::default()
                    .with_topic(topic.topic.clone())
                    .with_partitions(partitions)
            })
            .collect();
        OffsetForLeaderEpochResponse::default().with_topics(topics)
    }

    /// The end of `asked.leader_epoch` on `topic`/`partition`, or the error code that refuses.
    fn epoch_end(
        &self,
        topic: &str,
        partition: i32,
        asked: &kafka_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderPartition,
    ) -> Result<(i32, i64), i16> {
        let index = partition_index(topic, partition).map_err(|e| code_of(&e).code())?;
        let (_, end) = self
            .broker
            .offsets(topic, index)
            .map_err(|e| code_of(&e).code())?;
        match asked.current_leader_epoch {
            NO_CURRENT_EPOCH => {}
            current if current < LEADER_EPOCH => {
                return Err(ResponseError::FencedLeaderEpoch.code());
            }
            current if current > LEADER_EPOCH => {
                return Err(ResponseError::UnknownLeaderEpoch.code());
            }
            _ => {}
        }
        Ok(if asked.leader_epoch == LEADER_EPOCH {
            (LEADER_EPOCH, end)
        } else {
            UNDEFINED
        })
    }
}
