//! One segment file: stored batches back to back, found through a sparse offset index.
//!
//! The index holds one entry (offset, position) per [`INDEX_INTERVAL`] bytes of batches, as
//! Kafka's does, so it costs about 8 bytes per 4 KiB stored rather than an entry per batch: a read
//! starts at the entry at or before its offset and walks the batch headers from there. A sealed
//! segment's index is written beside it (`.index`) when the segment rolls, so recovery need not
//! walk sealed segments again; the active segment's index lives in memory and is rebuilt by the
//! recovery scan.

use bytes::Bytes;
use minibroker_records::HEADER_LEN;
use std::io;
use std::sync::Arc;

use crate::ReadLimits;
use crate::storage::StorageFile;

/// Bytes of batches between two index entries.
pub const INDEX_INTERVAL: u64 = 4096;

/// The most bytes one read of a segment file asks for at once.
const MAX_READ_CHUNK: usize = 16 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    /// Offset of a batch's first record, relative to the segment's base offset.
    offset_delta: u32,
    /// Where that batch starts in the file.
    position: u32,
    /// The largest record timestamp of every batch before it in the segment (`i64::MIN` for
    /// none): Kafka's time index, folded into the offset index. Every batch before an entry
    /// whose value is below a timestamp is older than it, so a lookup by time starts at the
    /// last such entry and walks at most one index interval.
    max_timestamp_before: i64,
}

/// Bytes of one index entry in the index file.
const INDEX_ENTRY_LEN: usize = 16;

/// A segment: its file and what is known about the batches in it.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base_offset: i64,
    /// One past the last record's offset.
    pub(crate) next_offset: i64,
    pub(crate) file: Arc<dyn StorageFile>,
    /// Bytes of whole batches (the file holds exactly these once recovered).
    pub(crate) size: u64,
    pub(crate) batches: u64,
    /// The largest record timestamp, `i64::MIN` while empty.
    pub(crate) max_timestamp: i64,
    /// When the segment got its first batch (broker clock, milliseconds), for rolling by age.
    pub(crate) first_append_ms: Option<i64>,
    /// Written by compaction (`<base>.compacted`): its batches rise with gaps where batches were
    /// dropped, instead of each beginning where the one before it ended; its last batch still
    /// ends where the segment does.
    pub(crate) compacted: bool,
    index: Vec<IndexEntry>,
    unindexed: u64,
}

/// A segment as it was before some appends, to go back to when their write fails.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentMark {
    next_offset: i64,
    pub(crate) size: u64,
    pub(crate) batches: u64,
    max_timestamp: i64,
    first_append_ms: Option<i64>,
    index_len: usize,
    unindexed: u64,
}

/// What a recovery scan found wrong at the end of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    /// Bytes past the last whole, valid batch.
    pub(crate) dropped: u64,
    /// Why the first of them is not a valid batch.
    pub(crate) reason: String,
}

impl Segment {
    pub(crate) fn empty(base_offset: i64, file: Arc<dyn StorageFile>) -> Self {
        Self {
            base_offset,
            next_offset: base_offset,
            file,
            size: 0,
            batches: 0,
            max_timestamp: i64::MIN,
            first_append_ms: None,
            compacted: false,
            index: Vec::new(),
            unindexed: 0,
        }
    }

    /// The name of its file: `<base>.log`, or `<base>.compacted` once compaction wrote it.
    pub(crate) fn file_name(&self) -> String {
        let suffix = if self.compacted {
            crate::names::COMPACTED_SUFFIX
        } else {
            crate::names::LOG_SUFFIX
        };
        crate::names::file_name(self.base_offset, suffix)
    }

    /// Whether a batch at `base` may come where `expected` is next: exactly there, or (in a
    /// compacted segment) anywhere after.
    fn follows(&self, base: i64, expected: i64) -> bool {
        base == expected || (self.compacted && base > expected)
    }

    /// Records a batch just appended at the end of the segment (of the file, or of the bytes
    /// waiting to be written to it).
    pub(crate) fn note(&mut self, base_offset: i64, len: u64, end_offset: i64, timestamp: i64) {
        if self.index.is_empty() || self.unindexed >= INDEX_INTERVAL {
            // Offsets within a segment fit u32 (the log rolls before one would not, see
            // `MAX_RELATIVE_OFFSET`), and so do positions (segments stay below 4 GiB).
            self.index.push(IndexEntry {
                offset_delta: (base_offset - self.base_offset) as u32,
                position: self.size as u32,
                max_timestamp_before: self.max_timestamp,
            });
            self.unindexed = 0;
        }
        self.size += len;
        self.unindexed += len;
        self.next_offset = end_offset;
        self.batches += 1;
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }

    /// What [`Self::rewind`] goes back to.
    pub(crate) fn mark(&self) -> SegmentMark {
        SegmentMark {
            next_offset: self.next_offset,
            size: self.size,
            batches: self.batches,
            max_timestamp: self.max_timestamp,
            first_append_ms: self.first_append_ms,
            index_len: self.index.len(),
            unindexed: self.unindexed,
        }
    }

    /// Forgets every batch noted since `mark` was taken.
    pub(crate) fn rewind(&mut self, mark: SegmentMark) {
        self.next_offset = mark.next_offset;
        self.size = mark.size;
        self.batches = mark.batches;
        self.max_timestamp = mark.max_timestamp;
        self.first_append_ms = mark.first_append_ms;
        self.index.truncate(mark.index_len);
        self.unindexed = mark.unindexed;
    }

    /// Where to start walking for `offset`: the last indexed batch at or before it, as its
    /// position and base offset.
    fn locate(&self, offset: i64) -> (u64, i64) {
        let delta = offset
            .saturating_sub(self.base_offset)
            .clamp(0, i64::from(u32::MAX)) as u32;
        let after = self
            .index
            .partition_point(|entry| entry.offset_delta <= delta);
        after.checked_sub(1).map_or((0, self.base_offset), |at| {
            let entry = self.index[at];
            (
                u64::from(entry.position),
                self.base_offset
                    .saturating_add(i64::from(entry.offset_delta)),
            )
        })
    }

    /// What its index file says of it: where it ends, its size, batches, largest timestamp and
    /// index entries.
    pub(crate) fn summary(&self) -> (i64, u64, u64, i64, &[IndexEntry]) {
        (
            self.next_offset,
            self.size,
            self.batches,
            self.max_timestamp,
            &self.index,
        )
    }

    /// Where a lookup for the first batch with a record at or after `timestamp` starts: the
    /// base offset of the last indexed batch before which every record is older.
    pub(crate) fn time_lookup_start(&self, timestamp: i64) -> i64 {
        let after = self
            .index
            .partition_point(|entry| entry.max_timestamp_before < timestamp);
        after.checked_sub(1).map_or(self.base_offset, |at| {
            self.base_offset
                .saturating_add(i64::from(self.index[at].offset_delta))
        })
    }

    /// The whole batches holding `from` and after, within `limits` (at least one if any below
    /// `limits.before_offset`).
    ///
    /// Every batch walked must begin where the one before it ended, and every batch returned
    /// must pass [`minibroker_records::inspect_stored`] (its CRC-32C included): a batch damaged on
    /// disk is never served. Either failure is an [`io::ErrorKind::InvalidData`] error naming
    /// the offset and the position in the file.
    pub(crate) fn read(&self, from: i64, limits: ReadLimits) -> io::Result<Vec<Bytes>> {
        let chunk = limits
            .max_bytes
            .saturating_add(2 * INDEX_INTERVAL as usize)
            .min(MAX_READ_CHUNK);
        let mut reader = ChunkReader::new(&*self.file, self.size, chunk);
        let (mut position, mut expected) = self.locate(from);
        let mut batches = Vec::new();
        let mut cost = 0usize;
        while position < self.size {
            let header = reader.bytes(position, HEADER_LEN)?;
            let len = minibroker_records::batch_len(&header)
                .filter(|len| position + *len as u64 <= self.size)
                .ok_or_else(|| damaged(expected, position, "has a bad length"))?;
            let base = minibroker_records::base_offset(&header);
            if !self.follows(base, expected) {
                return Err(damaged(
                    expected,
                    position,
                    "does not follow the batch before it",
                ));
            }
            expected = base;
            let end = minibroker_records::end_offset(&header);
            if end <= from {
                position += len as u64;
                expected = end;
                continue;
            }
            let next = cost.saturating_add(len + limits.batch_overhead);
            if base >= limits.before_offset || (!batches.is_empty() && next > limits.max_bytes) {
                break;
            }
            let batch = reader.bytes(position, len)?;
            if let Err(error) = minibroker_records::inspect_stored(&batch, expected) {
                return Err(damaged(
                    expected,
                    position,
                    &format!("fails its check: {error}"),
                ));
            }
            batches.push(batch);
            cost = next;
            position += len as u64;
            expected = end;
        }
        Ok(batches)
    }

    /// Walks the file from its start, keeping every batch up to the first that is torn or (with
    /// `check` set) fails [`minibroker_records::inspect_stored`]. Returns the segment as far as it
    /// is sound, and what lies beyond, if anything.
    pub(crate) fn scan(
        base_offset: i64,
        file: Arc<dyn StorageFile>,
        check: bool,
        compacted: bool,
    ) -> io::Result<(Self, Option<Damage>)> {
        let file_len = file.len()?;
        let mut segment = Self::empty(base_offset, Arc::clone(&file));
        segment.compacted = compacted;
        let mut reader = ChunkReader::new(&*file, file_len, 4 << 20);
        let mut reason = None;
        while segment.size < file_len && reason.is_none() {
            reason = segment.scan_one(&mut reader, file_len, check)?;
        }
        let damage = reason.map(|reason| Damage {
            dropped: file_len - segment.size,
            reason,
        });
        Ok((segment, damage))
    }

    /// Checks the batch at the end of what the scan has kept and keeps it, or says why not.
    fn scan_one(
        &mut self,
        reader: &mut ChunkReader<'_>,
        file_len: u64,
        check: bool,
    ) -> io::Result<Option<String>> {
        let position = self.size;
        if file_len - position < HEADER_LEN as u64 {
            return Ok(Some("a torn header".into()));
        }
        let header = reader.bytes(position, HEADER_LEN)?;
        let Some(len) = minibroker_records::batch_len(&header) else {
            return Ok(Some("a bad length".into()));
        };
        if file_len - position < len as u64 {
            return Ok(Some(format!("a torn batch of {len} bytes")));
        }
        let batch = reader.bytes(position, len)?;
        let base = minibroker_records::base_offset(&batch);
        let expected = if self.follows(base, self.next_offset) {
            base
        } else {
            self.next_offset
        };
        let end = minibroker_records::end_offset(&batch);
        if check {
            if let Err(error) = minibroker_records::inspect_stored(&batch, expected) {
                return Ok(Some(error.to_string()));
            }
        } else if minibroker_records::base_offset(&batch) != expected || end <= expected {
            return Ok(Some(format!(
                "a batch that does not follow offset {expected}"
            )));
        }
        let timestamp = minibroker_records::max_timestamp(&batch);
        self.note(expected, len as u64, end, timestamp);
        Ok(None)
    }

    /// The sealed segment's index file: its summary and sparse index, in the envelope every
    /// small file shares ([`minibroker_envelope`]).
    ///
    /// ```text
    /// "\0MBX" version:u8 (2)
    /// base_offset:i64 next_offset:i64 size:u64 batches:u64 max_timestamp:i64
    /// entries × { offset_delta:u32 position:u32 max_timestamp_before:i64 }
    /// crc32c:u32
    /// ```
    pub(crate) fn encode_index(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40 + self.index.len() * INDEX_ENTRY_LEN);
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&self.next_offset.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.batches.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        for entry in &self.index {
            out.extend_from_slice(&entry.offset_delta.to_be_bytes());
            out.extend_from_slice(&entry.position.to_be_bytes());
            out.extend_from_slice(&entry.max_timestamp_before.to_be_bytes());
        }
        minibroker_envelope::seal(INDEX_MAGIC, INDEX_VERSION, &out)
    }

    /// A sealed segment from its index file, if the file is intact and describes exactly
    /// `file` (a segment whose index does not match is scanned instead, and so is one whose
    /// index is of the older format without timestamps, `MBX1`: the scan writes nothing, and
    /// the segment simply keeps its index in memory).
    pub(crate) fn from_index(
        base_offset: i64,
        file: Arc<dyn StorageFile>,
        index: &[u8],
    ) -> Option<Self> {
        const FIXED: usize = 5 * 8;
        let body = minibroker_envelope::unseal(INDEX_MAGIC, INDEX_VERSION, index).ok()?;
        if body.len() < FIXED || !(body.len() - FIXED).is_multiple_of(INDEX_ENTRY_LEN) {
            return None;
        }
        let field = |at: usize| u64::from_be_bytes(body[at..at + 8].try_into().unwrap_or([0; 8]));
        let size = field(16);
        if field(0) as i64 != base_offset || file.len().ok()? != size {
            return None;
        }
        let entries = body[FIXED..]
            .chunks_exact(INDEX_ENTRY_LEN)
            .map(|entry| {
                let (offset_delta, rest) = entry.split_at(4);
                let (position, max_timestamp_before) = rest.split_at(4);
                IndexEntry {
                    offset_delta: u32::from_be_bytes(offset_delta.try_into().unwrap_or([0; 4])),
                    position: u32::from_be_bytes(position.try_into().unwrap_or([0; 4])),
                    max_timestamp_before: i64::from_be_bytes(
                        max_timestamp_before.try_into().unwrap_or([0; 8]),
                    ),
                }
            })
            .collect();
        Some(Self {
            base_offset,
            next_offset: field(8) as i64,
            file,
            size,
            batches: field(24),
            max_timestamp: field(32) as i64,
            first_append_ms: None,
            compacted: false,
            index: entries,
            unindexed: 0,
        })
    }
}

/// Calls `each` with every batch of the first `size` bytes of `file`, in order, until it
/// returns `false` (compaction reads sealed segments with it, a few MiB at a time).
///
/// # Errors
/// As the file reports; [`io::ErrorKind::InvalidData`] for a bad batch length.
pub(crate) fn for_each_stored_batch<E: From<io::Error>>(
    file: &dyn StorageFile,
    size: u64,
    each: &mut dyn FnMut(Bytes) -> Result<bool, E>,
) -> Result<(), E> {
    let mut reader = ChunkReader::new(file, size, 4 << 20);
    let mut position = 0;
    while position < size {
        let header = reader.bytes(position, HEADER_LEN)?;
        let len = minibroker_records::batch_len(&header)
            .filter(|len| position + *len as u64 <= size)
            .ok_or_else(|| {
                damaged(
                    minibroker_records::base_offset(&header),
                    position,
                    "has a bad length",
                )
            })?;
        if !each(reader.bytes(position, len)?)? {
            break;
        }
        position += len as u64;
    }
    Ok(())
}

/// The index file's kind and version: version 2 entries carry
/// [`IndexEntry::max_timestamp_before`]. (Version 1, `MBX1` with no version byte, had none.)
const INDEX_MAGIC: &[u8; 4] = b"\0MBX";
const INDEX_VERSION: u8 = 2;

/// The magic of the older index format, which is scanned instead of read.
pub(crate) const OLDER_INDEX_MAGIC: &[u8; 4] = b"MBX1";

/// A stored batch that is not what was written: `what` happened to the batch expected at
/// `offset`, at `position` in the file.
fn damaged(offset: i64, position: u64, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the stored batch at offset {offset} (byte {position} of the file) {what}"),
    )
}

/// Reads a file a large chunk at a time and hands out slices of the chunk, so walking many small
/// batches costs a few reads, not one per batch.
struct ChunkReader<'a> {
    file: &'a dyn StorageFile,
    file_len: u64,
    chunk: usize,
    buffer: Bytes,
    start: u64,
}

impl<'a> ChunkReader<'a> {
    fn new(file: &'a dyn StorageFile, file_len: u64, chunk: usize) -> Self {
        Self {
            file,
            file_len,
            chunk,
            buffer: Bytes::new(),
            start: 0,
        }
    }

    /// `len` bytes at `position`, from the current chunk or a new one read from `position`.
    fn bytes(&mut self, position: u64, len: usize) -> io::Result<Bytes> {
        let end = position + len as u64;
        if position < self.start || end > self.start + self.buffer.len() as u64 {
            let available = self.file_len.saturating_sub(position);
            let size = (len.max(self.chunk) as u64).min(available) as usize;
            if size < len {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let mut data = vec![0; size];
            self.file.read_at(&mut data, position)?;
            self.buffer = Bytes::from(data);
            self.start = position;
        }
        let at = (position - self.start) as usize;
        Ok(self.buffer.slice(at..at + len))
    }
}
