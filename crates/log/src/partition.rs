//! [`PartitionLog`]: a partition's log, in memory or in segment files, behind one API.
//!
//! The broker core appends and reads through this type and never asks which it is; only
//! durability (syncing, snapshots, retention) is particular to files, and is reached through
//! [`PartitionLog::durable`].

use bytes::Bytes;

use crate::{
    Appended, CleanRules, CleanStats, CleanedUp, DurableClean, DurableCleaned, DurableLog,
    LogError, MemoryClean, MemoryCleaned, MemoryLog, ReadLimits, Released, Retention,
};

/// One partition's log.
#[derive(Debug)]
pub enum PartitionLog {
    /// Held in memory; lost when the process ends.
    Memory(MemoryLog),
    /// Segment files in a directory.
    Durable(DurableLog),
}

impl Default for PartitionLog {
    fn default() -> Self {
        Self::Memory(MemoryLog::new())
    }
}

impl PartitionLog {
    /// An empty in-memory log, keeping everything.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty in-memory log, keeping what `retention` says.
    #[must_use]
    pub fn in_memory(retention: Retention) -> Self {
        Self::Memory(MemoryLog::with_retention(retention))
    }

    /// Appends one v2 record batch of `record_count` records, stamped with its base offset.
    /// `now_ms` (the broker's clock) decides whether a segment is old enough to roll.
    ///
    /// # Errors
    /// [`LogError::BadBatch`]; for files, [`LogError::Storage`] or [`LogError::ReadOnly`].
    pub fn append(
        &mut self,
        batch: &[u8],
        record_count: u32,
        now_ms: i64,
    ) -> Result<Appended, LogError> {
        match self {
            Self::Memory(log) => log
                .append(batch, record_count)
                .map(|(base_offset, released)| Appended {
                    base_offset,
                    rolled: false,
                    released,
                    write_back: None,
                }),
            Self::Durable(log) => log.append(batch, record_count, now_ms),
        }
    }

    /// The offset the next record will get (Kafka's log end offset / high watermark).
    #[must_use]
    pub fn next_offset(&self) -> i64 {
        match self {
            Self::Memory(log) => log.next_offset(),
            Self::Durable(log) => log.next_offset(),
        }
    }

    /// The first offset held.
    #[must_use]
    pub fn start_offset(&self) -> i64 {
        match self {
            Self::Memory(log) => log.start_offset(),
            Self::Durable(log) => log.start_offset(),
        }
    }

    /// Bytes of batches stored.
    #[must_use]
    pub fn stored_bytes(&self) -> u64 {
        match self {
            Self::Memory(log) => log.stored_bytes() as u64,
            Self::Durable(log) => log.stored_bytes(),
        }
    }

    /// Writes what was appended and not yet written (a durable log gathers appends in memory;
    /// see [`DurableLog::write_pending`]). A produce is answered only after this.
    ///
    /// # Errors
    /// For files, [`LogError::Storage`] when the write fails (the log is read-only then).
    pub fn write_pending(&mut self) -> Result<(), LogError> {
        match self {
            Self::Memory(_) => Ok(()),
            Self::Durable(log) => log.write_pending(),
        }
    }

    /// The whole batches holding offsets from `from` onwards, within `limits`.
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`]; for files, [`LogError::Storage`] if a read fails.
    pub fn read(&mut self, from: i64, limits: ReadLimits) -> Result<Vec<Bytes>, LogError> {
        match self {
            Self::Memory(log) => log.read(from, limits),
            Self::Durable(log) => log.read(from, limits),
        }
    }

    /// The offset and timestamp of the first record at or after `timestamp`, if any; never an
    /// offset below the start (a batch DeleteRecords cut through may hold the record found,
    /// and the start is answered in its place).
    ///
    /// # Errors
    /// For files, [`LogError::Storage`] if a read fails.
    pub fn offset_for_timestamp(&mut self, timestamp: i64) -> Result<Option<(i64, i64)>, LogError> {
        let found = match self {
            Self::Memory(log) => log.offset_for_timestamp(timestamp),
            Self::Durable(log) => log.offset_for_timestamp(timestamp)?,
        };
        Ok(self.not_below_start(found))
    }

    /// `found`, its offset raised to the start if below it.
    fn not_below_start(&self, found: Option<(i64, i64)>) -> Option<(i64, i64)> {
        let start = self.start_offset();
        found.map(|(offset, at)| (offset.max(start), at))
    }

    /// The offset and timestamp of the record with the largest timestamp, if any.
    ///
    /// # Errors
    /// For files, [`LogError::Storage`] if a read fails.
    pub fn offset_of_max_timestamp(&mut self) -> Result<Option<(i64, i64)>, LogError> {
        let found = match self {
            Self::Memory(log) => log.offset_of_max_timestamp(),
            Self::Durable(log) => log.offset_of_max_timestamp()?,
        };
        Ok(self.not_below_start(found))
    }

    /// Drops what retention no longer keeps, as of `now_ms` (an in-memory log's oldest chunks, a
    /// durable log's oldest segment files), and returns what they held.
    ///
    /// # Errors
    /// For files, [`LogError::Storage`] if a deletion fails.
    pub fn apply_retention(
        &mut self,
        retention: Retention,
        now_ms: i64,
    ) -> Result<Released, LogError> {
        match self {
            Self::Memory(log) => Ok(log.apply_retention(now_ms)),
            Self::Durable(log) => log.apply_retention(retention, now_ms),
        }
    }

    /// Moves the start offset up to `before` (Kafka's DeleteRecords): reads below it are out of
    /// range from now on, and what lies wholly below it is dropped (an in-memory log's full
    /// chunks, a durable log's sealed segments, after the new start is saved). An offset at or
    /// below the start changes nothing; one past the end is taken as the end.
    ///
    /// # Errors
    /// For files, [`LogError::Storage`] when the start cannot be saved or a segment deleted.
    pub fn delete_records(&mut self, before: i64) -> Result<Released, LogError> {
        match self {
            Self::Memory(log) => Ok(log.delete_records(before)),
            Self::Durable(log) => log.delete_records(before),
        }
    }

    /// Moves the start offset up to `start`, even past the end (an in-memory copy then starts
    /// empty there: `MemoryLog::restart_at`); a log on files only deletes up to its end.
    ///
    /// # Errors
    /// As [`Self::delete_records`].
    pub fn restart_at(&mut self, start: i64) -> Result<Released, LogError> {
        match self {
            Self::Memory(log) => Ok(log.restart_at(start)),
            Self::Durable(log) => log.delete_records(start.min(log.next_offset())),
        }
    }

    /// Drops an in-memory log's oldest chunks while it would still hold `bytes` without them
    /// (`MemoryLog::trim_to`); a log on files keeps what it has.
    pub fn trim_to(&mut self, bytes: usize) -> Released {
        match self {
            Self::Memory(log) => log.trim_to(bytes),
            Self::Durable(_) => Released::default(),
        }
    }

    /// A compaction pass over what may be cleaned (full chunks or sealed segments whose newest
    /// record is at or before `cutoff_ms`), to run without the partition's lock; `None` when
    /// none of it is dirty (with `sweep`, a delete horizon having passed: when there is none of
    /// it). See `crate::cleaner`.
    pub fn clean_plan(&mut self, cutoff_ms: i64, sweep: bool) -> Option<CleanPlan> {
        match self {
            Self::Memory(log) => log.clean_plan(cutoff_ms, sweep).map(CleanPlan::Memory),
            Self::Durable(log) => log.clean_plan(cutoff_ms, sweep).map(CleanPlan::Durable),
        }
    }

    /// Bytes compaction could clean as of `cutoff_ms`: (not yet mapped, all).
    #[must_use]
    pub fn cleanable_bytes(&self, cutoff_ms: i64) -> (u64, u64) {
        match self {
            Self::Memory(log) => log.cleanable_bytes(cutoff_ms),
            Self::Durable(log) => log.cleanable_bytes(cutoff_ms),
        }
    }

    /// Swaps in what a pass wrote (no file is touched); returns what it freed and, for files,
    /// what is left to do on disk once the lock is let go ([`CleanedUp::finish`]).
    pub fn commit_clean(&mut self, cleaned: Cleaned) -> (Released, Option<CleanedUp>) {
        match (self, cleaned) {
            (Self::Memory(log), Cleaned::Memory(cleaned)) => (log.commit_clean(cleaned), None),
            (Self::Durable(log), Cleaned::Durable(cleaned)) => {
                let (freed, cleaned_up) = log.commit_clean(cleaned);
                (freed, Some(cleaned_up))
            }
            // A pass planned on the other kind of log: nothing of it applies.
            _ => (Released::default(), None),
        }
    }

    /// Keeps what `retention` says and, for files, rolls segments by `segments`, from now on
    /// (a durable log is given its retention at each [`Self::apply_retention`]).
    pub fn set_limits(&mut self, retention: Retention, segments: crate::SegmentConfig) {
        match self {
            Self::Memory(log) => log.set_retention(retention),
            Self::Durable(log) => log.set_segment_config(segments),
        }
    }

    /// The file-backed log, if this is one.
    #[must_use]
    pub fn as_durable(&self) -> Option<&DurableLog> {
        match self {
            Self::Memory(_) => None,
            Self::Durable(log) => Some(log),
        }
    }

    /// The file-backed log, if this is one, to change.
    #[must_use]
    pub fn durable(&mut self) -> Option<&mut DurableLog> {
        match self {
            Self::Memory(_) => None,
            Self::Durable(log) => Some(log),
        }
    }

    /// Whether its files still take writes, shared with the log (an in-memory log never
    /// fails).
    #[must_use]
    pub fn health(&self) -> crate::Health {
        match self {
            Self::Memory(_) => crate::Health::default(),
            Self::Durable(log) => log.health().clone(),
        }
    }
}

/// A compaction pass planned over a partition's log ([`PartitionLog::clean_plan`]).
#[derive(Debug)]
pub enum CleanPlan {
    /// Over an in-memory log's full chunks.
    Memory(MemoryClean),
    /// Over a durable log's sealed segments.
    Durable(DurableClean),
}

/// What a pass wrote, to swap in ([`PartitionLog::commit_clean`]).
#[derive(Debug)]
pub enum Cleaned {
    /// New chunks.
    Memory(MemoryCleaned),
    /// New segment files, synced.
    Durable(DurableCleaned),
}

impl CleanPlan {
    /// Runs the pass (no lock needed): an offset map of at most `map_budget` bytes of keys,
    /// files read and written at most at `bytes_per_second`. `None` when nothing was dirty.
    ///
    /// # Errors
    /// As [`DurableClean::run`] and [`MemoryClean::run`].
    pub fn run(
        self,
        map_budget: usize,
        rules: &CleanRules,
        bytes_per_second: Option<u64>,
        stats: &mut CleanStats,
    ) -> Result<Option<Cleaned>, LogError> {
        match self {
            Self::Memory(plan) => Ok(plan.run(map_budget, rules, stats)?.map(Cleaned::Memory)),
            Self::Durable(plan) => Ok(plan
                .run(map_budget, rules, bytes_per_second, stats)?
                .map(Cleaned::Durable)),
        }
    }
}
