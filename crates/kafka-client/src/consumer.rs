//! [`KafkaConsumer`]: a member of a consumer group (Kafka's classic protocol) reading one topic,
//! so a checker can watch what consumers are shown while producers write, and judge it.
//!
//! It finds the group's coordinator, joins (JoinGroup, asked again with the member id the
//! coordinator gives), and, when it is the leader, assigns the topic's partitions to the
//! members in ranges (the `range` assignor's rule for one topic). It starts each partition it
//! is given at the group's committed offset, or at the log's start. A poll sends one Fetch to
//! each leader of its partitions, at `read_uncommitted` or `read_committed`; for the latter it
//! drops what the broker names as aborted, as Kafka's clients do ([`crate::fetched`]). It
//! heartbeats between polls, and joins again when the coordinator says the group is
//! rebalancing. Every poll says which assignment (generation) it was made under, so a reader of
//! the polls can tell a consumer that skipped records from one that was handed a partition.
//!
//! It is written to be watched, not to be fast: one request at a time, no prefetching.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, BrokerId, ConsumerProtocolAssignment, ConsumerProtocolSubscription, FetchRequest,
    FetchResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use thiserror::Error;

use crate::{KafkaClientError, KafkaConnection, error_name};

mod assignor;
mod leaders;

use leaders::Leaders;

/// The versions used (Kafka 2.5 and later, and minibroker, speak them).
const JOIN_GROUP: i16 = 5;
const SYNC_GROUP: i16 = 3;
const HEARTBEAT: i16 = 3;
const LEAVE_GROUP: i16 = 3;
const OFFSET_COMMIT: i16 = 7;
/// The first OffsetFetch with `require_stable` (KIP-447): offsets a transaction holds are
/// answered UNSTABLE_OFFSET_COMMIT until it ends.
const OFFSET_FETCH: i16 = 7;
const FETCH: i16 = 11;

/// FindCoordinator's key type for a group.
const GROUP_KEY: i8 = 0;

/// The consumer protocol's assignor name and the version of its subscription and assignment.
const RANGE: &str = "range";
const CONSUMER_PROTOCOL_VERSION: i16 = 0;

/// Kafka's codes the consumer acts on.
const MEMBER_ID_REQUIRED: i16 = 79;
const REBALANCE_IN_PROGRESS: i16 = 27;
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const NOT_COORDINATOR: i16 = 16;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// How long a Fetch may wait for records.
const FETCH_WAIT_MS: i32 = 200;

/// Pause before asking again after a retriable answer.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);

/// How a [`KafkaConsumer`] reads.
#[derive(Debug, Clone)]
pub struct KafkaConsumerConfig {
    /// The group.
    pub group: String,
    /// The one topic it reads.
    pub topic: String,
    /// `read_committed` (else `read_uncommitted`).
    pub read_committed: bool,
    /// The group's session timeout: a member not heard from for this long is removed.
    pub session_timeout: Duration,
    /// How often it heartbeats.
    pub heartbeat_interval: Duration,
    /// How long any answer may take, and how long joining may take.
    pub answer_timeout: Duration,
}

impl KafkaConsumerConfig {
    /// Reading `topic` as a member of `group`, with 10 s sessions and heartbeats every second.
    #[must_use]
    pub fn new(group: &str, topic: &str, read_committed: bool) -> Self {
        Self {
            group: group.to_owned(),
            topic: topic.to_owned(),
            read_committed,
            session_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(1),
            answer_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a consumer stopped.
#[derive(Debug, Error)]
pub enum KafkaConsumerError {
    /// A request got no answer.
    #[error(transparent)]
    Client(#[from] KafkaClientError),
    /// The broker answered an error that asking again does not cure.
    #[error("the broker answered {} for {what}", error_name(*.code))]
    Broker {
        /// Kafka's error code.
        code: i16,
        /// What was asked.
        what: String,
    },
    /// An answer lacks what was asked for, or carries what cannot be read.
    #[error("Kafka protocol error: {0}")]
    Protocol(String),
    /// A batch did not decode.
    #[error(transparent)]
    Records(#[from] minibroker_records::RecordsError),
    /// Joining took longer than the answer timeout.
    #[error("joining group {group} took longer than {timeout:?} (last: {last})")]
    JoinTimeout {
        /// The group.
        group: String,
        /// The timeout.
        timeout: Duration,
        /// What the last attempt ran into.
        last: String,
    },
}

/// One record a poll returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolledRecord {
    /// Its offset.
    pub offset: i64,
    /// Its value (empty for none).
    pub value: Bytes,
}

/// What one partition gave one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    /// The start it was read after: each assignment, and each rewind to the committed offsets,
    /// is a new one ([`Assigned::session`]).
    pub session: u32,
    /// The assignment it was read under: the group's generation.
    pub generation: i32,
    /// The partition.
    pub partition: i32,
    /// The position the Fetch asked from.
    pub from: i64,
    /// The records shown, in offset order.
    pub records: Vec<PolledRecord>,
}

/// An assignment (or a rewind to the committed offsets): the partitions given, and where each
/// starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    /// Counts the starts of this consumer, from 1.
    pub session: u32,
    /// The group's generation.
    pub generation: i32,
    /// Each partition given and the offset it starts at (the group's committed one, or the
    /// log's start: `None`).
    pub partitions: BTreeMap<i32, Option<i64>>,
}

/// A member of a consumer group reading one topic (see the module docs).
#[derive(Debug)]
pub struct KafkaConsumer {
    bootstrap: String,
    config: KafkaConsumerConfig,
    coordinator: Option<KafkaConnection>,
    member_id: String,
    generation: i32,
    /// The assigned partitions and the next offset of each.
    positions: BTreeMap<i32, i64>,
    leaders: Leaders,
    last_heartbeat: Instant,
    /// Assignments not yet taken by [`Self::take_assignments`].
    assignments: Vec<Assigned>,
    /// The current start's number ([`Assigned::session`]).
    session: u32,
}

impl KafkaConsumer {
    /// Joins `config`'s group through the broker at `bootstrap` and takes its first
    /// assignment.
    ///
    /// # Errors
    /// A broker that cannot be reached, or refuses the group.
    pub async fn join(
        bootstrap: &str,
        config: KafkaConsumerConfig,
    ) -> Result<Self, KafkaConsumerError> {
        let mut consumer = Self {
            bootstrap: bootstrap.to_owned(),
            leaders: Leaders::new(bootstrap, &config.topic, config.answer_timeout),
            config,
            coordinator: None,
            member_id: String::new(),
            generation: -1,
            positions: BTreeMap::new(),
            last_heartbeat: Instant::now(),
            assignments: Vec::new(),
            session: 0,
        };
        consumer.rejoin().await?;
        Ok(consumer)
    }

    /// Its member id.
    #[must_use]
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The group's generation it reads under, and its member id: what a transaction's offsets
    /// are committed under.
    #[must_use]
    pub fn generation(&self) -> i32 {
        self.generation
    }

    /// The group it is a member of.
    #[must_use]
    pub fn group(&self) -> &str {
        &self.config.group
    }

    /// Starts every assigned partition again at the group's committed offset: after a
    /// transaction that carried its offsets aborted, what it read since must be read again.
    ///
    /// # Errors
    /// As [`Self::join`].
    pub async fn rewind(&mut self) -> Result<(), KafkaConsumerError> {
        let partitions: Vec<i32> = self.positions.keys().copied().collect();
        self.start_at_committed(partitions).await
    }

    /// Its assigned partitions, each with the offset it reads next.
    #[must_use]
    pub fn positions(&self) -> &BTreeMap<i32, i64> {
        &self.positions
    }

    /// The assignments it has been given since last asked (each join gives one).
    pub fn take_assignments(&mut self) -> Vec<Assigned> {
        std::mem::take(&mut self.assignments)
    }

    /// One Fetch of every assigned partition (one request per leader): what each gave. It
    /// heartbeats first when one is due, and joins again if the group is rebalancing.
    ///
    /// # Errors
    /// As [`Self::join`]; a partition's error that is not retriable.
    pub async fn poll(&mut self) -> Result<Vec<Polled>, KafkaConsumerError> {
        if self.last_heartbeat.elapsed() >= self.config.heartbeat_interval {
            self.heartbeat().await?;
        }
        let mut by_leader: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
        for (&partition, &position) in &self.positions {
            match self.leaders.leader(partition).await {
                Ok(leader) => by_leader
                    .entry(leader)
                    .or_default()
                    .push((partition, position)),
                // Asked again at the next poll.
                Err(KafkaConsumerError::Client(_)) => self.leaders.forget(),
                Err(error) => return Err(error),
            }
        }
        let mut polled = Vec::new();
        for (leader, partitions) in by_leader {
            match self.fetch(leader, &partitions).await {
                Ok(mut answers) => polled.append(&mut answers),
                Err(KafkaConsumerError::Client(_)) => self.leaders.forget(),
                Err(error) => return Err(error),
            }
        }
        Ok(polled)
    }

    /// Commits its position in every assigned partition; what it committed.
    ///
    /// # Errors
    /// A refusal that is not a rebalance (after a rebalance it joins again and commits
    /// nothing).
    pub async fn commit(&mut self) -> Result<Vec<(i32, i64)>, KafkaConsumerError> {
        let committed: Vec<(i32, i64)> = self.positions.iter().map(|(&p, &o)| (p, o)).collect();
        if committed.is_empty() {
            return Ok(committed);
        }
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.config.group.clone())))
            .with_generation_id_or_member_epoch(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(topic_name(&self.config.topic))
                    .with_partitions(
                        committed
                            .iter()
                            .map(|&(partition, offset)| {
                                OffsetCommitRequestPartition::default()
                                    .with_partition_index(partition)
                                    .with_committed_offset(offset)
                            })
                            .collect(),
                    ),
            ]);
        let answer: OffsetCommitResponse = self
            .coordinator_call(ApiKey::OffsetCommit, OFFSET_COMMIT, &request)
            .await?;
        let code = answer
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.error_code)
            .find(|&code| code != 0)
            .unwrap_or(0);
        match code {
            0 => Ok(committed),
            REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID => {
                self.rejoin().await?;
                Ok(Vec::new())
            }
            code => Err(KafkaConsumerError::Broker {
                code,
                what: format!("OffsetCommit of group {}", self.config.group),
            }),
        }
    }

    /// Leaves the group, so its partitions go to the others at once.
    ///
    /// # Errors
    /// If the coordinator does not answer.
    pub async fn leave(mut self) -> Result<(), KafkaConsumerError> {
        let request = LeaveGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.config.group.clone())))
            .with_members(vec![
                kafka_protocol::messages::leave_group_request::MemberIdentity::default()
                    .with_member_id(StrBytes::from_string(self.member_id.clone())),
            ]);
        let _: LeaveGroupResponse = self
            .coordinator_call(ApiKey::LeaveGroup, LEAVE_GROUP, &request)
            .await?;
        Ok(())
    }

    /// One heartbeat; a rebalance makes it join again.
    async fn heartbeat(&mut self) -> Result<(), KafkaConsumerError> {
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.config.group.clone())))
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()));
        let answer: HeartbeatResponse = self
            .coordinator_call(ApiKey::Heartbeat, HEARTBEAT, &request)
            .await?;
        self.last_heartbeat = Instant::now();
        match answer.error_code {
            0 => Ok(()),
            REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID => self.rejoin().await,
            code => Err(KafkaConsumerError::Broker {
                code,
                what: format!("Heartbeat of group {}", self.config.group),
            }),
        }
    }

    /// Joins (again), takes the new assignment and starts each partition at the group's
    /// committed offset.
    async fn rejoin(&mut self) -> Result<(), KafkaConsumerError> {
        let deadline = Instant::now() + self.config.answer_timeout;
        loop {
            let last = match self.join_once().await {
                Ok(Some(partitions)) => return self.start_at_committed(partitions).await,
                Ok(None) => "the group is rebalancing".to_owned(),
                Err(KafkaConsumerError::Client(error)) => {
                    self.coordinator = None;
                    error.to_string()
                }
                Err(KafkaConsumerError::Broker { code, .. }) if retriable_in_a_group(code) => {
                    if code == UNKNOWN_MEMBER_ID {
                        self.member_id.clear();
                    }
                    self.coordinator = None;
                    error_name(code)
                }
                Err(error) => return Err(error),
            };
            if Instant::now() >= deadline {
                return Err(KafkaConsumerError::JoinTimeout {
                    group: self.config.group.clone(),
                    timeout: self.config.answer_timeout,
                    last,
                });
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// One JoinGroup and SyncGroup: the partitions assigned, or `None` when the group moved on
    /// in between.
    async fn join_once(&mut self) -> Result<Option<Vec<i32>>, KafkaConsumerError> {
        let subscription = ConsumerProtocolSubscription::default()
            .with_topics(vec![StrBytes::from_string(self.config.topic.clone())]);
        let config = self.config.clone();
        let request = |member_id: &str| {
            JoinGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(config.group.clone())))
                .with_session_timeout_ms(millis(config.session_timeout))
                .with_rebalance_timeout_ms(millis(config.answer_timeout))
                .with_member_id(StrBytes::from_string(member_id.to_owned()))
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(vec![
                    JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_static_str(RANGE))
                        .with_metadata(versioned(&subscription)),
                ])
        };
        let mut joined: JoinGroupResponse = self
            .coordinator_call(ApiKey::JoinGroup, JOIN_GROUP, &request(&self.member_id))
            .await?;
        if joined.error_code == MEMBER_ID_REQUIRED {
            self.member_id = joined.member_id.to_string();
            joined = self
                .coordinator_call(ApiKey::JoinGroup, JOIN_GROUP, &request(&self.member_id))
                .await?;
        }
        match joined.error_code {
            0 => {}
            REBALANCE_IN_PROGRESS => return Ok(None),
            code => {
                return Err(KafkaConsumerError::Broker {
                    code,
                    what: format!("JoinGroup of group {}", self.config.group),
                });
            }
        }
        self.member_id = joined.member_id.to_string();
        self.generation = joined.generation_id;
        let assignments = if joined.leader == joined.member_id {
            let members: Vec<String> = joined
                .members
                .iter()
                .map(|m| m.member_id.to_string())
                .collect();
            let partitions = self.leaders.partitions().await?;
            assignor::ranges(&members, &partitions)
                .into_iter()
                .map(|(member, given)| {
                    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
                        vec![
                            kafka_protocol::messages::consumer_protocol_assignment::TopicPartition::default()
                                .with_topic(topic_name(&self.config.topic))
                                .with_partitions(given),
                        ],
                    );
                    SyncGroupRequestAssignment::default()
                        .with_member_id(StrBytes::from_string(member))
                        .with_assignment(versioned(&assignment))
                })
                .collect()
        } else {
            Vec::new()
        };
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.config.group.clone())))
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_assignments(assignments);
        let synced: SyncGroupResponse = self
            .coordinator_call(ApiKey::SyncGroup, SYNC_GROUP, &request)
            .await?;
        match synced.error_code {
            0 => {}
            REBALANCE_IN_PROGRESS => return Ok(None),
            code => {
                return Err(KafkaConsumerError::Broker {
                    code,
                    what: format!("SyncGroup of group {}", self.config.group),
                });
            }
        }
        self.last_heartbeat = Instant::now();
        Ok(Some(self.assigned_partitions(&synced.assignment)?))
    }

    /// This topic's partitions in a consumer-protocol assignment.
    fn assigned_partitions(&self, bytes: &Bytes) -> Result<Vec<i32>, KafkaConsumerError> {
        if bytes.is_empty() {
            return Ok(Vec::new());
        }
        let mut buffer = bytes.clone();
        let version = buffer.get_i16().min(3);
        let assignment = ConsumerProtocolAssignment::decode(&mut buffer, version)
            .map_err(|e| KafkaConsumerError::Protocol(format!("an assignment: {e}")))?;
        Ok(assignment
            .assigned_partitions
            .into_iter()
            .filter(|t| t.topic.0.as_str() == self.config.topic)
            .flat_map(|t| t.partitions)
            .collect())
    }

    /// Starts each of `partitions` at the group's committed offset (the log's start without
    /// one), and notes the assignment.
    async fn start_at_committed(&mut self, partitions: Vec<i32>) -> Result<(), KafkaConsumerError> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.config.group.clone())))
            .with_require_stable(true)
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(topic_name(&self.config.topic))
                    .with_partition_indexes(partitions.clone()),
            ]));
        let deadline = Instant::now() + self.config.answer_timeout;
        let committed: HashMap<i32, i64> = loop {
            let answer: OffsetFetchResponse = self
                .coordinator_call(ApiKey::OffsetFetch, OFFSET_FETCH, &request)
                .await?;
            let codes = std::iter::once(answer.error_code).chain(
                answer
                    .topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| p.error_code),
            );
            match codes.into_iter().find(|&code| code != 0) {
                None => {
                    break answer
                        .topics
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .filter(|p| p.committed_offset >= 0)
                        .map(|p| (p.partition_index, p.committed_offset))
                        .collect();
                }
                // Offsets a transaction still holds (UNSTABLE_OFFSET_COMMIT) settle soon.
                Some(code) if retriable_in_a_group(code) && Instant::now() < deadline => {
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
                Some(code) => {
                    return Err(KafkaConsumerError::Broker {
                        code,
                        what: format!("OffsetFetch of group {}", self.config.group),
                    });
                }
            }
        };
        self.positions = partitions
            .iter()
            .map(|&p| (p, committed.get(&p).copied().unwrap_or(0)))
            .collect();
        self.session += 1;
        self.assignments.push(Assigned {
            session: self.session,
            generation: self.generation,
            partitions: partitions
                .iter()
                .map(|&p| (p, committed.get(&p).copied()))
                .collect(),
        });
        Ok(())
    }

    /// One Fetch of `partitions` (each at its position) from broker `leader`.
    async fn fetch(
        &mut self,
        leader: i32,
        partitions: &[(i32, i64)],
    ) -> Result<Vec<Polled>, KafkaConsumerError> {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(i8::from(self.config.read_committed))
            .with_max_wait_ms(FETCH_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(topic_name(&self.config.topic))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|&(partition, position)| {
                                FetchPartition::default()
                                    .with_partition(partition)
                                    .with_fetch_offset(position)
                                    .with_partition_max_bytes(1 << 20)
                            })
                            .collect(),
                    ),
            ]);
        let answer: FetchResponse = self
            .leaders
            .call(leader, ApiKey::Fetch, FETCH, &request)
            .await?;
        let mut polled = Vec::new();
        for data in answer.responses.iter().flat_map(|t| &t.partitions) {
            let Some(&position) = self.positions.get(&data.partition_index) else {
                continue;
            };
            match data.error_code {
                0 => {}
                OFFSET_OUT_OF_RANGE => {
                    return Err(KafkaConsumerError::Broker {
                        code: OFFSET_OUT_OF_RANGE,
                        what: format!(
                            "{}/{} at offset {position}",
                            self.config.topic, data.partition_index
                        ),
                    });
                }
                _ => {
                    // A leader that moved, a partition not ready: asked again next time.
                    self.leaders.forget();
                    continue;
                }
            }
            let (records, next) = self.shown(data, position)?;
            self.positions.insert(data.partition_index, next);
            polled.push(Polled {
                session: self.session,
                generation: self.generation,
                partition: data.partition_index,
                from: position,
                records,
            });
        }
        Ok(polled)
    }

    /// The records of one partition's answer a consumer is shown, from `position`, and the
    /// position after them.
    fn shown(
        &self,
        data: &kafka_protocol::messages::fetch_response::PartitionData,
        position: i64,
    ) -> Result<(Vec<PolledRecord>, i64), KafkaConsumerError> {
        let mut decoded = Vec::new();
        for batch in crate::whole_batches(data.records.clone().unwrap_or_default()) {
            let commit = minibroker_records::marker(&batch)?.map(|marker| marker.commit);
            decoded.push((
                minibroker_records::decode(&batch)?,
                commit,
                minibroker_records::end_offset(&batch),
            ));
        }
        let aborted: Vec<(i64, i64)> = data
            .aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.producer_id.0, a.first_offset))
            .collect();
        let kept = if self.config.read_committed {
            Some(crate::kept_by_read_committed(
                decoded
                    .iter()
                    .map(|(batch, commit, _)| (batch.base_offset, &batch.info, *commit)),
                &aborted,
            ))
        } else {
            None
        };
        let mut records = Vec::new();
        let mut next = position;
        for (batch, _, end) in decoded {
            next = next.max(end);
            let shown = !batch.info.control
                && kept
                    .as_ref()
                    .is_none_or(|kept| kept.contains(&batch.base_offset));
            if !shown {
                continue;
            }
            records.extend(
                batch
                    .records
                    .into_iter()
                    .filter(|r| r.offset >= position)
                    .map(|r| PolledRecord {
                        offset: r.offset,
                        value: r.value.unwrap_or_default(),
                    }),
            );
        }
        Ok((records, next))
    }

    /// Sends `request` to the group's coordinator (found first if need be); a lost answer or a
    /// moved coordinator is asked again, until the answer timeout.
    async fn coordinator_call<R: Encodable, T: Decodable + ErrorCode>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &R,
    ) -> Result<T, KafkaConsumerError> {
        let deadline = Instant::now() + self.config.answer_timeout;
        loop {
            let answer = match self.coordinator().await {
                Ok(conn) => conn
                    .call::<R, T>(api, version, request)
                    .await
                    .map_err(Into::into),
                Err(error) => Err(error),
            };
            let last = match answer {
                Ok(answer) if moved(answer.error_code()) => {
                    self.coordinator = None;
                    error_name(answer.error_code())
                }
                Ok(answer) => return Ok(answer),
                Err(KafkaConsumerError::Client(error))
                    if !matches!(error, KafkaClientError::Encode(_)) =>
                {
                    self.coordinator = None;
                    error.to_string()
                }
                Err(KafkaConsumerError::Broker { code, .. }) if moved(code) => {
                    self.coordinator = None;
                    error_name(code)
                }
                Err(error) => return Err(error),
            };
            if Instant::now() >= deadline {
                return Err(KafkaConsumerError::Protocol(format!(
                    "{api:?} of group {}: no answer within {:?} (last: {last})",
                    self.config.group, self.config.answer_timeout
                )));
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// The connection to the group's coordinator, found through the bootstrap broker.
    async fn coordinator(&mut self) -> Result<&mut KafkaConnection, KafkaConsumerError> {
        if self.coordinator.is_none() {
            let conn = KafkaConnection::to_coordinator(
                &self.bootstrap,
                (&self.config.group, GROUP_KEY),
                "minibroker-consumer",
                self.config.answer_timeout,
            )
            .await?
            .map_err(|code| KafkaConsumerError::Broker {
                code,
                what: format!("the coordinator of group {}", self.config.group),
            })?;
            self.coordinator = Some(conn);
        }
        Ok(self.coordinator.as_mut().expect("connected just above"))
    }
}

/// The top-level error code of a group answer.
trait ErrorCode {
    fn error_code(&self) -> i16;
}

macro_rules! top_level_error_code {
    ($($answer:ty),*) => {
        $(impl ErrorCode for $answer {
            fn error_code(&self) -> i16 {
                self.error_code
            }
        })*
    };
}

top_level_error_code!(
    JoinGroupResponse,
    SyncGroupResponse,
    HeartbeatResponse,
    LeaveGroupResponse,
    OffsetFetchResponse
);

impl ErrorCode for OffsetCommitResponse {
    fn error_code(&self) -> i16 {
        // Its codes are per partition; a moved coordinator is named in each.
        self.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.error_code)
            .find(|&code| moved(code))
            .unwrap_or(0)
    }
}

/// Whether `code` says the coordinator is elsewhere (or not ready): find it again.
fn moved(code: i16) -> bool {
    matches!(
        code,
        NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS
    )
}

/// Whether joining again cures `code`.
fn retriable_in_a_group(code: i16) -> bool {
    moved(code)
        || matches!(
            code,
            REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID
        )
        || kafka_protocol::ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
}

/// A consumer-protocol message as JoinGroup and SyncGroup carry it: its version, then it.
fn versioned(message: &impl Encodable) -> Bytes {
    let mut bytes = BytesMut::new();
    bytes.put_i16(CONSUMER_PROTOCOL_VERSION);
    message
        .encode(&mut bytes, CONSUMER_PROTOCOL_VERSION)
        .expect("a consumer-protocol message encodes at version 0");
    bytes.freeze()
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

fn millis(duration: Duration) -> i32 {
    i32::try_from(duration.as_millis()).unwrap_or(i32::MAX)
}
