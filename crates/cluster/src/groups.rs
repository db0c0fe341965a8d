//! Consumer groups as every broker of a cluster shares them: each group's last saved
//! generation and members, and its committed offsets.
//!
//! Only the broker holding the group's lease writes them (`coordinators`), and each write is one
//! call of a function of the schema that first checks, in the same transaction, that the
//! broker's run still holds the lease at the epoch it took it, and for a member's offset commit
//! that the generation and the member are those saved. A refused write changes nothing. Any
//! broker reads them: OffsetFetch, ListGroups and DescribeGroups are answered from here.

use thiserror::Error;
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

/// Why a group's write was refused.
#[derive(Debug, Error)]
pub enum GroupWriteError {
    /// This broker's run no longer holds the group's lease at that epoch.
    #[error("this broker no longer coordinates the group")]
    NotCoordinator,
    /// The member or its generation is not the group's saved ones.
    #[error("the member or its generation is not the group's")]
    NotMember,
    /// PostgreSQL refused or could not be reached.
    #[error("the cluster's database: {0}")]
    Postgres(#[from] tokio_postgres::Error),
}

impl GroupWriteError {
    fn of(error: tokio_postgres::Error) -> Self {
        match error.code().map(SqlState::code) {
            Some("MB002") => Self::NotCoordinator,
            Some("MB003") => Self::NotMember,
            _ => Self::Postgres(error),
        }
    }
}

/// Who writes: the run holding the group's lease, and that lease's epoch.
#[derive(Debug, Clone, Copy)]
pub struct Tenure<'a> {
    /// The broker run's id.
    pub run_id: &'a str,
    /// The lease's epoch.
    pub epoch: i64,
}

/// One committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOffset {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset committed.
    pub offset: i64,
    /// Its metadata.
    pub metadata: Option<String>,
    /// When it was committed (ms since the epoch).
    pub commit_ms: i64,
}

/// A group's row: its last saved generation and what ListGroups and DescribeGroups show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRow {
    /// The group's id.
    pub group_id: String,
    /// Its generation.
    pub generation: i32,
    /// Its members' ids in that generation.
    pub members: Vec<String>,
    /// Its state, by Kafka's name.
    pub state: String,
    /// Its protocol type (`consumer` for consumers).
    pub protocol_type: String,
    /// Its membership as the group coordinator encodes it, if saved.
    pub membership: Option<Vec<u8>>,
}

/// Commits `offsets` for `group_id`: by `member` (its generation and id, checked against the
/// saved ones) or, with `None`, outside any generation.
///
/// # Errors
/// [`GroupWriteError`]: nothing is committed.
pub async fn commit_offsets(
    client: &impl GenericClient,
    tenure: Tenure<'_>,
    group_id: &str,
    member: Option<(i32, &str)>,
    offsets: &[StoredOffset],
) -> Result<(), GroupWriteError> {
    let columns = CommitColumns::new(group_id, tenure, member, offsets);
    client
        .execute(
            "SELECT minibroker.commit_group_offsets($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &columns.parameters(),
        )
        .await
        .map_err(GroupWriteError::of)?;
    Ok(())
}

/// A commit's parameters, in the order the schema's commit functions take them: the group, the
/// writer's tenure, the committing member (its generation, `NULL` outside any) and the offsets
/// as columns.
pub(crate) struct CommitColumns<'a> {
    group_id: &'a str,
    run_id: &'a str,
    epoch: i64,
    generation: Option<i32>,
    member: &'a str,
    topics: Vec<&'a str>,
    partitions: Vec<i32>,
    offsets: Vec<i64>,
    metadata: Vec<Option<&'a str>>,
    commit_ms: i64,
}

impl<'a> CommitColumns<'a> {
    pub(crate) fn new(
        group_id: &'a str,
        tenure: Tenure<'a>,
        member: Option<(i32, &'a str)>,
        offsets: &'a [StoredOffset],
    ) -> Self {
        Self {
            group_id,
            run_id: tenure.run_id,
            epoch: tenure.epoch,
            generation: member.map(|(generation, _)| generation),
            member: member.map_or("", |(_, id)| id),
            topics: offsets.iter().map(|o| o.topic.as_str()).collect(),
            partitions: offsets.iter().map(|o| o.partition).collect(),
            offsets: offsets.iter().map(|o| o.offset).collect(),
            metadata: offsets.iter().map(|o| o.metadata.as_deref()).collect(),
            commit_ms: offsets.first().map_or(0, |o| o.commit_ms),
        }
    }

    pub(crate) fn parameters(&self) -> [&(dyn ToSql + Sync); 10] {
        [
            &self.group_id,
            &self.run_id,
            &self.epoch,
            &self.generation,
            &self.member,
            &self.topics,
            &self.partitions,
            &self.offsets,
            &self.metadata,
            &self.commit_ms,
        ]
    }
}

/// Saves `row` as `row.group_id`'s generation and membership.
///
/// # Errors
/// [`GroupWriteError`]: nothing is saved.
pub async fn save_group(
    client: &impl GenericClient,
    tenure: Tenure<'_>,
    row: &GroupRow,
) -> Result<(), GroupWriteError> {
    client
        .execute(
            "SELECT minibroker.save_group($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &row.group_id,
                &tenure.run_id,
                &tenure.epoch,
                &row.generation,
                &row.members,
                &row.state,
                &row.protocol_type,
                &row.membership,
            ],
        )
        .await
        .map_err(GroupWriteError::of)?;
    Ok(())
}

/// Forgets `group_id`'s committed offsets of `partitions`.
///
/// # Errors
/// [`GroupWriteError`]: nothing is forgotten.
pub async fn delete_offsets(
    client: &impl GenericClient,
    tenure: Tenure<'_>,
    group_id: &str,
    partitions: &[(String, i32)],
) -> Result<(), GroupWriteError> {
    let topics: Vec<&str> = partitions.iter().map(|(t, _)| t.as_str()).collect();
    let indexes: Vec<i32> = partitions.iter().map(|(_, p)| *p).collect();
    client
        .execute(
            "SELECT minibroker.delete_group_offsets($1, $2, $3, $4, $5)",
            &[&group_id, &tenure.run_id, &tenure.epoch, &topics, &indexes],
        )
        .await
        .map_err(GroupWriteError::of)?;
    Ok(())
}

/// Removes `group_id` and its committed offsets.
///
/// # Errors
/// [`GroupWriteError`]: nothing is removed.
pub async fn remove_group(
    client: &impl GenericClient,
    tenure: Tenure<'_>,
    group_id: &str,
) -> Result<(), GroupWriteError> {
    client
        .execute(
            "SELECT minibroker.remove_group($1, $2, $3)",
            &[&group_id, &tenure.run_id, &tenure.epoch],
        )
        .await
        .map_err(GroupWriteError::of)?;
    Ok(())
}

/// `group_id`'s committed offsets, by topic and partition.
///
/// # Errors
/// PostgreSQL's error.
pub async fn group_offsets(
    client: &impl GenericClient,
    group_id: &str,
) -> Result<Vec<StoredOffset>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT topic, partition, committed_offset, metadata, commit_ms
             FROM minibroker.group_offsets WHERE group_id = $1 ORDER BY topic, partition",
            &[&group_id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| StoredOffset {
            topic: row.get(0),
            partition: row.get(1),
            offset: row.get(2),
            metadata: row.get(3),
            commit_ms: row.get(4),
        })
        .collect())
}

/// Every group's row, by id (without their membership bytes).
///
/// # Errors
/// PostgreSQL's error.
pub async fn list_groups(
    client: &impl GenericClient,
) -> Result<Vec<GroupRow>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT group_id, generation, members, state, protocol_type
             FROM minibroker.groups ORDER BY group_id",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|row| group_row(row, None)).collect())
}

/// `group_id`'s row, if it has one.
///
/// # Errors
/// PostgreSQL's error.
pub async fn find_group(
    client: &impl GenericClient,
    group_id: &str,
) -> Result<Option<GroupRow>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT group_id, generation, members, state, protocol_type, membership
             FROM minibroker.groups WHERE group_id = $1",
            &[&group_id],
        )
        .await?;
    Ok(row.map(|row| {
        let membership = row.get(5);
        group_row(&row, membership)
    }))
}

fn group_row(row: &tokio_postgres::Row, membership: Option<Vec<u8>>) -> GroupRow {
    GroupRow {
        group_id: row.get(0),
        generation: row.get(1),
        members: row.get(2),
        state: row.get(3),
        protocol_type: row.get(4),
        membership,
    }
}

/// Forgets the groups with no members, no offsets waiting in a transaction and no write for
/// `retention_ms` (Kafka's `offsets.retention.minutes`), with their offsets; returns how many.
/// Any broker may run it: a write racing it keeps its group (see the schema).
///
/// # Errors
/// PostgreSQL's error.
pub async fn expire_idle_groups(
    client: &impl GenericClient,
    retention_ms: i64,
) -> Result<i64, tokio_postgres::Error> {
    Ok(client
        .query_one("SELECT minibroker.expire_idle_groups($1)", &[&retention_ms])
        .await?
        .get(0))
}
