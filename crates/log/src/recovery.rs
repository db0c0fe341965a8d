//! [`Recovery`]: how a durable log is read back from its directory, a step at a time: which
//! segments there are, each sealed one from its index (or a scan of it when the index is missing,
//! damaged or of an older format, after which the index is written again), the active one scanned and cut at its first torn or damaged
//! batch, and the chain of base offsets checked for a missing segment.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::LogError;
use crate::names::{COMPACTED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, file_name, parse_name};
use crate::open_files::OpenFiles;
use crate::segment::{Damage, Segment};
use crate::storage::{Storage, StorageFile, TEMPORARY_SUFFIX, read_whole, replace_unsynced};

/// The segment files of a directory, as a start reads its names (and `minibroker check-data`
/// with it, so the two never disagree on what a directory holds).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SegmentFiles {
    /// Each segment's base offset, in order, with whether compaction wrote it (`.compacted`).
    pub(crate) bases: Vec<(i64, bool)>,
    /// Bases with both a `.log` and a `.compacted`: a compaction's swap that a stop
    /// interrupted. The compacted one is complete (it is renamed into place only once synced),
    /// so the `.log` is the one to go, and a start deletes it.
    pub(crate) unfinished_swaps: Vec<i64>,
}

impl SegmentFiles {
    pub(crate) fn of(names: &[String]) -> Self {
        let mut bases = std::collections::BTreeMap::new();
        let mut logs = std::collections::BTreeSet::new();
        for name in names {
            if let Some(base) = parse_name(name, COMPACTED_SUFFIX) {
                bases.insert(base, true);
            } else if let Some(base) = parse_name(name, LOG_SUFFIX) {
                logs.insert(base);
                bases.entry(base).or_insert(false);
            }
        }
        let unfinished_swaps = bases
            .iter()
            .filter(|&(base, &compacted)| compacted && logs.contains(base))
            .map(|(&base, _)| base)
            .collect();
        Self {
            bases: bases.into_iter().collect(),
            unfinished_swaps,
        }
    }
}

/// One log directory being opened.
pub(crate) struct Recovery<'a> {
    pub(crate) storage: &'a Arc<dyn Storage>,
    pub(crate) dir: &'a Path,
    /// Where sealed segments' files are opened when read; without it they stay open.
    pub(crate) open_files: Option<&'a Arc<OpenFiles>>,
}

impl Recovery<'_> {
    fn io_error(&self, what: &str, error: io::Error) -> LogError {
        LogError::storage(what, self.dir, error)
    }

    /// The segment files, in order, as (base offset, whether compaction wrote it). The
    /// directory is created if missing, and writes that never finished are removed (the file
    /// each was replacing still stands). A segment found both as `.log` and as `.compacted` was
    /// being swapped when the broker stopped: the compacted one was complete (it is renamed into
    /// place only once synced), so the `.log` goes.
    pub(crate) fn segment_bases(&self) -> Result<Vec<(i64, bool)>, LogError> {
        self.storage
            .create_dir_all(self.dir)
            .map_err(|e| self.io_error("creating the directory", e))?;
        let names = self
            .storage
            .list(self.dir)
            .map_err(|e| self.io_error("listing the directory", e))?;
        for name in names.iter().filter(|name| name.ends_with(TEMPORARY_SUFFIX)) {
            let _ = self.storage.remove_file(&self.dir.join(name));
        }
        let files = SegmentFiles::of(&names);
        for &base in &files.unfinished_swaps {
            self.storage
                .remove_file(&self.dir.join(file_name(base, LOG_SUFFIX)))
                .map_err(|e| self.io_error("finishing a compaction's swap", e))?;
        }
        if !files.unfinished_swaps.is_empty() {
            self.storage
                .sync_dir(self.dir)
                .map_err(|e| self.io_error("syncing the directory", e))?;
        }
        Ok(files.bases)
    }

    /// A new log's first, empty segment.
    pub(crate) fn first_segment(&self) -> Result<Segment, LogError> {
        let file = self
            .storage
            .create(&self.dir.join(file_name(0, LOG_SUFFIX)))
            .map_err(|e| self.io_error("creating the first segment", e))?;
        self.storage
            .sync_dir(self.dir)
            .map_err(|e| self.io_error("syncing the directory", e))?;
        Ok(Segment::empty(0, file))
    }

    fn open_file(&self, name: &str) -> Result<Arc<dyn StorageFile>, LogError> {
        self.storage
            .open(&self.dir.join(name))
            .map_err(|e| self.io_error(&format!("opening {name}"), e))
    }

    /// A sealed segment: from its index if that describes the file, else scanned (a sealed
    /// segment that does not scan whole is damage: it is never truncated, that would leave a
    /// hole). With [`OpenFiles`], its file is opened once here for its length, then when read.
    pub(crate) fn sealed_segment(&self, base: i64, compacted: bool) -> Result<Segment, LogError> {
        let name = file_name(
            base,
            if compacted {
                COMPACTED_SUFFIX
            } else {
                LOG_SUFFIX
            },
        );
        let file = match self.open_files {
            Some(files) => {
                let len = self
                    .open_file(&name)?
                    .len()
                    .map_err(|e| self.io_error(&format!("reading {name}"), e))?;
                files.sealed(self.dir.join(&name), len)
            }
            None => self.open_file(&name)?,
        };
        let index_path = self.dir.join(file_name(base, INDEX_SUFFIX));
        let index = read_whole(&**self.storage, &index_path);
        if let Some(mut segment) = index
            .ok()
            .and_then(|index| Segment::from_index(base, Arc::clone(&file), &index))
        {
            segment.compacted = compacted;
            return Ok(segment);
        }
        match Segment::scan(base, file, false, compacted)
            .map_err(|e| self.io_error(&format!("reading {name}"), e))?
        {
            (segment, None) => {
                // Written again (missing, damaged or of an older format), so the next start
                // reads it instead of scanning; not synced, as at a roll: a bad one is scanned.
                let _ = replace_unsynced(&**self.storage, &index_path, &segment.encode_index());
                Ok(segment)
            }
            (_, Some(Damage { reason, .. })) => Err(LogError::Damaged(format!(
                "sealed segment {} holds {reason}; it is never truncated (that would leave a hole)",
                self.dir.join(&name).display()
            ))),
        }
    }

    /// The active segment, every batch checked, cut (and synced) at the first torn or damaged
    /// one; with what was cut, if anything: how many bytes, and why.
    pub(crate) fn active_segment(
        &self,
        base: i64,
    ) -> Result<(Segment, Option<(u64, String)>), LogError> {
        let name = file_name(base, LOG_SUFFIX);
        let (active, damage) = Segment::scan(base, self.open_file(&name)?, true, false)
            .map_err(|e| self.io_error(&format!("reading {}", file_name(base, LOG_SUFFIX)), e))?;
        let Some(Damage { dropped, reason }) = damage else {
            return Ok((active, None));
        };
        active
            .file
            .truncate(active.size)
            .and_then(|()| active.file.sync())
            .map_err(|e| self.io_error("truncating the torn tail", e))?;
        Ok((active, Some((dropped, reason))))
    }

    /// Each segment must begin where the one before it ends: a gap is a missing file.
    pub(crate) fn check_chain<'s>(
        &self,
        segments: impl Iterator<Item = &'s Segment>,
    ) -> Result<(), LogError> {
        let mut expected: Option<(String, i64)> = None;
        for segment in segments {
            if let Some((previous_name, next)) = &expected
                && *next != segment.base_offset
            {
                return Err(LogError::Damaged(format!(
                    "segment {} ends at offset {next} but the next one is {}: the segment file {} is missing",
                    self.dir.join(previous_name).display(),
                    segment.file_name(),
                    self.dir.join(file_name(*next, LOG_SUFFIX)).display(),
                )));
            }
            expected = Some((segment.file_name(), segment.next_offset));
        }
        Ok(())
    }
}
