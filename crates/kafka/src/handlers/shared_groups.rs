//! Consumer groups on a broker of a cluster (`minibroker_host::ClusterGroups`): FindCoordinator
//! names the broker holding the group's lease (or the one the group hashes to, which takes it;
//! a transactional id's the same way),
//! and what any broker is asked about a group (its committed offsets, the groups, a group's
//! members) is read from the cluster's database, so it is the same through every broker. The
//! requests of a group's members go to its coordinator's `minibroker_groups::GroupCoordinator`,
//! which keeps what it must not lose in the database under the lease.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{BrokerId, FindCoordinatorResponse};
use minibroker_cluster::KeyType;
use minibroker_groups::{Committed, GroupDescription, GroupState, TopicPartition};
use minibroker_host::ClusterLink;
use std::collections::{HashMap, HashSet};

use super::groups::text;
use crate::front_end::KafkaFrontEnd;

impl KafkaFrontEnd {
    /// FindCoordinator for `key` (a group or a transactional id) on a broker of `cluster`.
    pub(crate) async fn shared_coordinator(
        cluster: &ClusterLink,
        key_type: KeyType,
        key: &str,
    ) -> FindCoordinatorResponse {
        let found = cluster.groups().coordinator(key_type, key).await;
        let refused = |message: String| {
            tracing::info!(key, "FindCoordinator: COORDINATOR_NOT_AVAILABLE: {message}");
            FindCoordinatorResponse::default()
                .with_error_code(ResponseError::CoordinatorNotAvailable.code())
                .with_error_message(Some(text(&message)))
                .with_node_id(BrokerId(-1))
                .with_port(-1)
        };
        match found {
            Ok(Some(member)) => FindCoordinatorResponse::default()
                .with_node_id(BrokerId(member.node_id))
                .with_host(text(&member.kafka_host))
                .with_port(i32::from(member.kafka_port)),
            Ok(None) => refused("no broker of the cluster is live".to_owned()),
            Err(error) => refused(error.to_string()),
        }
    }

    /// Group `group_id`'s committed offsets of `wanted` (all of them when `None`), as the
    /// cluster keeps them; with `stable`, also the partitions with offsets waiting in an open
    /// transaction.
    pub(crate) async fn shared_committed(
        cluster: &ClusterLink,
        group_id: &str,
        wanted: Option<&[TopicPartition]>,
        stable: bool,
    ) -> Result<SharedCommitted, ResponseError> {
        let mut committed = cluster
            .groups()
            .committed(group_id)
            .await
            .map_err(unavailable)?;
        if let Some(wanted) = wanted {
            let mut found: HashMap<TopicPartition, Committed> = committed.into_iter().collect();
            committed = wanted
                .iter()
                .filter_map(|key| found.remove(key).map(|c| (key.clone(), c)))
                .collect();
        }
        let pending = if stable {
            let pending = cluster
                .groups()
                .pending(group_id)
                .await
                .map_err(unavailable)?;
            Some(pending.into_iter().collect())
        } else {
            None
        };
        Ok((committed, pending))
    }

    /// Every group of the cluster: id, protocol type, state.
    pub(crate) async fn shared_groups(
        cluster: &ClusterLink,
    ) -> Result<Vec<(String, String, GroupState)>, ResponseError> {
        let rows = cluster.groups().list().await.map_err(unavailable)?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let state = GroupState::from_name(&row.state).unwrap_or(GroupState::Empty);
                (row.group_id, row.protocol_type, state)
            })
            .collect())
    }

    /// Each of `group_ids` as DescribeGroups shows it, from what the cluster keeps (a group it
    /// does not have is Dead).
    pub(crate) async fn shared_descriptions(
        cluster: &ClusterLink,
        group_ids: impl Iterator<Item = &str>,
    ) -> Result<HashMap<String, GroupDescription>, ResponseError> {
        let mut described = HashMap::new();
        for group_id in group_ids {
            let row = cluster.groups().find(group_id).await.map_err(unavailable)?;
            let description = row
                .and_then(|row| {
                    let state = GroupState::from_name(&row.state)?;
                    minibroker_groups::describe_shared(state, row.membership.as_deref()).map(
                        |described| GroupDescription {
                            protocol_type: row.protocol_type,
                            ..described
                        },
                    )
                })
                .unwrap_or_else(GroupDescription::dead);
            described.insert(group_id.to_owned(), description);
        }
        Ok(described)
    }
}

/// A group's committed offsets, and the partitions with offsets waiting in an open transaction
/// (when asked for).
pub(crate) type SharedCommitted = (
    Vec<(TopicPartition, Committed)>,
    Option<HashSet<TopicPartition>>,
);

/// The cluster's database did not answer a coordinator's question: the client asks again.
pub(crate) fn unavailable(error: minibroker_host::ClusterError) -> ResponseError {
    tracing::warn!(%error, "a coordinator's question went unanswered: the cluster's database did not answer");
    ResponseError::CoordinatorNotAvailable
}
