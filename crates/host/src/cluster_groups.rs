//! [`ClusterGroups`]: the group coordinator's seam (`minibroker_groups::SharedGroups`) on a
//! broker of a cluster. A group is coordinated under its lease (`minibroker_cluster::
//! coordinators`), and what it must not lose is written to the cluster's database under that
//! lease (`minibroker_cluster::groups`), on a connection of the coordinator's own. Any broker
//! answers what is read: committed offsets, the groups, a group's members.

use minibroker_cluster::groups::{self, GroupWriteError};
use minibroker_cluster::transactions::TransactionWriteError;
use minibroker_cluster::{Database, GroupRow, KeyType, Member, StoredOffset};
use minibroker_groups::{
    Claimed, Committed, GroupError, SharedFuture, SharedGroups, SharedWrite, TopicPartition,
};
use std::sync::Arc;

use crate::cluster_error::ClusterError;
use crate::coordinating::Coordinating;

/// A broker's groups in its cluster; see the module docs.
#[derive(Debug)]
pub struct ClusterGroups {
    on: Arc<Coordinating>,
    database: Database,
}

impl ClusterGroups {
    pub(crate) fn new(on: Arc<Coordinating>) -> Self {
        let database = on.database();
        Self { on, database }
    }

    /// The broker that coordinates `key` of `key_type`: the live holder of its lease, or the
    /// live broker it hashes to, which takes the lease at once when it is this one. `None`
    /// when no broker is live.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn coordinator(
        &self,
        key_type: KeyType,
        key: &str,
    ) -> Result<Option<Member>, ClusterError> {
        let client = self.database.client().await?;
        let found =
            minibroker_cluster::coordinators::coordinator(&*client, (key_type, key)).await?;
        let Some(found) = found else {
            return Ok(None);
        };
        if found.node_id != self.on.registration.member.node_id
            || self.on.leases.epoch(key_type, key).is_some()
        {
            return Ok(Some(found));
        }
        let taken = match key_type {
            KeyType::Group => minibroker_cluster::coordinators::claim_group(
                &*client,
                &self.on.leases,
                &self.on.registration,
                key,
                self.on.lease,
            )
            .await?
            .is_some(),
            KeyType::Transaction => minibroker_cluster::coordinators::claim(
                &*client,
                &self.on.leases,
                &self.on.registration,
                (key_type, key),
                self.on.lease,
            )
            .await?
            .is_some(),
        };
        if taken {
            return Ok(Some(found));
        }
        // Another broker took it in between: it is the coordinator.
        Ok(minibroker_cluster::coordinators::coordinator(&*client, (key_type, key)).await?)
    }

    /// `group_id`'s committed offsets, as every broker sees them.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn committed(
        &self,
        group_id: &str,
    ) -> Result<Vec<(TopicPartition, Committed)>, ClusterError> {
        let client = self.database.client().await?;
        let stored = groups::group_offsets(&*client, group_id).await?;
        Ok(stored.into_iter().map(committed_of).collect())
    }

    /// The partitions with offsets of `group_id` waiting in an open transaction.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn pending(&self, group_id: &str) -> Result<Vec<(String, i32)>, ClusterError> {
        let client = self.database.client().await?;
        Ok(minibroker_cluster::transactions::pending_partitions(&*client, group_id).await?)
    }

    /// Every group of the cluster (without their members' bytes).
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn list(&self) -> Result<Vec<GroupRow>, ClusterError> {
        let client = self.database.client().await?;
        Ok(groups::list_groups(&*client).await?)
    }

    /// `group_id`'s row, if the cluster has the group.
    ///
    /// # Errors
    /// The database could not be asked.
    pub async fn find(&self, group_id: &str) -> Result<Option<GroupRow>, ClusterError> {
        let client = self.database.client().await?;
        Ok(groups::find_group(&*client, group_id).await?)
    }

    async fn claim_group(&self, group_id: &str) -> Result<Claimed, GroupError> {
        let client = self.database.client().await.map_err(storage)?;
        let claimed = minibroker_cluster::coordinators::claim_group(
            &*client,
            &self.on.leases,
            &self.on.registration,
            group_id,
            self.on.lease,
        )
        .await
        .map_err(storage)?;
        let Some((epoch, generation)) = claimed else {
            return Err(GroupError::NotCoordinator);
        };
        let offsets = groups::group_offsets(&*client, group_id)
            .await
            .map_err(storage)?
            .into_iter()
            .map(committed_of)
            .collect();
        Ok(Claimed {
            epoch,
            generation,
            offsets,
        })
    }

    async fn write_group(
        &self,
        group_id: &str,
        epoch: i64,
        write: SharedWrite,
    ) -> Result<(), GroupError> {
        let client = self.database.client().await.map_err(storage)?;
        let tenure = minibroker_cluster::Tenure {
            run_id: &self.on.registration.run_id,
            epoch,
        };
        let written = match write {
            SharedWrite::Commit { member, offsets } => {
                let stored: Vec<StoredOffset> = offsets.into_iter().map(stored_offset).collect();
                let member = member
                    .as_ref()
                    .map(|(generation, id)| (*generation, id.as_str()));
                groups::commit_offsets(&*client, tenure, group_id, member, &stored).await
            }
            SharedWrite::Forget(partitions) => {
                groups::delete_offsets(&*client, tenure, group_id, &partitions).await
            }
            SharedWrite::Membership(membership) => {
                let row = GroupRow {
                    group_id: group_id.to_owned(),
                    generation: membership.generation,
                    members: membership.members,
                    state: membership.state.to_string(),
                    protocol_type: membership.protocol_type,
                    membership: Some(membership.record),
                };
                groups::save_group(&*client, tenure, &row).await
            }
            SharedWrite::Remove => groups::remove_group(&*client, tenure, group_id).await,
            SharedWrite::Pending {
                transaction,
                member,
                offsets,
            } => {
                let stored: Vec<StoredOffset> = offsets.into_iter().map(stored_offset).collect();
                let member = member
                    .as_ref()
                    .map(|(generation, id)| (*generation, id.as_str()));
                let (id, producer_id, epoch) = &transaction;
                let pending = minibroker_cluster::transactions::commit_pending_offsets(
                    &*client,
                    tenure,
                    group_id,
                    member,
                    (id, *producer_id, *epoch),
                    &stored,
                )
                .await;
                return pending.map_err(|error| match error {
                    TransactionWriteError::NotCoordinator => GroupError::NotCoordinator,
                    TransactionWriteError::NotMember => GroupError::IllegalGeneration,
                    TransactionWriteError::Fenced => GroupError::ProducerFenced,
                    TransactionWriteError::NotInTransaction | TransactionWriteError::Changed => {
                        GroupError::NotInTransaction
                    }
                    TransactionWriteError::Postgres(error) => storage(error),
                });
            }
        };
        written.map_err(|error| match error {
            GroupWriteError::NotCoordinator => GroupError::NotCoordinator,
            GroupWriteError::NotMember => GroupError::IllegalGeneration,
            GroupWriteError::Postgres(error) => storage(error),
        })
    }
}

impl SharedGroups for ClusterGroups {
    fn claim<'a>(&'a self, group_id: &'a str) -> SharedFuture<'a, Claimed> {
        Box::pin(self.claim_group(group_id))
    }

    fn epoch(&self, group_id: &str) -> Option<i64> {
        self.on.leases.epoch(KeyType::Group, group_id)
    }

    fn write<'a>(
        &'a self,
        group_id: &'a str,
        epoch: i64,
        write: SharedWrite,
    ) -> SharedFuture<'a, ()> {
        Box::pin(self.write_group(group_id, epoch, write))
    }
}

/// A committed offset as the database keeps it, as the group coordinator does.
fn committed_of(stored: StoredOffset) -> (TopicPartition, Committed) {
    let committed = Committed {
        offset: stored.offset,
        metadata: stored.metadata,
        commit_ms: stored.commit_ms,
    };
    ((stored.topic, stored.partition), committed)
}

/// The group coordinator's committed offset as the database keeps it.
pub(crate) fn stored_offset(
    ((topic, partition), committed): (TopicPartition, Committed),
) -> StoredOffset {
    StoredOffset {
        topic,
        partition,
        offset: committed.offset,
        metadata: committed.metadata,
        commit_ms: committed.commit_ms,
    }
}

/// The database's failure as the group coordinator's storage error (retriable: the client
/// asks again).
pub(crate) fn storage(error: tokio_postgres::Error) -> GroupError {
    GroupError::Storage(minibroker_groups::StoreFailure::new(
        "the cluster's database",
        std::io::Error::other(error),
    ))
}
