//! DeleteRecords: each partition's start offset moved up to the offset asked (-1: the high
//! watermark), answered with the start after it (the low watermark). As Kafka: Delete on the
//! topic, OFFSET_OUT_OF_RANGE past the high watermark, an offset below the start a no-op. Run on
//! a blocking thread: a durable partition saves a snapshot and its new start, synced, first.

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
                if let Err(refused) = self.not_in_a_cluster("DeleteRecords") {
                    tracing::info!(topic = %topic.name.as_str(), "{refused}");
                    Some(ResponseError::InvalidRequest)
                } else if self.may(Operation::Delete, ResourceType::Topic, &topic.name) {
                    None
                } else {
                    Some(ResponseError::TopicAuthorizationFailed)
                }
            })
            .collect();
        let broker = Arc::clone(&self.broker);
        tokio::task::spawn_blocking(move || delete_records(&broker, &request, &deletable))
            .await
            .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
    }
}

/// The answer to `request`, whose topics `refused` says may be deleted from (`None`), or why
/// not.
fn delete_records(
    broker: &Broker,
    request: &DeleteRecordsRequest,
    refused: &[Option<ResponseError>],
) -> DeleteRecordsResponse {
    let topics = request
        .topics
        .iter()
        .zip(refused)
        .map(|(topic, &refused)| {
            let partitions = topic
                .partitions
                .iter()
                .map(|asked| {
                    let answer = DeleteRecordsPartitionResult::default()
                        .with_partition_index(asked.partition_index)
                        .with_low_watermark(NONE);
                    if let Some(refused) = refused {
                        return answer.with_error_code(refused.code());
                    }
                    let deleted = partition_index(&topic.name, asked.partition_index)
                        .and_then(|index| broker.delete_records(&topic.name, index, asked.offset));
                    match deleted {
                        Ok(start) => answer.with_low_watermark(start),
                        Err(error) => answer.with_error_code(code_of(&error).code()),
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
