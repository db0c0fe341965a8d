//! Authorisation on the Kafka listener: each API asks what Kafka's `KafkaApis` asks of the
//! connection's principal, and refuses with Kafka's code (29 topic, 30 group, 31 cluster, 53
//! transactional id). The principal, the ACLs and the producer-id owners are the connection's
//! `minibroker_host::access::Guard`'s; this file only turns its answers into Kafka's.

use kafka_protocol::ResponseError;
use minibroker_records::BatchInfo;
use minibroker_security::acl::Acls;
use minibroker_security::{FileError, Operation, ResourceType};
use std::sync::Arc;

use crate::front_end::KafkaFrontEnd;

impl KafkaFrontEnd {
    /// Whether the principal may do `operation` on the resource; a denial is logged at info.
    pub(crate) fn may(
        &self,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.guard.may(operation, resource_type, name)
    }

    /// As [`Self::may`], a denial logged at debug only: for what a listing leaves out.
    pub(crate) fn may_see(
        &self,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.guard.may_see(operation, resource_type, name)
    }

    /// Whether the principal may create the topic `name`: Create on the cluster or on it.
    pub(crate) fn may_create_topic(&self, name: &str) -> bool {
        self.guard.may_create_topic(name)
    }

    /// Whether the principal may get an idempotent producer id (KIP-679).
    pub(crate) fn may_write_idempotently(&self) -> bool {
        self.guard.may_write_idempotently()
    }

    /// Whether an epoch bump of `producer_id` may go ahead: only for its owner.
    pub(crate) fn owns_producer(&self, producer_id: i64) -> bool {
        self.guard.owns_producer(producer_id)
    }

    /// Records that `producer_id` is this principal's, before it is handed out.
    pub(crate) fn record_producer(&self, producer_id: i64) -> Result<(), FileError> {
        self.guard.record_producer(producer_id)
    }

    /// UNKNOWN_TOPIC_OR_PARTITION when the topic `name` does not exist and the principal may not
    /// create it: a produce creates a topic only for whom Create allows.
    pub(crate) fn unknown_to_creator(&self, name: &str) -> Option<ResponseError> {
        if !self.guard.is_on() || self.broker.topic(name, false).is_ok() {
            return None;
        }
        (!self.may_create_topic(name)).then_some(ResponseError::UnknownTopicOrPartition)
    }

    /// CLUSTER_AUTHORIZATION_FAILED for a batch whose producer id was not issued to this
    /// principal (another's, or no one's); UNKNOWN_PRODUCER_ID for one forgotten since it was
    /// issued (the producer asks for a new id).
    pub(crate) fn foreign_producer(&self, batch: Option<&BatchInfo>) -> Option<ResponseError> {
        if !self.guard.is_on() {
            return None;
        }
        crate::errors::producer_use_code(self.guard.producer_use(batch?.producer_id))
    }

    /// The ACLs now (none without access control).
    pub(crate) fn current_acls(&self) -> Arc<Acls> {
        self.guard.current_acls()
    }

    /// Edits the ACLs file.
    pub(crate) fn edit_acls<R>(&self, edit: impl FnOnce(&mut Acls) -> R) -> Result<R, FileError> {
        match self.guard.access() {
            Some(access) => access.edit(edit).inspect_err(|error| {
                tracing::warn!(%error, "the ACLs file could not be edited");
            }),
            None => Err(FileError::NotConfigured {
                setting: "acls_file",
            }),
        }
    }
}
