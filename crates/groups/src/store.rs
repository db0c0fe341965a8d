use minibroker_log::sealed::framed::frame;
use minibroker_storage::TEMPORARY_SUFFIX;
use std::collections::HashSet;
use std::sync::Arc;

use minibroker_broker::ServerError;
use minibroker_broker::data_dir::DataDir;

use crate::codec::{self, Layout};
use crate::model::{GroupChange, GroupError, SavedGroup, StoreFailure};

/// The directory of per-group files.
const DIR: &str = "groups";
/// Every group in one file: what older brokers wrote.
const LEGACY_FILE: &str = "group-offsets";
const SUFFIX: &str = ".offsets";

/// A file at most this large is never replaced for its size alone.
const COMPACT_BYTES: u64 = 64 << 10;

/// One group as loaded: its id, its file's name, what it holds, and its file's state.
pub(super) type Saved = (String, String, SavedGroup, FileState);

/// What the coordinator knows of a group's file, kept under the group's writer lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct FileState {
    /// Bytes of whole records in the file.
    pub(super) bytes: u64,
    /// The next write replaces the file whole: there is none yet, it is unframed, it has a torn
    /// tail, or an append to it failed.
    pub(super) whole_needed: bool,
}

impl FileState {
    /// A group with no file yet.
    pub(super) fn new_group() -> Self {
        Self {
            bytes: 0,
            whole_needed: true,
        }
    }

    /// Whether the next write replaces the file whole, for a group holding `group_bytes` (what
    /// it costs the broker's memory, a little more than its whole record).
    pub(super) fn whole_due(&self, group_bytes: u64) -> bool {
        self.whole_needed || self.bytes > COMPACT_BYTES.max(2 * group_bytes)
    }
}

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
            let Some(bytes) = self.read_bytes(&path)? else {
                continue;
            };
            let (id, group, layout) = codec::read_group_file(&bytes)
                .map_err(|reason| self.damaged(&path, reason.to_string()))?;
            if !ids.insert(id.clone()) {
                return Err(self.damaged(&path, format!("holds group {id:?} a second time")));
            }
            let state = match layout {
                Layout::Unframed => FileState {
                    bytes: bytes.len() as u64,
                    whole_needed: true,
                },
                Layout::Framed(None) => FileState {
                    bytes: bytes.len() as u64,
                    whole_needed: false,
                },
                Layout::Framed(Some(torn)) => {
                    tracing::warn!(
                        file = %self.data.root().join(&path).display(),
                        at = torn.at,
                        bytes = torn.bytes,
                        "left out a torn tail of a group's file: an append a crash interrupted (never answered), or lost data"
                    );
                    FileState {
                        bytes: torn.at as u64,
                        whole_needed: true,
                    }
                }
            };
            saved.push((id, file.to_owned(), group, state));
        }
        Ok(saved)
    }

    fn read_bytes(&self, path: &str) -> Result<Option<Vec<u8>>, ServerError> {
        self.data
            .read_file(path)
            .map_err(|error| self.io_error(path, "reading it", error))
    }

    /// Writes each group of an older broker's `group-offsets` to its own file, then removes it.
    fn split_legacy_file(&self) -> Result<(), ServerError> {
        let Some(bytes) = self.read_bytes(LEGACY_FILE)? else {
            return Ok(());
        };
        let legacy = codec::decode(&bytes)
            .ok_or_else(|| self.damaged(LEGACY_FILE, "damaged (bad checksum or layout)"))?;
        let mut used = HashSet::new();
        for (id, offsets) in legacy {
            let name = file_name(&id, &used);
            let path = Self::path(&name);
            self.data
                .write_file(&path, &frame(&codec::encode(&[(id, offsets)])))
                .map_err(|error| self.io_error(&path, "writing it", error))?;
            used.insert(name);
        }
        self.data
            .remove_file(LEGACY_FILE)
            .map_err(|error| self.io_error(LEGACY_FILE, "removing it", error))?;
        tracing::info!("committed offsets moved from group-offsets to a file per group");
        Ok(())
    }

    /// Replaces `group`'s file `name` with its whole record, on a blocking thread; returns the
    /// file's size.
    pub(super) async fn save_whole(
        &self,
        name: &str,
        group: String,
        saved: SavedGroup,
    ) -> Result<u64, GroupError> {
        let path = Self::path(name);
        let framed = frame(&codec::encode(&[(group, saved)]));
        let bytes = framed.len() as u64;
        self.blocking("saving a group", move |data| {
            data.write_file(&path, &framed)
        })
        .await?;
        Ok(bytes)
    }

    /// Appends `change` to the file `name` of `bytes` whole bytes and syncs it, on a blocking
    /// thread; returns what it added. A failed append is cut off again where it can be.
    pub(super) async fn append(
        &self,
        name: &str,
        bytes: u64,
        change: &GroupChange,
    ) -> Result<u64, GroupError> {
        let path = self.data.root().join(Self::path(name));
        let framed = frame(&codec::encode_change(change));
        let added = framed.len() as u64;
        self.blocking("saving a change of a group", move |data| {
            let file = data.storage().open(&path)?;
            if let Err(error) = file.append(&framed) {
                let _ = file.truncate(bytes);
                return Err(error);
            }
            file.sync()
        })
        .await?;
        Ok(added)
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

/// Every group file in `data` (the per-group ones and an older broker's single one), each
/// with what is wrong with it, if anything: for `minibroker check-data`, which writes nothing. A
/// torn tail is reported as damage, as a segment's is: the start leaves it out.
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
            let problem = match data.read_file(&name) {
                Ok(None) => return None,
                Err(error) => Some(format!("cannot read it: {error}")),
                Ok(Some(bytes)) if name == LEGACY_FILE => codec::decode(&bytes)
                    .is_none()
                    .then(|| "damaged (bad checksum or layout)".to_owned()),
                Ok(Some(bytes)) => match codec::read_group_file(&bytes) {
                    Ok((_, _, Layout::Framed(Some(torn)))) => Some(torn.to_string()),
                    Ok(_) => None,
                    Err(reason) => Some(reason.to_string()),
                },
            };
            Some((path, problem))
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

#[cfg(test)]
mod tests {
    use super::*;

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
