//! The security files (users, ACLs, producer owners): one error type naming the file and line,
//! their reading and writing through [`Storage`] as [`KeyedLines`] records (the checksummed
//! envelope every small file of a broker has; the users and the ACLs readable by their owner
//! only), and [`Reloading`] — a file read again when it changes, so an edit needs no restart.

use minibroker_storage::keyed_lines::{KeyedLines, KeyedLinesError, TornTail};
use minibroker_storage::{Storage, read_whole};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use thiserror::Error;

/// Why a security file could not be read or written.
#[derive(Debug, Error)]
pub enum FileError {
    /// The file system refused.
    #[error("{what} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line that does not read.
    #[error("{}, line {line}: {reason}", .path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// Its 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Records that do not read: damaged, or of a version this broker does not know.
    #[error("{}: {source}", .path.display())]
    Records {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KeyedLinesError,
    },
    /// Bytes at the end that are not a whole record.
    #[error("{}: {torn}", .path.display())]
    Torn {
        /// The file.
        path: PathBuf,
        /// Where, and how many bytes.
        torn: TornTail,
    },
    /// An edit of a file the broker was started without (the setting names it).
    #[error("no {setting}: the broker was started without one")]
    NotConfigured {
        /// The setting that names the file.
        setting: &'static str,
    },
}

/// The bytes of the file at `path`; `None` when it does not exist.
pub(crate) fn read_bytes(storage: &dyn Storage, path: &Path) -> Result<Option<Vec<u8>>, FileError> {
    match read_whole(storage, path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileError::Io {
            what: "reading",
            path: path.to_owned(),
            source,
        }),
    }
}

/// What the list file at `path` holds, read with `parse`; `T::default()` when it does not
/// exist. The file is `file`'s records, or plain text (what older brokers wrote, and what an
/// operator may write by hand), read as it is.
pub(crate) fn load_list<T: Default>(
    storage: &dyn Storage,
    path: &Path,
    file: &KeyedLines,
    parse: fn(&str, &Path) -> Result<T, FileError>,
) -> Result<T, FileError> {
    let Some(bytes) = read_bytes(storage, path)? else {
        return Ok(T::default());
    };
    if !file.holds_records(&bytes) {
        let text = String::from_utf8(bytes).map_err(|_| FileError::Records {
            path: path.to_owned(),
            source: KeyedLinesError::NotUtf8,
        })?;
        return parse(&text, path);
    }
    let (lines, torn) = read_records(path, file, &bytes)?;
    if let Some(torn) = torn {
        // Written whole and renamed into place: a torn tail is not a crash's.
        return Err(FileError::Torn {
            path: path.to_owned(),
            torn,
        });
    }
    parse(&lines.join("\n"), path)
}

/// The lines of `file`'s records in `bytes` (the file at `path`), and a torn tail left out.
pub(crate) fn read_records(
    path: &Path,
    file: &KeyedLines,
    bytes: &[u8],
) -> Result<(Vec<String>, Option<TornTail>), FileError> {
    file.read(bytes).map_err(|source| FileError::Records {
        path: path.to_owned(),
        source,
    })
}

/// Replaces the list file at `path` with `text`'s lines as `file`'s whole list (see
/// [`save_lines`]).
pub(crate) fn save_list(
    storage: &dyn Storage,
    path: &Path,
    file: &KeyedLines,
    text: &str,
) -> Result<(), FileError> {
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    save_lines(storage, path, file, &lines)
}

/// Replaces the list file at `path` with `lines` as `file`'s whole list, atomically (written
/// aside, synced, renamed, the directory synced).
pub(crate) fn save_lines(
    storage: &dyn Storage,
    path: &Path,
    file: &KeyedLines,
    lines: &[String],
) -> Result<(), FileError> {
    file.write_whole(storage, path, lines)
        .map(drop)
        .map_err(|source| FileError::Io {
            what: "replacing",
            path: path.to_owned(),
            source,
        })
}

/// What tells one version of a file from another: its modification time, its length and (as
/// the CLI's edits write a new file) its inode.
type FileVersion = Option<(SystemTime, u64, u64)>;

fn version(path: &Path) -> FileVersion {
    let metadata = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&metadata);
    #[cfg(not(unix))]
    let inode = 0;
    Some((metadata.modified().ok()?, metadata.len(), inode))
}

/// A file and what it held when last read; [`Self::current`] reads it again when it changed.
#[derive(Debug)]
pub struct Reloading<T> {
    path: Option<PathBuf>,
    load: fn(&Path) -> Result<T, FileError>,
    /// How long after a look at the file the next one waits (zero: every call looks).
    recheck: Duration,
    read: Mutex<Held<T>>,
    /// Held by [`Self::edit`]: one edit at a time, each of the file as the last one left it.
    editing: Mutex<()>,
}

/// What a [`Reloading`] holds: the version it read, when it last looked, and what it read.
#[derive(Debug)]
struct Held<T> {
    version: FileVersion,
    looked: Instant,
    value: Arc<T>,
}

impl<T: Default> Reloading<T> {
    /// The file at `path` read with `load` (no file: `T::default()`, for good).
    ///
    /// # Errors
    /// What `load` says: a broker does not start on a file that does not read.
    pub fn open(
        path: Option<PathBuf>,
        load: fn(&Path) -> Result<T, FileError>,
    ) -> Result<Self, FileError> {
        let version = path.as_deref().and_then(version);
        let held = match &path {
            Some(path) => load(path)?,
            None => T::default(),
        };
        Ok(Self {
            path,
            load,
            recheck: Duration::ZERO,
            read: Mutex::new(Held {
                version,
                looked: Instant::now(),
                value: Arc::new(held),
            }),
            editing: Mutex::new(()),
        })
    }

    /// Applies `edit` to the file as it is now on disk (an operator's edit may be newer than
    /// what is held), writes it with `save`, and holds the result at once. Edits are made one
    /// at a time.
    ///
    /// # Errors
    /// [`FileError::NotConfigured`] (naming `setting`) without a file; the file cannot be read
    /// or written (then nothing changed, and a warning says why).
    pub fn edit<R>(
        &self,
        setting: &'static str,
        save: fn(&T, &Path) -> Result<(), FileError>,
        edit: impl FnOnce(&mut T) -> R,
    ) -> Result<R, FileError> {
        let _one_at_a_time = self.editing.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(path) = &self.path else {
            return Err(FileError::NotConfigured { setting });
        };
        let edited = (self.load)(path).and_then(|mut value| {
            let result = edit(&mut value);
            save(&value, path)?;
            Ok((value, result))
        });
        match edited {
            Ok((value, result)) => {
                self.replace(value);
                Ok(result)
            }
            Err(error) => {
                tracing::warn!(%error, "the file could not be edited");
                Err(error)
            }
        }
    }

    /// Looks at the file at most once per `recheck` (for a file consulted on every request).
    #[must_use]
    pub fn recheck_after(mut self, recheck: Duration) -> Self {
        self.recheck = recheck;
        self
    }

    /// Holds `value` now: what the file was just replaced with by this process, so it is seen at
    /// once rather than at the next look.
    pub fn replace(&self, value: T) {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        read.version = self.path.as_deref().and_then(version);
        read.looked = Instant::now();
        read.value = Arc::new(value);
    }

    /// The file, if there is one.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What the file holds, read again first if it changed since (one `stat` per call, or per
    /// `recheck`). A file that no longer reads keeps what it held, with a warning: a typo in an
    /// edit must not lock everyone out.
    pub fn current(&self) -> Arc<T> {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(path) = &self.path else {
            return Arc::clone(&read.value);
        };
        if !self.recheck.is_zero() && read.looked.elapsed() < self.recheck {
            return Arc::clone(&read.value);
        }
        read.looked = Instant::now();
        let now = version(path);
        if now != read.version {
            read.version = now;
            match (self.load)(path) {
                Ok(held) => {
                    tracing::info!(file = %path.display(), "read again after a change");
                    read.value = Arc::new(held);
                }
                Err(error) => {
                    tracing::warn!(%error, "the file changed but does not read; keeping what it held");
                }
            }
        }
        Arc::clone(&read.value)
    }
}
