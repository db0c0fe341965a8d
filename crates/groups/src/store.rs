//! Committed offsets on disk: one checksummed file per group, `DIR/groups/<name>.offsets`,
//! replaced atomically (written aside, synced, renamed) on each commit of that group, before the
//! commit is answered.
//!
//! A commit rewrites only its own group's file, so what it costs depends on what its group
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
//!            v2: pending:u32  pending × { producer_id:i64 offsets } }
//! offsets = count:u32  count × { topic:str partition:i32 offset:i64
//!                                has_metadata:u8 metadata:str commit_ms:i64 }
//! crc32c:u32
//! ```
//! (`str` is a u32 length and UTF-8 bytes; integers big-endian.) A per-group file holds one
//! group. Version 2 added the offsets producers committed in their open transactions
//! (TxnOffsetCommit), kept until the transaction's COMMIT makes them the group's or its ABORT
//! drops them; version 1 files, from before transactions, are still read.

use minibroker_log::sealed::{FieldWriter, Fields};
use minibroker_log::storage::TEMPORARY_SUFFIX;
use std::collections::HashSet;
use std::sync::Arc;

use minibroker_broker::ServerError;
use minibroker_broker::data_dir::DataDir;

use crate::model::{
    Committed, GroupError, OffsetsSnapshot, SavedOffsets, StoreFailure, TopicPartition,
};

/// The directory of per-group files.
const DIR: &str = "groups";
/// Every group in one file: what older brokers wrote.
const LEGACY_FILE: &str = "group-offsets";
const SUFFIX: &str = ".offsets";
const MAGIC: &[u8; 4] = b"MBGO";
/// The version written.
const VERSION: u8 = 2;
/// The oldest version read.
const OLDEST_VERSION: u8 = 1;

/// Groups' committed offsets, as saved.
type Snapshot = OffsetsSnapshot;

/// One group as loaded: its id, its file's name and its offsets.
pub(super) type Saved = (String, String, SavedOffsets);

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

    /// Writes `group`'s offsets to its file `name` on a blocking thread.
    pub(super) async fn save(
        &self,
        name: &str,
        group: String,
        offsets: SavedOffsets,
    ) -> Result<(), GroupError> {
        let path = Self::path(name);
        self.blocking("saving committed offsets", move |data| {
            data.write_file(&path, &encode(&[(group, offsets)]))
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

fn encode(snapshot: &[(String, SavedOffsets)]) -> Vec<u8> {
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
    }
    minibroker_log::sealed::seal(MAGIC, VERSION, &out.into_body())
}

fn encode_offsets(out: &mut FieldWriter, offsets: &[(TopicPartition, Committed)]) {
    out.count(offsets.len());
    for ((topic, partition), committed) in offsets {
        out.string(topic);
        out.int(partition.to_be_bytes());
        out.int(committed.offset.to_be_bytes());
        out.u8(u8::from(committed.metadata.is_some()));
        out.string(committed.metadata.as_deref().unwrap_or(""));
        out.int(committed.commit_ms.to_be_bytes());
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
        snapshot.push((group, SavedOffsets { committed, pending }));
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
        let has_metadata = r.u8()?;
        let metadata = r.string()?;
        let commit_ms = i64::from_be_bytes(r.take()?);
        offsets.push((
            (topic, partition),
            Committed {
                offset,
                metadata: (has_metadata == 1).then_some(metadata),
                commit_ms,
            },
        ));
    }
    Some(offsets)
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
        let saved = SavedOffsets {
            committed: vec![(("t".into(), 3), committed(5))],
            pending: vec![],
        };
        assert_eq!(decode(&bytes), Some(vec![("g".into(), saved)]));
    }

    #[test]
    fn offsets_round_trip_and_damage_is_detected() {
        let pending = vec![(4000, vec![(("in".into(), 0), committed(11))])];
        let snapshot: Snapshot = vec![(
            "g".into(),
            SavedOffsets {
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
