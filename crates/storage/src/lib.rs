//! The disk as every durable file of a broker sees it: a few operations behind a trait.
//!
//! Everything a broker does to disk (the segments, the small files beside them, the groups' and
//! the transactions' logs, the security files) goes through [`Storage`] and [`StorageFile`], so a
//! test can swap the real file system ([`FsStorage`]) for one that forgets unsynced bytes on a
//! simulated crash or fails a write with ENOSPC ([`sim::SimStorage`]), and drive thousands of
//! crash points in memory. The operations are the ones a log needs and no more: append at the
//! end, read at a position, truncate a torn tail, sync, reserve space ahead of the appends, and
//! the directory operations that create, rename and delete whole files.
//!
//! A crate of its own, below the log, so that the crates whose files are not logs (security's
//! users, ACLs and producer owners) write through the same trait without depending on the log.
//! [`keyed_lines`] is the one shape of a small list kept by appending its changes.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod keyed_lines;
pub mod sim;

/// One file of the log: appended at its end, read anywhere.
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// The file's length in bytes.
    ///
    /// # Errors
    /// As the file system reports.
    fn len(&self) -> io::Result<u64>;

    /// Whether the file is empty.
    ///
    /// # Errors
    /// As [`Self::len`].
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Fills `buf` from `position`; reading past the end is an error.
    ///
    /// # Errors
    /// As the file system reports; [`io::ErrorKind::UnexpectedEof`] past the end.
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<()>;

    /// Appends `data` at the end of the file.
    ///
    /// # Errors
    /// As the file system reports (ENOSPC, EIO); part of `data` may have been written then.
    fn append(&self, data: &[u8]) -> io::Result<()>;

    /// Cuts the file to `len` bytes.
    ///
    /// # Errors
    /// As the file system reports.
    fn truncate(&self, len: u64) -> io::Result<()>;

    /// Makes everything written so far durable (fdatasync).
    ///
    /// # Errors
    /// As the file system reports; after a failed sync nothing written since the last good one
    /// may be assumed durable.
    fn sync(&self) -> io::Result<()>;

    /// Reserves disk space for the file to grow to `len` bytes, without changing its length
    /// (`fallocate` with `FALLOC_FL_KEEP_SIZE` on Linux), so appends into that space need no
    /// block allocation: otherwise writeback allocates the blocks of a whole synced range while
    /// holding the file's block map, and appends wait for it. Unused space past the length is
    /// freed by [`Self::truncate`]. The default does nothing.
    ///
    /// # Errors
    /// As the file system reports, including when it cannot preallocate.
    fn preallocate(&self, len: u64) -> io::Result<()> {
        let _ = len;
        Ok(())
    }
}

/// The directory operations of the log.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates `dir` and its parents.
    ///
    /// # Errors
    /// As the file system reports.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// The names of the entries of `dir` (files and directories), in no particular order.
    ///
    /// # Errors
    /// As the file system reports ([`io::ErrorKind::NotFound`] for a missing directory).
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;

    /// Opens an existing file for reading and appending.
    ///
    /// # Errors
    /// As the file system reports ([`io::ErrorKind::NotFound`] for a missing file).
    fn open(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>>;

    /// Creates `path` empty (truncating any file of that name), for reading and appending.
    ///
    /// # Errors
    /// As the file system reports.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>>;

    /// As [`Self::create`], readable and writable by its owner only (a file of secrets: the
    /// users' credentials). The default is [`Self::create`], for a storage with no owners.
    ///
    /// # Errors
    /// As the file system reports.
    fn create_owner_only(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        self.create(path)
    }

    /// Deletes a file.
    ///
    /// # Errors
    /// As the file system reports.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Deletes a directory and everything in it.
    ///
    /// # Errors
    /// As the file system reports.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Renames a file, replacing `to` if it exists.
    ///
    /// # Errors
    /// As the file system reports.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Makes the directory's entries (files created, renamed, deleted) durable.
    ///
    /// # Errors
    /// As the file system reports.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// Writes `data` to `path` so that a crash leaves either the old file or the whole new one: a
/// temporary file is written and synced, renamed over `path`, and the directory synced.
///
/// # Errors
/// As the file system reports; `path` is unchanged then.
pub fn write_atomically(storage: &dyn Storage, path: &Path, data: &[u8]) -> io::Result<()> {
    write_atomically_as(storage, path, data, Access::Default)
}

/// Who may read a file a broker writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// As the process's umask allows.
    Default,
    /// Its owner only ([`Storage::create_owner_only`]).
    OwnerOnly,
}

/// [`write_atomically`], the new file created with `access`.
///
/// # Errors
/// As the file system reports; `path` is unchanged then.
pub fn write_atomically_as(
    storage: &dyn Storage,
    path: &Path,
    data: &[u8],
    access: Access,
) -> io::Result<()> {
    let temporary = temporary_path(path);
    let file = match access {
        Access::Default => storage.create(&temporary)?,
        Access::OwnerOnly => storage.create_owner_only(&temporary)?,
    };
    file.append(data)?;
    file.sync()?;
    drop(file);
    storage.rename(&temporary, path)?;
    match path.parent() {
        Some(dir) => storage.sync_dir(dir),
        None => Ok(()),
    }
}

/// Writes `data` to `path` through a temporary file renamed over it, syncing nothing: a crash
/// may leave the old file, the new one or a damaged one. For files that only save work and are
/// checked when read (a sealed segment's index: a bad one means a scan of the segment).
///
/// # Errors
/// As the file system reports.
pub fn replace_unsynced(storage: &dyn Storage, path: &Path, data: &[u8]) -> io::Result<()> {
    let temporary = temporary_path(path);
    let file = storage.create(&temporary)?;
    file.append(data)?;
    drop(file);
    storage.rename(&temporary, path)
}

/// The whole content of the file at `path`.
///
/// # Errors
/// As the file system reports.
pub fn read_whole(storage: &dyn Storage, path: &Path) -> io::Result<Vec<u8>> {
    let file = storage.open(path)?;
    let len = usize::try_from(file.len()?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
    let mut data = vec![0; len];
    file.read_at(&mut data, 0)?;
    Ok(data)
}

/// Where [`write_atomically`] writes before renaming: the name with `.tmp` added.
#[must_use]
pub fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(TEMPORARY_SUFFIX);
    PathBuf::from(name)
}

/// The suffix of files [`write_atomically`] had not finished; recovery deletes them.
pub const TEMPORARY_SUFFIX: &str = ".tmp";

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsStorage;

#[derive(Debug)]
struct FsFile(File);

impl StorageFile for FsFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_exact_at(&self.0, buf, position)
        }
        #[cfg(not(unix))]
        {
            let mut done = 0;
            while done < buf.len() {
                let read = std::os::windows::fs::FileExt::seek_read(
                    &self.0,
                    &mut buf[done..],
                    position + done as u64,
                )?;
                if read == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                done += read;
            }
            Ok(())
        }
    }

    fn append(&self, data: &[u8]) -> io::Result<()> {
        // Opened with O_APPEND: every write lands at the end.
        (&self.0).write_all(data)
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    #[cfg(target_os = "linux")]
    fn preallocate(&self, len: u64) -> io::Result<()> {
        use rustix::fs::{FallocateFlags, fallocate};
        Ok(fallocate(&self.0, FallocateFlags::KEEP_SIZE, 0, len)?)
    }
}

impl FsStorage {
    fn open_with(path: &Path, create: bool, access: Access) -> io::Result<Arc<dyn StorageFile>> {
        let mut options = OpenOptions::new();
        options
            .read(true)
            .append(true)
            .create(create)
            .truncate(false);
        #[cfg(unix)]
        if access == Access::OwnerOnly {
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        }
        let file = options.open(path)?;
        if create {
            file.set_len(0)?;
        }
        Ok(Arc::new(FsFile(file)))
    }
}

impl Storage for FsStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        std::fs::read_dir(dir)?
            .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
            .collect()
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        Self::open_with(path, false, Access::Default)
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        Self::open_with(path, true, Access::Default)
    }

    fn create_owner_only(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        Self::open_with(path, true, Access::OwnerOnly)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        #[cfg(unix)]
        {
            File::open(dir)?.sync_all()
        }
        #[cfg(not(unix))]
        {
            let _ = dir;
            Ok(())
        }
    }
}
