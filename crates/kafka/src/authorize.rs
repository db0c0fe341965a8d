//! Authorisation on the Kafka listener: each API asks what Kafka's `KafkaApis` asks of the
//! connection's principal, and refuses with Kafka's code (29 topic, 30 group, 31 cluster, 53
//! transactional id) — see `minibroker_security::acl` for the decision itself.
//!
//! The principal is `User:NAME` after a SASL login, the client certificate's common name on a
//! TLS listener without SASL, and `User:ANONYMOUS` otherwise. Authorisation is on when
//! `acls_file` is set; the file is read again (at most once a second) when it changes. A
//! request is judged against one snapshot of the ACLs, taken when it arrives. A direct denial
//! is logged at info with the principal, operation and resource; a topic or group merely left
//! out of a listing, at debug.

use minibroker_net::Config;
use minibroker_security::acl::{ANONYMOUS, Acls, Authorizer, CLUSTER_NAME, Request};
use minibroker_security::{FileError, Operation, ProducerOwners, Reloading, ResourceType, Use};
use std::sync::Arc;
use std::time::Duration;

use crate::front_end::KafkaFrontEnd;

/// How often a changed ACLs file is noticed, at most (one `stat` per this, not per request).
const ACLS_RECHECK: Duration = Duration::from_secs(1);

/// The listener's ACLs and settings.
#[derive(Debug)]
pub struct AccessControl {
    acls: Reloading<Acls>,
    /// Which principal each producer id was issued to (`producer-owners` in the data
    /// directory of a durable broker).
    owners: ProducerOwners,
    super_users: Arc<Vec<String>>,
    allow_everyone_if_no_acl_found: bool,
    /// One edit of the ACLs file at a time (CreateAcls, DeleteAcls).
    editing: std::sync::Mutex<()>,
}

impl AccessControl {
    /// The access control `config` asks for: `None` when it sets no `acls_file`.
    ///
    /// # Errors
    /// The ACLs file cannot be read, or a line of it does not.
    pub fn from_config(config: &Config) -> Result<Option<Self>, FileError> {
        let net = &config.net;
        let Some(path) = &net.acls_file else {
            return Ok(None);
        };
        let broker = &config.broker;
        let owners = ProducerOwners::open(
            broker
                .data_dir
                .as_ref()
                .map(|dir| dir.join("producer-owners")),
            broker.max_producer_ids,
            i64::try_from(broker.producer_id_expiration_ms).unwrap_or(i64::MAX),
            minibroker_records::now_millis(),
        )?;
        Ok(Some(Self {
            editing: std::sync::Mutex::new(()),
            owners,
            acls: Reloading::open(Some(path.clone()), Acls::load)?.recheck_after(ACLS_RECHECK),
            super_users: Arc::new(net.super_users.clone()),
            allow_everyone_if_no_acl_found: net.allow_everyone_if_no_acl_found,
        }))
    }

    /// The authoriser over the ACLs as they are now.
    #[must_use]
    pub fn now(&self) -> Authorizer {
        Authorizer {
            acls: self.acls.current(),
            super_users: Arc::clone(&self.super_users),
            allow_everyone_if_no_acl_found: self.allow_everyone_if_no_acl_found,
        }
    }
}

impl AccessControl {
    /// Applies `edit` to the ACLs file as it is now on disk, saves it, and holds the result at
    /// once (every connection judges its next request by it).
    ///
    /// # Errors
    /// The file cannot be read or written.
    pub fn edit<R>(&self, edit: impl FnOnce(&mut Acls) -> R) -> Result<R, FileError> {
        let _one_at_a_time = self
            .editing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(path) = self.acls.path() else {
            // Access control always has its file; nothing to edit otherwise.
            let mut acls = Acls::clone(&self.acls.current());
            return Ok(edit(&mut acls));
        };
        let mut acls = Acls::load(path)?;
        let result = edit(&mut acls);
        acls.save(path)?;
        self.acls.replace(acls);
        Ok(result)
    }
}

/// The principal of a connection that has not logged in: its certificate's name, or anonymous.
pub(crate) fn principal_of(certificate_name: Option<&str>) -> String {
    certificate_name.map_or_else(|| ANONYMOUS.to_owned(), |name| format!("User:{name}"))
}

impl KafkaFrontEnd {
    /// Takes the snapshot of the ACLs this request is judged by.
    pub(crate) fn refresh_authorizer(&mut self) {
        if let Some(access) = &self.config.access {
            self.authorizer = Some(access.now());
        }
    }

    /// The ACLs now (none without access control).
    pub(crate) fn current_acls(&self) -> Arc<Acls> {
        self.config
            .access
            .as_ref()
            .map(|access| access.acls.current())
            .unwrap_or_default()
    }

    /// [`AccessControl::edit`], its error as text for an answer.
    pub(crate) fn edit_acls<R>(&self, edit: impl FnOnce(&mut Acls) -> R) -> Result<R, String> {
        match &self.config.access {
            Some(access) => access.edit(edit).map_err(|error| {
                tracing::warn!(%error, "the ACLs file could not be edited");
                error.to_string()
            }),
            None => Err("no acls_file".into()),
        }
    }

    /// Whether the principal may do `operation` on the resource; a denial is logged at info.
    pub(crate) fn may(
        &self,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.judge(operation, resource_type, name, true)
    }

    /// As [`Self::may`], a denial logged at debug only: for what a listing leaves out.
    pub(crate) fn may_see(
        &self,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.judge(operation, resource_type, name, false)
    }

    /// Whether the principal may create the topic `name`: Create on the cluster or on it.
    pub(crate) fn may_create_topic(&self, name: &str) -> bool {
        self.judge(
            Operation::Create,
            ResourceType::Cluster,
            CLUSTER_NAME,
            false,
        ) || self.may(Operation::Create, ResourceType::Topic, name)
    }

    /// UNKNOWN_TOPIC_OR_PARTITION when the topic `name` does not exist and the principal may not
    /// create it: a produce creates a topic only for whom Create allows.
    pub(crate) fn unknown_to_creator(&self, name: &str) -> Option<kafka_protocol::ResponseError> {
        if self.authorizer.is_none() || self.broker.topic(name, false).is_ok() {
            return None;
        }
        (!self.may_create_topic(name))
            .then_some(kafka_protocol::ResponseError::UnknownTopicOrPartition)
    }

    /// Whether the principal may get an idempotent producer id: IdempotentWrite on the cluster,
    /// or Write on some topic (KIP-679).
    pub(crate) fn may_write_idempotently(&self) -> bool {
        let Some(authorizer) = &self.authorizer else {
            return true;
        };
        let allowed = self.judge(
            Operation::IdempotentWrite,
            ResourceType::Cluster,
            CLUSTER_NAME,
            false,
        ) || authorizer.allows_any(
            &self.principal,
            Some(self.peer.addr.ip()),
            Operation::Write,
            ResourceType::Topic,
        );
        if !allowed {
            tracing::info!(principal = %self.principal, operation = "IDEMPOTENT_WRITE",
                resource = "CLUSTER kafka-cluster", "denied: neither IdempotentWrite on the cluster nor Write on any topic");
        }
        allowed
    }

    /// Whether an epoch bump of `producer_id` may go ahead for this principal: with
    /// authorisation on, only for its owner (anyone else gets a new id instead).
    pub(crate) fn owns_producer(&self, producer_id: i64) -> bool {
        let Some(access) = &self.config.access else {
            return true;
        };
        access.owners.owner(producer_id).as_deref() == Some(self.principal.as_str())
    }

    /// Records that `producer_id` is this principal's, before it is handed out.
    ///
    /// # Errors
    /// The record could not be stored: the id must not be handed out.
    pub(crate) fn record_producer(&self, producer_id: i64) -> Result<(), FileError> {
        match &self.config.access {
            Some(access) => access.owners.record(
                producer_id,
                &self.principal,
                minibroker_records::now_millis(),
            ),
            None => Ok(()),
        }
    }

    /// CLUSTER_AUTHORIZATION_FAILED for a batch whose producer id was not issued to this
    /// principal (another's, or no one's): with authorisation on, no one writes as another
    /// producer, nor fences it.
    pub(crate) fn foreign_producer(&self, batch: &[u8]) -> Option<kafka_protocol::ResponseError> {
        let access = self.config.access.as_ref()?;
        let producer_id = minibroker_records::inspect(batch).ok()?.producer_id;
        if producer_id < 0 {
            return None;
        }
        let refused = Some(kafka_protocol::ResponseError::ClusterAuthorizationFailed);
        match access.owners.check_use(
            producer_id,
            &self.principal,
            minibroker_records::now_millis(),
        ) {
            Ok(Use::Owner) => None,
            Ok(Use::Other(owner)) => {
                tracing::info!(principal = %self.principal, producer_id, %owner,
                    "denied: the producer id was issued to another principal");
                refused
            }
            Ok(Use::Nobody) => {
                tracing::info!(principal = %self.principal, producer_id,
                    "denied: the producer id was not issued to anyone (InitProducerId first)");
                refused
            }
            Err(error) => {
                tracing::warn!(%error, "the producer-owners file could not be written");
                Some(kafka_protocol::ResponseError::KafkaStorageError)
            }
        }
    }

    fn judge(
        &self,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
        loud: bool,
    ) -> bool {
        let Some(authorizer) = &self.authorizer else {
            return true;
        };
        let decision = authorizer.authorize(&Request {
            principal: &self.principal,
            host: Some(self.peer.addr.ip()),
            operation,
            resource_type,
            name,
        });
        if !decision.allowed {
            if loud {
                tracing::info!(principal = %self.principal, %operation, resource = %format!("{resource_type} {name}"), %decision, "denied");
            } else {
                tracing::debug!(principal = %self.principal, %operation, resource = %format!("{resource_type} {name}"), %decision, "left out");
            }
        }
        decision.allowed
    }
}
