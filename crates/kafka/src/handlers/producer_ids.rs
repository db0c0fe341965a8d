//! InitProducerId: a new idempotent producer id, or the next epoch of one; with a transactional
//! id, the transaction coordinator's (see `transactions`).

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use minibroker_records::NO_PRODUCER_ID;

use crate::errors::code_of;
use crate::front_end::KafkaFrontEnd;

impl KafkaFrontEnd {
    pub(crate) async fn init_producer_id(
        &self,
        request: InitProducerIdRequest,
        version: i16,
    ) -> InitProducerIdResponse {
        let refused = |error: ResponseError| {
            InitProducerIdResponse::default()
                .with_error_code(error.code())
                .with_producer_id(ProducerId(NO_PRODUCER_ID))
                .with_producer_epoch(-1)
        };
        match request.transactional_id.as_deref().map(|id| id.to_string()) {
            // As Kafka: an empty transactional id is a malformed request, not a transaction.
            Some(id) if id.is_empty() => return refused(ResponseError::InvalidRequest),
            Some(id) => {
                return self
                    .init_transactional_producer(&id, &request, version)
                    .await;
            }
            None => {}
        }
        if let Some(cluster) = &self.cluster {
            return match self.shared_producer_id(cluster).await {
                Ok(id) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(id))
                    .with_producer_epoch(0),
                Err(error) => refused(error),
            };
        }
        // As Kafka (KIP-679): IdempotentWrite on the cluster, or Write on some topic.
        if !self.may_write_idempotently() {
            return refused(ResponseError::ClusterAuthorizationFailed);
        }
        // KIP-360: a producer that knows its id asks for the next epoch.
        // With authorisation on, only the id's owner may bump it: anyone else gets a new id,
        // as Kafka answers a non-transactional request it cannot match.
        let known = (request.producer_id.0 != NO_PRODUCER_ID)
            .then_some(request.producer_id.0)
            .filter(|&id| self.owns_producer(id));
        match self.broker.init_producer(known) {
            Ok(identity) => match self.record_producer(identity.producer_id) {
                Ok(()) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(identity.producer_id))
                    .with_producer_epoch(identity.epoch),
                Err(error) => {
                    tracing::warn!(%error, "the producer-owners file could not be written");
                    refused(ResponseError::KafkaStorageError)
                }
            },
            Err(error) => refused(code_of(&error)),
        }
    }
}
