//! [`OpenFiles`]: sealed segment files opened when they are read, a bounded number at a time.
//!
//! Every open file is a descriptor, and a broker's descriptors are shared by everything it
//! does. A log that kept each segment open would need one per segment of every partition, a
//! number that grows with what is stored and that no limit ties to the process's: one client
//! creating topics could take the descriptors another partition needs to roll. So only the
//! active segment of a log stays open; a sealed one (written once, only read from then on) is
//! a [`StorageFile`] that opens its file when read, through a cache shared by every log of the
//! broker that closes the least recently read file once [`OpenFiles::capacity`] are open.
//! Sealed segments are read rarely (consumers read the tail), so the cache mostly holds the
//! files of catching-up readers.
//!
//! Each sealed file is known to the cache by a key of its own, never by its path: a path is
//! used again (a topic deleted and created again under its name, a segment deleted by retention
//! and written again at the same base offset after DeleteRecords), and a descriptor cached for
//! the old file would serve its records as the new one's.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::storage::{Storage, StorageFile};

/// The open sealed files of a broker's logs.
pub struct OpenFiles {
    storage: Arc<dyn Storage>,
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Each open file by its sealed file's key, with when it was last read.
    open: HashMap<u64, (Arc<dyn StorageFile>, u64)>,
    reads: u64,
    /// The key of the next sealed file.
    next_key: u64,
}

impl fmt::Debug for OpenFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenFiles")
            .field("capacity", &self.capacity)
            .field("open", &self.open_count())
            .finish_non_exhaustive()
    }
}

impl OpenFiles {
    /// At most `capacity` (at least 1) files of `storage` open at once.
    #[must_use]
    pub fn new(storage: Arc<dyn Storage>, capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            storage,
            capacity: capacity.max(1),
            state: Mutex::default(),
        })
    }

    /// How many files it keeps open at most.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many are open now.
    #[must_use]
    pub fn open_count(&self) -> usize {
        self.state().open.len()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sealed file at `path`, `len` bytes long, opened when it is read.
    pub(crate) fn sealed(self: &Arc<Self>, path: PathBuf, len: u64) -> Arc<dyn StorageFile> {
        let key = {
            let mut state = self.state();
            state.next_key += 1;
            state.next_key
        };
        Arc::new(SealedFile {
            files: Arc::clone(self),
            key,
            path,
            len,
        })
    }

    /// The open file of sealed file `key`, at `path`, opened (closing the least recently read
    /// one if the cache is full) if it is not.
    fn get(&self, key: u64, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        let mut state = self.state();
        state.reads += 1;
        let now = state.reads;
        if let Some((file, read)) = state.open.get_mut(&key) {
            *read = now;
            return Ok(Arc::clone(file));
        }
        if state.open.len() >= self.capacity {
            let oldest = state
                .open
                .iter()
                .min_by_key(|(_, (_, read))| *read)
                .map(|(key, _)| *key);
            if let Some(oldest) = oldest {
                state.open.remove(&oldest);
            }
        }
        let file = self.storage.open(path)?;
        state.open.insert(key, (Arc::clone(&file), now));
        Ok(file)
    }

    fn forget(&self, key: u64) {
        self.state().open.remove(&key);
    }
}

/// A sealed segment's file, opened through [`OpenFiles`] when read. It is never written again:
/// the segment was synced when it rolled.
struct SealedFile {
    files: Arc<OpenFiles>,
    /// Its key in the cache, its own for as long as it lives.
    key: u64,
    path: PathBuf,
    len: u64,
}

impl fmt::Debug for SealedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedFile")
            .field("path", &self.path)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

fn sealed_error(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{} is a sealed segment", path.display()),
    )
}

impl StorageFile for SealedFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.len)
    }

    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        self.files.get(self.key, &self.path)?.read_at(buf, position)
    }

    fn append(&self, _data: &[u8]) -> io::Result<()> {
        Err(sealed_error(&self.path))
    }

    fn truncate(&self, _len: u64) -> io::Result<()> {
        Err(sealed_error(&self.path))
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SealedFile {
    fn drop(&mut self) {
        // The segment is gone (retention, a deleted topic): its descriptor goes with it.
        self.files.forget(self.key);
    }
}
