//! The data directory: where a durable broker keeps everything that must outlive it.
//!
//! ```text
//! DIR/lock                         held (flock) while a broker uses DIR
//! DIR/topics                       one line per topic: "<name> <partitions>"
//! DIR/producer-ids                 the first producer id not yet reserved
//! DIR/group-offsets                consumer groups' committed offsets (`crate::groups`)
//! DIR/logs/<topic>/<partition>/    a partition's segment files and snapshots (minibroker_log)
//! ```
//!
//! The topic list and the producer-id reservation are small files replaced atomically (written
//! aside, synced, renamed). Producer ids are reserved a block at a time: the file is rewritten
//! only when a block runs out, and a restarted broker starts after the last reserved block, so an
//! id is never issued twice even if the broker was killed mid-block.

use minibroker_log::storage::{read_whole, write_atomically};
use minibroker_log::{DurableLog, Opened, SegmentConfig, Storage};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::ServerError;

/// Producer ids reserved per write of `producer-ids`.
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// A broker's data directory.
#[derive(Debug)]
pub struct DataDir {
    root: PathBuf,
    storage: Arc<dyn Storage>,
    segments: SegmentConfig,
    /// Held for as long as the broker runs, so a second broker cannot use the same directory.
    _lock: Option<std::fs::File>,
}

impl DataDir {
    /// Opens `root` on `storage`, creating it if needed. With `lock`, `root` is a real
    /// directory and an exclusive lock on `root/lock` is taken (and held until drop).
    ///
    /// # Errors
    /// [`ServerError::DataDir`] if it cannot be created or another process holds it.
    pub fn open(
        root: &Path,
        storage: Arc<dyn Storage>,
        segments: SegmentConfig,
        lock: bool,
    ) -> Result<Self, ServerError> {
        let failed = |reason: String| ServerError::DataDir {
            path: root.to_owned(),
            reason,
        };
        storage
            .create_dir_all(&root.join("logs"))
            .map_err(|e| failed(e.to_string()))?;
        let lock = if lock {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(root.join("lock"))
                .map_err(|e| failed(format!("cannot open its lock file: {e}")))?;
            file.try_lock().map_err(|_| {
                failed("another minibroker is using it (its lock file is held)".into())
            })?;
            Some(file)
        } else {
            None
        };
        Ok(Self {
            root: root.to_owned(),
            storage,
            segments,
            _lock: lock,
        })
    }

    /// The directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The topics saved by [`Self::save_topics`], in file order.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] for a file that cannot be read or parsed.
    pub fn topics(&self) -> Result<Vec<(String, u32)>, ServerError> {
        let path = self.root.join("topics");
        let text = match read_whole(&*self.storage, &path) {
            Ok(bytes) => String::from_utf8(bytes).map_err(|_| self.damaged(&path, "not UTF-8"))?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(self.damaged(&path, &error.to_string())),
        };
        text.lines()
            .filter(|line| !line.is_empty())
            .map(|line| {
                let (name, partitions) = line
                    .split_once(' ')
                    .ok_or_else(|| self.damaged(&path, &format!("bad line {line:?}")))?;
                let partitions = partitions
                    .parse()
                    .map_err(|_| self.damaged(&path, &format!("bad line {line:?}")))?;
                Ok((name.to_owned(), partitions))
            })
            .collect()
    }

    /// Replaces the topic list.
    ///
    /// # Errors
    /// As the file system reports.
    pub fn save_topics<'a>(
        &self,
        topics: impl IntoIterator<Item = (&'a str, u32)>,
    ) -> io::Result<()> {
        let text: String = topics
            .into_iter()
            .map(|(name, partitions)| format!("{name} {partitions}\n"))
            .collect();
        write_atomically(&*self.storage, &self.root.join("topics"), text.as_bytes())
    }

    /// The first producer id not yet reserved, if any was ever saved.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] for a file that cannot be read or parsed.
    pub fn reserved_producer_ids(&self) -> Result<Option<i64>, ServerError> {
        let path = self.root.join("producer-ids");
        match read_whole(&*self.storage, &path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes)
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| self.damaged(&path, "not a number")),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(self.damaged(&path, &error.to_string())),
        }
    }

    /// Saves `until` as the first producer id not reserved.
    ///
    /// # Errors
    /// As the file system reports.
    pub fn reserve_producer_ids(&self, until: i64) -> io::Result<()> {
        write_atomically(
            &*self.storage,
            &self.root.join("producer-ids"),
            format!("{until}\n").as_bytes(),
        )
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

    fn topic_dir(&self, topic: &str) -> PathBuf {
        // Topic names are 1 to 249 of [A-Za-z0-9._-] and never "." or "..": safe as a file name.
        self.root.join("logs").join(topic)
    }

    /// Opens (recovering) partition `index` of `topic`.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] when its files cannot be read or do not form a log.
    pub fn open_partition(&self, topic: &str, index: u32) -> Result<Opened, ServerError> {
        let dir = self.topic_dir(topic).join(index.to_string());
        DurableLog::open(Arc::clone(&self.storage), &dir, self.segments).map_err(|error| {
            ServerError::DataDir {
                path: dir,
                reason: error.to_string(),
            }
        })
    }

    /// Deletes everything stored for `topic`.
    ///
    /// # Errors
    /// As the file system reports (a missing directory is not an error).
    pub fn remove_topic(&self, topic: &str) -> io::Result<()> {
        match self.storage.remove_dir_all(&self.topic_dir(topic)) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => self.storage.sync_dir(&self.root.join("logs")),
        }
    }

    /// Deletes the directories of topics not in `known` (left by a crash between creating a
    /// topic's files and saving the topic list, or during a delete).
    ///
    /// # Errors
    /// As the file system reports.
    pub fn remove_unknown_topics(&self, known: &[(String, u32)]) -> io::Result<()> {
        for name in self.storage.list(&self.root.join("logs"))? {
            if !known.iter().any(|(topic, _)| *topic == name) {
                tracing::warn!(
                    topic = name,
                    "deleting the files of a topic that does not exist"
                );
                self.remove_topic(&name)?;
            }
        }
        Ok(())
    }

    fn damaged(&self, path: &Path, reason: &str) -> ServerError {
        ServerError::DataDir {
            path: path.to_owned(),
            reason: reason.to_owned(),
        }
    }
}
