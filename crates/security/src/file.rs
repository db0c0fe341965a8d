//! The security files (users, ACLs): one error type naming the file and line, an atomic
//! replace readable by its owner only, and [`Reloading`] — a file read again when it changes,
//! so an edit needs no restart.

use std::io::Write;
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
    /// An edit of a file the broker was started without (the setting names it).
    #[error("no {setting}: the broker was started without one")]
    NotConfigured {
        /// The setting that names the file.
        setting: &'static str,
    },
}

/// The text of the file at `path`; `None` when it does not exist.
pub(crate) fn read_text(path: &Path) -> Result<Option<String>, FileError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileError::Io {
            what: "reading",
            path: path.to_owned(),
            source,
        }),
    }
}

/// What the file at `path` holds, read with `parse`; `T::default()` when it does not exist.
pub(crate) fn load_with<T: Default>(
    path: &Path,
    parse: fn(&str, &Path) -> Result<T, FileError>,
) -> Result<T, FileError> {
    match read_text(path)? {
        Some(text) => parse(&text, path),
        None => Ok(T::default()),
    }
}

/// Replaces the file at `path` with `text`, atomically (written aside, synced, renamed, the
/// directory synced), readable by its owner only.
pub(crate) fn save_atomically(path: &Path, text: &str) -> Result<(), FileError> {
    let io = |what| {
        move |source| FileError::Io {
            what,
            path: path.to_owned(),
            source,
        }
    };
    let mut aside = path.as_os_str().to_owned();
    aside.push(".tmp");
    let aside = PathBuf::from(aside);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&aside).map_err(io("writing"))?;
    file.write_all(text.as_bytes()).map_err(io("writing"))?;
    file.sync_all().map_err(io("syncing"))?;
    std::fs::rename(&aside, path).map_err(io("replacing"))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("syncing the directory of"))?;
    }
    Ok(())
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
        })
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
