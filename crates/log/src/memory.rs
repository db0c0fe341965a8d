//! [`MemoryLog`]: batches in offset order, appended at the end, read from any offset.
//!
//! Batch bytes are copied into large chunks (1 MiB, or one batch if it is larger); each chunk
//! has its own small index of where its batches are, so a growing log never reallocates (and
//! copies) everything it holds while a producer waits. An append touches no reference count:
//! the bytes written since the last read are handed out as one frozen piece when a read needs
//! them, and a read's batches are slices of those pieces.
//!
//! Retention drops whole chunks from the front. A dropped chunk whose bytes nobody else holds
//! any more (no fetch answer is still being written from it) is reused for the next appends
//! instead of being freed: fresh memory costs the kernel a page fault and a zeroed page per
//! 4 KiB, which was about half of the broker's cycles at 1 GB/s, and a reused chunk costs none.

use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

use crate::batch::{check_appendable, first_record_at_or_after};
use crate::{LogError, Retention};

mod clean;
pub use clean::{MemoryClean, MemoryCleaned};

/// Size of the chunks batch bytes are copied into.
const CHUNK_BYTES: usize = 1 << 20;

/// Dropped chunks kept for reuse beyond the one the next roll takes (time-based retention can
/// drop many at once; the rest are freed).
const SPARE_CHUNKS: usize = 4;

/// How much one read may return. Whole batches are returned, and at least one when any is
/// available, so a batch larger than `max_bytes` never blocks a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Stop before the returned batches' cost exceeds this many bytes.
    pub max_bytes: usize,
    /// What each returned batch costs besides its bytes (the caller's encoding of it), so the
    /// caller can bound the size of its answer.
    pub batch_overhead: usize,
    /// Stop at the first batch that begins at or after this offset (a `read_committed` reader
    /// stops at the last stable offset, so nothing is read beyond it to be dropped);
    /// `i64::MAX` for no bound.
    pub before_offset: i64,
}

impl ReadLimits {
    /// Up to `max_bytes`, each batch costing `batch_overhead` more, with no offset bound.
    #[must_use]
    pub fn bytes(max_bytes: usize, batch_overhead: usize) -> Self {
        Self {
            max_bytes,
            batch_overhead,
            before_offset: i64::MAX,
        }
    }
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self::bytes(1 << 20, 0)
    }
}

/// What retention removed from a log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// Batches removed.
    pub batches: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl std::ops::AddAssign for Released {
    fn add_assign(&mut self, other: Self) {
        self.batches += other.batches;
        self.bytes += other.bytes;
    }
}

/// Where one stored batch is in its chunk.
#[derive(Debug, Clone, Copy)]
struct Entry {
    base_offset: i64,
    /// The offsets it takes: its record count as appended, kept when compaction removes records.
    offsets: u32,
    /// Offset of its first byte in the chunk.
    start: u32,
    len: u32,
}

impl Entry {
    fn end_offset(&self) -> i64 {
        self.base_offset + i64::from(self.offsets)
    }
}

/// One chunk of batch bytes and the batches stored in it.
#[derive(Debug, Default)]
struct Chunk {
    /// The log's next offset when it was started: where it begins, even once compaction removed
    /// its first batches.
    first_offset: i64,
    entries: Vec<Entry>,
    /// The chunk's bytes handed out so far, each with its offset in the chunk, in order and
    /// contiguous from its start. The rest of what was written is at the front of the log's
    /// `free`.
    pieces: Vec<(u32, Bytes)>,
    /// Bytes written into it.
    bytes: usize,
    /// The largest record timestamp in it (for time-based retention).
    max_timestamp: i64,
    /// The largest record timestamp of every chunk appended before it, dropped ones too: a
    /// lookup by time skips, by binary search, the chunks before the last one whose value is
    /// below the timestamp wanted, since every record in them is older.
    max_timestamp_before: i64,
    /// The empty end of the chunk, left once it is full: the handle through which the whole
    /// allocation is reclaimed when its pieces are gone.
    rest: Option<BytesMut>,
}

impl Chunk {
    /// How many of its bytes, from its start, were handed out as pieces.
    fn frozen(&self) -> usize {
        self.pieces
            .last()
            .map_or(0, |(start, piece)| *start as usize + piece.len())
    }

    /// The frozen piece holding `entry` (which lies below [`Self::frozen`]), and where in it the
    /// entry's bytes start.
    fn piece_of(&self, entry: &Entry) -> (&Bytes, usize) {
        let at = self
            .pieces
            .partition_point(|(start, _)| *start <= entry.start)
            .saturating_sub(1);
        let (start, piece) = &self.pieces[at];
        (piece, (entry.start - start) as usize)
    }

    /// The frozen bytes of `entry`, sharing the chunk.
    fn slice(&self, entry: &Entry) -> Bytes {
        let (piece, from) = self.piece_of(entry);
        piece.slice(from..from + entry.len as usize)
    }
}

/// An append-only, in-memory log of one partition.
#[derive(Debug, Default)]
pub struct MemoryLog {
    /// Chunks in offset order; the last one is being filled.
    chunks: VecDeque<Chunk>,
    /// The chunk being filled from its frozen end on: written bytes not yet handed out, then
    /// room for more.
    free: BytesMut,
    /// Dropped chunks, reclaimed whole, waiting to be filled again.
    spare: Vec<BytesMut>,
    retention: Retention,
    next_offset: i64,
    /// The offset [`Self::delete_records`] moved the start to: records below it are not served
    /// even where their chunk is still kept.
    deleted_before: i64,
    /// Compaction mapped every offset below this (see `crate::cleaner`).
    cleaned_through: i64,
    stored_bytes: usize,
    batch_count: usize,
}

impl MemoryLog {
    /// An empty log starting at offset 0, keeping everything.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty log that drops its oldest chunks as `retention` says: by size as it grows, by
    /// age when [`Self::apply_retention`] is called.
    #[must_use]
    pub fn with_retention(retention: Retention) -> Self {
        Self {
            retention,
            ..Self::default()
        }
    }

    /// Keeps what `retention` says from now on (the next append or retention pass applies it).
    pub fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }

    /// Appends one v2 record batch of `record_count` records, stamping it with its base offset,
    /// and returns that offset and what size-based retention dropped to make room.
    /// The caller has checked the batch (`minibroker_records::inspect`).
    ///
    /// # Errors
    /// [`LogError::BadBatch`] for no records or a batch of 4 GiB or more (or shorter than a
    /// header); nothing is stored then.
    pub fn append(&mut self, batch: &[u8], record_count: u32) -> Result<(i64, Released), LogError> {
        check_appendable(batch, record_count, self.next_offset)?;
        let mut released = Released::default();
        if self.chunks.is_empty() || self.free.capacity() - self.free.len() < batch.len() {
            released = self.start_chunk(batch.len());
        }
        let base_offset = self.next_offset;
        let at = self.free.len();
        self.free.extend_from_slice(batch);
        minibroker_records::set_base_offset(&mut self.free[at..], base_offset);
        self.next_offset = base_offset + i64::from(record_count);
        self.stored_bytes += batch.len();
        self.batch_count += 1;
        if let Some(chunk) = self.chunks.back_mut() {
            // A chunk is at most 4 GiB: `check_appendable` caps a batch below that, and a
            // standard chunk is 1 MiB.
            chunk.entries.push(Entry {
                base_offset,
                offsets: record_count,
                start: chunk.bytes as u32,
                len: batch.len() as u32,
            });
            chunk.bytes += batch.len();
            chunk.max_timestamp = chunk
                .max_timestamp
                .max(minibroker_records::max_timestamp(batch));
        }
        Ok((base_offset, released))
    }

    /// Hands out what was written into the chunk being filled since the last time, as one
    /// more frozen piece of it.
    fn freeze_written(&mut self) {
        if self.free.is_empty() {
            return;
        }
        let written = self.free.split_to(self.free.len()).freeze();
        if let Some(chunk) = self.chunks.back_mut() {
            let start = chunk.frozen() as u32;
            chunk.pieces.push((start, written));
        }
    }

    /// Seals the chunk being filled and starts one with room for `needed` bytes: a spare one if
    /// it fits, after dropping the chunks size-based retention no longer keeps.
    fn start_chunk(&mut self, needed: usize) -> Released {
        self.freeze_written();
        if let Some(chunk) = self.chunks.back_mut() {
            chunk.rest = Some(std::mem::take(&mut self.free));
        }
        let retention = self.retention;
        let released = self.drop_chunks_while(|log, oldest| {
            retention.too_big(log.stored_bytes as u64, oldest.bytes as u64)
        });
        self.free = match self.spare.pop() {
            Some(spare) if needed <= spare.capacity() => spare,
            _ => BytesMut::with_capacity(needed.max(CHUNK_BYTES)),
        };
        let max_timestamp_before = self.chunks.back().map_or(i64::MIN, |last| {
            last.max_timestamp_before.max(last.max_timestamp)
        });
        self.chunks.push_back(Chunk {
            first_offset: self.next_offset,
            max_timestamp: i64::MIN,
            max_timestamp_before,
            ..Chunk::default()
        });
        released
    }

    /// Drops the oldest full chunks while `drop` says so (never the one being filled), keeping
    /// the ones that can be reclaimed whole as spares.
    fn drop_chunks_while(&mut self, drop: impl Fn(&Self, &Chunk) -> bool) -> Released {
        let mut released = Released::default();
        while self.chunks.len() > 1 && self.chunks.front().is_some_and(|oldest| drop(self, oldest))
        {
            let Some(mut oldest) = self.chunks.pop_front() else {
                break;
            };
            released += Released {
                batches: oldest.entries.len() as u64,
                bytes: oldest.bytes as u64,
            };
            self.stored_bytes -= oldest.bytes;
            self.batch_count -= oldest.entries.len();
            // Let go of the pieces first: the chunk is reclaimed only if nothing else holds them.
            oldest.pieces = Vec::new();
            if let Some(mut rest) = oldest.rest.take()
                && self.spare.len() <= SPARE_CHUNKS
                && rest.try_reclaim(CHUNK_BYTES)
                // Only standard chunks: an outsized one is freed, not kept.
                && rest.capacity() == CHUNK_BYTES
            {
                self.spare.push(rest);
            }
        }
        released
    }

    /// Drops the oldest chunks whose newest record is older than the retention's age (as of
    /// `now_ms`), and, by size, those it no longer keeps; returns what was dropped.
    pub fn apply_retention(&mut self, now_ms: i64) -> Released {
        let retention = self.retention;
        self.drop_chunks_while(|log, oldest| {
            let oldest_piece = (oldest.bytes as u64, oldest.max_timestamp);
            retention.drops(log.stored_bytes as u64, oldest_piece, now_ms)
        })
    }

    /// The offset the next record will get (Kafka's log end offset / high watermark).
    #[must_use]
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// The first offset served: the end offset when retention has dropped everything, and
    /// never below where [`Self::delete_records`] moved it.
    #[must_use]
    pub fn start_offset(&self) -> i64 {
        self.chunks
            .front()
            .map_or(self.next_offset, |chunk| chunk.first_offset)
            .max(self.deleted_before)
    }

    /// Moves the start offset up to `before` (Kafka's DeleteRecords; an offset at or below the
    /// start changes nothing, one past the end is taken as the end) and drops the full chunks
    /// wholly below it; returns what they held.
    pub fn delete_records(&mut self, before: i64) -> Released {
        let before = before.min(self.next_offset);
        if before <= self.start_offset() {
            return Released::default();
        }
        self.deleted_before = before;
        self.drop_chunks_while(|log, oldest| {
            oldest
                .entries
                .last()
                .is_some_and(|last| last.end_offset() <= log.deleted_before)
        })
    }

    /// Moves the start offset up to `start`, as [`Self::delete_records`] does, except that a
    /// `start` past the end empties the log and starts it there: a copy of a log kept
    /// elsewhere, whose oldest records were deleted there before this copy held them.
    pub fn restart_at(&mut self, start: i64) -> Released {
        if start <= self.next_offset {
            return self.delete_records(start);
        }
        let released = Released {
            batches: self.batch_count as u64,
            bytes: self.stored_bytes as u64,
        };
        *self = Self {
            retention: self.retention,
            next_offset: start,
            deleted_before: start,
            spare: std::mem::take(&mut self.spare),
            ..Self::default()
        };
        released
    }

    /// Drops the oldest full chunks while the log would still hold `bytes` or more without
    /// them (never the chunk being filled): a cache of a log kept elsewhere, bounded. Unlike
    /// retention, the start does not move for readers who know where the rest is kept; here it
    /// does, and they read below it there.
    pub fn trim_to(&mut self, bytes: usize) -> Released {
        self.drop_chunks_while(|log, oldest| log.stored_bytes - oldest.bytes >= bytes)
    }

    /// Bytes of batches stored.
    #[must_use]
    pub fn stored_bytes(&self) -> usize {
        self.stored_bytes
    }

    /// Number of stored batches.
    #[must_use]
    pub fn batch_count(&self) -> usize {
        self.batch_count
    }

    /// The bytes of a stored batch, frozen or not.
    fn bytes_of<'a>(&'a self, chunk: &'a Chunk, entry: &Entry) -> &'a [u8] {
        let start = entry.start as usize;
        let len = entry.len as usize;
        let frozen = chunk.frozen();
        if start >= frozen {
            // Only the chunk being filled has bytes that were never handed out.
            let at = start - frozen;
            &self.free[at..at + len]
        } else {
            let (piece, from) = chunk.piece_of(entry);
            &piece[from..from + len]
        }
    }

    /// The offset and timestamp of the first record whose timestamp is at least `timestamp`,
    /// or `None` if no record is that recent (Kafka's ListOffsets by time). Batches are found by
    /// the largest timestamp in their headers; only the one that holds the answer is decoded, and
    /// only if it is uncompressed (a compressed one answers with its first offset). The chunks
    /// before the answer are skipped by binary search and by their largest timestamp, so a
    /// lookup walks the batches of one chunk, not the log.
    #[must_use]
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Option<(i64, i64)> {
        let first = self
            .chunks
            .partition_point(|chunk| chunk.max_timestamp_before < timestamp)
            .saturating_sub(1);
        let batch = self
            .chunks
            .range(first..)
            .filter(|chunk| !chunk.entries.is_empty() && chunk.max_timestamp >= timestamp)
            .flat_map(|chunk| chunk.entries.iter().map(move |entry| (chunk, entry)))
            .map(|(chunk, entry)| self.bytes_of(chunk, entry))
            .find(|batch| minibroker_records::max_timestamp(batch) >= timestamp)?;
        first_record_at_or_after(batch, timestamp)
    }

    /// The offset and timestamp of the (first) record with the largest timestamp.
    #[must_use]
    pub fn offset_of_max_timestamp(&self) -> Option<(i64, i64)> {
        // The largest timestamp from the chunks' own, then the first batch holding it.
        let newest = self
            .chunks
            .iter()
            .filter(|chunk| !chunk.entries.is_empty())
            .map(|chunk| chunk.max_timestamp)
            .max()?;
        self.offset_for_timestamp(newest)
    }

    /// The whole batches holding offsets from `from` onwards, within `limits`: the first one may
    /// begin before `from` (a reader skips the records it did not ask for, as Kafka consumers
    /// do). Reading at the end offset returns nothing.
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`] when `from` is before the start or past the end.
    pub fn read(&mut self, from: i64, limits: ReadLimits) -> Result<Vec<Bytes>, LogError> {
        if from < self.start_offset() || from > self.next_offset {
            return Err(LogError::OffsetOutOfRange {
                requested: from,
                start: self.start_offset(),
                end: self.next_offset,
            });
        }
        self.freeze_written();
        // The first chunk whose last batch ends after `from`, then the batch within it.
        let first_chunk = self
            .chunks
            .partition_point(|c| c.entries.last().is_some_and(|b| b.end_offset() <= from));
        let mut batches = Vec::new();
        let mut cost = 0usize;
        for chunk in self.chunks.range(first_chunk..) {
            let first = chunk.entries.partition_point(|b| b.end_offset() <= from);
            for entry in &chunk.entries[first..] {
                let next = cost.saturating_add(entry.len as usize + limits.batch_overhead);
                if entry.base_offset >= limits.before_offset
                    || (!batches.is_empty() && next > limits.max_bytes)
                {
                    return Ok(batches);
                }
                cost = next;
                batches.push(chunk.slice(entry));
            }
        }
        Ok(batches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minibroker_records::{NewRecord, Writer, base_offset, encode, inspect_stored};

    fn batch(producer_id: i64, base_sequence: i32, values: &[&str]) -> Bytes {
        let writer = Writer {
            producer_id,
            epoch: 0,
            base_sequence,
        };
        let records: Vec<NewRecord> = values
            .iter()
            .map(|v| NewRecord::value(v.to_string()))
            .collect();
        encode(writer, &records, 0).unwrap()
    }

    fn append(log: &mut MemoryLog, producer_id: i64, values: &[&str]) -> i64 {
        let batch = batch(producer_id, 0, values);
        log.append(&batch, values.len() as u32).unwrap().0
    }

    fn sample() -> MemoryLog {
        let mut log = MemoryLog::new();
        append(&mut log, 1, &["a0", "a1", "a2"]);
        append(&mut log, 2, &["b0"]);
        append(&mut log, 1, &["a3", "a4"]);
        log
    }

    #[test]
    fn restart_at_past_the_end_empties_the_log_and_goes_on_from_there() {
        let mut log = sample();
        let released = log.restart_at(20);
        assert_eq!(released.batches, 3);
        assert_eq!(released.bytes, log_bytes_of_sample());
        assert_eq!((log.start_offset(), log.next_offset()), (20, 20));
        assert_eq!(log.batch_count(), 0);
        assert_eq!(append(&mut log, 1, &["c0"]), 20);
        assert_eq!((log.start_offset(), log.next_offset()), (20, 21));
    }

    #[test]
    fn restart_at_within_the_log_is_delete_records() {
        let mut log = sample();
        log.restart_at(3);
        assert_eq!((log.start_offset(), log.next_offset()), (3, 6));
        log.restart_at(1);
        assert_eq!(log.start_offset(), 3);
    }

    #[test]
    fn trim_to_keeps_the_newest_chunks_that_hold_the_bound() {
        let mut log = MemoryLog::new();
        let big = "x".repeat(400_000);
        for _ in 0..8 {
            append(&mut log, 1, &[big.as_str()]);
        }
        let before = log.stored_bytes();
        let released = log.trim_to(1);
        assert!(released.batches > 0);
        assert_eq!(log.stored_bytes(), before - released.bytes as usize);
        // Only the chunk being filled is left, and reads go on from its first offset.
        assert!(log.start_offset() > 0);
        assert_eq!(log.next_offset(), 8);
        assert!(log.trim_to(usize::MAX).batches == 0);
    }

    fn log_bytes_of_sample() -> u64 {
        sample().stored_bytes() as u64
    }

    fn bases(read: &[Bytes]) -> Vec<i64> {
        read.iter().map(|b| base_offset(b)).collect()
    }

    #[test]
    fn append_assigns_consecutive_offsets_per_record_and_stamps_each_batch() {
        let mut log = sample();
        let all = log.read(0, ReadLimits::default()).unwrap();
        let stored = bases(&all);
        assert_eq!(stored, vec![0, 3, 4]);
        assert_eq!(log.next_offset(), 6);
        for batch in &all {
            // Stored verbatim but for the stamp, so it still passes the full check.
            inspect_stored(batch, base_offset(batch)).unwrap();
        }
    }

    #[test]
    fn read_returns_whole_batches_from_the_one_holding_the_offset() {
        let mut log = sample();
        assert_eq!(
            bases(&log.read(0, ReadLimits::default()).unwrap()),
            vec![0, 3, 4]
        );
        assert_eq!(
            bases(&log.read(1, ReadLimits::default()).unwrap()),
            vec![0, 3, 4]
        );
        assert_eq!(
            bases(&log.read(3, ReadLimits::default()).unwrap()),
            vec![3, 4]
        );
        assert_eq!(bases(&log.read(5, ReadLimits::default()).unwrap()), vec![4]);
    }

    #[test]
    fn read_respects_the_byte_limit_but_always_returns_one_batch() {
        let mut log = sample();
        let all = log.read(0, ReadLimits::default()).unwrap();
        let one = all[0].len();
        let limits = |max_bytes| ReadLimits::bytes(max_bytes, 0);
        assert_eq!(log.read(0, limits(1)).unwrap().len(), 1);
        assert_eq!(log.read(0, limits(one)).unwrap().len(), 1);
        assert_eq!(log.read(0, limits(usize::MAX)).unwrap().len(), 3);
        // The overhead counts too.
        let two = one + all[1].len();
        let with_overhead = |max_bytes| ReadLimits::bytes(max_bytes, 10);
        assert_eq!(log.read(0, with_overhead(two + 19)).unwrap().len(), 1);
        assert_eq!(log.read(0, with_overhead(two + 20)).unwrap().len(), 2);
    }

    #[test]
    fn read_stops_before_the_offset_bound() {
        let mut log = sample();
        let all = log.read(0, ReadLimits::default()).unwrap();
        let before = |offset| ReadLimits {
            before_offset: offset,
            ..ReadLimits::default()
        };
        let second = base_offset(&all[1]);
        assert_eq!(log.read(0, before(second)).unwrap().len(), 1);
        assert_eq!(log.read(0, before(second + 1)).unwrap().len(), 2);
        // Nothing begins below the bound: nothing is read, not even one batch.
        assert!(log.read(second, before(second)).unwrap().is_empty());
    }

    #[test]
    fn read_at_end_is_empty_and_past_end_is_an_error() {
        let mut log = sample();
        assert!(log.read(6, ReadLimits::default()).unwrap().is_empty());
        assert!(matches!(
            log.read(7, ReadLimits::default()),
            Err(LogError::OffsetOutOfRange {
                requested: 7,
                start: 0,
                end: 6
            })
        ));
        assert!(log.read(-1, ReadLimits::default()).is_err());
    }

    #[test]
    fn offsets_are_found_by_timestamp() {
        let mut log = MemoryLog::new();
        for (sequence, times) in [(0, [100, 200]), (2, [300, 300]), (4, [400, 500])] {
            let writer = Writer {
                producer_id: 1,
                epoch: 0,
                base_sequence: sequence,
            };
            let records: Vec<NewRecord> = times
                .iter()
                .map(|t| NewRecord {
                    timestamp: Some(*t),
                    ..NewRecord::value("x")
                })
                .collect();
            log.append(&encode(writer, &records, 0).unwrap(), 2)
                .unwrap();
        }
        assert_eq!(log.offset_for_timestamp(0), Some((0, 100)));
        assert_eq!(log.offset_for_timestamp(150), Some((1, 200)));
        assert_eq!(log.offset_for_timestamp(300), Some((2, 300)));
        assert_eq!(log.offset_for_timestamp(450), Some((5, 500)));
        assert_eq!(log.offset_for_timestamp(501), None);
        assert_eq!(log.offset_of_max_timestamp(), Some((5, 500)));
    }

    #[test]
    fn bad_batches_are_rejected_and_nothing_changes() {
        let mut log = sample();
        let good = batch(3, 0, &["x"]);
        assert!(matches!(
            log.append(&good, 0),
            Err(LogError::BadBatch { .. })
        ));
        assert!(log.append(&good[..10], 1).is_err());
        assert_eq!(log.next_offset(), 6);
        assert_eq!(log.batch_count(), 3);
    }

    #[test]
    fn reads_cross_chunk_boundaries() {
        let mut log = MemoryLog::new();
        let big = "x".repeat(300 * 1024);
        let batches = 10_010;
        for i in 0..batches {
            // Every hundredth batch is large, so chunks fill up and new ones start.
            let first: &str = if i % 100 == 0 { &big } else { "ab" };
            append(&mut log, 1, &[first, "c"]);
        }
        assert!(log.chunks.len() > 10);
        assert_eq!(log.batch_count(), batches);
        assert_eq!(log.next_offset(), 2 * batches as i64);
        let all = ReadLimits::bytes(usize::MAX, 0);
        let read = log.read(0, all).unwrap();
        assert_eq!(read.len(), batches);
        for (i, batch) in read.iter().enumerate() {
            inspect_stored(batch, 2 * i as i64).unwrap();
        }
        // A read starting inside a later chunk, mid-batch.
        let offset = 2 * 4_105 + 1;
        let tail = log.read(offset, all).unwrap();
        assert_eq!(base_offset(&tail[0]), offset - 1);
        assert_eq!(tail.len(), batches - 4_105);
    }

    #[test]
    fn reads_between_appends_see_every_batch_frozen_or_not() {
        let mut log = MemoryLog::new();
        for i in 0..50i64 {
            let writer = Writer {
                producer_id: 1,
                epoch: 0,
                base_sequence: i as i32,
            };
            let record = NewRecord {
                timestamp: Some(1_000 + i),
                ..NewRecord::value(format!("v{i}"))
            };
            log.append(&encode(writer, &[record], 0).unwrap(), 1)
                .unwrap();
            // The newest batch is found by time before any read has frozen it.
            assert_eq!(log.offset_for_timestamp(1_000 + i), Some((i, 1_000 + i)));
            assert_eq!(log.offset_of_max_timestamp(), Some((i, 1_000 + i)));
            // Every third append is followed by a read, so the chunk is frozen in many pieces.
            if i % 3 == 0 {
                let all = log.read(0, ReadLimits::bytes(usize::MAX, 0));
                let all = all.unwrap();
                assert_eq!(all.len() as i64, i + 1);
                for (offset, batch) in all.iter().enumerate() {
                    inspect_stored(batch, offset as i64).unwrap();
                }
            }
        }
        assert!(log.chunks[0].pieces.len() > 10);
        assert_eq!(log.offset_for_timestamp(1_020), Some((20, 1_020)));
        assert_eq!(log.read(49, ReadLimits::default()).unwrap().len(), 1);
    }

    /// A batch of about `size` bytes for `producer_id`, at `sequence`.
    fn sized_batch(sequence: i32, size: usize, timestamp: i64) -> Bytes {
        let writer = Writer {
            producer_id: 1,
            epoch: 0,
            base_sequence: sequence,
        };
        let record = NewRecord {
            timestamp: Some(timestamp),
            ..NewRecord::value(vec![b'v'; size])
        };
        encode(writer, &[record], 0).unwrap()
    }

    #[test]
    fn size_retention_drops_the_oldest_chunks_and_reports_them() {
        let max = 3 * CHUNK_BYTES as u64;
        let mut log = MemoryLog::with_retention(Retention {
            bytes: Some(max),
            ms: None,
        });
        let mut released = Released::default();
        let mut appended = 0u64;
        for sequence in 0..200 {
            let batch = sized_batch(sequence, 100_000, 0);
            appended += batch.len() as u64;
            let (offset, dropped) = log.append(&batch, 1).unwrap();
            assert_eq!(offset, i64::from(sequence));
            released += dropped;
        }
        // What was dropped and what is kept add up to what was appended.
        assert_eq!(released.bytes + log.stored_bytes() as u64, appended);
        assert_eq!(released.batches + log.batch_count() as u64, 200);
        // At least `max` is kept, and less than two chunks more (the one being filled).
        assert!(log.stored_bytes() as u64 >= max);
        assert!((log.stored_bytes() as u64) < max + 2 * CHUNK_BYTES as u64);
        let start = log.start_offset();
        assert_eq!(start, released.batches as i64);
        assert!(matches!(
            log.read(start - 1, ReadLimits::default()),
            Err(LogError::OffsetOutOfRange { .. })
        ));
        let first = log.read(start, ReadLimits::default()).unwrap();
        inspect_stored(&first[0], start).unwrap();
    }

    #[test]
    fn a_dropped_chunk_is_reused_unless_a_reader_still_holds_it() {
        let mut log = MemoryLog::with_retention(Retention {
            bytes: Some(CHUNK_BYTES as u64),
            ms: None,
        });
        let chunk_start = |log: &MemoryLog, index: usize| {
            let chunk = &log.chunks[index];
            log.bytes_of(chunk, &chunk.entries[0]).as_ptr() as usize
        };
        let mut sequence = 0;
        // Appends until a new chunk is started.
        let mut roll = |log: &mut MemoryLog| {
            loop {
                log.append(&sized_batch(sequence, 200_000, 0), 1).unwrap();
                sequence += 1;
                if log.chunks.back().is_some_and(|c| c.entries.len() == 1) {
                    return;
                }
            }
        };
        // Three chunks, and the newest rolls: all are kept (the other two are less than the
        // limit), then the next roll drops the first one and fills it again.
        roll(&mut log);
        roll(&mut log);
        roll(&mut log);
        assert_eq!(log.chunks.len(), 3);
        let first = chunk_start(&log, 0);
        let before = log.start_offset();
        roll(&mut log);
        assert_eq!(log.chunks.len(), 3);
        assert!(log.start_offset() > before);
        assert_eq!(chunk_start(&log, 2), first);
        // A reader holding a batch of the oldest chunk keeps it from being reused.
        let held = log.read(log.start_offset(), ReadLimits::default()).unwrap();
        let oldest = chunk_start(&log, 0);
        let copy = held[0].to_vec();
        roll(&mut log);
        assert_ne!(chunk_start(&log, 2), oldest);
        assert_eq!(held[0].to_vec(), copy);
    }

    #[test]
    fn time_retention_drops_chunks_whose_newest_record_is_too_old() {
        let mut log = MemoryLog::with_retention(Retention {
            bytes: None,
            ms: Some(1_000),
        });
        // Three chunks of records at 1,000, 2,000 and 3,000 ms, and one being filled at 4,000.
        for (sequence, timestamp) in (0..).zip([1_000, 2_000, 3_000, 4_000]) {
            log.append(&sized_batch(sequence, 600_000, timestamp), 1)
                .unwrap();
        }
        assert_eq!(log.chunks.len(), 4);
        // At 3,500 ms the first two are older than a second.
        let released = log.apply_retention(3_500);
        assert_eq!(released.batches, 2);
        assert_eq!(log.start_offset(), 2);
        // Never the chunk being filled, however old.
        let released = log.apply_retention(100_000);
        assert_eq!(released.batches, 1);
        assert_eq!(log.start_offset(), 3);
        assert_eq!(log.batch_count(), 1);
    }

    #[test]
    fn delete_records_moves_the_start_and_drops_the_full_chunks_below_it() {
        let mut log = MemoryLog::new();
        // Three full chunks of one batch each (records 0, 1, 2) and one being filled (3).
        for (sequence, timestamp) in (0..).zip([1_000, 2_000, 3_000, 4_000]) {
            log.append(&sized_batch(sequence, 600_000, timestamp), 1)
                .unwrap();
        }
        let mut sample = sample();
        // Inside a batch of three: the batch is still served whole, the offsets below are not.
        assert_eq!(sample.delete_records(1).bytes, 0);
        assert_eq!(sample.start_offset(), 1);
        assert!(matches!(
            sample.read(0, ReadLimits::default()),
            Err(LogError::OffsetOutOfRange { start: 1, .. })
        ));
        assert_eq!(
            bases(&sample.read(1, ReadLimits::default()).unwrap()),
            [0, 3, 4]
        );

        assert_eq!(log.chunks.len(), 4);
        let released = log.delete_records(2);
        assert_eq!(released.batches, 2, "the chunks of records 0 and 1");
        assert_eq!(log.start_offset(), 2);
        assert_eq!(
            log.delete_records(1),
            Released::default(),
            "below the start"
        );
        // Past the end: the end, and never the chunk being filled.
        let released = log.delete_records(99);
        assert_eq!(released.batches, 1);
        assert_eq!(log.start_offset(), 4);
        assert!(log.read(4, ReadLimits::default()).unwrap().is_empty());
        assert_eq!(log.append(&sized_batch(4, 100, 6_000), 1).unwrap().0, 4);
    }
}
