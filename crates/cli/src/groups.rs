//! `minibroker groups`: the consumer groups of a broker, over the Kafka protocol — the list, or
//! one group's state, members, assignments, committed offsets and lag per partition.

use anyhow::{Context, Result, bail};
use bytes::{Buf, Bytes};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, ConsumerProtocolAssignment, DescribeGroupsRequest, DescribeGroupsResponse, GroupId,
    ListGroupsRequest, ListGroupsResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use minibroker_kafka_client::KafkaConnection;
use serde_json::json;
use std::collections::BTreeMap;

/// Flags of `groups`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The broker's Kafka listener (host:port).
    #[arg(long)]
    kafka: String,
    /// Show this group: state, members, their assignments, committed offsets and lag.
    #[arg(long, value_name = "GROUP")]
    describe: Option<String>,
    /// JSON lines instead of text: one line, {"groups": [...]} or the group described.
    #[arg(long)]
    json: bool,
}

/// ListOffsets' "latest" timestamp.
const LATEST: i64 = -1;

pub async fn run(args: Args) -> Result<()> {
    let mut conn = KafkaConnection::connect(args.kafka.as_str())
        .await?
        .with_client_id("minibroker-groups");
    match &args.describe {
        None => list(&mut conn, args.json).await,
        Some(group) => describe(&mut conn, group, args.json).await,
    }
}

async fn list(conn: &mut KafkaConnection, json_out: bool) -> Result<()> {
    let answer: ListGroupsResponse = conn
        .call(ApiKey::ListGroups, 4, &ListGroupsRequest::default())
        .await?;
    if answer.error_code != 0 {
        bail!(
            "ListGroups answered {}",
            minibroker_kafka_client::error_name(answer.error_code)
        );
    }
    if json_out {
        let groups: Vec<_> = answer
            .groups
            .iter()
            .map(|g| {
                json!({
                    "group": g.group_id.0.as_str(),
                    "state": g.group_state.as_str(),
                    "protocol_type": g.protocol_type.as_str(),
                })
            })
            .collect();
        println!("{}", json!({ "groups": groups }));
        return Ok(());
    }
    println!("{:<32} {:<20} PROTOCOL TYPE", "GROUP", "STATE");
    for g in &answer.groups {
        println!(
            "{:<32} {:<20} {}",
            g.group_id.0.as_str(),
            g.group_state.as_str(),
            g.protocol_type.as_str()
        );
    }
    Ok(())
}

/// One row of a group's description: a partition, who owns it, where the group is, the end.
struct Row {
    topic: String,
    partition: i32,
    member: Option<String>,
    committed: Option<i64>,
    end: Option<i64>,
}

impl Row {
    fn lag(&self) -> Option<i64> {
        Some((self.end? - self.committed?).max(0))
    }
}

async fn describe(conn: &mut KafkaConnection, group: &str, json_out: bool) -> Result<()> {
    let group_id = GroupId(StrBytes::from_string(group.to_owned()));
    let described: DescribeGroupsResponse = conn
        .call(
            ApiKey::DescribeGroups,
            4,
            &DescribeGroupsRequest::default().with_groups(vec![group_id.clone()]),
        )
        .await?;
    let found = described
        .groups
        .first()
        .context("DescribeGroups answered no group")?;
    if found.error_code != 0 {
        bail!(
            "DescribeGroups answered {}",
            minibroker_kafka_client::error_name(found.error_code)
        );
    }
    // Kafka describes a group it does not know as Dead, with nothing in it.
    if found.group_state.as_str() == "Dead" && found.members.is_empty() {
        bail!("no group named {group:?} (the broker knows no such group)");
    }
    // Partition → its owner, from each member's assignment.
    let mut rows: BTreeMap<(String, i32), Row> = BTreeMap::new();
    let mut members = Vec::new();
    for member in &found.members {
        let assigned = assignment(&member.member_assignment);
        for (topic, partition) in assigned.iter().flatten() {
            rows.insert(
                (topic.clone(), *partition),
                Row {
                    topic: topic.clone(),
                    partition: *partition,
                    member: Some(member.member_id.to_string()),
                    committed: None,
                    end: None,
                },
            );
        }
        members.push((
            member.member_id.to_string(),
            member.client_id.to_string(),
            assigned,
            member.member_assignment.len(),
        ));
    }
    let offsets: OffsetFetchResponse = conn
        .call(
            ApiKey::OffsetFetch,
            7,
            &OffsetFetchRequest::default()
                .with_group_id(group_id)
                .with_topics(None),
        )
        .await?;
    for topic in &offsets.topics {
        for p in &topic.partitions {
            let key = (topic.name.0.to_string(), p.partition_index);
            let row = rows.entry(key.clone()).or_insert(Row {
                topic: key.0.clone(),
                partition: key.1,
                member: None,
                committed: None,
                end: None,
            });
            row.committed = (p.committed_offset >= 0).then_some(p.committed_offset);
        }
    }
    end_offsets(conn, &mut rows).await?;
    if json_out {
        let members: Vec<_> = members
            .iter()
            .map(|(id, client, assigned, bytes)| {
                json!({
                    "member_id": id,
                    "client_id": client,
                    // null: not the consumer protocol's format (its size is given instead).
                    "assignment": assigned.as_ref().map(|assigned| assigned
                        .iter()
                        .map(|(t, p)| json!({"topic": t, "partition": p}))
                        .collect::<Vec<_>>()),
                    "assignment_bytes": bytes,
                })
            })
            .collect();
        let partitions: Vec<_> = rows
            .values()
            .map(|r| {
                json!({
                    "topic": r.topic,
                    "partition": r.partition,
                    "member_id": r.member,
                    "committed": r.committed,
                    "end": r.end,
                    "lag": r.lag(),
                })
            })
            .collect();
        println!(
            "{}",
            json!({
                "group": group,
                "state": found.group_state.as_str(),
                "protocol": found.protocol_data.as_str(),
                "members": members,
                "partitions": partitions,
            })
        );
        return Ok(());
    }
    println!(
        "group {group}: {} ({} member(s), protocol {})",
        found.group_state.as_str(),
        members.len(),
        if found.protocol_data.is_empty() {
            "-"
        } else {
            found.protocol_data.as_str()
        }
    );
    for (id, client, assigned, bytes) in &members {
        match assigned {
            Some(assigned) if *bytes > 0 => println!(
                "  member {id} (client {client}): {} partition(s)",
                assigned.len()
            ),
            Some(_) => println!("  member {id} (client {client}): no assignment yet"),
            None => println!(
                "  member {id} (client {client}): an assignment of {bytes} bytes not in the consumer protocol's format (protocol {})",
                found.protocol_data.as_str()
            ),
        }
    }
    println!(
        "{:<24} {:>9} {:>12} {:>12} {:>8}  MEMBER",
        "TOPIC", "PARTITION", "COMMITTED", "END", "LAG"
    );
    let show = |value: Option<i64>| value.map_or_else(|| "-".to_owned(), |v| v.to_string());
    for r in rows.values() {
        println!(
            "{:<24} {:>9} {:>12} {:>12} {:>8}  {}",
            r.topic,
            r.partition,
            show(r.committed),
            show(r.end),
            show(r.lag()),
            r.member.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

/// Fills in each row's log end offset (ListOffsets "latest").
async fn end_offsets(
    conn: &mut KafkaConnection,
    rows: &mut BTreeMap<(String, i32), Row>,
) -> Result<()> {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in rows.keys() {
        topics.entry(topic).or_default().push(*partition);
    }
    if topics.is_empty() {
        return Ok(());
    }
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(
            topics
                .iter()
                .map(|(topic, partitions)| {
                    ListOffsetsTopic::default()
                        .with_name(TopicName(StrBytes::from_string((*topic).to_owned())))
                        .with_partitions(
                            partitions
                                .iter()
                                .map(|p| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(*p)
                                        .with_timestamp(LATEST)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    let answer: ListOffsetsResponse = conn.call(ApiKey::ListOffsets, 7, &request).await?;
    for topic in &answer.topics {
        for p in &topic.partitions {
            if let Some(row) = rows.get_mut(&(topic.name.0.to_string(), p.partition_index))
                && p.error_code == 0
            {
                row.end = Some(p.offset);
            }
        }
    }
    Ok(())
}

/// The (topic, partition) pairs of a consumer-protocol assignment (none for no bytes, a
/// member not assigned yet); `None` if it is not one (another protocol's, or damaged).
fn assignment(bytes: &Bytes) -> Option<Vec<(String, i32)>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    // The counts are checked against the bytes first: the decoder reserves room for a count
    // before reading, and these bytes come from some other client.
    if !plausible_assignment(bytes) {
        return None;
    }
    let mut buffer = bytes.clone();
    // A version above 3 is read as 3, as Kafka's consumer reads it (the fields it added stay
    // after the ones read here).
    let version = buffer.get_i16().min(3);
    ConsumerProtocolAssignment::decode(&mut buffer, version)
        .ok()
        .map(|decoded| {
            decoded
                .assigned_partitions
                .into_iter()
                .flat_map(|t| {
                    let topic = t.topic.0.to_string();
                    t.partitions.into_iter().map(move |p| (topic.clone(), p))
                })
                .collect()
        })
}

/// Whether the array counts of a (version 0-3, non-flexible) assignment fit its bytes.
fn plausible_assignment(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
        rest = tail;
        Some(head)
    };
    let mut walk = || -> Option<()> {
        let version = i16::from_be_bytes(take(2)?.try_into().ok()?);
        if version < 0 {
            return None;
        }
        let topics = usize::try_from(i32::from_be_bytes(take(4)?.try_into().ok()?)).ok()?;
        for _ in 0..topics {
            let len = usize::try_from(i16::from_be_bytes(take(2)?.try_into().ok()?)).ok()?;
            take(len)?;
            let partitions = usize::try_from(i32::from_be_bytes(take(4)?.try_into().ok()?)).ok()?;
            take(partitions.checked_mul(4)?)?;
        }
        Some(())
    };
    walk().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A consumer-protocol assignment of `version` (its v0-v3 fields): partitions 0 and 2 of
    /// "t", no user data, then `extra` bytes a later version adds.
    fn consumer_assignment(version: i16, extra: &[u8]) -> Bytes {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&version.to_be_bytes());
        bytes.extend_from_slice(&1i32.to_be_bytes());
        bytes.extend_from_slice(&1i16.to_be_bytes());
        bytes.push(b't');
        bytes.extend_from_slice(&2i32.to_be_bytes());
        bytes.extend_from_slice(&0i32.to_be_bytes());
        bytes.extend_from_slice(&2i32.to_be_bytes());
        bytes.extend_from_slice(&(-1i32).to_be_bytes());
        bytes.extend_from_slice(extra);
        Bytes::from(bytes)
    }

    #[test]
    fn assignments_of_every_consumer_version_read_and_others_are_told_apart_from_none() {
        let read = vec![("t".to_owned(), 0), ("t".to_owned(), 2)];
        for version in 0..=3 {
            assert_eq!(
                assignment(&consumer_assignment(version, &[])),
                Some(read.clone())
            );
        }
        // A later version is read as 3, as Kafka's consumer reads it.
        assert_eq!(
            assignment(&consumer_assignment(4, &[0, 0, 0, 7])),
            Some(read)
        );
        assert_eq!(
            assignment(&Bytes::new()),
            Some(Vec::new()),
            "not yet assigned"
        );
        for other in [
            &b"{\"custom\": true}"[..],
            &[0xff, 0xff, 0, 0][..],
            &[0, 0, 0][..],
        ] {
            assert_eq!(
                assignment(&Bytes::copy_from_slice(other)),
                None,
                "{other:?}"
            );
        }
    }
}
