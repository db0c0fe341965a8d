//! The consumer-group APIs: FindCoordinator (this broker, or in a cluster the group's
//! coordinator), JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
//! ListGroups, DescribeGroups and DeleteGroups, translated onto the group coordinator
//! (`minibroker_groups::GroupCoordinator`); in a cluster, what any broker reads of a group comes
//! from the cluster's database (`shared_groups`).

use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_groups::{
    Committed, GroupError, JoinRequest, MAX_OFFSET_METADATA_BYTES, TopicPartition,
};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::KafkaFrontEnd;
use crate::answer_room::{AnswerRoom, AnswerTooLarge};
use crate::errors::{code_or_none, group_code};
use minibroker_cluster::KeyType;
use minibroker_security::{Operation, ResourceType};

/// FindCoordinator's key type for a consumer group (1 is a transactional id).
const GROUP_KEY: i8 = 0;
/// FindCoordinator's key type for a transactional id.
const TRANSACTION_KEY: i8 = 1;

pub(super) fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

impl KafkaFrontEnd {
    /// Read on the group: what joining, syncing, heartbeats, leaving and commits need.
    fn may_read_group(&self, group: &str) -> bool {
        self.may(Operation::Read, ResourceType::Group, group)
    }

    pub(crate) async fn find_coordinator(
        &self,
        request: FindCoordinatorRequest,
    ) -> FindCoordinatorResponse {
        // As Kafka: Describe on the group, or on the transactional id.
        let denied = |resource_type, error| {
            (!self.may(Operation::Describe, resource_type, &request.key))
                .then(|| (error, ResponseError::to_string(&error)))
        };
        let refusal = match request.key_type {
            GROUP_KEY => denied(ResourceType::Group, ResponseError::GroupAuthorizationFailed),
            TRANSACTION_KEY => denied(
                ResourceType::TransactionalId,
                ResponseError::TransactionalIdAuthorizationFailed,
            ),
            _ => Some((
                ResponseError::InvalidRequest,
                "unknown coordinator key type".to_owned(),
            )),
        };
        let response = FindCoordinatorResponse::default();
        if let Some((error, message)) = refusal {
            return response
                .with_error_code(error.code())
                .with_error_message(Some(text(&message)))
                .with_node_id(BrokerId(-1))
                .with_port(-1);
        }
        if let Some(cluster) = &self.cluster {
            let key_type = if request.key_type == TRANSACTION_KEY {
                KeyType::Transaction
            } else {
                KeyType::Group
            };
            return Self::shared_coordinator(cluster, key_type, &request.key).await;
        }
        response
            .with_node_id(BrokerId(self.config.node_id))
            .with_host(text(&self.config.advertised_host))
            .with_port(self.config.advertised_port)
    }

    pub(crate) async fn join_group(
        &self,
        request: JoinGroupRequest,
        version: i16,
        client_id: &str,
    ) -> JoinGroupResponse {
        let session = Duration::from_millis(u64::try_from(request.session_timeout_ms).unwrap_or(0));
        let rebalance = if version >= 1 {
            Duration::from_millis(u64::try_from(request.rebalance_timeout_ms).unwrap_or(0))
        } else {
            session
        };
        let join = JoinRequest {
            group_id: request.group_id.0.to_string(),
            member_id: request.member_id.to_string(),
            group_instance_id: request.group_instance_id.map(|id| id.to_string()),
            client_id: client_id.to_owned(),
            client_host: String::new(),
            session_timeout: session,
            rebalance_timeout: rebalance,
            protocol_type: request.protocol_type.to_string(),
            protocols: request
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
            require_known_member: version >= 4,
        };
        let failed = |code: i16, member_id: &str| {
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_member_id(text(member_id))
        };
        if !self.may_read_group(&request.group_id) {
            return failed(
                ResponseError::GroupAuthorizationFailed.code(),
                &request.member_id,
            );
        }
        match self.groups.join(join).await {
            Ok(joined) => {
                let members = joined
                    .members
                    .into_iter()
                    .map(|(id, instance, metadata)| {
                        JoinGroupResponseMember::default()
                            .with_member_id(text(&id))
                            .with_group_instance_id(instance.map(|i| text(&i)))
                            .with_metadata(metadata)
                    })
                    .collect();
                let response = JoinGroupResponse::default()
                    .with_generation_id(joined.generation)
                    .with_protocol_name(Some(text(&joined.protocol)))
                    .with_leader(text(&joined.leader))
                    .with_member_id(text(&joined.member_id))
                    .with_members(members);
                if version >= 7 {
                    response.with_protocol_type(Some(text(&joined.protocol_type)))
                } else {
                    response
                }
            }
            Err(GroupError::MemberIdRequired(id)) => {
                failed(ResponseError::MemberIdRequired.code(), &id)
            }
            Err(error) => failed(group_code(&error).code(), &request.member_id),
        }
    }

    pub(crate) async fn sync_group(&self, request: SyncGroupRequest) -> SyncGroupResponse {
        if !self.may_read_group(&request.group_id) {
            return SyncGroupResponse::default()
                .with_error_code(ResponseError::GroupAuthorizationFailed.code());
        }
        let assignments = request
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect();
        match self
            .groups
            .sync(
                &request.group_id.0,
                request.generation_id,
                &request.member_id,
                assignments,
            )
            .await
        {
            Ok(assignment) => SyncGroupResponse::default().with_assignment(assignment),
            Err(error) => SyncGroupResponse::default().with_error_code(group_code(&error).code()),
        }
    }

    pub(crate) fn heartbeat(&self, request: HeartbeatRequest) -> HeartbeatResponse {
        if !self.may_read_group(&request.group_id) {
            return HeartbeatResponse::default()
                .with_error_code(ResponseError::GroupAuthorizationFailed.code());
        }
        let result = self.groups.heartbeat(
            &request.group_id.0,
            request.generation_id,
            &request.member_id,
        );
        HeartbeatResponse::default().with_error_code(code_or_none(&result))
    }

    pub(crate) fn leave_group(
        &self,
        request: LeaveGroupRequest,
        version: i16,
    ) -> LeaveGroupResponse {
        let members: Vec<String> = if version >= 3 {
            request
                .members
                .iter()
                .map(|m| m.member_id.to_string())
                .collect()
        } else {
            vec![request.member_id.to_string()]
        };
        let codes: Vec<i16> = if self.may_read_group(&request.group_id) {
            let results = self.groups.leave(&request.group_id.0, &members);
            results.iter().map(code_or_none).collect()
        } else {
            vec![ResponseError::GroupAuthorizationFailed.code(); members.len().max(1)]
        };
        if version >= 3 {
            let answers = request
                .members
                .into_iter()
                .zip(&codes)
                .map(|(member, code)| {
                    MemberResponse::default()
                        .with_member_id(member.member_id)
                        .with_group_instance_id(member.group_instance_id)
                        .with_error_code(*code)
                })
                .collect();
            LeaveGroupResponse::default().with_members(answers)
        } else {
            let code = codes.first().copied().unwrap_or(0);
            LeaveGroupResponse::default().with_error_code(code)
        }
    }

    pub(crate) async fn offset_commit(&self, request: OffsetCommitRequest) -> OffsetCommitResponse {
        // Partitions that do not exist, or come with more metadata than Kafka's
        // `offset.metadata.max.bytes`, are refused one by one; the rest are committed together.
        if let Some(cluster) = &self.cluster {
            // The coordinator's copy may not hold a topic its members read through others.
            let names: Vec<String> = request.topics.iter().map(|t| t.name.to_string()).collect();
            self.hold_shared_topics(cluster, &names, false).await;
        }
        let mut offsets = Vec::new();
        let mut answers: Vec<(TopicName, Vec<(i32, i16)>)> = Vec::new();
        // As Kafka: Read on the group for all of it, then Read on each topic.
        let group_allowed = self.may_read_group(&request.group_id);
        for topic in &request.topics {
            let mut partitions = Vec::new();
            let denied = if !group_allowed {
                Some(ResponseError::GroupAuthorizationFailed)
            } else {
                (!self.may(Operation::Read, ResourceType::Topic, &topic.name))
                    .then_some(ResponseError::TopicAuthorizationFailed)
            };
            for partition in &topic.partitions {
                if let Some(denied) = denied {
                    partitions.push((partition.partition_index, denied.code()));
                    continue;
                }
                let exists = u32::try_from(partition.partition_index)
                    .ok()
                    .is_some_and(|index| self.broker.offsets(&topic.name, index).is_ok());
                let metadata_len = partition.committed_metadata.as_ref().map_or(0, |m| m.len());
                if metadata_len > MAX_OFFSET_METADATA_BYTES {
                    let code = ResponseError::OffsetMetadataTooLarge.code();
                    partitions.push((partition.partition_index, code));
                } else if exists {
                    offsets.push((
                        topic.name.0.to_string(),
                        partition.partition_index,
                        partition.committed_offset,
                        partition.committed_metadata.as_ref().map(|m| m.to_string()),
                    ));
                    partitions.push((partition.partition_index, 0));
                } else {
                    let code = ResponseError::UnknownTopicOrPartition.code();
                    partitions.push((partition.partition_index, code));
                }
            }
            answers.push((topic.name.clone(), partitions));
        }
        let result = if group_allowed {
            self.groups
                .commit(
                    &request.group_id.0,
                    request.generation_id_or_member_epoch,
                    &request.member_id,
                    offsets,
                )
                .await
        } else {
            Ok(())
        };
        let group_error = code_or_none(&result);
        let topics = answers
            .into_iter()
            .map(|(name, partitions)| {
                let partitions = partitions
                    .into_iter()
                    .map(|(index, code)| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(index)
                            .with_error_code(if code == 0 { group_error } else { code })
                    })
                    .collect();
                OffsetCommitResponseTopic::default()
                    .with_name(name)
                    .with_partitions(partitions)
            })
            .collect();
        OffsetCommitResponse::default().with_topics(topics)
    }

    /// # Errors
    /// [`AnswerTooLarge`] when the answer would not fit in one frame.
    pub(crate) async fn offset_fetch(
        &self,
        request: OffsetFetchRequest,
        version: i16,
    ) -> Result<OffsetFetchResponse, AnswerTooLarge> {
        let group = request.group_id.0.to_string();
        if !self.may(Operation::Describe, ResourceType::Group, &group) {
            let refused = OffsetFetchResponse::default();
            return Ok(if version >= 2 {
                refused.with_error_code(ResponseError::GroupAuthorizationFailed.code())
            } else {
                refused
            });
        }
        // Each partition asked for once, in the order first asked: a repeated topic or
        // partition is answered once, as Kafka does.
        let wanted: Option<Vec<TopicPartition>> = request.topics.as_ref().map(|topics| {
            let mut seen = HashSet::new();
            topics
                .iter()
                .flat_map(|t| {
                    t.partition_indexes
                        .iter()
                        .map(|p| (t.name.0.to_string(), *p))
                })
                .filter(|key| seen.insert(key.clone()))
                .collect()
        });
        // v7's require_stable: a partition an open transaction has committed an offset of is
        // answered UNSTABLE_OFFSET_COMMIT (the client asks again once it ends).
        let require_stable = version >= 7 && request.require_stable;
        let (committed, shared_pending) = match &self.cluster {
            Some(cluster) => {
                match Self::shared_committed(cluster, &group, wanted.as_deref(), require_stable)
                    .await
                {
                    Ok(committed) => committed,
                    Err(error) => {
                        let refused = OffsetFetchResponse::default();
                        return Ok(if version >= 2 {
                            refused.with_error_code(error.code())
                        } else {
                            refused
                        });
                    }
                }
            }
            None => (self.groups.committed(&group, wanted.as_deref()), None),
        };
        let mut room = AnswerRoom::new(self.config.max_answer_bytes, version);
        let mut answers: Vec<OffsetFetchResponseTopic> = Vec::new();
        let mut topic_at: HashMap<String, usize> = HashMap::new();
        let pending = |key: &TopicPartition| match &shared_pending {
            Some(pending) => pending.contains(key),
            None => self.groups.has_pending(&group, key),
        };
        // As Kafka: a topic asked for that the principal may not describe is answered
        // TOPIC_AUTHORIZATION_FAILED; one not asked for is left out.
        let visible: HashMap<&str, bool> = committed
            .iter()
            .map(|(key, _)| key.0.as_str())
            .chain(wanted.iter().flatten().map(|key| key.0.as_str()))
            .map(|topic| {
                (
                    topic,
                    self.may_see(Operation::Describe, ResourceType::Topic, topic),
                )
            })
            .collect();
        let entry = |key: &TopicPartition, committed: Option<&Committed>| {
            let answer = OffsetFetchResponsePartition::default()
                .with_partition_index(key.1)
                .with_committed_leader_epoch(-1);
            if !visible[key.0.as_str()] {
                return answer
                    .with_committed_offset(-1)
                    .with_metadata(Some(text("")))
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code());
            }
            if require_stable && pending(key) {
                return answer
                    .with_committed_offset(-1)
                    .with_metadata(Some(text("")))
                    .with_error_code(ResponseError::UnstableOffsetCommit.code());
            }
            answer
                .with_committed_offset(committed.map_or(-1, |c| c.offset))
                .with_metadata(Some(text(
                    committed
                        .and_then(|c| c.metadata.as_deref())
                        .unwrap_or_default(),
                )))
        };
        // Every partition asked for, with -1 where nothing is committed; or every partition
        // with a committed offset.
        let found: HashMap<&TopicPartition, &Committed> =
            committed.iter().map(|(key, c)| (key, c)).collect();
        let partitions: Vec<(&TopicPartition, Option<&Committed>)> = match &wanted {
            Some(wanted) => wanted
                .iter()
                .map(|key| (key, found.get(key).copied()))
                .collect(),
            None => committed
                .iter()
                .filter(|(key, _)| visible[key.0.as_str()])
                .map(|(key, c)| (key, Some(c)))
                .collect(),
        };
        for (key, committed) in partitions {
            let partition = room.keep(entry(key, committed))?;
            let topic = &key.0;
            let at = match topic_at.get(topic) {
                Some(&at) => at,
                None => {
                    let named = room.keep(
                        OffsetFetchResponseTopic::default().with_name(TopicName(text(topic))),
                    )?;
                    answers.push(named);
                    topic_at.insert(topic.clone(), answers.len() - 1);
                    answers.len() - 1
                }
            };
            answers[at].partitions.push(partition);
        }
        let response = OffsetFetchResponse::default().with_topics(answers);
        Ok(if version >= 2 {
            response.with_error_code(0)
        } else {
            response
        })
    }

    pub(crate) async fn list_groups(&self, request: ListGroupsRequest) -> ListGroupsResponse {
        let wanted: Vec<String> = request
            .states_filter
            .iter()
            .map(|s| s.to_lowercase())
            .collect();
        let all_groups = !self.guard.is_on()
            || self.may_see(
                Operation::Describe,
                ResourceType::Cluster,
                minibroker_security::acl::CLUSTER_NAME,
            );
        let listed = match &self.cluster {
            Some(cluster) => match Self::shared_groups(cluster).await {
                Ok(listed) => listed,
                Err(error) => return ListGroupsResponse::default().with_error_code(error.code()),
            },
            None => self.groups.list(),
        };
        let groups = listed
            .into_iter()
            .filter(|(_, _, state)| {
                wanted.is_empty() || wanted.contains(&state.to_string().to_lowercase())
            })
            // As Kafka: Describe on the cluster lists every group; otherwise those the
            // principal may describe.
            .filter(|(id, _, _)| {
                all_groups || self.may_see(Operation::Describe, ResourceType::Group, id)
            })
            .map(|(id, protocol_type, state)| {
                ListedGroup::default()
                    .with_group_id(GroupId(text(&id)))
                    .with_protocol_type(text(&protocol_type))
                    .with_group_state(text(&state.to_string()))
            })
            .collect();
        ListGroupsResponse::default().with_groups(groups)
    }

    /// # Errors
    /// [`AnswerTooLarge`] when the answer would not fit in one frame.
    pub(crate) async fn describe_groups(
        &self,
        request: DescribeGroupsRequest,
        version: i16,
    ) -> Result<DescribeGroupsResponse, AnswerTooLarge> {
        let mut shared = match &self.cluster {
            Some(cluster) => {
                let ids = request.groups.iter().map(|id| id.0.as_str());
                match Self::shared_descriptions(cluster, ids).await {
                    Ok(described) => Some(described),
                    Err(error) => {
                        let groups = request.groups.into_iter().map(|group_id| {
                            DescribedGroup::default()
                                .with_group_id(group_id)
                                .with_error_code(error.code())
                        });
                        return Ok(DescribeGroupsResponse::default().with_groups(groups.collect()));
                    }
                }
            }
            None => None,
        };
        let mut room = AnswerRoom::new(self.config.max_answer_bytes, version);
        let groups = room.fill(request.groups, |group_id| {
            if !self.may(Operation::Describe, ResourceType::Group, &group_id) {
                return DescribedGroup::default()
                    .with_group_id(group_id)
                    .with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            let described = shared
                .as_mut()
                .and_then(|shared| shared.remove(group_id.0.as_str()))
                .unwrap_or_else(|| self.groups.describe(&group_id.0));
            let members = described
                .members
                .into_iter()
                .map(|m| {
                    DescribedGroupMember::default()
                        .with_member_id(text(&m.member_id))
                        .with_group_instance_id(m.group_instance_id.map(|i| text(&i)))
                        .with_client_id(text(&m.client_id))
                        .with_client_host(text(&m.client_host))
                        .with_member_metadata(m.metadata)
                        .with_member_assignment(m.assignment)
                })
                .collect();
            DescribedGroup::default()
                .with_group_id(group_id)
                .with_group_state(text(&described.state.to_string()))
                .with_protocol_type(text(&described.protocol_type))
                .with_protocol_data(text(&described.protocol))
                .with_members(members)
        })?;
        Ok(DescribeGroupsResponse::default().with_groups(groups))
    }

    pub(crate) async fn delete_groups(&self, request: DeleteGroupsRequest) -> DeleteGroupsResponse {
        let mut results = Vec::new();
        for group_id in request.groups_names {
            let code = if self.may(Operation::Delete, ResourceType::Group, &group_id) {
                code_or_none(&self.groups.delete(&group_id.0).await)
            } else {
                ResponseError::GroupAuthorizationFailed.code()
            };
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(group_id)
                    .with_error_code(code),
            );
        }
        DeleteGroupsResponse::default().with_results(results)
    }
}
