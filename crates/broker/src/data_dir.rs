//! The data directory: where a durable broker keeps everything that must outlive it.
//!
//! ```text
//! DIR/lock                         held (flock) while a broker uses DIR
//! DIR/topics                       one line per topic: "<name> <partitions>"
//! DIR/topic-configs                the topics' own settings: "<topic> <name>=<value>" per line
//! DIR/producer-ids                 the first producer id not yet reserved (i64)
//! DIR/groups/<hash>.offsets        a consumer group's committed offsets (`minibroker_groups`; older
//!                                  brokers kept every group in DIR/group-offsets)
//! DIR/logs/<topic>/<partition>/    a partition's segment files, snapshots and start offset
//!                                  (minibroker_log)
//! DIR/set-aside/<name>-<ms>/       a directory under logs/ that names no topic, moved aside
//! DIR/deleted/<name>-<ms>-<n>/     a deleted topic's directory, being removed (a start removes
//!                                  what a crash left here)
//! ```
//!
//! The topic list and the topics' settings are kept by appending what each change changed
//! (`keyed_lines`), and the producer-id reservation is replaced atomically (written aside,
//! synced, renamed); each record is in the checksummed envelope of [`minibroker_log::sealed`]:
//! a damaged one stops the broker with its name. Files of older brokers (plain text, no
//! checksum, or one sealed whole list) are still read, and replaced at the next write. Producer ids are reserved a
//! block at a time: the file is rewritten only when a block runs out, and a restarted broker
//! starts after the last reserved block, so an id is never issued twice even if the broker was
//! killed mid-block.
//!
//! A directory under `logs/` that the topic list does not name is never deleted (the list may be
//! what is wrong): it is moved to `set-aside/` with a warning, for the operator to look at.

use minibroker_log::sealed::framed::TornTail;
use minibroker_log::sealed::{seal, unseal};
use minibroker_log::{DurableLog, LogError, OpenFiles, Opened, SegmentConfig};
use minibroker_storage::Storage;
use minibroker_storage::{read_whole, write_atomically};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::ServerError;
use crate::descriptors::{self, DescriptorPlan};
use minibroker_storage::keyed_lines::KeyedLines;

/// Where deleted topics' directories wait for their removal.
const DELETED: &str = "deleted";

/// Producer ids reserved per write of `producer-ids`.
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// The sealed files' magics. Each begins with a NUL byte and is followed by a version byte of 1:
/// neither is printable, so no single changed byte makes a sealed file look like the plain text
/// of an older broker (see [`DataDir::read_sealed`]).
const TOPICS_MAGIC: &[u8; 4] = b"\0MBT";
const TOPICS: &str = "topics";
const TOPIC_CONFIGS: &str = "topic-configs";
const PRODUCER_IDS_MAGIC: &[u8; 4] = b"\0MBI";
const TOPIC_CONFIGS_MAGIC: &[u8; 4] = b"\0MBC";
const VERSION: u8 = 1;

/// A broker's data directory.
#[derive(Debug)]
pub struct DataDir {
    root: PathBuf,
    storage: Arc<dyn Storage>,
    segments: SegmentConfig,
    /// Where every partition's sealed segments are opened when read.
    open_files: Arc<OpenFiles>,
    /// How the broker's descriptors are shared (the soft limit raised at open).
    descriptors: DescriptorPlan,
    /// Held for as long as the broker runs, so a second broker cannot use the same directory.
    _lock: Option<std::fs::File>,
    /// The topic list, a line per topic (`<name> <partitions>`).
    topics_file: KeyedLines,
    /// The topics' own settings, a line per topic and setting (`<topic> <name>=<value>`).
    topic_configs_file: KeyedLines,
}

impl DataDir {
    /// Opens `root` on `storage`, creating it if needed. With `lock`, `root` is a real
    /// directory and an exclusive lock on `root/lock` is taken (and held until drop). The
    /// process's open-file limit is raised, and shared out for up to `max_connections`, within
    /// `max_open_files` when given (see [`descriptors`]).
    ///
    /// # Errors
    /// [`ServerError::DataDir`] if it cannot be created or another process holds it.
    pub fn open(
        root: &Path,
        storage: Arc<dyn Storage>,
        segments: SegmentConfig,
        lock: bool,
        (max_connections, max_open_files): (usize, Option<u64>),
    ) -> Result<Self, ServerError> {
        storage
            .create_dir_all(&root.join("logs"))
            .map_err(|e| ServerError::data_dir_io(root, "creating it", e))?;
        let lock = if lock {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(root.join("lock"))
                .map_err(|e| ServerError::data_dir_io(root, "opening its lock file", e))?;
            file.try_lock().map_err(|_| {
                ServerError::data_dir(
                    root,
                    "another minibroker is using it (its lock file is held)",
                )
            })?;
            Some(file)
        } else {
            None
        };
        let raised = descriptors::raise_limit();
        let limit = match max_open_files {
            Some(wanted) => Some(raised.map_or(wanted, |raised| raised.min(wanted))),
            None => raised,
        };
        let descriptors = descriptors::plan(limit, max_connections);
        Ok(Self {
            root: root.to_owned(),
            open_files: OpenFiles::new(Arc::clone(&storage), descriptors.sealed_files),
            storage,
            segments,
            descriptors,
            _lock: lock,
            topics_file: KeyedLines::new(TOPICS_MAGIC, |line| {
                line.split_once(' ').map_or(line, |(name, _)| name)
            }),
            topic_configs_file: KeyedLines::new(TOPIC_CONFIGS_MAGIC, |line| {
                line.split_once('=')
                    .map_or(line, |(topic_and_name, _)| topic_and_name)
            }),
        })
    }

    /// How the broker's descriptors are shared.
    #[must_use]
    pub fn descriptors(&self) -> DescriptorPlan {
        self.descriptors
    }

    /// The directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The storage the directory lives on (the real file system, or a simulated disk), for
    /// what keeps files of its own here (the transaction log).
    #[must_use]
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The topics saved by [`Self::save_topics`], by name.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] for a file that cannot be read or parsed.
    pub fn topics(&self) -> Result<Vec<(String, u32)>, ServerError> {
        let path = self.root.join(TOPICS);
        self.keyed_lines(&self.topics_file, TOPICS)?
            .iter()
            .map(|line| {
                line.split_once(' ')
                    .and_then(|(name, partitions)| {
                        Some((name.to_owned(), partitions.parse().ok()?))
                    })
                    .ok_or_else(|| self.damaged(&path, &format!("bad line {line:?}")))
            })
            .collect()
    }

    /// Replaces the topic list (appending what changed since the last save).
    ///
    /// # Errors
    /// As the file system reports.
    pub fn save_topics<'a>(
        &self,
        topics: impl IntoIterator<Item = (&'a str, u32)>,
    ) -> io::Result<()> {
        let lines = topics
            .into_iter()
            .map(|(name, partitions)| format!("{name} {partitions}"));
        self.topics_file
            .save(&*self.storage, &self.root.join(TOPICS), lines)
    }

    /// The topics' own settings saved by [`Self::save_topic_settings`], as (topic, name,
    /// value); each is checked again by the caller. An older broker's directory may have none,
    /// and no topic has settings of its own then.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] for a file that cannot be read or parsed.
    pub fn topic_settings(&self) -> Result<Vec<(String, String, String)>, ServerError> {
        let path = self.root.join(TOPIC_CONFIGS);
        self.keyed_lines(&self.topic_configs_file, TOPIC_CONFIGS)?
            .iter()
            .map(|line| {
                line.split_once(' ')
                    .and_then(|(topic, setting)| {
                        let (name, value) = setting.split_once('=')?;
                        Some((topic.to_owned(), name.to_owned(), value.to_owned()))
                    })
                    .ok_or_else(|| self.damaged(&path, &format!("bad line {line:?}")))
            })
            .collect()
    }

    /// Replaces the topics' own settings with `settings`: (topic, name, value), where names are
    /// Kafka's and values were checked (neither holds a space, `=` or a newline).
    ///
    /// # Errors
    /// As the file system reports.
    pub fn save_topic_settings<'a>(
        &self,
        settings: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> io::Result<()> {
        let lines = settings
            .into_iter()
            .map(|(topic, name, value)| format!("{topic} {name}={value}"));
        self.topic_configs_file
            .save(&*self.storage, &self.root.join(TOPIC_CONFIGS), lines)
    }

    /// The lines of the keyed-lines file `name`, none if there is no file; a torn tail is left
    /// out with a warning.
    fn keyed_lines(&self, file: &KeyedLines, name: &str) -> Result<Vec<String>, ServerError> {
        let path = self.root.join(name);
        let Some(bytes) = self
            .read_file(name)
            .map_err(|error| ServerError::data_dir_io(&path, "reading it", error))?
        else {
            return Ok(Vec::new());
        };
        let (lines, torn) = file
            .read(&bytes)
            .map_err(|reason| self.damaged(&path, &reason.to_string()))?;
        if let Some(torn) = torn {
            tracing::warn!(
                file = %path.display(),
                at = torn.at,
                bytes = torn.bytes,
                "left out a torn tail: an append a crash interrupted (never answered), or lost data"
            );
        }
        Ok(lines)
    }

    /// The topic list and the topics' settings, each with the torn tail it holds, if any: for
    /// `minibroker check-data`, which reports them as damage (the start leaves them out).
    #[must_use]
    pub fn torn_small_files(&self) -> Vec<(PathBuf, TornTail)> {
        [
            (&self.topics_file, TOPICS),
            (&self.topic_configs_file, TOPIC_CONFIGS),
        ]
        .into_iter()
        .filter_map(|(file, name)| {
            let bytes = self.read_file(name).ok()??;
            let (_, torn) = file.read(&bytes).ok()?;
            Some((self.root.join(name), torn?))
        })
        .collect()
    }

    /// The body of the sealed file at `path` (see the module doc), or an older broker's
    /// plain-text file as it is; `None` if there is no file. Older brokers wrote printable ASCII
    /// lines only; anything else must open as a sealed file.
    fn read_sealed(&self, path: &Path, magic: &[u8; 4]) -> Result<Option<Vec<u8>>, ServerError> {
        let bytes = match read_whole(&*self.storage, path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(ServerError::data_dir_io(path, "reading it", error)),
        };
        let plain_text = |b: &u8| b.is_ascii_graphic() || *b == b' ' || *b == b'\n';
        if bytes.iter().all(plain_text) {
            return Ok(Some(bytes));
        }
        unseal(magic, VERSION, &bytes)
            .map(|body| Some(body.to_vec()))
            .map_err(|error| ServerError::data_dir(path, error))
    }

    /// The first producer id not yet reserved, if any was ever saved.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] for a file that cannot be read or parsed.
    pub fn reserved_producer_ids(&self) -> Result<Option<i64>, ServerError> {
        let path = self.root.join("producer-ids");
        let Some(bytes) = self.read_sealed(&path, PRODUCER_IDS_MAGIC)? else {
            return Ok(None);
        };
        let parsed = match <[u8; 8]>::try_from(bytes.as_slice()) {
            Ok(sealed) => Some(i64::from_be_bytes(sealed)),
            // An older broker's file: the number as text.
            Err(_) => String::from_utf8_lossy(&bytes).trim().parse().ok(),
        };
        parsed
            .filter(|until| *until >= 0)
            .map(Some)
            .ok_or_else(|| self.damaged(&path, "not a producer id"))
    }

    /// Saves `until` as the first producer id not reserved.
    ///
    /// # Errors
    /// As the file system reports.
    pub fn reserve_producer_ids(&self, until: i64) -> io::Result<()> {
        let sealed = seal(PRODUCER_IDS_MAGIC, VERSION, &until.to_be_bytes());
        write_atomically(&*self.storage, &self.root.join("producer-ids"), &sealed)
    }

    /// The content of the file `name` in the directory, if it exists.
    ///
    /// # Errors
    /// As the file system reports.
    pub fn read_file(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match read_whole(&*self.storage, &self.root.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Replaces the file `name` in the directory atomically.
    ///
    /// # Errors
    /// As the file system reports.
    pub fn write_file(&self, name: &str, data: &[u8]) -> io::Result<()> {
        write_atomically(&*self.storage, &self.root.join(name), data)
    }

    /// Creates the directory `name` in the directory, if it is not there.
    ///
    /// # Errors
    /// As the file system reports.
    pub fn create_dir(&self, name: &str) -> io::Result<()> {
        self.storage.create_dir_all(&self.root.join(name))
    }

    /// The names in the directory `name` of the directory.
    ///
    /// # Errors
    /// As the file system reports.
    pub fn list(&self, name: &str) -> io::Result<Vec<String>> {
        self.storage.list(&self.root.join(name))
    }

    /// Removes the file `name` (a missing one is not an error) and syncs its directory.
    ///
    /// # Errors
    /// As the file system reports.
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        let path = self.root.join(name);
        match self.storage.remove_file(&path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => match path.parent() {
                Some(dir) => self.storage.sync_dir(dir),
                None => Ok(()),
            },
        }
    }

    fn topic_dir(&self, topic: &str) -> PathBuf {
        // Topic names are 1 to 249 of [A-Za-z0-9._-] and never "." or "..": safe as a file name.
        self.root.join("logs").join(topic)
    }

    /// Opens (recovering) partition `index` of `topic`.
    ///
    /// # Errors
    /// A [`LogError`] when its files cannot be read or do not form a log.
    pub fn open_partition(&self, topic: &str, index: u32) -> Result<Opened, LogError> {
        let dir = self.topic_dir(topic).join(index.to_string());
        let open_files = Some(Arc::clone(&self.open_files));
        DurableLog::open_with(Arc::clone(&self.storage), &dir, self.segments, open_files)
    }

    /// Deletes everything stored for `topic` ([`Self::retire_topic`], then its removal).
    ///
    /// # Errors
    /// As the file system reports (a missing directory is not an error).
    pub fn remove_topic(&self, topic: &str) -> io::Result<()> {
        match self.retire_topic(topic)? {
            Some(retired) => self.remove_retired(&retired),
            None => Ok(()),
        }
    }

    /// Moves `topic`'s directory out of `logs/` to `deleted/` (one rename, so the name is free
    /// for a new topic at once); `None` when it has none. [`Self::remove_retired`] removes it.
    ///
    /// # Errors
    /// As the file system reports.
    pub fn retire_topic(&self, topic: &str) -> io::Result<Option<PathBuf>> {
        static RETIRED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let deleted = self.root.join(DELETED);
        self.storage.create_dir_all(&deleted)?;
        let n = RETIRED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let to = deleted.join(format!("{topic}-{}-{n}", minibroker_records::now_millis()));
        match self.storage.rename(&self.topic_dir(topic), &to) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            renamed => renamed?,
        }
        self.storage.sync_dir(&self.root.join("logs"))?;
        self.storage.sync_dir(&deleted)?;
        Ok(Some(to))
    }

    /// Removes a directory [`Self::retire_topic`] moved aside.
    ///
    /// # Errors
    /// As the file system reports (a missing directory is not an error).
    pub fn remove_retired(&self, retired: &Path) -> io::Result<()> {
        match self.storage.remove_dir_all(retired) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => self.storage.sync_dir(&self.root.join(DELETED)),
        }
    }

    /// Removes every directory under `deleted/`: what a crash in the middle of a removal left.
    ///
    /// # Errors
    /// As the file system reports (no `deleted/` is not an error).
    pub fn remove_deleted(&self) -> io::Result<()> {
        let deleted = self.root.join(DELETED);
        let names = match self.storage.list(&deleted) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            listed => listed?,
        };
        names
            .iter()
            .try_for_each(|name| self.remove_retired(&deleted.join(name)))
    }

    /// Moves the directories under `logs/` that name no topic in `known` to `set-aside/` (a
    /// crash between creating a topic's files and saving the topic list, or during a delete,
    /// leaves one; so could a topic list that is wrong, which is why nothing is deleted).
    ///
    /// # Errors
    /// As the file system reports.
    pub fn set_aside_unknown_topics(&self, known: &[(String, u32)]) -> io::Result<()> {
        let logs = self.root.join("logs");
        for name in self.storage.list(&logs)? {
            if !known.iter().any(|(topic, _)| *topic == name) {
                let aside = self.root.join("set-aside");
                self.storage.create_dir_all(&aside)?;
                let to = aside.join(format!("{name}-{}", minibroker_records::now_millis()));
                tracing::warn!(
                    directory = %logs.join(&name).display(),
                    moved_to = %to.display(),
                    "a directory names no known topic; it is set aside, not deleted"
                );
                self.storage.rename(&logs.join(&name), &to)?;
                self.storage.sync_dir(&logs)?;
                self.storage.sync_dir(&aside)?;
            }
        }
        Ok(())
    }

    fn damaged(&self, path: &Path, reason: &str) -> ServerError {
        ServerError::data_dir(path, reason)
    }
}
