//! Authorisation for every listener: the broker's ACLs and who owns which producer id
//! ([`AccessControl`], one per broker), and one connection's [`Guard`] — its principal and the
//! snapshot of the ACLs its current request is judged by. Each front end asks the guard what
//! Kafka's `KafkaApis` asks for its API and answers a refusal in its own protocol; the decision
//! itself is `minibroker_security::acl`'s.
//!
//! The principal is `User:NAME` after a SASL login, the client certificate's common name on a
//! TLS listener without SASL, and `User:ANONYMOUS` otherwise. Authorisation is on when
//! `acls_file` is set; the file is read again (at most once a second) when it changes. A direct
//! denial is logged at info with the principal, operation and resource; a topic or group merely
//! left out of a listing, at debug.

use minibroker_security::acl::{ANONYMOUS, Acls, Authorizer, CLUSTER_NAME, Request};
use minibroker_security::{FileError, Operation, ProducerOwners, Reloading, ResourceType, Use};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::Config;
use minibroker_net::Peer;

/// How often a changed ACLs file is noticed, at most (one `stat` per this, not per request).
const ACLS_RECHECK: Duration = Duration::from_secs(1);

/// Milliseconds since the epoch, as the producer-owners records and the cluster's retention
/// count them.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

/// The broker's ACLs, settings and producer-id owners.
#[derive(Debug)]
pub struct AccessControl {
    acls: Reloading<Acls>,
    /// Which principal each producer id was issued to (`producer-owners` in the data
    /// directory of a durable broker).
    owners: ProducerOwners,
    super_users: Arc<Vec<String>>,
    allow_everyone_if_no_acl_found: bool,
}

impl AccessControl {
    /// The access control `config` asks for: `None` when it sets no `acls_file`.
    ///
    /// # Errors
    /// The ACLs file or the producer-owners file cannot be read, or a line of one does not.
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
            now_ms(),
        )?;
        Ok(Some(Self {
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

    /// Applies `edit` to the ACLs file as it is now on disk, saves it, and holds the result at
    /// once (every connection judges its next request by it).
    ///
    /// # Errors
    /// The file cannot be read or written.
    pub fn edit<R>(&self, edit: impl FnOnce(&mut Acls) -> R) -> Result<R, FileError> {
        if self.acls.path().is_none() {
            // Access control always has its file; nothing to edit otherwise.
            let mut acls = Acls::clone(&self.acls.current());
            return Ok(edit(&mut acls));
        }
        self.acls.edit("acls_file", Acls::save, edit)
    }
}

/// Whether a batch's producer id may be written with by the connection's principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerUse {
    /// Yes: its own id, no id (-1), or authorisation is off.
    Allowed,
    /// No: another principal's id, or one issued to no one.
    Refused,
    /// No: an id issued once and forgotten since; the producer is to ask for a new one.
    Forgotten,
    /// The owners file could not be written (a refreshed record): not stored.
    StorageFailed,
}

/// One connection's principal and the ACLs its current request is judged by.
#[derive(Debug)]
pub struct Guard {
    access: Option<Arc<AccessControl>>,
    snapshot: Option<Authorizer>,
    principal: String,
    host: IpAddr,
}

impl Guard {
    /// The guard of a connection from `peer` under `access` (`None`: authorisation is off);
    /// its principal is the certificate's name, or anonymous, until a login says otherwise.
    #[must_use]
    pub fn new(access: Option<Arc<AccessControl>>, peer: &Peer) -> Self {
        Self {
            snapshot: access.as_ref().map(|access| access.now()),
            access,
            principal: peer
                .certificate_name
                .as_deref()
                .map_or_else(|| ANONYMOUS.to_owned(), |name| format!("User:{name}")),
            host: peer.addr.ip(),
        }
    }

    /// The principal the connection's requests are authorised as.
    #[must_use]
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The connection logged in as `user`.
    pub fn logged_in(&mut self, user: &str) {
        self.principal = format!("User:{user}");
    }

    /// Whether authorisation is on.
    #[must_use]
    pub fn is_on(&self) -> bool {
        self.access.is_some()
    }

    /// The access control, when on.
    #[must_use]
    pub fn access(&self) -> Option<&Arc<AccessControl>> {
        self.access.as_ref()
    }

    /// Takes the snapshot of the ACLs the next request is judged by.
    pub fn refresh(&mut self) {
        if let Some(access) = &self.access {
            self.snapshot = Some(access.now());
        }
    }

    /// The ACLs now (none without access control).
    #[must_use]
    pub fn current_acls(&self) -> Arc<Acls> {
        self.access
            .as_ref()
            .map(|access| access.acls.current())
            .unwrap_or_default()
    }

    /// Whether the principal may do `operation` on the resource; a denial is logged at info.
    #[must_use]
    pub fn may(&self, operation: Operation, resource_type: ResourceType, name: &str) -> bool {
        self.judge(operation, resource_type, name, true)
    }

    /// As [`Self::may`], a denial logged at debug only: for what a listing leaves out.
    #[must_use]
    pub fn may_see(&self, operation: Operation, resource_type: ResourceType, name: &str) -> bool {
        self.judge(operation, resource_type, name, false)
    }

    /// Whether the principal may create the topic `name`: Create on the cluster or on it.
    #[must_use]
    pub fn may_create_topic(&self, name: &str) -> bool {
        self.judge(
            Operation::Create,
            ResourceType::Cluster,
            CLUSTER_NAME,
            false,
        ) || self.may(Operation::Create, ResourceType::Topic, name)
    }

    /// Whether the principal may get an idempotent producer id: IdempotentWrite on the
    /// cluster, or Write on some topic (KIP-679).
    #[must_use]
    pub fn may_write_idempotently(&self) -> bool {
        let Some(snapshot) = &self.snapshot else {
            return true;
        };
        let allowed = self.judge(
            Operation::IdempotentWrite,
            ResourceType::Cluster,
            CLUSTER_NAME,
            false,
        ) || snapshot.allows_any(
            &self.principal,
            Some(self.host),
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
    #[must_use]
    pub fn owns_producer(&self, producer_id: i64) -> bool {
        let Some(access) = &self.access else {
            return true;
        };
        access.owners.owner(producer_id).as_deref() == Some(self.principal.as_str())
    }

    /// Whether this broker remembers whose `producer_id` is (with authorisation off, there is
    /// nothing to know: `true`).
    #[must_use]
    pub fn knows_producer(&self, producer_id: i64) -> bool {
        self.access
            .as_ref()
            .is_none_or(|access| access.owners.owner(producer_id).is_some())
    }

    /// Remembers that `producer_id` was issued to `owner`: by another broker of a cluster,
    /// which recorded it in the cluster's database.
    ///
    /// # Errors
    /// The record could not be stored.
    pub fn remember_producer_owner(&self, producer_id: i64, owner: &str) -> Result<(), FileError> {
        match &self.access {
            Some(access) => access.owners.record(producer_id, owner, now_ms()),
            None => Ok(()),
        }
    }

    /// Records that `producer_id` is this principal's, before it is handed out.
    ///
    /// # Errors
    /// The record could not be stored: the id must not be handed out.
    pub fn record_producer(&self, producer_id: i64) -> Result<(), FileError> {
        match &self.access {
            Some(access) => access.owners.record(producer_id, &self.principal, now_ms()),
            None => Ok(()),
        }
    }

    /// Whether the principal may write a batch of `producer_id` (-1: no producer): with
    /// authorisation on, no one writes as another producer, nor fences it.
    #[must_use]
    pub fn producer_use(&self, producer_id: i64) -> ProducerUse {
        let Some(access) = &self.access else {
            return ProducerUse::Allowed;
        };
        if producer_id < 0 {
            return ProducerUse::Allowed;
        }
        match access
            .owners
            .check_use(producer_id, &self.principal, now_ms())
        {
            Ok(Use::Owner) => ProducerUse::Allowed,
            Ok(Use::Other(owner)) => {
                tracing::info!(principal = %self.principal, producer_id, %owner,
                    "denied: the producer id was issued to another principal");
                ProducerUse::Refused
            }
            Ok(Use::Forgotten) => {
                tracing::info!(principal = %self.principal, producer_id,
                    "refused: the producer id was forgotten (expired, or its owner's least recently used beyond max_producer_ids)");
                ProducerUse::Forgotten
            }
            Ok(Use::Nobody) => {
                tracing::info!(principal = %self.principal, producer_id,
                    "denied: the producer id was not issued to anyone (init the producer first)");
                ProducerUse::Refused
            }
            Err(error) => {
                tracing::warn!(%error, "the producer-owners file could not be written");
                ProducerUse::StorageFailed
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
        let Some(snapshot) = &self.snapshot else {
            return true;
        };
        let decision = snapshot.authorize(&Request {
            principal: &self.principal,
            host: Some(self.host),
            operation,
            resource_type,
            name,
        });
        if !decision.allowed {
            let resource = format!("{resource_type} {name}");
            if loud {
                tracing::info!(principal = %self.principal, %operation, %resource, %decision, "denied");
            } else {
                tracing::debug!(principal = %self.principal, %operation, %resource, %decision, "left out");
            }
        }
        decision.allowed
    }
}
