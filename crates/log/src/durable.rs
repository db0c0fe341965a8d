//! [`DurableLog`]: one partition's batches in segment files, in one directory.
//!
//! The directory holds segment files named by their base offset (`00000000000000000000.log`),
//! each the stored batches back to back exactly as the memory log keeps them; an index file
//! beside each sealed segment; producer-state snapshots (`<offset>.snapshot`, opaque bytes
//! to this crate, see [`SnapshotStore`]); and, once records were deleted, the start offset
//! (`log-start-offset`, see `offset_files`).
//!
//! Appends go to the last (active) segment, and first to memory: the log gathers appended
//! batches and writes them to the file with one `write(2)` when asked
//! ([`DurableLog::write_pending`]), when they reach [`MAX_PENDING_BYTES`], and before anything
//! that reads or syncs the file. A broker answers a produce only after the write that holds it,
//! so many produces share a write and a killed process loses only unanswered batches; a failed
//! write forgets the batches it held, so nothing unwritten is ever served.
//!
//! The active segment rolls, once it holds a batch, when the next batch
//! would take it past `segment_bytes` or its first batch is older than `segment_ms`; a rolling
//! segment is synced and its index written before the next one is created, so every sealed
//! segment is durable whatever the flush policy, and only the active segment can have a torn
//! tail after a crash.
//!
//! Opening recovers: sealed segments come from their index files (or a header walk when one is
//! missing), must follow each other without a gap, and are never truncated; the active segment
//! is checked batch by batch, CRC included, and cut at the first batch that is torn or damaged.
//! A failed write or sync makes the log read-only: it never retries a sync and pretends.

use bytes::Bytes;
use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{check_appendable, first_record_at_or_after};
use crate::health::Health;
use crate::names::{
    COMPACTED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX, file_name, parse_name,
};
use crate::offset_files::{CLEANED_THROUGH, START_OFFSET};
use crate::open_files::OpenFiles;
use crate::recovery::Recovery;
use crate::segment::{INDEX_INTERVAL, Segment, SegmentMark};
use crate::storage::{Storage, StorageFile, read_whole, replace_unsynced, write_atomically};
use crate::{LogError, ReadLimits, Released};

mod clean;
pub use clean::{CleanedUp, DurableClean, DurableCleaned};

/// When segments roll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentConfig {
    /// A segment holding a batch rolls before a batch that would take it past this size.
    pub segment_bytes: u64,
    /// A segment whose first batch is this old (milliseconds) rolls on the next append.
    pub segment_ms: i64,
    /// Ask for a background sync of the active segment each time this many bytes were
    /// appended since the last one ([`Appended::write_back`]), so the sync a roll must do finds
    /// little left to write; `None` when every acknowledgement syncs anyway (`always`).
    pub write_back_bytes: Option<u64>,
}

impl Default for SegmentConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 256 << 20,
            segment_ms: 7 * 24 * 3600 * 1000,
            write_back_bytes: None,
        }
    }
}

/// How much of a partition's history is kept; whole sealed segments beyond it are deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Delete the oldest segment while the log would still hold this many bytes without it.
    pub bytes: Option<u64>,
    /// Delete a segment once its newest record is older than this (milliseconds).
    pub ms: Option<i64>,
}

impl Retention {
    /// Whether the oldest piece of a log (a durable log's segment, an in-memory log's chunk) of
    /// `oldest_bytes` whose newest record is `oldest_max_timestamp` goes, in a log of
    /// `stored_bytes`, as of `now_ms`: the one rule both logs apply.
    #[must_use]
    pub fn drops(
        &self,
        stored_bytes: u64,
        (oldest_bytes, oldest_max_timestamp): (u64, i64),
        now_ms: i64,
    ) -> bool {
        self.too_big(stored_bytes, oldest_bytes)
            || self
                .ms
                .is_some_and(|ms| oldest_max_timestamp < now_ms.saturating_sub(ms))
    }

    /// The size half of [`Self::drops`]: whether the log holds `bytes` or more without it.
    #[must_use]
    pub fn too_big(&self, stored_bytes: u64, oldest_bytes: u64) -> bool {
        self.bytes
            .is_some_and(|max| stored_bytes.saturating_sub(oldest_bytes) >= max)
    }
}

/// Where an append landed.
#[derive(Debug)]
pub struct Appended {
    /// The batch's base offset.
    pub base_offset: i64,
    /// Whether a new segment was started for it (the moment to snapshot producer state).
    pub rolled: bool,
    /// What retention dropped to make room (an in-memory log drops its oldest chunks as it
    /// grows; a durable log deletes segments only in [`DurableLog::apply_retention`]).
    pub released: Released,
    /// A sync of the active segment to run off the append path (on a blocking thread), when
    /// [`SegmentConfig::write_back_bytes`] are due.
    pub write_back: Option<WriteBack>,
}

/// A background sync of a segment file; see [`SegmentConfig::write_back_bytes`].
///
/// Without it, a segment of 256 MiB written at page-cache speed is synced all at once when it
/// rolls, under the partition's lock: a stall of hundreds of milliseconds for every producer of
/// the partition. Syncing as it fills spreads that work over the disk's idle time. A failed
/// background sync makes the log read-only at its next append, as a failed sync anywhere does.
#[derive(Debug)]
pub struct WriteBack {
    file: Arc<dyn StorageFile>,
    running: Arc<std::sync::atomic::AtomicBool>,
    health: Health,
    dir: PathBuf,
}

impl WriteBack {
    /// Syncs the file (blocking). A failure fails the log's [`Health`]: the partition takes no
    /// more writes.
    pub fn run(self) {
        use std::sync::atomic::Ordering;
        if let Err(error) = self.file.sync() {
            self.health
                .fail(LogError::storage("a background sync", self.dir, error));
        }
        self.running.store(false, Ordering::Release);
    }
}

/// What must be synced for everything appended so far to be durable.
#[derive(Debug, Clone)]
pub struct SyncPoint {
    /// The active segment's file (sealed ones were synced when they rolled).
    pub file: Arc<dyn StorageFile>,
    /// The offsets below this are covered once `file` is synced.
    pub through: i64,
}

/// A partition log in segment files.
#[derive(Debug)]
pub struct DurableLog {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    config: SegmentConfig,
    sealed: VecDeque<Segment>,
    active: Segment,
    stored_bytes: u64,
    batch_count: u64,
    /// Whether its files still take writes (shared with its background syncs and the broker).
    health: Health,
    /// Batches appended to the active segment and not yet written to its file, back to back.
    pending: Vec<u8>,
    /// The active segment as it was before the first of them, while there are any (boxed: it
    /// is there only between an append and the next write, and keeps the log small).
    unwritten: Option<Box<SegmentMark>>,
    /// How far into the active segment's file disk space has been asked for.
    preallocated: u64,
    /// Bytes appended to the active segment since its last sync was asked for.
    unsynced: u64,
    /// Whether a background sync runs (one at a time per log).
    write_back_running: Arc<std::sync::atomic::AtomicBool>,
    /// Where sealed segments' files are opened when read; without it they stay open.
    open_files: Option<Arc<OpenFiles>>,
    /// The offset DeleteRecords moved the start to (saved in `log-start-offset`): records
    /// below it are not served even where their segment is still kept.
    deleted_before: i64,
    /// Compaction mapped every offset below this (saved in `cleaner-offset`).
    cleaned_through: i64,
}

/// Bytes of appended batches gathered in memory at most before they are written, whoever asks.
pub const MAX_PENDING_BYTES: usize = 64 << 10;

/// The largest offset a segment may hold, relative to its base: what its index can store.
pub const MAX_RELATIVE_OFFSET: i64 = u32::MAX as i64;

/// Disk space reserved at a time ahead of the active segment's appends (capped by the segment
/// size); see [`StorageFile::preallocate`].
pub const PREALLOCATE_BYTES: u64 = 4 << 20;

/// A log opened from its directory, and what recovery cut off its tail.
#[derive(Debug)]
pub struct Opened {
    /// The log.
    pub log: DurableLog,
    /// The torn or damaged bytes cut from the active segment: how many, and why.
    pub truncated: Option<(u64, String)>,
}

impl DurableLog {
    /// Opens (and recovers) the log in `dir`, creating it if it does not exist.
    ///
    /// # Errors
    /// [`LogError::Storage`] when the files cannot be read; [`LogError::Damaged`] for a sealed
    /// segment that is damaged or a segment missing between two others (serving the log would
    /// serve a hole).
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: SegmentConfig,
    ) -> Result<Opened, LogError> {
        Self::open_with(storage, dir, config, None)
    }

    /// [`Self::open`], with sealed segments' files opened through `open_files` when read
    /// instead of held open (see [`OpenFiles`]).
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn open_with(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: SegmentConfig,
        open_files: Option<Arc<OpenFiles>>,
    ) -> Result<Opened, LogError> {
        let recovery = Recovery {
            storage: &storage,
            dir,
            open_files: open_files.as_ref(),
        };
        let bases = recovery.segment_bases()?;
        let Some((&(last, last_compacted), older)) = bases.split_last() else {
            let first = recovery.first_segment()?;
            let log = Self::assemble(storage, dir, config, (VecDeque::new(), first), open_files);
            return Ok(Opened {
                log,
                truncated: None,
            });
        };
        if last_compacted {
            return Err(LogError::Damaged(format!(
                "the newest segment of {} is a compacted one: the active segment after it is missing",
                dir.display()
            )));
        }
        let sealed = older
            .iter()
            .map(|&(base, compacted)| recovery.sealed_segment(base, compacted))
            .collect::<Result<VecDeque<_>, _>>()?;
        let (active, truncated) = recovery.active_segment(last)?;
        recovery.check_chain(sealed.iter().chain(std::iter::once(&active)))?;
        let mut log = Self::assemble(storage, dir, config, (sealed, active), open_files);
        if let Some(saved) = START_OFFSET.read(&*log.storage, dir)? {
            // A tail cut by recovery was never acknowledged, so no DeleteRecords passed it;
            // the clamp only keeps the start within the log whatever the file says.
            log.deleted_before = saved.min(log.next_offset());
            // Finishes a deletion a crash interrupted after the file was saved.
            log.drop_deleted_segments()?;
        }
        log.cleaned_through = CLEANED_THROUGH.read(&*log.storage, dir)?.unwrap_or(0);
        Ok(Opened { log, truncated })
    }

    fn assemble(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: SegmentConfig,
        (sealed, active): (VecDeque<Segment>, Segment),
        open_files: Option<Arc<OpenFiles>>,
    ) -> Self {
        let segments = || sealed.iter().chain(std::iter::once(&active));
        let stored_bytes = segments().map(|s| s.size).sum();
        let batch_count = segments().map(|s| s.batches).sum();
        Self {
            dir: dir.to_owned(),
            storage,
            config,
            sealed,
            active,
            stored_bytes,
            batch_count,
            health: Health::default(),
            pending: Vec::new(),
            unwritten: None,
            preallocated: 0,
            unsynced: 0,
            write_back_running: Arc::default(),
            open_files,
            deleted_before: 0,
            cleaned_through: 0,
        }
    }

    /// Rolls segments by `config` from the next append on (a topic's settings changed).
    pub fn set_segment_config(&mut self, config: SegmentConfig) {
        self.config = config;
    }

    fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.sealed.iter().chain(std::iter::once(&self.active))
    }

    /// Makes the log read-only after a failed write or sync, and says why.
    fn fail(&mut self, what: &str, error: io::Error) -> LogError {
        let failure = LogError::storage(what, &self.dir, error);
        self.set_failed(failure.clone());
        failure
    }

    /// Marks the log read-only (a sync of it failed elsewhere), with the reason. Batches not
    /// yet written are forgotten: they were never acknowledged, and never will be.
    pub fn set_failed(&mut self, error: LogError) {
        self.health.fail(error);
        self.forget_pending();
    }

    /// [`LogError::ReadOnly`] once the log's health has failed (here, in a background sync or
    /// in a sync the broker ran); batches not yet written are forgotten then.
    fn refuse_if_failed(&mut self) -> Result<(), LogError> {
        let Some(first) = self.health.failure().cloned() else {
            return Ok(());
        };
        self.forget_pending();
        Err(LogError::ReadOnly(first))
    }

    /// [`LogError::Deleted`] once the partition's topic is deleted: its directory may be a
    /// re-created topic's now, so nothing is done there by path.
    fn refuse_if_deleted(&self) -> Result<(), LogError> {
        if self.health.is_deleted() {
            return Err(LogError::Deleted);
        }
        Ok(())
    }

    /// Drops the batches not yet written, as if they had never been appended.
    fn forget_pending(&mut self) {
        if let Some(before) = self.unwritten.take() {
            // Every pending batch is in the active segment, counted since the mark.
            self.stored_bytes -= self.active.size - before.size;
            self.batch_count -= self.active.batches - before.batches;
            self.active.rewind(*before);
        }
        self.pending.clear();
    }

    /// Writes the batches appended since the last write to the active segment's file, with one
    /// `write(2)`; nothing to do when there are none. An answer to a produce must wait for
    /// this: until then, a killed process loses the batch.
    ///
    /// # Errors
    /// [`LogError::Storage`] when the write fails: the batches it held are forgotten (reads and
    /// the log end no longer show them) and the log is read-only from then on.
    pub fn write_pending(&mut self) -> Result<(), LogError> {
        if self.health.is_failed() {
            // Failed elsewhere (a background sync): what waits was never acknowledged, and
            // never will be.
            self.forget_pending();
            return Ok(());
        }
        let Some(before) = self.unwritten.as_deref().copied() else {
            return Ok(());
        };
        self.reserve_ahead();
        if let Err(error) = self.active.file.append(&self.pending) {
            // Cut any part that was written; the log stays read-only either way.
            let _ = self.active.file.truncate(before.size);
            return Err(self.fail("writing batches", error));
        }
        self.unwritten = None;
        self.pending.clear();
        if self.pending.capacity() > 2 * MAX_PENDING_BYTES {
            // One large batch went through: do not keep its memory for every partition.
            self.pending.shrink_to(MAX_PENDING_BYTES);
        }
        Ok(())
    }

    /// Reserves the next [`PREALLOCATE_BYTES`] of the active segment once the appends reach
    /// the end of what was reserved. Best effort: without the reservation the write still
    /// goes ahead (and fails on its own when the disk is full).
    fn reserve_ahead(&mut self) {
        let end = self.active.size;
        if end <= self.preallocated {
            return;
        }
        let target = end
            .saturating_add(PREALLOCATE_BYTES)
            .min(self.config.segment_bytes)
            .max(end);
        // Asked once per step either way: a file system that cannot preallocate is not asked
        // on every write.
        self.preallocated = target;
        let _ = self.active.file.preallocate(target);
    }

    /// Whether appended batches wait to be written ([`Self::write_pending`]).
    #[must_use]
    pub fn has_pending(&self) -> bool {
        self.unwritten.is_some()
    }

    /// The failure that made the log read-only, if one did.
    #[must_use]
    pub fn failure(&self) -> Option<&Arc<LogError>> {
        self.health.failure()
    }

    /// The log's directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The active segment's file.
    #[must_use]
    pub fn active_path(&self) -> PathBuf {
        self.dir.join(self.active.file_name())
    }

    /// Whether its files still take writes; clones share the state.
    #[must_use]
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Appends a batch of `record_count` records at the end, stamped with its base offset;
    /// `now_ms` decides whether the active segment is old enough to roll first.
    ///
    /// # Errors
    /// [`LogError::BadBatch`] as for the memory log; [`LogError::ReadOnly`] after an earlier
    /// failure; [`LogError::Storage`] when the write fails (the log is read-only from then on).
    pub fn append(
        &mut self,
        batch: &[u8],
        record_count: u32,
        now_ms: i64,
    ) -> Result<Appended, LogError> {
        self.refuse_if_failed()?;
        check_appendable(batch, record_count, self.active.next_offset)?;
        let len = batch.len() as u64;
        let too_big = self.active.size + len > self.config.segment_bytes;
        let too_old = self
            .active
            .first_append_ms
            .is_some_and(|first| now_ms.saturating_sub(first) >= self.config.segment_ms);
        // The index keeps offsets relative to the segment's base as u32 (Kafka's rule too): a
        // batch whose last offset would pass that starts a new segment. Compressed batches may
        // claim 2^20 records each, so a few thousand of them would otherwise wrap it.
        let end = self.active.next_offset + i64::from(record_count);
        let too_far = end - 1 - self.active.base_offset > MAX_RELATIVE_OFFSET;
        let rolled = self.active.batches > 0 && (too_big || too_old || too_far);
        if rolled {
            self.roll()?;
        }
        if self.pending.len() + batch.len() > MAX_PENDING_BYTES {
            self.write_pending()?;
        }
        // A roll starts the next segment at the same offset, so `end` still holds.
        let base_offset = self.active.next_offset;
        if self.unwritten.is_none() {
            self.unwritten = Some(Box::new(self.active.mark()));
        }
        let start = self.pending.len();
        self.pending.extend_from_slice(batch);
        minibroker_records::set_base_offset(&mut self.pending[start..], base_offset);
        let timestamp = minibroker_records::max_timestamp(batch);
        self.active.note(base_offset, len, end, timestamp);
        self.active.first_append_ms.get_or_insert(now_ms);
        self.stored_bytes += len;
        self.batch_count += 1;
        self.unsynced += len;
        Ok(Appended {
            base_offset,
            rolled,
            released: Released::default(),
            write_back: self.due_write_back()?,
        })
    }

    /// The background sync to run now, if enough was appended since the last and none runs;
    /// pending batches are written first, so it covers everything appended.
    fn due_write_back(&mut self) -> Result<Option<WriteBack>, LogError> {
        use std::sync::atomic::Ordering;
        let Some(every) = self.config.write_back_bytes else {
            return Ok(None);
        };
        if self.unsynced < every || self.write_back_running.load(Ordering::Acquire) {
            return Ok(None);
        }
        self.write_pending()?;
        self.write_back_running.store(true, Ordering::Release);
        self.unsynced = 0;
        Ok(Some(WriteBack {
            file: Arc::clone(&self.active.file),
            running: Arc::clone(&self.write_back_running),
            health: self.health.clone(),
            dir: self.dir.clone(),
        }))
    }

    /// [`Self::fail`], unless `error` says the process or system is out of file descriptors
    /// for now (EMFILE, ENFILE): nothing was lost, the active segment stays active, and the
    /// next append tries to roll again, so a passing shortage never makes a partition
    /// read-only for good.
    fn fail_unless_transient(&mut self, what: &str, error: io::Error) -> LogError {
        const ENFILE: i32 = 23;
        const EMFILE: i32 = 24;
        if matches!(error.raw_os_error(), Some(ENFILE | EMFILE)) {
            return LogError::storage(
                format!("{what} (tried again at the next append)"),
                &self.dir,
                error,
            );
        }
        self.fail(what, error)
    }

    /// Seals the active segment (synced, index written) and starts the next.
    fn roll(&mut self) -> Result<(), LogError> {
        self.write_pending()?;
        self.unsynced = 0;
        if let Err(error) = self.active.file.sync() {
            return Err(self.fail("syncing a segment", error));
        }
        if self.preallocated > self.active.size {
            // Give back the reserved space the sealed segment will never use (best effort).
            let _ = self.active.file.truncate(self.active.size);
        }
        self.preallocated = 0;
        let index = self
            .dir
            .join(file_name(self.active.base_offset, INDEX_SUFFIX));
        // Not synced: the index only saves recovery a scan, and a damaged one is scanned.
        if let Err(error) = replace_unsynced(&*self.storage, &index, &self.active.encode_index()) {
            return Err(self.fail_unless_transient("writing a segment index", error));
        }
        let next = self.active.next_offset;
        let created = self
            .storage
            .create(&self.dir.join(file_name(next, LOG_SUFFIX)))
            .and_then(|file| self.storage.sync_dir(&self.dir).map(|()| file));
        match created {
            Ok(file) => {
                let mut sealed = std::mem::replace(&mut self.active, Segment::empty(next, file));
                if let Some(files) = &self.open_files {
                    let path = self.dir.join(file_name(sealed.base_offset, LOG_SUFFIX));
                    sealed.file = files.sealed(path, sealed.size);
                }
                self.sealed.push_back(sealed);
                Ok(())
            }
            Err(error) => Err(self.fail_unless_transient("creating a segment", error)),
        }
    }

    /// What to sync for everything appended so far to be durable (pending batches are written
    /// first).
    ///
    /// # Errors
    /// As [`Self::write_pending`]; [`LogError::ReadOnly`] after an earlier failure.
    pub fn sync_point(&mut self) -> Result<SyncPoint, LogError> {
        self.refuse_if_failed()?;
        self.write_pending()?;
        Ok(SyncPoint {
            file: Arc::clone(&self.active.file),
            through: self.active.next_offset,
        })
    }

    /// Syncs the active segment now (clean shutdown, the interval flush).
    ///
    /// # Errors
    /// [`LogError::Storage`] when the sync fails; the log is read-only from then on.
    pub fn sync(&mut self) -> Result<(), LogError> {
        self.refuse_if_failed()?;
        self.write_pending()?;
        match self.active.file.sync() {
            Ok(()) => Ok(()),
            Err(error) => Err(self.fail("syncing a segment", error)),
        }
    }

    /// The offset the next record will get.
    #[must_use]
    pub fn next_offset(&self) -> i64 {
        self.active.next_offset
    }

    /// The first offset served: the base of the oldest segment retention left, or where
    /// [`Self::delete_records`] moved it, whichever is later.
    #[must_use]
    pub fn start_offset(&self) -> i64 {
        self.sealed
            .front()
            .map_or(self.active.base_offset, |s| s.base_offset)
            .max(self.deleted_before)
    }

    /// Bytes of batches stored.
    #[must_use]
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    /// Number of stored batches.
    #[must_use]
    pub fn batch_count(&self) -> u64 {
        self.batch_count
    }

    /// How many segment files the log has.
    #[must_use]
    pub fn segment_count(&self) -> usize {
        self.sealed.len() + 1
    }

    /// The whole batches holding offsets from `from` onwards, within `limits`, from the one
    /// segment that holds `from`.
    ///
    /// Pending batches are written first, so a read sees every batch appended.
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`] outside the log; [`LogError::Storage`] if a read, or the
    /// write of pending batches, fails; [`LogError::Damaged`] for a stored batch that fails its
    /// CRC or does not follow the one before it (the log is read-only from then on).
    pub fn read(&mut self, from: i64, limits: ReadLimits) -> Result<Vec<Bytes>, LogError> {
        self.write_pending()?;
        let (start, end) = (self.start_offset(), self.next_offset());
        if from < start || from > end {
            return Err(LogError::OffsetOutOfRange {
                requested: from,
                start,
                end,
            });
        }
        let segment = if from >= self.active.base_offset {
            &self.active
        } else {
            let at = self.sealed.partition_point(|s| s.next_offset <= from);
            &self.sealed[at]
        };
        let name = segment.file_name();
        let read = segment.read(from, limits);
        read.map_err(|error| {
            let what = format!("reading segment {name}");
            if error.kind() == io::ErrorKind::InvalidData {
                // Damaged bytes do not mend: nothing more is written after them, and the
                // broker reports the partition's storage as failed.
                let damaged =
                    LogError::Damaged(format!("{what} in {}: {error}", self.dir.display()));
                self.set_failed(damaged.clone());
                damaged
            } else {
                LogError::storage(what, &self.dir, error)
            }
        })
    }

    /// Calls `each` with every batch from the one holding `from` to the end, in order, until it
    /// returns `false` (recovery replays producer state with it).
    ///
    /// # Errors
    /// As [`Self::read`].
    pub fn for_each_batch(
        &mut self,
        from: i64,
        each: impl FnMut(&Bytes) -> bool,
    ) -> Result<(), LogError> {
        self.for_each_batch_read(from, 8 << 20, each)
    }

    /// [`Self::for_each_batch`], reading about `read_bytes` at a time.
    fn for_each_batch_read(
        &mut self,
        from: i64,
        read_bytes: usize,
        mut each: impl FnMut(&Bytes) -> bool,
    ) -> Result<(), LogError> {
        let limits = ReadLimits::bytes(read_bytes, 0);
        let mut at = from.max(self.start_offset());
        while at < self.next_offset() {
            let batches = self.read(at, limits)?;
            let Some(last) = batches.last() else { break };
            at = minibroker_records::end_offset(last);
            if !batches.iter().all(&mut each) {
                break;
            }
        }
        Ok(())
    }

    /// The offset and timestamp of the first record at or after `timestamp`, as the memory log
    /// answers it. Segments are skipped by their largest timestamp and, within the one found,
    /// the index says where to start (`Segment::time_lookup_start`), so a lookup reads about
    /// one index interval, not the partition.
    ///
    /// # Errors
    /// [`LogError::Storage`] if a read fails.
    pub fn offset_for_timestamp(&mut self, timestamp: i64) -> Result<Option<(i64, i64)>, LogError> {
        let Some(start) = self
            .segments()
            .find(|s| s.max_timestamp >= timestamp)
            .map(|s| s.time_lookup_start(timestamp))
        else {
            return Ok(None);
        };
        let mut found = None;
        self.for_each_batch_read(start, 2 * INDEX_INTERVAL as usize, |batch| {
            if minibroker_records::max_timestamp(batch) >= timestamp {
                found = Some(batch.clone());
            }
            found.is_none()
        })?;
        Ok(found.and_then(|batch| first_record_at_or_after(&batch, timestamp)))
    }

    /// The offset and timestamp of the (first) record with the largest timestamp.
    ///
    /// # Errors
    /// [`LogError::Storage`] if a read fails.
    pub fn offset_of_max_timestamp(&mut self) -> Result<Option<(i64, i64)>, LogError> {
        match self
            .segments()
            .filter(|s| s.batches > 0)
            .map(|s| s.max_timestamp)
            .max()
        {
            Some(newest) => self.offset_for_timestamp(newest),
            None => Ok(None),
        }
    }

    /// Deletes the oldest sealed segments that `retention` no longer keeps (never the active
    /// one), advancing the start offset; returns what they held.
    ///
    /// # Errors
    /// [`LogError::Storage`] if a file cannot be deleted (what was deleted stays deleted).
    pub fn apply_retention(
        &mut self,
        retention: Retention,
        now_ms: i64,
    ) -> Result<Released, LogError> {
        self.drop_oldest_while(|log, oldest| {
            retention.drops(
                log.stored_bytes,
                (oldest.size, oldest.max_timestamp),
                now_ms,
            )
        })
    }

    /// Moves the start offset up to `before` (Kafka's DeleteRecords; an offset at or below the
    /// start changes nothing, one past the end is taken as the end): the new start is saved
    /// first, then the sealed segments wholly below it are deleted. Returns what they held.
    ///
    /// # Errors
    /// [`LogError::Storage`] when the start cannot be saved (nothing changed then) or a segment
    /// cannot be deleted (the start has moved; the next open deletes the rest).
    pub fn delete_records(&mut self, before: i64) -> Result<Released, LogError> {
        self.refuse_if_deleted()?;
        let before = before.min(self.next_offset());
        if before <= self.start_offset() {
            return Ok(Released::default());
        }
        START_OFFSET
            .write(&*self.storage, &self.dir, before)
            .map_err(|error| {
                LogError::storage(
                    format!("saving the start offset in {}", START_OFFSET.name),
                    &self.dir,
                    error,
                )
            })?;
        self.deleted_before = before;
        self.drop_deleted_segments()
    }

    /// Deletes the sealed segments wholly below the start DeleteRecords set.
    fn drop_deleted_segments(&mut self) -> Result<Released, LogError> {
        self.drop_oldest_while(|log, oldest| oldest.next_offset <= log.deleted_before)
    }

    /// Deletes the oldest sealed segment while `drops` says so (never the active one).
    fn drop_oldest_while(
        &mut self,
        drops: impl Fn(&Self, &Segment) -> bool,
    ) -> Result<Released, LogError> {
        self.refuse_if_deleted()?;
        let mut removed = Released::default();
        while let Some(oldest) = self.sealed.front() {
            if !drops(self, oldest) {
                break;
            }
            let base = oldest.base_offset;
            self.storage
                .remove_file(&self.dir.join(oldest.file_name()))
                .map_err(|e| LogError::storage("deleting an old segment", &self.dir, e))?;
            let _ = self
                .storage
                .remove_file(&self.dir.join(file_name(base, INDEX_SUFFIX)));
            // A compaction pass may have put its rewrite in place beside it, before its swap.
            let _ = self
                .storage
                .remove_file(&self.dir.join(file_name(base, COMPACTED_SUFFIX)));
            // Synced one deletion at a time, so a crash can never bring back an older segment
            // without the newer ones after it (that would be a hole).
            self.storage
                .sync_dir(&self.dir)
                .map_err(|e| LogError::storage("syncing the directory", &self.dir, e))?;
            if let Some(segment) = self.sealed.pop_front() {
                self.stored_bytes -= segment.size;
                self.batch_count -= segment.batches;
                removed += Released {
                    batches: segment.batches,
                    bytes: segment.size,
                };
            }
        }
        Ok(removed)
    }

    /// The producer-state snapshots of this partition.
    #[must_use]
    pub fn snapshots(&self) -> SnapshotStore {
        SnapshotStore {
            storage: Arc::clone(&self.storage),
            dir: self.dir.clone(),
            health: self.health.clone(),
        }
    }
}

/// A partition's snapshot files: opaque bytes (the state crate's encoding) named by the offset
/// they cover up to. Written atomically; the newest [`SnapshotStore::KEPT`] are kept.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// The partition's: a snapshot is written outside its lock, and never once it is deleted.
    health: Health,
}

impl SnapshotStore {
    /// Snapshots kept: the newest, and one before it in case the newest is damaged.
    pub const KEPT: usize = 2;

    fn offsets(&self) -> io::Result<Vec<i64>> {
        let mut offsets: Vec<i64> = self
            .storage
            .list(&self.dir)?
            .iter()
            .filter_map(|name| parse_name(name, SNAPSHOT_SUFFIX))
            .collect();
        offsets.sort_unstable_by(|a, b| b.cmp(a));
        Ok(offsets)
    }

    /// Writes the snapshot covering every batch below `offset`, then deletes older ones beyond
    /// [`Self::KEPT`].
    ///
    /// # Errors
    /// As the file system reports.
    pub fn write(&self, offset: i64, data: &[u8]) -> io::Result<()> {
        let Some(_files) = self.health.files() else {
            // The topic was deleted: the directory may be a re-created topic's.
            return Ok(());
        };
        let path = self.dir.join(file_name(offset, SNAPSHOT_SUFFIX));
        write_atomically(&*self.storage, &path, data)?;
        for old in self.offsets()?.into_iter().skip(Self::KEPT) {
            match self
                .storage
                .remove_file(&self.dir.join(file_name(old, SNAPSHOT_SUFFIX)))
            {
                // A snapshot written at the same time removed it first.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                removed => removed?,
            }
        }
        Ok(())
    }

    /// The snapshots at or below `max_offset`, newest first, as (offset, bytes); one that
    /// cannot be read is left out.
    ///
    /// # Errors
    /// If the directory cannot be listed.
    pub fn newest_first(&self, max_offset: i64) -> io::Result<Vec<(i64, Vec<u8>)>> {
        Ok(self
            .offsets()?
            .into_iter()
            .filter(|offset| *offset <= max_offset)
            .filter_map(|offset| {
                let path = self.dir.join(file_name(offset, SNAPSHOT_SUFFIX));
                read_whole(&*self.storage, &path)
                    .ok()
                    .map(|data| (offset, data))
            })
            .collect())
    }
}
