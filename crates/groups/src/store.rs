//! Groups on disk: one checksummed file per group, `DIR/groups/<name>.offsets`, replaced
//! atomically (written aside, synced, renamed) before a change is answered: on each commit of
//! its offsets, each generation it opens and each assignment it completes.
//!
//! A write rewrites only its own group's file, so what it costs depends on what its group
//! holds, never on what other groups hold (one client with a 125 MiB group cannot make another's
//! commit slow). A whole-file rewrite keeps recovery trivial: read each file; a damaged one is
//! an error naming it, never half-loaded.
//!
//! A file is named by a 64-bit FNV-1a hash of its group id (ids are any string, too long or too
//! strange for a file name); the id itself is inside, and two ids with one hash get `-1`, `-2`
//! ... The name is the coordinator's to keep for as long as the group lives.
//!
//! An older broker kept every group in one file, `DIR/group-offsets`, in the same layout. It is
//! read at start, split into per-group files and then removed; a crash part way leaves it in
//! place, and the split is simply done again.
//!
//! In the envelope every small file of the data directory shares ([`minibroker_log::sealed`]):
//! ```text
//! "MBGO" version:u8 groups:u32
//! groups × { id:str offsets
//!            v2: pending:u32  pending × { producer_id:i64 offsets }
//!            v3: generation:i32 assigned:u8 protocol_type:opt protocol:opt leader:opt
//!                members:u32  members × { id:str instance_id:opt client_id:str client_host:str
//!                                         session_ms:u64 rebalance_ms:u64
//!                                         protocols:u32  protocols × { name:str metadata:bytes }
//!                                         assignment:bytes } }
//! offsets = count:u32  count × { topic:str partition:i32 offset:i64 metadata:opt commit_ms:i64 }
//! opt = present:u8 str        (0 and an empty string when absent)
//! crc32c:u32
//! ```
//! (`str` and `bytes` are a u32 length and the bytes, UTF-8 for `str`; integers big-endian.) A
//! per-group file holds one group. Version 2 added the offsets producers committed in their
//! open transactions (TxnOffsetCommit), kept until the transaction's COMMIT makes them the
//! group's or its ABORT drops them. Version 3 added the group's generation and members, so a
//! restart neither tells running consumers UNKNOWN_MEMBER_ID nor opens a generation a second
//! time (Kafka keeps them in its group metadata records). Versions 1 and 2 are still read: their
//! groups have no members and generation 0.

use minibroker_log::sealed::{FieldWriter, Fields};
use minibroker_log::storage::TEMPORARY_SUFFIX;
use std::collections::HashSet;
use std::sync::Arc;

use minibroker_broker::ServerError;
use minibroker_broker::data_dir::DataDir;

use bytes::Bytes;
use std::time::Duration;

use crate::model::{
    Committed, GroupError, GroupsSnapshot, SavedGroup, SavedMember, SavedMembership, StoreFailure,
    TopicPartition,
};

/// The directory of per-group files.
const DIR: &str = "groups";
/// Every group in one file: what older brokers wrote.
const LEGACY_FILE: &str = "group-offsets";
const SUFFIX: &str = ".offsets";
const MAGIC: &[u8; 4] = b"MBGO";
/// The version written.
const VERSION: u8 = 3;
/// The oldest version read.
const OLDEST_VERSION: u8 = 1;

/// Groups, as saved.
type Snapshot = GroupsSnapshot;

/// One group as loaded: its id, its file's name and what it holds.
pub(super) type Saved = (String, String, SavedGroup);

/// Where a durable broker keeps committed offsets.
#[derive(Debug)]
pub(super) struct OffsetStore {
    data: Arc<DataDir>,
}

impl OffsetStore {
    pub(super) fn new(data: Arc<DataDir>) -> Self {
        Self { data }
    }

    /// The path in the data directory of the group file named `file`.
    fn path(file: &str) -> String {
        format!("{DIR}/{file}{SUFFIX}")
    }

    /// A data-directory error for `name`, where `what` failed with `error`.
    fn io_error(&self, name: &str, what: &'static str, error: std::io::Error) -> ServerError {
        ServerError::data_dir_io(self.data.root().join(name), what, error)
    }

    fn damaged(&self, name: &str, reason: impl Into<String>) -> ServerError {
        damaged(&self.data, name, reason)
    }

    /// Every saved group (an older broker's single file is split into per-group files first).
    pub(super) fn load(&self) -> Result<Vec<Saved>, ServerError> {
        self.data
            .create_dir(DIR)
            .map_err(|error| self.io_error(DIR, "creating it", error))?;
        self.split_legacy_file()?;
        let mut saved = Vec::new();
        let mut ids = HashSet::new();
        let names = self
            .data
            .list(DIR)
            .map_err(|error| self.io_error(DIR, "listing it", error))?;
        for name in names {
            if name.ends_with(TEMPORARY_SUFFIX) {
                let path = format!("{DIR}/{name}");
                // A write that never finished: the file it was to replace is still there.
                self.data
                    .remove_file(&path)
                    .map_err(|error| self.io_error(&path, "removing an unfinished write", error))?;
                continue;
            }
            let Some(file) = name.strip_suffix(SUFFIX) else {
                let path = self.data.root().join(DIR).join(&name);
                tracing::warn!(file = %path.display(), "not a group's offsets; left alone");
                continue;
            };
            let path = Self::path(file);
            let mut groups = self.read(&path)?.unwrap_or_default();
            let (Some((id, offsets)), None) = (groups.pop(), groups.pop()) else {
                return Err(self.damaged(&path, "does not hold exactly one group"));
            };
            if !ids.insert(id.clone()) {
                return Err(self.damaged(&path, format!("holds group {id:?} a second time")));
            }
            saved.push((id, file.to_owned(), offsets));
        }
        Ok(saved)
    }

    fn read(&self, path: &str) -> Result<Option<Snapshot>, ServerError> {
        read_groups(&self.data, path)
    }

    /// Writes each group of an older broker's `group-offsets` to its own file, then removes it.
    fn split_legacy_file(&self) -> Result<(), ServerError> {
        let Some(legacy) = self.read(LEGACY_FILE)? else {
            return Ok(());
        };
        let mut used = HashSet::new();
        for (id, offsets) in legacy {
            let name = file_name(&id, &used);
            let path = Self::path(&name);
            self.data
                .write_file(&path, &encode(&[(id, offsets)]))
                .map_err(|error| self.io_error(&path, "writing it", error))?;
            used.insert(name);
        }
        self.data
            .remove_file(LEGACY_FILE)
            .map_err(|error| self.io_error(LEGACY_FILE, "removing it", error))?;
        tracing::info!("committed offsets moved from group-offsets to a file per group");
        Ok(())
    }

    /// Writes `group` to its file `name` on a blocking thread.
    pub(super) async fn save(
        &self,
        name: &str,
        group: String,
        saved: SavedGroup,
    ) -> Result<(), GroupError> {
        let path = Self::path(name);
        self.blocking("saving a group", move |data| {
            data.write_file(&path, &encode(&[(group, saved)]))
        })
        .await
    }

    /// Removes a group's file `name`, on a blocking thread.
    pub(super) async fn remove(&self, name: &str) -> Result<(), GroupError> {
        let path = Self::path(name);
        self.blocking("removing committed offsets", move |data| {
            data.remove_file(&path)
        })
        .await
    }

    /// Runs the file work `work` on a blocking thread; a failure is a storage error saying
    /// `what` was being done.
    async fn blocking(
        &self,
        what: &'static str,
        work: impl FnOnce(&DataDir) -> std::io::Result<()> + Send + 'static,
    ) -> Result<(), GroupError> {
        let data = Arc::clone(&self.data);
        tokio::task::spawn_blocking(move || work(&data))
            .await
            .map_err(|error| {
                GroupError::Storage(StoreFailure::new(what, std::io::Error::other(error)))
            })?
            .map_err(|error| GroupError::Storage(StoreFailure::new(what, error)))
    }
}

fn damaged(data: &DataDir, name: &str, reason: impl Into<String>) -> ServerError {
    ServerError::data_dir(data.root().join(name), reason.into())
}

/// The groups of the file `path` of `data`, none if it does not exist.
fn read_groups(data: &DataDir, path: &str) -> Result<Option<Snapshot>, ServerError> {
    match data.read_file(path) {
        Ok(None) => Ok(None),
        Ok(Some(bytes)) => decode(&bytes)
            .map(Some)
            .ok_or_else(|| damaged(data, path, "damaged (bad checksum or layout)")),
        Err(error) => Err(ServerError::data_dir_io(
            data.root().join(path),
            "reading it",
            error,
        )),
    }
}

/// Every offsets file in `data` (the per-group ones and an older broker's single one), each
/// with what is wrong with it, if anything: for `minibroker check-data`, which writes nothing.
pub fn check_files(data: &DataDir) -> Vec<(std::path::PathBuf, Option<String>)> {
    let mut names: Vec<String> = data
        .list(DIR)
        .unwrap_or_default()
        .into_iter()
        .filter(|name| name.ends_with(SUFFIX))
        .map(|name| format!("{DIR}/{name}"))
        .collect();
    names.push(LEGACY_FILE.to_owned());
    names
        .into_iter()
        .filter_map(|name| {
            let path = data.root().join(&name);
            match read_groups(data, &name) {
                Ok(None) => None,
                Ok(Some(_)) => Some((path, None)),
                Err(ServerError::DataDir { problem, .. }) => {
                    Some((path, Some(problem.to_string())))
                }
                Err(error) => Some((path, Some(error.to_string()))),
            }
        })
        .collect()
}

/// The name (without [`SUFFIX`]) for a new file of group `id`, other than every name in `used`.
pub(super) fn file_name(id: &str, used: &HashSet<String>) -> String {
    let hash = fnv1a(id.as_bytes());
    let mut name = format!("{hash:016x}");
    let mut n = 0u64;
    while used.contains(&name) {
        n += 1;
        name = format!("{hash:016x}-{n}");
    }
    name
}

/// FNV-1a, 64 bits: stable across versions and platforms, unlike the standard library's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn encode(snapshot: &[(String, SavedGroup)]) -> Vec<u8> {
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

fn decode(bytes: &[u8]) -> Option<Snapshot> {
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
        assert_eq!(decode(&bytes), Some(vec![("g".into(), saved)]));
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
    fn a_file_name_is_the_ids_hash_and_never_one_in_use() {
        let none = HashSet::new();
        let first = file_name("g", &none);
        assert_eq!(first, format!("{:016x}", fnv1a(b"g")));
        assert_eq!(file_name("g", &none), first, "stable");
        let used: HashSet<String> = [first.clone()].into();
        assert_eq!(file_name("g", &used), format!("{first}-1"));
    }
}
