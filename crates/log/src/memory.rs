//! [`MemoryLog`]: batches in offset order, appended at the end, read from any offset.
//!
//! Batch bytes are copied into large chunks (1 MiB, or one batch if it is larger) and each batch
//! keeps a cheap `Bytes` slice of its chunk, so an append costs one copy and, most of the time,
//! no allocation at all. The index of batches is kept in bounded segments, so a growing log never
//! reallocates (and copies) everything it holds while a producer waits.

use bytes::{Bytes, BytesMut};

use crate::batch::{check_appendable, first_record_at_or_after};
use crate::{LogError, StoredBatch};

/// Size of the chunks batch bytes are copied into.
const CHUNK_BYTES: usize = 1 << 20;

/// How much one read may return. Whole batches are returned, and at least one when any is
/// available, so a batch larger than `max_bytes` never blocks a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Stop before the returned batches' cost exceeds this many bytes.
    pub max_bytes: usize,
    /// What each returned batch costs besides its bytes (the caller's encoding of it), so the
    /// caller can bound the size of its answer.
    pub batch_overhead: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            max_bytes: 1 << 20,
            batch_overhead: 0,
        }
    }
}

/// An append-only, in-memory log of one partition.
#[derive(Debug, Default, Clone)]
pub struct MemoryLog {
    /// Batches in offset order, in segments of at most [`SEGMENT_BATCHES`].
    segments: Vec<Vec<StoredBatch>>,
    /// The chunk being filled; appended batches are split off its front.
    chunk: BytesMut,
    next_offset: i64,
    stored_bytes: usize,
    batch_count: usize,
}

/// Batches per index segment.
const SEGMENT_BATCHES: usize = 4096;

impl MemoryLog {
    /// An empty log starting at offset 0.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one v2 record batch of `record_count` records, stamping it with its base offset,
    /// and returns that offset. The caller has checked the batch (`minibroker_records::inspect`).
    ///
    /// # Errors
    /// [`LogError::BadBatch`] for no records or a batch of 4 GiB or more (or shorter than a
    /// header); nothing is stored then.
    pub fn append(&mut self, batch: &[u8], record_count: u32) -> Result<i64, LogError> {
        check_appendable(batch, record_count)?;
        if self.chunk.capacity() - self.chunk.len() < batch.len() {
            // Start a new chunk; the old one lives on in the batches that slice it.
            self.chunk = BytesMut::with_capacity(batch.len().max(CHUNK_BYTES));
        }
        let base_offset = self.next_offset;
        self.chunk.extend_from_slice(batch);
        minibroker_records::set_base_offset(&mut self.chunk, base_offset);
        let data = self.chunk.split_to(self.chunk.len()).freeze();
        let stored = StoredBatch::new(base_offset, record_count, data);
        self.next_offset = stored.end_offset();
        self.stored_bytes += batch.len();
        self.batch_count += 1;
        if self
            .segments
            .last()
            .is_none_or(|segment| segment.len() >= SEGMENT_BATCHES)
        {
            self.segments.push(Vec::new());
        }
        if let Some(segment) = self.segments.last_mut() {
            segment.push(stored);
        }
        Ok(base_offset)
    }

    /// The offset the next record will get (Kafka's log end offset / high watermark).
    #[must_use]
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// The first offset held (always 0 until retention exists).
    #[must_use]
    pub fn start_offset(&self) -> i64 {
        self.batches()
            .next()
            .map_or(self.next_offset, StoredBatch::base_offset)
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

    /// Every stored batch, in offset order.
    pub fn batches(&self) -> impl Iterator<Item = &StoredBatch> {
        self.segments.iter().flatten()
    }

    /// The offset and timestamp of the first record whose timestamp is at least `timestamp`,
    /// or `None` if no record is that recent (Kafka's ListOffsets by time). Batches are found by
    /// the largest timestamp in their headers; only the one that holds the answer is decoded, and
    /// only if it is uncompressed (a compressed one answers with its first offset).
    #[must_use]
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Option<(i64, i64)> {
        let batch = self
            .batches()
            .find(|batch| minibroker_records::max_timestamp(batch.bytes()) >= timestamp)?;
        first_record_at_or_after(batch.bytes(), timestamp)
    }

    /// The offset and timestamp of the (first) record with the largest timestamp.
    #[must_use]
    pub fn offset_of_max_timestamp(&self) -> Option<(i64, i64)> {
        // One pass: the first batch holding the largest timestamp, then its record.
        let mut newest: Option<(i64, &StoredBatch)> = None;
        for batch in self.batches() {
            let timestamp = minibroker_records::max_timestamp(batch.bytes());
            if newest.is_none_or(|(best, _)| timestamp > best) {
                newest = Some((timestamp, batch));
            }
        }
        let (timestamp, batch) = newest?;
        first_record_at_or_after(batch.bytes(), timestamp)
    }

    /// The whole batches holding offsets from `from` onwards, within `limits`: the first one may
    /// begin before `from` (a reader skips the records it did not ask for, as Kafka consumers
    /// do). Reading at the end offset returns nothing.
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`] when `from` is before the start or past the end.
    pub fn read(&self, from: i64, limits: ReadLimits) -> Result<Vec<Bytes>, LogError> {
        if from < self.start_offset() || from > self.next_offset {
            return Err(LogError::OffsetOutOfRange {
                requested: from,
                start: self.start_offset(),
                end: self.next_offset,
            });
        }
        // The first segment whose last batch ends after `from`, then the batch within it.
        let first_segment = self
            .segments
            .partition_point(|s| s.last().is_some_and(|b| b.end_offset() <= from));
        let mut batches = Vec::new();
        let mut cost = 0usize;
        for segment in &self.segments[first_segment..] {
            let first = segment.partition_point(|b| b.end_offset() <= from);
            for batch in &segment[first..] {
                let next = cost.saturating_add(batch.bytes().len() + limits.batch_overhead);
                if !batches.is_empty() && next > limits.max_bytes {
                    return Ok(batches);
                }
                cost = next;
                batches.push(batch.bytes().clone());
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
        log.append(&batch, values.len() as u32).unwrap()
    }

    fn sample() -> MemoryLog {
        let mut log = MemoryLog::new();
        append(&mut log, 1, &["a0", "a1", "a2"]);
        append(&mut log, 2, &["b0"]);
        append(&mut log, 1, &["a3", "a4"]);
        log
    }

    fn bases(read: &[Bytes]) -> Vec<i64> {
        read.iter().map(|b| base_offset(b)).collect()
    }

    #[test]
    fn append_assigns_consecutive_offsets_per_record_and_stamps_each_batch() {
        let log = sample();
        let stored: Vec<i64> = log.batches().map(StoredBatch::base_offset).collect();
        assert_eq!(stored, vec![0, 3, 4]);
        assert_eq!(log.next_offset(), 6);
        for batch in log.batches() {
            // Stored verbatim but for the stamp, so it still passes the full check.
            inspect_stored(batch.bytes(), batch.base_offset()).unwrap();
        }
    }

    #[test]
    fn read_returns_whole_batches_from_the_one_holding_the_offset() {
        let log = sample();
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
        let log = sample();
        let one = log.batches().next().unwrap().bytes().len();
        let limits = |max_bytes| ReadLimits {
            max_bytes,
            batch_overhead: 0,
        };
        assert_eq!(log.read(0, limits(1)).unwrap().len(), 1);
        assert_eq!(log.read(0, limits(one)).unwrap().len(), 1);
        assert_eq!(log.read(0, limits(usize::MAX)).unwrap().len(), 3);
        // The overhead counts too.
        let two = one + log.batches().nth(1).unwrap().bytes().len();
        let with_overhead = |max_bytes| ReadLimits {
            max_bytes,
            batch_overhead: 10,
        };
        assert_eq!(log.read(0, with_overhead(two + 19)).unwrap().len(), 1);
        assert_eq!(log.read(0, with_overhead(two + 20)).unwrap().len(), 2);
    }

    #[test]
    fn read_at_end_is_empty_and_past_end_is_an_error() {
        let log = sample();
        assert!(log.read(6, ReadLimits::default()).unwrap().is_empty());
        assert_eq!(
            log.read(7, ReadLimits::default()),
            Err(LogError::OffsetOutOfRange {
                requested: 7,
                start: 0,
                end: 6
            })
        );
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
    fn reads_cross_segment_and_chunk_boundaries() {
        let mut log = MemoryLog::new();
        let big = "x".repeat(300 * 1024);
        let batches = SEGMENT_BATCHES * 2 + 10;
        for i in 0..batches {
            // Every hundredth batch is large, so chunks fill up and new ones start.
            let first: &str = if i % 100 == 0 { &big } else { "ab" };
            append(&mut log, 1, &[first, "c"]);
        }
        assert_eq!(log.batch_count(), batches);
        assert_eq!(log.next_offset(), 2 * batches as i64);
        let all = ReadLimits {
            max_bytes: usize::MAX,
            batch_overhead: 0,
        };
        let read = log.read(0, all).unwrap();
        assert_eq!(read.len(), batches);
        for (i, batch) in read.iter().enumerate() {
            inspect_stored(batch, 2 * i as i64).unwrap();
        }
        // A read starting inside a later segment, mid-batch.
        let offset = 2 * (SEGMENT_BATCHES as i64 + 5) + 1;
        let tail = log.read(offset, all).unwrap();
        assert_eq!(base_offset(&tail[0]), offset - 1);
        assert_eq!(tail.len(), batches - SEGMENT_BATCHES - 5);
    }
}
