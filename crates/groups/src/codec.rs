//! The records of a group's file (see `store` for the file): a whole group, as `MBGO`, and one
//! change of it, as `MBGC`; and the reading of a file of them, a change applied to the group the
//! records before it left.
//!
//! ```text
//! "MBGO" version:u8 groups:u32
//! groups × { id:str offsets
//!            v2: pending:u32  pending × { producer_id:i64 offsets }
//!            v3: generation:i32 assigned:u8 protocol_type:opt protocol:opt leader:opt
//!                members:u32  members × { id:str instance_id:opt client_id:str client_host:str
//!                                         session_ms:u64 rebalance_ms:u64
//!                                         protocols:u32  protocols × { name:str metadata:bytes }
//!                                         assignment:bytes } }
//! crc32c:u32
//!
//! "MBGC" version:u8 (1) kind:u8
//!   1 committed:   offsets
//!   2 pending:     producer_id:i64 offsets
//!   3 ended:       producer_id:i64 committed:u8
//!   4 deleted:     count:u32  count × { topic:str partition:i32 }
//!   5 membership:  as in v3 above, from generation on
//! crc32c:u32
//!
//! offsets = count:u32  count × { topic:str partition:i32 offset:i64 metadata:opt commit_ms:i64 }
//! opt = present:u8 str        (0 and an empty string when absent)
//! ```
//! (`str` and `bytes` are a u32 length and the bytes, UTF-8 for `str`; integers big-endian.)
//! Version 2 of `MBGO` added the offsets producers committed in their open transactions
//! (TxnOffsetCommit), kept until the transaction's COMMIT makes them the group's or its ABORT
//! drops them. Version 3 added the group's generation and members, so a restart neither tells
//! running consumers UNKNOWN_MEMBER_ID nor opens a generation a second time (Kafka keeps them in
//! its group metadata records). Versions 1 and 2 are still read: their groups have no members
//! and generation 0.

use bytes::Bytes;
use minibroker_log::sealed::framed::{TornTail, read_framed};
use minibroker_log::sealed::{FieldWriter, Fields};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::{
    Committed, GroupChange, GroupsSnapshot, SavedGroup, SavedMember, SavedMembership,
    TopicPartition,
};

const MAGIC: &[u8; 4] = b"MBGO";
/// The version written.
const VERSION: u8 = 3;
/// The oldest version read.
const OLDEST_VERSION: u8 = 1;
const CHANGE_MAGIC: &[u8; 4] = b"MBGC";
const CHANGE_VERSION: u8 = 1;

/// Groups, as saved.
type Snapshot = GroupsSnapshot;

/// How a group's file was laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// One whole group, not framed: what brokers before appended changes wrote. Its next write
    /// replaces it whole.
    Unframed,
    /// Framed records, with the torn tail a crash mid-append left, if any (left out).
    Framed(Option<TornTail>),
}

/// Why a group's file does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum GroupFileError {
    /// An older broker's whole-group file that does not decode.
    #[error("damaged (bad checksum or layout)")]
    Damaged,
    /// An older broker's whole-group file with no group, or several.
    #[error("does not hold exactly one group")]
    NotOneGroup,
    /// A framed record that does not read, with whole records after it.
    #[error("damaged at byte {at}: {why}")]
    DamagedAt {
        /// Where the record begins.
        at: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Framed records, none of them a whole group.
    #[error("holds no group")]
    NoGroup,
}

/// The group a file's `bytes` hold: its id, what it holds, and how the file was laid out; why
/// not, otherwise.
pub(super) fn read_group_file(
    bytes: &[u8],
) -> Result<(String, SavedGroup, Layout), GroupFileError> {
    if bytes.starts_with(MAGIC) {
        let mut groups = decode(bytes).ok_or(GroupFileError::Damaged)?;
        let (Some((id, saved)), None) = (groups.pop(), groups.pop()) else {
            return Err(GroupFileError::NotOneGroup);
        };
        return Ok((id, saved, Layout::Unframed));
    }
    let mut group: Option<(String, Replayed)> = None;
    let apply = |_at: usize, record: &[u8]| -> Result<(), &'static str> {
        if record.starts_with(CHANGE_MAGIC) {
            let change = decode_change(record).ok_or("a damaged change")?;
            let (_, replayed) = group.as_mut().ok_or("a change before any whole group")?;
            replayed.apply(change);
            return Ok(());
        }
        let mut groups = decode(record).ok_or("a damaged group")?;
        let (Some((id, saved)), None) = (groups.pop(), groups.pop()) else {
            return Err("a record that does not hold exactly one group");
        };
        if group.as_ref().is_some_and(|(held, _)| *held != id) {
            return Err("records of two groups");
        }
        group = Some((id, Replayed::from(saved)));
        Ok(())
    };
    let reads_whole = |record: &[u8]| decode(record).is_some() || decode_change(record).is_some();
    let torn = read_framed(bytes, &[MAGIC, CHANGE_MAGIC], apply, reads_whole).map_err(|error| {
        GroupFileError::DamagedAt {
            at: error.at,
            why: error
                .source
                .unwrap_or("its length is damaged: whole records follow it"),
        }
    })?;
    let (id, replayed) = group.ok_or(GroupFileError::NoGroup)?;
    Ok((id, replayed.into(), Layout::Framed(torn)))
}

/// A group as its records leave it, kept by key while they are read.
#[derive(Debug, Default)]
struct Replayed {
    committed: BTreeMap<TopicPartition, Committed>,
    pending: BTreeMap<i64, BTreeMap<TopicPartition, Committed>>,
    membership: SavedMembership,
}

impl From<SavedGroup> for Replayed {
    fn from(saved: SavedGroup) -> Self {
        Self {
            committed: saved.committed.into_iter().collect(),
            pending: saved
                .pending
                .into_iter()
                .map(|(producer_id, offsets)| (producer_id, offsets.into_iter().collect()))
                .collect(),
            membership: saved.membership,
        }
    }
}

impl From<Replayed> for SavedGroup {
    fn from(replayed: Replayed) -> Self {
        Self {
            committed: replayed.committed.into_iter().collect(),
            pending: replayed
                .pending
                .into_iter()
                .map(|(producer_id, offsets)| (producer_id, offsets.into_iter().collect()))
                .collect(),
            membership: replayed.membership,
        }
    }
}

impl Replayed {
    /// What the coordinator did when it wrote `change` (`Group`'s commit, TxnOffsetCommit,
    /// end of a transaction, OffsetDelete, a new generation or assignment).
    fn apply(&mut self, change: GroupChange) {
        match change {
            GroupChange::Committed(offsets) => self.committed.extend(offsets),
            GroupChange::Pending(producer_id, offsets) => {
                self.pending.entry(producer_id).or_default().extend(offsets);
            }
            GroupChange::Ended(producer_id, committed) => {
                let pending = self.pending.remove(&producer_id).unwrap_or_default();
                if committed {
                    self.committed.extend(pending);
                }
            }
            GroupChange::Deleted(partitions) => {
                for partition in partitions {
                    self.committed.remove(&partition);
                }
            }
            GroupChange::Membership(membership) => self.membership = membership,
        }
    }
}

/// `change`'s record.
pub(super) fn encode_change(change: &GroupChange) -> Vec<u8> {
    let mut out = FieldWriter::default();
    match change {
        GroupChange::Committed(offsets) => {
            out.u8(1);
            encode_offsets(&mut out, offsets);
        }
        GroupChange::Pending(producer_id, offsets) => {
            out.u8(2);
            out.int(producer_id.to_be_bytes());
            encode_offsets(&mut out, offsets);
        }
        GroupChange::Ended(producer_id, committed) => {
            out.u8(3);
            out.int(producer_id.to_be_bytes());
            out.u8(u8::from(*committed));
        }
        GroupChange::Deleted(partitions) => {
            out.u8(4);
            out.count(partitions.len());
            for (topic, partition) in partitions {
                out.string(topic);
                out.int(partition.to_be_bytes());
            }
        }
        GroupChange::Membership(membership) => {
            out.u8(5);
            encode_membership(&mut out, membership);
        }
    }
    minibroker_log::sealed::seal(CHANGE_MAGIC, CHANGE_VERSION, &out.into_body())
}

/// A group's membership as a sealed, versioned record of its own (what a cluster's database
/// keeps for DescribeGroups through any broker): the file's membership change.
pub(super) fn encode_membership_record(membership: &SavedMembership) -> Vec<u8> {
    encode_change(&GroupChange::Membership(membership.clone()))
}

/// The membership [`encode_membership_record`] wrote; `None` for anything else.
pub(super) fn decode_membership_record(bytes: &[u8]) -> Option<SavedMembership> {
    match decode_change(bytes)? {
        GroupChange::Membership(membership) => Some(membership),
        _ => None,
    }
}

fn decode_change(bytes: &[u8]) -> Option<GroupChange> {
    let body = minibroker_log::sealed::unseal(CHANGE_MAGIC, CHANGE_VERSION, bytes).ok()?;
    let mut r = Fields::new(body);
    let change = match r.u8()? {
        1 => GroupChange::Committed(decode_offsets(&mut r)?),
        2 => {
            let producer_id = i64::from_be_bytes(r.take()?);
            GroupChange::Pending(producer_id, decode_offsets(&mut r)?)
        }
        3 => {
            let producer_id = i64::from_be_bytes(r.take()?);
            let committed = match r.u8()? {
                0 => false,
                1 => true,
                _ => return None,
            };
            GroupChange::Ended(producer_id, committed)
        }
        4 => {
            let mut partitions = Vec::new();
            for _ in 0..r.count()? {
                let topic = r.string()?;
                partitions.push((topic, i32::from_be_bytes(r.take()?)));
            }
            GroupChange::Deleted(partitions)
        }
        5 => GroupChange::Membership(decode_membership(&mut r)?),
        _ => return None,
    };
    (r.remaining() == 0).then_some(change)
}

pub(super) fn encode(snapshot: &[(String, SavedGroup)]) -> Vec<u8> {
    let mut out = FieldWriter::default();
    out.count(snapshot.len());
    for (group, saved) in snapshot {
        out.string(group);
        encode_offsets(&mut out, &saved.committed);
        out.count(saved.pending.len());
        for (producer_id, offsets) in &saved.pending {
            out.int(producer_id.to_be_bytes());
            encode_offsets(&mut out, offsets);
        }
        encode_membership(&mut out, &saved.membership);
    }
    minibroker_log::sealed::seal(MAGIC, VERSION, &out.into_body())
}

fn encode_offsets(out: &mut FieldWriter, offsets: &[(TopicPartition, Committed)]) {
    out.count(offsets.len());
    for ((topic, partition), committed) in offsets {
        out.string(topic);
        out.int(partition.to_be_bytes());
        out.int(committed.offset.to_be_bytes());
        put_optional(out, committed.metadata.as_deref());
        out.int(committed.commit_ms.to_be_bytes());
    }
}

fn encode_membership(out: &mut FieldWriter, membership: &SavedMembership) {
    out.int(membership.generation.to_be_bytes());
    out.u8(u8::from(membership.assigned));
    put_optional(out, membership.protocol_type.as_deref());
    put_optional(out, membership.protocol.as_deref());
    put_optional(out, membership.leader.as_deref());
    out.count(membership.members.len());
    for member in &membership.members {
        out.string(&member.id);
        put_optional(out, member.group_instance_id.as_deref());
        out.string(&member.client_id);
        out.string(&member.client_host);
        out.int(millis(member.session_timeout).to_be_bytes());
        out.int(millis(member.rebalance_timeout).to_be_bytes());
        out.count(member.protocols.len());
        for (name, metadata) in &member.protocols {
            out.string(name);
            out.bytes(metadata);
        }
        out.bytes(&member.assignment);
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// An optional string: `1` and the string, or `0` and an empty one.
fn put_optional(out: &mut FieldWriter, text: Option<&str>) {
    out.u8(u8::from(text.is_some()));
    out.string(text.unwrap_or(""));
}

fn optional(r: &mut Fields<'_>) -> Option<Option<String>> {
    let present = r.u8()?;
    let text = r.string()?;
    match present {
        0 => Some(None),
        1 => Some(Some(text)),
        _ => None,
    }
}

pub(super) fn decode(bytes: &[u8]) -> Option<Snapshot> {
    let (version, body) =
        minibroker_log::sealed::unseal_versions(MAGIC, OLDEST_VERSION..=VERSION, bytes).ok()?;
    let mut r = Fields::new(body);
    let groups = r.count()?;
    let mut snapshot = Vec::new();
    for _ in 0..groups {
        let group = r.string()?;
        let committed = decode_offsets(&mut r)?;
        let mut pending = Vec::new();
        if version >= 2 {
            for _ in 0..r.count()? {
                let producer_id = i64::from_be_bytes(r.take()?);
                pending.push((producer_id, decode_offsets(&mut r)?));
            }
        }
        let membership = if version >= 3 {
            decode_membership(&mut r)?
        } else {
            SavedMembership::default()
        };
        let saved = SavedGroup {
            committed,
            pending,
            membership,
        };
        snapshot.push((group, saved));
    }
    (r.remaining() == 0).then_some(snapshot)
}

fn decode_offsets(r: &mut Fields<'_>) -> Option<Vec<(TopicPartition, Committed)>> {
    let count = r.count()?;
    let mut offsets = Vec::new();
    for _ in 0..count {
        let topic = r.string()?;
        let partition = i32::from_be_bytes(r.take()?);
        let offset = i64::from_be_bytes(r.take()?);
        let metadata = optional(r)?;
        let commit_ms = i64::from_be_bytes(r.take()?);
        offsets.push((
            (topic, partition),
            Committed {
                offset,
                metadata,
                commit_ms,
            },
        ));
    }
    Some(offsets)
}

fn decode_membership(r: &mut Fields<'_>) -> Option<SavedMembership> {
    let generation = i32::from_be_bytes(r.take()?);
    let assigned = match r.u8()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let protocol_type = optional(r)?;
    let protocol = optional(r)?;
    let leader = optional(r)?;
    let mut members = Vec::new();
    for _ in 0..r.count()? {
        let id = r.string()?;
        let group_instance_id = optional(r)?;
        let client_id = r.string()?;
        let client_host = r.string()?;
        let session_timeout = Duration::from_millis(u64::from_be_bytes(r.take()?));
        let rebalance_timeout = Duration::from_millis(u64::from_be_bytes(r.take()?));
        let mut protocols = Vec::new();
        for _ in 0..r.count()? {
            let name = r.string()?;
            protocols.push((name, Bytes::copy_from_slice(r.bytes()?)));
        }
        let assignment = Bytes::copy_from_slice(r.bytes()?);
        members.push(SavedMember {
            id,
            group_instance_id,
            client_id,
            client_host,
            session_timeout,
            rebalance_timeout,
            protocols,
            assignment,
        });
    }
    Some(SavedMembership {
        generation,
        assigned,
        protocol_type,
        protocol,
        leader,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(offset: i64) -> Committed {
        Committed {
            offset,
            metadata: None,
            commit_ms: 9,
        }
    }

    #[test]
    fn a_version_1_file_is_still_read() {
        let mut body = FieldWriter::default();
        body.count(1);
        body.string("g");
        encode_offsets(&mut body, &[(("t".into(), 3), committed(5))]);
        let bytes = minibroker_log::sealed::seal(MAGIC, 1, &body.into_body());
        let saved = SavedGroup {
            committed: vec![(("t".into(), 3), committed(5))],
            ..SavedGroup::default()
        };
        assert_eq!(decode(&bytes), Some(vec![("g".into(), saved)]));
    }

    #[test]
    fn a_version_2_file_is_read_with_no_members() {
        let mut body = FieldWriter::default();
        body.count(1);
        body.string("g");
        encode_offsets(&mut body, &[]);
        body.count(1);
        body.int(4000i64.to_be_bytes());
        encode_offsets(&mut body, &[(("in".into(), 0), committed(11))]);
        let bytes = minibroker_log::sealed::seal(MAGIC, 2, &body.into_body());
        let saved = SavedGroup {
            pending: vec![(4000, vec![(("in".into(), 0), committed(11))])],
            ..SavedGroup::default()
        };
        assert_eq!(decode(&bytes), Some(vec![("g".into(), saved.clone())]));
        // As an older broker wrote a group's file: whole, unframed; replaced at its next write.
        assert_eq!(
            read_group_file(&bytes),
            Ok(("g".into(), saved, Layout::Unframed))
        );
    }

    #[test]
    fn groups_round_trip_with_their_members_and_damage_is_detected() {
        let pending = vec![(4000, vec![(("in".into(), 0), committed(11))])];
        let member = |id: &str, instance: Option<&str>| SavedMember {
            id: id.into(),
            group_instance_id: instance.map(Into::into),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_millis(45_000),
            rebalance_timeout: Duration::from_millis(300_000),
            protocols: vec![("range".into(), Bytes::from_static(&[0, 1, 0xff]))],
            assignment: Bytes::from_static(&[0, 0, 9]),
        };
        let membership = SavedMembership {
            generation: 7,
            assigned: true,
            protocol_type: Some("consumer".into()),
            protocol: Some("range".into()),
            leader: Some("c-1".into()),
            members: vec![member("c-1", None), member("c-2", Some("static"))],
        };
        let snapshot: Snapshot = vec![(
            "g".into(),
            SavedGroup {
                membership,
                pending,
                committed: vec![
                    (
                        ("t".into(), 0),
                        Committed {
                            offset: 42,
                            metadata: Some("m".into()),
                            commit_ms: 7,
                        },
                    ),
                    (
                        ("t".into(), 1),
                        Committed {
                            offset: 0,
                            metadata: None,
                            commit_ms: 8,
                        },
                    ),
                ],
            },
        )];
        let bytes = encode(&snapshot);
        assert_eq!(decode(&bytes), Some(snapshot));
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1;
            assert_eq!(decode(&damaged), None, "byte {at}");
        }
    }

    #[test]
    fn changes_round_trip_and_replay_onto_the_whole_group_before_them() {
        let member = SavedMember {
            id: "c-1".into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_millis(45_000),
            rebalance_timeout: Duration::from_millis(300_000),
            protocols: vec![("range".into(), Bytes::from_static(&[0, 1]))],
            assignment: Bytes::from_static(&[9]),
        };
        let membership = SavedMembership {
            generation: 4,
            assigned: true,
            protocol_type: Some("consumer".into()),
            protocol: Some("range".into()),
            leader: Some("c-1".into()),
            members: vec![member],
        };
        let changes = [
            GroupChange::Committed(vec![
                (("t".into(), 0), committed(5)),
                (("t".into(), 1), committed(6)),
            ]),
            GroupChange::Pending(7, vec![(("t".into(), 2), committed(8))]),
            GroupChange::Pending(9, vec![(("t".into(), 0), committed(1))]),
            GroupChange::Ended(7, true),
            GroupChange::Ended(9, false),
            GroupChange::Deleted(vec![("t".into(), 1)]),
            GroupChange::Membership(membership.clone()),
        ];
        let mut file =
            minibroker_log::sealed::framed::frame(&encode(&[("g".into(), SavedGroup::default())]));
        for change in &changes {
            let record = encode_change(change);
            assert_eq!(decode_change(&record).as_ref(), Some(change));
            for at in 0..record.len() {
                let mut damaged = record.clone();
                damaged[at] ^= 1;
                assert_eq!(decode_change(&damaged), None, "byte {at}");
            }
            file.extend(minibroker_log::sealed::framed::frame(&record));
        }
        let (id, saved, layout) = read_group_file(&file).unwrap();
        assert_eq!((id.as_str(), layout), ("g", Layout::Framed(None)));
        assert_eq!(
            saved,
            SavedGroup {
                committed: vec![
                    (("t".into(), 0), committed(5)),
                    (("t".into(), 2), committed(8))
                ],
                pending: vec![],
                membership,
            }
        );
        // A crash mid-append leaves a torn tail: left out, and said.
        let whole = file.len();
        let more = minibroker_log::sealed::framed::frame(&encode_change(&changes[0]));
        file.extend_from_slice(&more[..more.len() - 2]);
        let (_, torn, layout) = read_group_file(&file).unwrap();
        assert_eq!(torn, saved);
        assert_eq!(
            layout,
            Layout::Framed(Some(TornTail {
                at: whole,
                bytes: more.len() - 2
            }))
        );
        // A change with no whole group before it cannot be read.
        let alone = minibroker_log::sealed::framed::frame(&encode_change(&changes[0]));
        assert!(
            read_group_file(&alone)
                .unwrap_err()
                .to_string()
                .contains("before any whole group")
        );
    }
}
