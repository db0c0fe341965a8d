//! DeleteRecords: each partition's start offset moved up to the offset asked (-1: the high
//! watermark), answered with the start after it (the low watermark). As Kafka: Delete on the
//! topic, OFFSET_OUT_OF_RANGE past the high watermark, an offset below the start a no-op. Run on
//! a blocking thread: a durable partition saves a snapshot and its new start, synced, first. On a
//! broker of a cluster, the cluster's partition moves, for every broker.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use minibroker_broker::Broker;
use minibroker_security::{Operation, ResourceType};

use super::{NONE, partition_index};
use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;

impl KafkaFrontEnd {
    pub(crate) async fn delete_records(
        &self,
        request: DeleteRecordsRequest,
    ) -> DeleteRecordsResponse {
        let deletable: Vec<Option<ResponseError>> = request
            .topics
            .iter()
            .map(|topic| {
                (!self.may(Operation::Delete, ResourceType::Topic, &topic.name))
                    .then_some(ResponseError::TopicAuthorizationFailed)
            })
            .collect();
        let deleted = match self.cluster.clone() {
            Some(cluster) => {
                let mut deleted = Vec::with_capacity(request.topics.len());
                for (topic, refused) in request.topics.iter().zip(&deletable) {
                    let mut partitions = Vec::with_capacity(topic.partitions.len());
                    for asked in &topic.partitions {
                        partitions.push(match refused {
                            Some(refused) => Err(*refused),
                            None => {
                                Self::delete_shared_records(
                                    &cluster,
                                    &topic.name,
                                    asked.partition_index,
                                    asked.offset,
                                )
                                .await
                            }
                        });
                    }
                    deleted.push(partitions);
                }
                deleted
            }
            None => {
                let broker = Arc::clone(&self.broker);
                let request = request.clone();
                tokio::task::spawn_blocking(move || delete_records(&broker, &request, &deletable))
                    .await
                    .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
            }
        };
        answer(&request, deleted)
    }
}

/// What deleting each partition `request` names did: its new start, or why not. `refused`
/// says, per topic, whether it may be deleted from (`None`) or why not.
fn delete_records(
    broker: &Broker,
    request: &DeleteRecordsRequest,
    refused: &[Option<ResponseError>],
) -> Vec<Vec<Result<i64, ResponseError>>> {
    request
        .topics
        .iter()
        .zip(refused)
        .map(|(topic, refused)| {
            topic
                .partitions
                .iter()
                .map(|asked| {
                    if let Some(refused) = refused {
                        return Err(*refused);
                    }
                    partition_index(&topic.name, asked.partition_index)
                        .and_then(|index| broker.delete_records(&topic.name, index, asked.offset))
                        .map_err(|error| code_of(&error))
                })
                .collect()
        })
        .collect()
}

/// The answer to `request`, from what deleting each of its partitions did.
fn answer(
    request: &DeleteRecordsRequest,
    deleted: Vec<Vec<Result<i64, ResponseError>>>,
) -> DeleteRecordsResponse {
    let topics = request
        .topics
        .iter()
        .zip(deleted)
        .map(|(topic, deleted)| {
            let partitions = topic
                .partitions
                .iter()
                .zip(deleted)
                .map(|(asked, deleted)| {
                    let answer = DeleteRecordsPartitionResult::default()
                        .with_partition_index(asked.partition_index)
                        .with_low_watermark(NONE);
                    match deleted {
                        Ok(start) => answer.with_low_watermark(start),
                        Err(error) => answer.with_error_code(error.code()),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}
