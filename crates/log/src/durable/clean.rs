//! Compaction of a durable log (`crate::cleaner`'s rule): its sealed segments are the pieces,
//! never the active one.
//!
//! A pass is planned under the partition's lock ([`DurableLog::clean_plan`]: the segments'
//! files, shared), run without it ([`DurableClean::run`]), and swapped in under the lock again
//! ([`DurableLog::commit_clean`]), which touches no file: every slow step is outside the lock.
//!
//! The run writes each rewritten segment to `<base>.compacted.tmp` and syncs it (at the rate
//! asked), then, for each, removes the old index, renames the file to `<base>.compacted`, writes
//! its index (unsynced, as at a roll: a bad one means a scan) and syncs the directory. Only
//! after the swap is the old `<base>.log` deleted. So a crash at any point leaves a valid log:
//! before a rename the old segment stands and the temporary file is removed at the next open;
//! after it, the compacted one is complete and the open deletes the `.log` beside it
//! (`crate::recovery`). Until the swap, readers keep using the old segment, whose index is in
//! memory. Offsets, and where each segment begins and ends, never change.

use bytes::Bytes;
use std::path::PathBuf;
use std::sync::Arc;

use super::DurableLog;
use crate::cleaner::{CleanRules, CleanStats, Piece, Throttle, run_pass};
use crate::names::{COMPACTED_SUFFIX, INDEX_SUFFIX, file_name};
use crate::offset_files::CLEANED_THROUGH;
use crate::segment::{Segment, for_each_stored_batch};
use crate::storage::{Storage, StorageFile, replace_unsynced, temporary_path};
use crate::{Health, LogError, Released};

/// Bytes of kept batches gathered before each write of a rewritten segment.
const WRITE_BYTES: usize = 1 << 20;

/// One sealed segment, as a pass reads it.
#[derive(Debug)]
struct DurablePiece {
    base: i64,
    end: i64,
    size: u64,
    file: Arc<dyn StorageFile>,
    dir: PathBuf,
}

impl Piece for DurablePiece {
    fn base(&self) -> i64 {
        self.base
    }

    fn end(&self) -> i64 {
        self.end
    }

    fn for_each_batch(
        &self,
        each: &mut dyn FnMut(Bytes) -> Result<bool, LogError>,
    ) -> Result<(), LogError> {
        for_each_stored_batch(&*self.file, self.size, &mut |batch| {
            each(batch).map_err(Failed::Log)
        })
        .map_err(|failed| match failed {
            Failed::Log(error) => error,
            Failed::Io(error) => {
                LogError::storage("reading a segment to compact it", &self.dir, error)
            }
        })
    }
}

/// A read that failed, or what the pass said.
enum Failed {
    Log(LogError),
    Io(std::io::Error),
}

impl From<std::io::Error> for Failed {
    fn from(error: std::io::Error) -> Self {
        Self::Io(error)
    }
}

/// A pass planned over a durable log's cleanable sealed segments.
#[derive(Debug)]
pub struct DurableClean {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    /// The partition's: held while the pass touches the directory, which it must not once the
    /// topic is deleted (a re-created topic may own it by then).
    health: Health,
    pieces: Vec<DurablePiece>,
    cleaned_through: i64,
}

/// A pass's rewritten segments, written and synced, to swap in ([`DurableLog::commit_clean`]).
#[derive(Debug)]
pub struct DurableCleaned {
    segments: Vec<Segment>,
    cleaned_through: i64,
}

/// A rewritten segment being written.
struct Rewrite {
    segment: Segment,
    pending: Vec<u8>,
}

impl DurableClean {
    /// Runs the pass (no lock needed): maps the dirty segments within `map_budget` bytes of
    /// keys, rewrites the segments up to what it mapped into temporary files, synced, reading
    /// and writing at most `bytes_per_second`. `None` when nothing is dirty.
    ///
    /// # Errors
    /// [`LogError::Storage`] when a read, write or sync fails (the temporary files are removed;
    /// the log is unchanged); [`LogError::Damaged`] for a stored batch that does not read.
    pub fn run(
        self,
        map_budget: usize,
        rules: &CleanRules,
        bytes_per_second: Option<u64>,
        stats: &mut CleanStats,
    ) -> Result<Option<DurableCleaned>, LogError> {
        let mut rewrites: Vec<Rewrite> = Vec::new();
        let mut throttle = Throttle::new(bytes_per_second);
        let storage = Arc::clone(&self.storage);
        let dir = self.dir.clone();
        let failed = |what: &str, error| LogError::storage(what, &dir, error);
        let mut keep = |index: usize, batch: Bytes| {
            if rewrites.len() <= index {
                let Some(_files) = self.health.files() else {
                    return Err(LogError::Deleted);
                };
                let base = self.pieces[index].base;
                let path = temporary_path(&dir.join(file_name(base, COMPACTED_SUFFIX)));
                let file = storage
                    .create(&path)
                    .map_err(|e| failed("creating a compacted segment", e))?;
                let mut segment = Segment::empty(base, file);
                segment.compacted = true;
                rewrites.push(Rewrite {
                    segment,
                    pending: Vec::new(),
                });
            }
            let rewrite = &mut rewrites[index];
            let base = minibroker_records::base_offset(&batch);
            let end = minibroker_records::end_offset(&batch);
            let timestamp = minibroker_records::max_timestamp(&batch);
            rewrite
                .segment
                .note(base, batch.len() as u64, end, timestamp);
            rewrite.pending.extend_from_slice(&batch);
            if rewrite.pending.len() >= WRITE_BYTES {
                rewrite
                    .segment
                    .file
                    .append(&rewrite.pending)
                    .map_err(|e| failed("writing a compacted segment", e))?;
                rewrite.pending.clear();
            }
            Ok(())
        };
        let passed = run_pass(
            &self.pieces,
            self.cleaned_through,
            map_budget,
            rules,
            &mut throttle,
            stats,
            &mut keep,
        );
        let finished = passed.and_then(|outcome| {
            for rewrite in &mut rewrites {
                rewrite
                    .segment
                    .file
                    .append(&rewrite.pending)
                    .and_then(|()| rewrite.segment.file.sync())
                    .map_err(|e| failed("writing a compacted segment", e))?;
            }
            if outcome.is_some() {
                self.put_in_place(&rewrites)?;
            }
            Ok(outcome)
        });
        match finished {
            Ok(Some((cleaned_through, _))) => Ok(Some(DurableCleaned {
                segments: rewrites.into_iter().map(|r| r.segment).collect(),
                cleaned_through,
            })),
            Ok(None) => Ok(None),
            Err(error) => {
                let Some(_files) = self.health.files() else {
                    return Err(error);
                };
                for rewrite in &rewrites {
                    let _ = self
                        .storage
                        .remove_file(&temporary_path(&self.dir.join(rewrite.segment.file_name())));
                }
                Err(error)
            }
        }
    }
}

impl DurableClean {
    /// Renames each synced rewrite into place beside the segment it replaces (its old index
    /// removed first, its own written after), then syncs the directory.
    fn put_in_place(&self, rewrites: &[Rewrite]) -> Result<(), LogError> {
        let Some(_files) = self.health.files() else {
            return Err(LogError::Deleted);
        };
        let failed = |what: &str, error| LogError::storage(what, &self.dir, error);
        for rewrite in rewrites {
            let segment = &rewrite.segment;
            let name = segment.file_name();
            let index = self.dir.join(file_name(segment.base_offset, INDEX_SUFFIX));
            match self.storage.remove_file(&index) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    return Err(failed("removing a segment's index", error));
                }
                _ => {}
            }
            self.storage
                .rename(
                    &temporary_path(&self.dir.join(&name)),
                    &self.dir.join(&name),
                )
                .map_err(|e| failed("renaming a compacted segment", e))?;
            let _ = replace_unsynced(&*self.storage, &index, &segment.encode_index());
        }
        self.storage
            .sync_dir(&self.dir)
            .map_err(|e| failed("syncing the directory", e))
    }
}

impl DurableLog {
    /// The sealed segments (oldest first) whose newest record is at or before `cutoff_ms`
    /// (`min.compaction.lag.ms` ago), as a pass to run; `None` when none of them is dirty.
    #[must_use]
    /// With `sweep`, the pass is planned with nothing dirty too (when there are any segments).
    pub fn clean_plan(&self, cutoff_ms: i64, sweep: bool) -> Option<DurableClean> {
        let pieces: Vec<DurablePiece> = self
            .cleanable(cutoff_ms)
            .map(|segment| DurablePiece {
                base: segment.base_offset,
                end: segment.next_offset,
                size: segment.size,
                file: Arc::clone(&segment.file),
                dir: self.dir.clone(),
            })
            .collect();
        let cleaned_through = self.cleaned_through.max(self.start_offset());
        let dirty = pieces.iter().any(|piece| piece.end > cleaned_through);
        (dirty || (sweep && !pieces.is_empty())).then(|| DurableClean {
            dir: self.dir.clone(),
            storage: Arc::clone(&self.storage),
            health: self.health.clone(),
            pieces,
            cleaned_through,
        })
    }

    fn cleanable(&self, cutoff_ms: i64) -> impl Iterator<Item = &Segment> {
        self.sealed
            .iter()
            .take_while(move |segment| segment.max_timestamp <= cutoff_ms)
    }

    /// Bytes of the sealed segments whose newest record is at or before `cutoff_ms`: (dirty,
    /// all).
    #[must_use]
    pub fn cleanable_bytes(&self, cutoff_ms: i64) -> (u64, u64) {
        self.cleanable(cutoff_ms)
            .fold((0, 0), |(dirty, all), segment| {
                let dirty_bytes = if segment.next_offset > self.cleaned_through {
                    segment.size
                } else {
                    0
                };
                (dirty + dirty_bytes, all + segment.size)
            })
    }

    /// Swaps in a pass's segments, already in place on disk (one retention or DeleteRecords
    /// deleted meanwhile is passed over, its compacted file removed); returns what was freed and
    /// the files left to clean up ([`CleanedUp::finish`], outside the lock).
    pub fn commit_clean(&mut self, cleaned: DurableCleaned) -> (Released, CleanedUp) {
        let mut freed = Released::default();
        let mut leftovers = Vec::new();
        for mut segment in cleaned.segments {
            let name = segment.file_name();
            let Some(at) = self
                .sealed
                .iter()
                .position(|old| old.base_offset == segment.base_offset)
            else {
                leftovers.push(name);
                leftovers.push(file_name(segment.base_offset, INDEX_SUFFIX));
                continue;
            };
            if let Some(files) = &self.open_files {
                segment.file = files.sealed(self.dir.join(&name), segment.size);
            }
            let old = std::mem::replace(&mut self.sealed[at], segment);
            let new = &self.sealed[at];
            freed += Released {
                batches: old.batches - new.batches,
                // A rewrite can be a little larger: a delete horizon's timestamp deltas may take
                // more bytes than the ones they replace.
                bytes: old.size.saturating_sub(new.size),
            };
            self.stored_bytes = self.stored_bytes - old.size + new.size;
            self.batch_count -= old.batches - new.batches;
            if !old.compacted {
                leftovers.push(old.file_name());
            }
        }
        self.cleaned_through = self.cleaned_through.max(cleaned.cleaned_through);
        let cleaned_up = CleanedUp {
            storage: Arc::clone(&self.storage),
            health: self.health.clone(),
            dir: self.dir.clone(),
            leftovers,
            cleaned_through: self.cleaned_through,
        };
        (freed, cleaned_up)
    }
}

/// What a swap leaves to do on disk, without the partition's lock: delete the `.log` files the
/// compacted ones replaced (a start deletes any left, see `crate::recovery`) and save how far
/// the log is mapped.
#[derive(Debug)]
pub struct CleanedUp {
    storage: Arc<dyn Storage>,
    /// The partition's: nothing is removed once its topic is deleted.
    health: Health,
    dir: PathBuf,
    leftovers: Vec<String>,
    cleaned_through: i64,
}

impl CleanedUp {
    /// Does it.
    ///
    /// # Errors
    /// [`LogError::Storage`] when a deletion or the save fails (the log is whole either way).
    pub fn finish(self) -> Result<(), LogError> {
        let Some(_files) = self.health.files() else {
            return Ok(());
        };
        let failed = |what: &str, error| LogError::storage(what, &self.dir, error);
        for name in &self.leftovers {
            match self.storage.remove_file(&self.dir.join(name)) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    return Err(failed("removing a compacted segment's original", error));
                }
                _ => {}
            }
        }
        CLEANED_THROUGH
            .write(&*self.storage, &self.dir, self.cleaned_through)
            .map_err(|e| failed("saving how far compaction went", e))
    }
}
