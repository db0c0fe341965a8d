//! [`SimStorage`]: an in-memory file system that can crash, for testing what survives.
//!
//! Each file keeps two images: what has been written, and what the last sync made durable. A
//! [`SimStorage::crash`] returns the file system a restarted machine would find: every file as
//! of its last sync plus, chosen by a seed, some prefix of the bytes appended since (a kernel may
//! have written any part of its page cache back before the power went). Writes and syncs can be
//! made to fail with ENOSPC and EIO, as a full or failing disk does.
//!
//! Directory operations (create, rename, delete) are durable at once: the durable log syncs its
//! directory after each of them, so the model does not need to forget them.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{Storage, StorageFile};

/// Faults to inject, shared by a storage and its files.
#[derive(Debug, Default)]
pub struct Faults {
    /// Appends fail with ENOSPC (no byte is written).
    pub full: AtomicBool,
    /// Syncs fail with EIO.
    pub failing_sync: AtomicBool,
    /// Opening or creating a file fails with EMFILE (the process is out of descriptors).
    pub no_descriptors: AtomicBool,
    /// Syncs done, for tests that count them.
    pub syncs: AtomicU64,
    /// How long each sync takes, in microseconds (a real disk's fsync is not instant).
    pub sync_micros: AtomicU64,
    /// Bytes read from files, for tests that bound what a lookup reads.
    pub bytes_read: AtomicU64,
    /// Bytes appended to files, for tests that bound what a write costs.
    pub bytes_written: AtomicU64,
}

#[derive(Debug, Default)]
struct Images {
    written: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Debug)]
struct SimFile {
    images: Mutex<Images>,
    faults: Arc<Faults>,
}

impl SimFile {
    fn images(&self) -> MutexGuard<'_, Images> {
        self.images.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

const ENOSPC: i32 = 28;
const EMFILE: i32 = 24;
const EIO: i32 = 5;

impl StorageFile for SimFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.images().written.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        let images = self.images();
        let start = usize::try_from(position).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start
            .checked_add(buf.len())
            .filter(|end| *end <= images.written.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(&images.written[start..end]);
        self.faults
            .bytes_read
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn append(&self, data: &[u8]) -> io::Result<()> {
        if self.faults.full.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(ENOSPC));
        }
        self.images().written.extend_from_slice(data);
        self.faults
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        let mut images = self.images();
        images.written.truncate(len);
        images.durable.truncate(len);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        if self.faults.failing_sync.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(EIO));
        }
        self.faults.syncs.fetch_add(1, Ordering::Relaxed);
        let delay = self.faults.sync_micros.load(Ordering::Relaxed);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
        let mut images = self.images();
        images.durable = images.written.clone();
        Ok(())
    }
}

/// An in-memory file system with crashes and injected faults.
#[derive(Debug, Default, Clone)]
pub struct SimStorage {
    files: Arc<Mutex<BTreeMap<PathBuf, Arc<SimFile>>>>,
    /// The faults its files obey.
    pub faults: Arc<Faults>,
}

impl SimStorage {
    /// An empty file system.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A descriptor for a file to be opened, unless they are out.
    fn descriptor(&self) -> io::Result<()> {
        if self.faults.no_descriptors.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(EMFILE));
        }
        Ok(())
    }

    fn files(&self) -> MutexGuard<'_, BTreeMap<PathBuf, Arc<SimFile>>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The file system after a crash: every file's durable image plus a prefix, chosen by
    /// `seed`, of what was appended to it since its last sync. Faults start cleared.
    #[must_use]
    pub fn crash(&self, seed: u64) -> Self {
        let mut random = Xorshift::new(seed);
        let crashed = Self::new();
        for (path, file) in self.files().iter() {
            let images = file.images();
            let mut survived = images.durable.clone();
            if images.written.starts_with(&images.durable) {
                let unsynced = &images.written[images.durable.len()..];
                // A prefix of any length, including none and all of it.
                let kept = random.below(unsynced.len() as u64 + 1) as usize;
                survived.extend_from_slice(&unsynced[..kept]);
            }
            crashed.insert(path, survived);
        }
        crashed
    }

    fn insert(&self, path: &Path, durable: Vec<u8>) -> Arc<SimFile> {
        let file = Arc::new(SimFile {
            images: Mutex::new(Images {
                written: durable.clone(),
                durable,
            }),
            faults: Arc::clone(&self.faults),
        });
        self.files().insert(path.to_owned(), Arc::clone(&file));
        file
    }

    /// The current (written) content of a file, if it exists.
    #[must_use]
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        self.files()
            .get(path)
            .map(|file| file.images().written.clone())
    }

    /// Replaces a file's content (written and durable), as a test damaging a disk does.
    pub fn set_contents(&self, path: &Path, data: Vec<u8>) {
        self.insert(path, data);
    }

    /// Every file's path.
    #[must_use]
    pub fn paths(&self) -> Vec<PathBuf> {
        self.files().keys().cloned().collect()
    }
}

impl Storage for SimStorage {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .files()
            .keys()
            .filter_map(|path| {
                let relative = path.strip_prefix(dir).ok()?;
                let first = relative.components().next()?;
                Some(first.as_os_str().to_string_lossy().into_owned())
            })
            .collect();
        names.dedup();
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        self.descriptor()?;
        let file = self
            .files()
            .get(path)
            .cloned()
            .ok_or(io::ErrorKind::NotFound)?;
        Ok(file)
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        self.descriptor()?;
        Ok(self.insert(path, Vec::new()))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.files()
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::ErrorKind::NotFound.into())
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.files().retain(|path, _| !path.starts_with(dir));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut files = self.files();
        if let Some(file) = files.remove(from) {
            files.insert(to.to_owned(), file);
            return Ok(());
        }
        // A directory: every file under it moves.
        let under: Vec<PathBuf> = files
            .keys()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        if under.is_empty() {
            return Err(io::ErrorKind::NotFound.into());
        }
        for path in under {
            let moved = to.join(path.strip_prefix(from).unwrap_or(&path));
            if let Some(file) = files.remove(&path) {
                files.insert(moved, file);
            }
        }
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
}

/// A small deterministic generator (xorshift) for crash tests: the same seed, the same run, so
/// a failing seed can be replayed.
#[derive(Debug, Clone)]
pub struct Xorshift(u64);

impl Xorshift {
    /// The generator of `seed` (any seed, zero too).
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number in `0..bound` (`bound` must not be zero).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}
