//! The requests a broker of a cluster serves differently from a broker on its own
//! (`minibroker_host::ClusterLink`): Produce is judged and stored by the cluster's database,
//! producer ids and topics are the cluster's, Metadata lists the live brokers. Reads are the
//! same handlers as a single broker's: they read the broker's copy of what the cluster
//! committed. Consumer groups and transactional ids are coordinated under leases
//! (`shared_groups`); a transactional batch is checked against its transaction in the database,
//! under its partition's lock.

use bytes::{Bytes, BytesMut};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{BrokerId, FetchRequest, ListOffsetsRequest};
use kafka_protocol::protocol::StrBytes;
use minibroker_broker::{BrokerError, Overrides};
use minibroker_cluster::Deleted;
use minibroker_cluster::{Append, AppendError, AppendRefused};
use minibroker_host::{ByTime, ClusterError, ClusterLink};
use minibroker_records::Inspected;
use std::sync::Arc;

use super::NONE;
use super::code;
use super::fetch::{Older, OlderBatches};
use super::implicit_add::TransactionAllowance;
use super::offsets::{EARLIEST, Known, MAX_TIMESTAMP};
use super::produce::{Gate, refused, verdict_answer};
use super::topics::Refused;
use crate::deferred::DeferredProduce;
use crate::front_end::KafkaFrontEnd;
use crate::produce_wire::{self, PartitionAnswer, ProduceView};

impl KafkaFrontEnd {
    /// Serves a Produce (read from `frame`) on a broker of `cluster`: every partition's batch
    /// goes to the cluster's next window at once, and the answer's place in `out` is kept
    /// until the windows have committed ([`Self::answer_deferred`]), so the requests a
    /// connection pipelines share windows instead of waiting for one each.
    pub(crate) async fn produce_shared(
        &mut self,
        cluster: &Arc<ClusterLink>,
        request: &ProduceView<'_>,
        frame: &Bytes,
        version: i16,
        out: &BytesMut,
    ) {
        // A transactional request: may its principal write the transactional id (and, from
        // Produce v12, the partitions its batches add themselves)? The partitions check the
        // rest under their locks, in the database.
        let allowance = if request.transactional_id.is_some() {
            let batches: Vec<_> = request
                .partitions
                .iter()
                .map(|data| Inspected::new(data.records.unwrap_or_default()))
                .collect();
            self.allow_transaction(request, &batches, version).await
        } else {
            TransactionAllowance::default()
        };
        let mut gate = Gate::new(request, allowance);
        let mut answers = Vec::with_capacity(request.partitions.len());
        let mut pending = Vec::new();
        for (at, data) in request.partitions.iter().enumerate() {
            let topic = request.topics[data.topic];
            let batch = Inspected::new(data.records.unwrap_or_default());
            let info = batch.as_ref().ok().map(|batch| *batch.info());
            if let Some(info) = &info {
                self.learn_producer_owner(cluster, info.producer_id).await;
            }
            if let Some(refusal) = gate.refusal(self, data, topic, info.as_ref()) {
                answers.push(refusal);
                continue;
            }
            let submitted = match self.shared_append(cluster, topic, data.index, batch).await {
                Ok(append) => cluster
                    .submit(append)
                    .await
                    .map_err(|error| (append_refusal(&error, version), error.to_string())),
                Err(refusal) => Err(refusal),
            };
            match (submitted, info) {
                (Ok(submitted), Some(info)) => {
                    // Its place, filled once the window has committed.
                    answers.push(refused(
                        data.index,
                        ResponseError::UnknownServerError,
                        String::new(),
                    ));
                    pending.push((at, submitted, info));
                }
                (Err((error, message)), _) => answers.push(refused(data.index, error, message)),
                // A batch that did not read is refused by `shared_append` before it is sent.
                (Ok(_), None) => answers.push(refused(
                    data.index,
                    ResponseError::CorruptMessage,
                    "not a record batch".to_owned(),
                )),
            }
        }
        // acks=0 gets no answer; its batches are committed all the same.
        if request.acks != 0 {
            self.deferred.push(DeferredProduce {
                at: out.len(),
                frame: frame.clone(),
                version,
                answers,
                pending,
            });
        }
    }

    /// Writes the answers of the Produces [`Self::produce_shared`] deferred into their places
    /// in `out`, once their batches' windows have committed.
    pub(crate) async fn answer_deferred(&mut self, out: &mut BytesMut) {
        let deferred = std::mem::take(&mut self.deferred);
        let Some(cluster) = self.cluster.clone().filter(|_| !deferred.is_empty()) else {
            return;
        };
        let mut answered = BytesMut::with_capacity(out.len() + 128 * deferred.len());
        let mut copied = 0;
        for produce in deferred {
            answered.extend_from_slice(&out[copied..produce.at]);
            copied = produce.at;
            let Ok(request) = produce_wire::read(&produce.frame, produce.version) else {
                continue; // it was read once already
            };
            let mut answers = produce.answers;
            for (at, pending, info) in produce.pending {
                let data = &request.partitions[at];
                let topic = request.topics[data.topic];
                let partition = u32::try_from(data.index).unwrap_or(u32::MAX);
                let records = data.records.unwrap_or_default();
                let outcome = cluster.outcome(pending, topic, partition, records).await;
                answers[at] = match outcome {
                    Ok(appended) => {
                        let (error, base_offset) =
                            verdict_answer(topic, partition, appended.verdict, &info);
                        PartitionAnswer {
                            index: data.index,
                            error_code: code(error),
                            base_offset,
                            log_start_offset: appended.log_start_offset,
                            error_message: None,
                        }
                    }
                    Err(error) => refused(
                        data.index,
                        append_refusal(&error, produce.version),
                        error.to_string(),
                    ),
                };
            }
            produce_wire::write_answer(&mut answered, &request, &answers, produce.version);
        }
        answered.extend_from_slice(&out[copied..]);
        *out = answered;
    }

    /// The cluster's append of one partition's batch, checked as a broker on its own checks it.
    async fn shared_append(
        &self,
        cluster: &ClusterLink,
        topic: &str,
        index: i32,
        batch: Result<Inspected<'_>, minibroker_records::RecordsError>,
    ) -> Result<Append, (ResponseError, String)> {
        let unknown = || {
            (
                ResponseError::UnknownTopicOrPartition,
                format!("topic {topic:?} partition {index} is not in the cluster"),
            )
        };
        let batch = batch.map_err(|error| (ResponseError::CorruptMessage, error.to_string()))?;
        let header = self
            .broker
            .check_batch(batch)
            .map_err(|error| (crate::errors::code_of(&error), error.to_string()))?;
        let create = self.may_create_topic(topic);
        let shared = match cluster.topic(topic, create).await {
            Ok(Some(shared)) => shared,
            Ok(None) => return Err(unknown()),
            Err(error) => return Err((ResponseError::KafkaStorageError, error.to_string())),
        };
        if index < 0 || index >= shared.partitions {
            return Err(unknown());
        }
        Ok(Append {
            topic_id: shared.id,
            partition: index,
            header,
            offsets: batch.info().record_count,
            bytes: Bytes::copy_from_slice(batch.bytes()),
        })
    }

    /// InitProducerId on a broker of `cluster`: a new id from the cluster's sequence, epoch 0.
    /// A producer that asks to bump the epoch of its id gets a new id, as Kafka answers a
    /// non-transactional request it cannot match.
    pub(crate) async fn shared_producer_id(
        &self,
        cluster: &ClusterLink,
    ) -> Result<i64, ResponseError> {
        if !self.may_write_idempotently() {
            return Err(ResponseError::ClusterAuthorizationFailed);
        }
        let owner = self.guard.is_on().then(|| self.guard.principal());
        let id = cluster.new_producer_id(owner).await.map_err(|error| {
            tracing::warn!(%error, "no producer id: the cluster's database did not answer");
            ResponseError::CoordinatorNotAvailable
        })?;
        self.record_producer(id).map_err(|error| {
            tracing::warn!(%error, "the producer-owners file could not be written");
            ResponseError::KafkaStorageError
        })?;
        Ok(id)
    }

    /// With authorisation on, learns from the cluster whose `producer_id` (a batch's) is, when
    /// another broker issued it, so this broker judges its use as that broker would. An id the
    /// cluster has no owner for stays unknown here, and is refused.
    async fn learn_producer_owner(&self, cluster: &ClusterLink, producer_id: i64) {
        if !self.guard.is_on() || producer_id < 0 || self.guard.knows_producer(producer_id) {
            return;
        }
        match cluster.producer_owner(producer_id).await {
            Ok(Some(owner)) => {
                if let Err(error) = self.guard.remember_producer_owner(producer_id, &owner) {
                    tracing::warn!(%error, producer_id, "a producer id's owner could not be remembered");
                }
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, producer_id, "a producer id's owner could not be asked of the cluster");
            }
        }
    }

    /// The live brokers of `cluster` as Metadata lists them, by node id; this broker alone
    /// when the database cannot be asked (it serves every partition all the same).
    pub(crate) async fn shared_brokers(
        &self,
        cluster: &ClusterLink,
    ) -> Vec<MetadataResponseBroker> {
        let members = match cluster.members().await {
            Ok(members) => members,
            Err(error) => {
                tracing::warn!(%error, "Metadata lists this broker alone: the cluster's database did not answer");
                Vec::new()
            }
        };
        let mut brokers: Vec<_> = members
            .into_iter()
            .map(|member| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(member.node_id))
                    .with_host(StrBytes::from_string(member.kafka_host))
                    .with_port(i32::from(member.kafka_port))
            })
            .collect();
        if !brokers.iter().any(|broker| broker.node_id == self.node()) {
            brokers.push(self.this_broker());
            brokers.sort_by_key(|broker| broker.node_id);
        }
        brokers
    }

    /// Creates topic `name` in the cluster, with `partitions` partitions and its own
    /// `settings`, checked as a broker on its own checks them.
    pub(crate) async fn create_shared_topic(
        &self,
        cluster: &ClusterLink,
        name: &str,
        partitions: u32,
        settings: &[(&str, &str)],
    ) -> Result<(), Refused> {
        let settings = self
            .broker
            .parse_topic_settings(settings)
            .and_then(|overrides| shared_settings(&overrides))
            .map_err(Refused::Broker)?;
        minibroker_broker::validate_topic_name(name).map_err(Refused::Broker)?;
        let count = i32::try_from(partitions)
            .ok()
            .filter(|count| *count > 0)
            .ok_or_else(|| {
                Refused::Request(
                    ResponseError::InvalidPartitions,
                    format!("a topic needs 1 to {} partitions", i32::MAX),
                )
            })?;
        match cluster.create_topic(name, count, &settings).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Refused::Request(
                ResponseError::TopicAlreadyExists,
                format!("topic {name:?} already exists"),
            )),
            Err(error) => Err(Refused::Request(
                ResponseError::KafkaStorageError,
                error.to_string(),
            )),
        }
    }

    /// Whether `settings` could be a new topic's here (CreateTopics with `validate_only`): on a
    /// broker of a cluster, also what a cluster's topic may not have yet.
    pub(crate) fn check_new_topic_settings(
        &self,
        settings: &[(&str, &str)],
    ) -> Result<(), BrokerError> {
        let overrides = self.broker.parse_topic_settings(settings)?;
        if self.cluster.is_some() {
            shared_settings(&overrides)?;
        }
        Ok(())
    }

    /// Changes the cluster's topic `name`'s own settings to what `change` makes of them.
    pub(crate) async fn alter_shared_settings(
        &self,
        cluster: &ClusterLink,
        name: &str,
        change: impl Fn(&Overrides) -> Result<Overrides, BrokerError>,
        validate_only: bool,
    ) -> Result<(), Refused> {
        let changed = cluster
            .change_topic_settings(
                name,
                |current| {
                    let current: Vec<(&str, &str)> = current
                        .iter()
                        .map(|(name, value)| (name.as_str(), value.as_str()))
                        .collect();
                    let current = self.broker.parse_topic_settings(&current)?;
                    shared_settings(&change(&current)?)
                },
                validate_only,
            )
            .await;
        changed.map_err(|error| match error {
            ClusterError::Refused(error) => Refused::Broker(error),
            ClusterError::UnknownTopic(_) => {
                Refused::Request(ResponseError::UnknownTopicOrPartition, error.to_string())
            }
            error => Refused::Request(ResponseError::KafkaStorageError, error.to_string()),
        })
    }

    /// DeleteRecords of `topic`/`partition` below `before` on a broker of `cluster`: the new
    /// start (low watermark), or Kafka's error.
    pub(crate) async fn delete_shared_records(
        cluster: &ClusterLink,
        topic: &str,
        partition: i32,
        before: i64,
    ) -> Result<i64, ResponseError> {
        match cluster.delete_records(topic, partition, before).await {
            Ok(Deleted::Start(start)) => Ok(start),
            Ok(Deleted::PastEnd { .. }) => Err(ResponseError::OffsetOutOfRange),
            Ok(Deleted::UnknownPartition) => Err(ResponseError::UnknownTopicOrPartition),
            Err(error) => {
                tracing::warn!(topic, partition, %error, "DeleteRecords: the cluster's database did not answer");
                Err(ResponseError::KafkaStorageError)
            }
        }
    }

    /// On a broker of a cluster, brings its copy up to what the cluster committed, for a read
    /// (Fetch, ListOffsets) that must see every batch acknowledged so far, by any broker.
    pub(crate) async fn catch_up(&self) {
        if let Some(cluster) = &self.cluster
            && let Err(error) = cluster.catch_up().await
        {
            tracing::warn!(%error, "served from this broker's copy as it is: the cluster's database did not answer");
        }
    }

    /// ListOffsets' answers a broker of `cluster` finds beyond its copy: the earliest offset is
    /// the cluster's start (the copy may hold less), and lookups by time (the largest timestamp
    /// too) are made in the database, which holds what the copy no longer does. A lookup the database could not
    /// answer is left to the copy.
    pub(crate) async fn shared_offsets(
        cluster: &ClusterLink,
        request: &ListOffsetsRequest,
    ) -> Known {
        let mut known = Known::new();
        for topic in &request.topics {
            for wanted in &topic.partitions {
                let Ok(partition) = u32::try_from(wanted.partition_index) else {
                    continue;
                };
                let answer = if wanted.timestamp == EARLIEST {
                    cluster
                        .log_start(&topic.name, partition)
                        .map(|start| (start, NONE))
                } else if let Some(by_time) = by_time(wanted.timestamp) {
                    from_database(
                        cluster
                            .offset_by_time(&topic.name, partition, by_time)
                            .await,
                    )
                } else {
                    None
                };
                if let Some(answer) = answer {
                    known.insert((topic.name.to_string(), wanted.partition_index), answer);
                }
            }
        }
        known
    }

    /// The batches a Fetch on a broker of `cluster` reads from the database: those of each
    /// partition it asks from an offset the copy no longer holds (the copy is a cache of the
    /// newest), by topic and partition. For a read_committed one, with the copy's last stable
    /// offset as it was before the aborted transactions were read: every transaction that ended
    /// below it is among them, so the answer never shows a batch whose abort it does not name
    /// (however long the fetch then waits).
    pub(crate) async fn shared_older_batches(
        &self,
        cluster: &ClusterLink,
        request: &FetchRequest,
    ) -> OlderBatches {
        let mut older = OlderBatches::new();
        for topic in &request.topics {
            for wanted in &topic.partitions {
                let Ok(partition) = u32::try_from(wanted.partition) else {
                    continue;
                };
                let max_bytes = usize::try_from(wanted.partition_max_bytes).unwrap_or(0);
                let read = cluster
                    .read_older(&topic.topic, partition, wanted.fetch_offset, max_bytes)
                    .await;
                let key = (topic.topic.to_string(), wanted.partition);
                let read = match read {
                    // A read_committed one is told the aborted transactions among them.
                    Ok(Some(batches)) if request.isolation_level == 1 && !batches.is_empty() => {
                        let stable = self.broker.last_stable_offset(&topic.topic, partition).ok();
                        let to = batches.last().map_or(wanted.fetch_offset, |last| {
                            minibroker_records::end_offset(last) - 1
                        });
                        cluster
                            .aborted_between(&topic.topic, partition, wanted.fetch_offset, to)
                            .await
                            .map(|aborted| {
                                Some(Older {
                                    batches,
                                    aborted,
                                    stable,
                                })
                            })
                    }
                    Ok(Some(batches)) => Ok(Some(Older {
                        batches,
                        aborted: Vec::new(),
                        stable: None,
                    })),
                    Ok(None) => Ok(None),
                    Err(error) => Err(error),
                };
                match read {
                    Ok(Some(read)) => {
                        older.insert(key, Ok(read));
                    }
                    Ok(None) => {}
                    Err(error) => {
                        // Never answered from the copy, which would say out of range: the
                        // client retries.
                        tracing::warn!(%error, "a Fetch below this broker's copy could not be read from the cluster's database");
                        older.insert(key, Err(ResponseError::KafkaStorageError));
                    }
                }
            }
        }
        older
    }

    /// The first offset of `topic`/`partition`: the cluster's on a broker of a cluster (its
    /// copy may hold less), else `local`, the broker's own.
    pub(crate) fn log_start_of(&self, topic: &str, partition: u32, local: i64) -> i64 {
        self.cluster
            .as_ref()
            .and_then(|cluster| cluster.log_start(topic, partition))
            .unwrap_or(local)
    }

    /// INVALID_REQUEST, saying why, for `what` (an admin change) on a broker of a cluster: its
    /// brokers do not share it yet, and a change to one broker's copy alone would be undone by
    /// the copy or differ between brokers.
    pub(crate) fn not_in_a_cluster(&self, what: &str) -> Result<(), Refused> {
        match self.cluster {
            Some(_) => Err(Refused::Request(
                ResponseError::InvalidRequest,
                format!("{what} is not served by a broker of a cluster yet"),
            )),
            None => Ok(()),
        }
    }

    /// The cluster's topics named in a Metadata request, found (or created, when `create` and
    /// the principal may) before the request is served from the broker's copy.
    pub(crate) async fn hold_shared_topics(
        &self,
        cluster: &ClusterLink,
        names: &[String],
        create: bool,
    ) {
        for name in names {
            let create = create && self.may_create_topic(name);
            if let Err(error) = cluster.topic(name, create).await {
                tracing::warn!(topic = %name, %error, "the cluster's topic could not be looked up");
            }
        }
    }
}

/// `overrides` as a topic of a cluster keeps them: Kafka's names and values. Compaction and
/// LogAppendTime are refused: a broker of a cluster does not compact, nor stamp batches with
/// its own time, yet.
fn shared_settings(overrides: &Overrides) -> Result<Vec<(String, String)>, BrokerError> {
    let refused = |name: &str, reason: &str| BrokerError::InvalidConfig {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    if overrides
        .get("cleanup.policy")
        .is_some_and(|policy| policy.split(',').any(|item| item.trim() == "compact"))
    {
        return Err(refused(
            "cleanup.policy",
            "compaction is not served by a broker of a cluster yet: use cleanup.policy=delete",
        ));
    }
    if overrides.get("message.timestamp.type") == Some("LogAppendTime") {
        return Err(refused(
            "message.timestamp.type",
            "LogAppendTime is not served by a broker of a cluster yet: use CreateTime",
        ));
    }
    Ok(overrides
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect())
}

/// The Produce error (at Produce `version`) for a batch the cluster did not store: retriable
/// unless the batch itself was refused; a transactional refusal as a single broker answers it.
fn append_refusal(error: &AppendError, version: i16) -> ResponseError {
    match error {
        AppendError::Refused(AppendRefused::NotAddedToTransaction { producer_id, epoch }) => {
            let refused = BrokerError::NotAddedToTransaction {
                producer_id: *producer_id,
                epoch: *epoch,
            };
            crate::errors::produce_code(&refused, version)
        }
        AppendError::Refused(AppendRefused::AbortedEpoch { producer_id, epoch }) => {
            crate::errors::code_of(&BrokerError::AbortedEpoch {
                producer_id: *producer_id,
                epoch: *epoch,
            })
        }
        AppendError::Refused(AppendRefused::InTransaction { .. }) => ResponseError::InvalidTxnState,
        AppendError::Refused(AppendRefused::UnknownPartition { .. }) => {
            ResponseError::UnknownTopicOrPartition
        }
        AppendError::Refused(AppendRefused::NotABatch { .. }) => ResponseError::CorruptMessage,
        // Stored or not: the producer's retry meets the rule, and is answered DUPLICATE with
        // the original offset when it was.
        AppendError::Unknown(_) => ResponseError::RequestTimedOut,
        AppendError::Unavailable(_) => ResponseError::KafkaStorageError,
    }
}

/// The lookup by time a ListOffsets timestamp asks for, if it is one.
fn by_time(timestamp: i64) -> Option<ByTime> {
    match timestamp {
        MAX_TIMESTAMP => Some(ByTime::Largest),
        at if at >= 0 => Some(ByTime::AtOrAfter(at)),
        _ => None,
    }
}

/// A lookup by time made in the database: its answer (no record: `NONE`), or `None` when the
/// database could not be asked, for the copy to answer.
fn from_database(found: Result<Option<(i64, i64)>, ClusterError>) -> Option<(i64, i64)> {
    match found {
        Ok(found) => Some(found.unwrap_or((NONE, NONE))),
        Err(error) => {
            tracing::warn!(%error, "ListOffsets by time answered from this broker's copy: the cluster's database did not answer");
            None
        }
    }
}
