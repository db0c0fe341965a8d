//! [`PartitionLog`]: batches in offset order, appended at the end, read from any offset.
//!
//! Record bytes are copied into large chunks (1 MiB, or one batch if it is larger) and each batch
//! keeps a cheap `Bytes` slice of its chunk; record end positions go into one table for the whole
//! partition. So an append costs one copy and, most of the time, no allocation at all — the
//! per-batch buffers of an earlier design cost two `malloc`/`free` pairs per request.

use bytes::BytesMut;

use crate::{BatchSlice, LogError, StoredBatch, Writer};

/// Size of the chunks record bytes are copied into.
const CHUNK_BYTES: usize = 1 << 20;

/// How much one read may return. At least one record is returned when any is available, so a
/// record larger than `max_bytes` never blocks a reader.
///
/// Each record costs its bytes plus `record_overhead`, and each batch `batch_overhead`, so a
/// caller that encodes the answer can bound its size: without them a partition of empty records
/// would cost nothing per record and one read would return all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Stop before the returned records' cost exceeds this many bytes.
    pub max_bytes: usize,
    /// Return at most this many records.
    pub max_records: usize,
    /// What each record costs besides its bytes.
    pub record_overhead: usize,
    /// What each batch (or part of one) returned costs besides its records.
    pub batch_overhead: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            max_bytes: 1 << 20,
            max_records: 10_000,
            record_overhead: 0,
            batch_overhead: 0,
        }
    }
}

/// An append-only, in-memory log of one partition.
#[derive(Debug, Default, Clone)]
pub struct PartitionLog {
    /// Batches in offset order, in segments of bounded size: a growing log never reallocates
    /// (and copies) everything it holds while a producer waits.
    segments: Vec<Segment>,
    /// The chunk being filled; appended batches are split off its front.
    chunk: BytesMut,
    next_offset: i64,
    stored_bytes: usize,
    batch_count: usize,
}

/// A run of consecutive batches and the end positions of their records.
#[derive(Debug, Default, Clone)]
struct Segment {
    batches: Vec<StoredBatch>,
    /// End position of each record within its batch's data, batch after batch.
    ends: Vec<u32>,
}

impl Segment {
    /// Batches per segment.
    const BATCHES: usize = 4096;
    /// Record end positions per segment before a new one starts (4 MiB of them).
    const ENDS: usize = 1 << 20;

    fn is_full(&self) -> bool {
        self.batches.len() >= Self::BATCHES || self.ends.len() >= Self::ENDS
    }

    /// The segment to append to, starting a new one when the last is full. Segments grow by
    /// doubling, so a small partition stays small; the largest copy a growing segment makes is
    /// bounded by its limits.
    fn open_last(segments: &mut Vec<Segment>) -> &mut Segment {
        if segments.last().is_none_or(Segment::is_full) {
            segments.push(Segment::default());
        }
        let last = segments.len() - 1;
        &mut segments[last]
    }
}

impl PartitionLog {
    /// An empty log starting at offset 0.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one batch and returns the offset of its first record.
    ///
    /// # Errors
    /// [`LogError::EmptyBatch`] for no records, [`LogError::BatchTooLarge`] past 4 GiB; nothing
    /// is stored then.
    pub fn append<R: AsRef<[u8]>>(
        &mut self,
        writer: Writer,
        records: &[R],
    ) -> Result<i64, LogError> {
        if records.is_empty() {
            return Err(LogError::EmptyBatch);
        }
        let total: usize = records.iter().map(|r| r.as_ref().len()).sum();
        let record_count = u32::try_from(records.len()).map_err(|_| LogError::BatchTooLarge)?;
        if u32::try_from(total).is_err() {
            return Err(LogError::BatchTooLarge);
        }
        if self.chunk.capacity() - self.chunk.len() < total {
            // Start a new chunk; the old one lives on in the batches that slice it.
            self.chunk = BytesMut::with_capacity(total.max(CHUNK_BYTES));
        }
        let segment = Segment::open_last(&mut self.segments);
        let first_end = segment.ends.len();
        let start = self.chunk.len();
        for record in records {
            self.chunk.extend_from_slice(record.as_ref());
            // Cannot truncate: the batch's total was checked above.
            segment.ends.push((self.chunk.len() - start) as u32);
        }
        let data = self.chunk.split_to(self.chunk.len()).freeze();
        let base_offset = self.next_offset;
        let batch = StoredBatch::new(base_offset, writer, data, first_end, record_count);
        self.next_offset = batch.end_offset();
        self.stored_bytes += total;
        self.batch_count += 1;
        segment.batches.push(batch);
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

    /// Bytes of record data stored.
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
        self.segments.iter().flat_map(|segment| &segment.batches)
    }

    /// Records from `from` onwards, grouped by the batch that holds them, within `limits`.
    /// Reading at the end offset returns nothing.
    ///
    /// # Errors
    /// [`LogError::OffsetOutOfRange`] when `from` is before the start or past the end.
    pub fn read(&self, from: i64, limits: ReadLimits) -> Result<Vec<BatchSlice>, LogError> {
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
            .partition_point(|s| s.batches.last().is_some_and(|b| b.end_offset() <= from));
        let mut slices = Vec::new();
        let (mut bytes, mut records) = (0usize, 0usize);
        for segment in &self.segments[first_segment..] {
            let first = segment.batches.partition_point(|b| b.end_offset() <= from);
            for batch in &segment.batches[first..] {
                let skip = usize::try_from(from - batch.base_offset()).unwrap_or(0);
                let mut slice = BatchSlice {
                    first_offset: batch.base_offset() + skip as i64,
                    batch_base_offset: batch.base_offset(),
                    writer: batch.writer(),
                    records: Vec::new(),
                };
                for index in skip..batch.record_count() {
                    let record = batch.record(&segment.ends, index);
                    let batch_cost = if slice.records.is_empty() {
                        limits.batch_overhead
                    } else {
                        0
                    };
                    let cost = record.len() + limits.record_overhead + batch_cost;
                    let over = records >= limits.max_records
                        || (records > 0 && bytes.saturating_add(cost) > limits.max_bytes);
                    if over {
                        if !slice.records.is_empty() {
                            slices.push(slice);
                        }
                        return Ok(slices);
                    }
                    bytes += cost;
                    records += 1;
                    slice.records.push(record);
                }
                slices.push(slice);
            }
        }
        Ok(slices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn writer(producer_id: i64, base_sequence: i32) -> Writer {
        Writer {
            producer_id,
            epoch: 0,
            base_sequence,
        }
    }

    fn flat(slices: &[BatchSlice]) -> Vec<(i64, Bytes)> {
        slices
            .iter()
            .flat_map(|s| {
                s.records
                    .iter()
                    .enumerate()
                    .map(move |(i, r)| (s.first_offset + i as i64, r.clone()))
            })
            .collect()
    }

    fn sample() -> PartitionLog {
        let mut log = PartitionLog::new();
        log.append(writer(1, 0), &[b"a0".as_slice(), b"a1", b"a2"])
            .unwrap();
        log.append(writer(2, 0), &[b"b0".as_slice()]).unwrap();
        log.append(writer(1, 1), &[b"a3".as_slice(), b"a4"])
            .unwrap();
        log
    }

    #[test]
    fn append_assigns_consecutive_offsets_per_record() {
        let log = sample();
        let bases: Vec<i64> = log.batches().map(StoredBatch::base_offset).collect();
        assert_eq!(bases, vec![0, 3, 4]);
        assert_eq!(log.next_offset(), 6);
        assert_eq!(log.stored_bytes(), 12);
    }

    #[test]
    fn batches_remember_their_writer() {
        let log = sample();
        let writers: Vec<(i64, i32)> = log
            .batches()
            .map(|b| (b.writer().producer_id, b.writer().base_sequence))
            .collect();
        assert_eq!(writers, vec![(1, 0), (2, 0), (1, 1)]);
    }

    #[test]
    fn read_from_mid_batch_returns_the_suffix() {
        let log = sample();
        let read = log.read(1, ReadLimits::default()).unwrap();
        assert_eq!(read[0].first_offset, 1);
        assert_eq!(read[0].batch_base_offset, 0);
        let offsets: Vec<i64> = flat(&read).iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, vec![1, 2, 3, 4, 5]);
        assert_eq!(flat(&read)[0].1, Bytes::from_static(b"a1"));
    }

    #[test]
    fn read_respects_record_and_byte_limits() {
        let log = sample();
        let by_records = ReadLimits {
            max_bytes: usize::MAX,
            max_records: 2,
            ..ReadLimits::default()
        };
        assert_eq!(flat(&log.read(2, by_records).unwrap()).len(), 2);
        let by_bytes = ReadLimits {
            max_bytes: 5,
            max_records: usize::MAX,
            ..ReadLimits::default()
        };
        let read = log.read(0, by_bytes).unwrap();
        assert_eq!(flat(&read).len(), 2);
        assert_eq!(read.len(), 1);
    }

    #[test]
    fn read_always_returns_one_record_even_if_it_is_over_the_byte_limit() {
        let log = sample();
        let tiny = ReadLimits {
            max_bytes: 1,
            max_records: 10,
            ..ReadLimits::default()
        };
        assert_eq!(flat(&log.read(0, tiny).unwrap()).len(), 1);
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
    fn empty_batch_is_rejected_and_nothing_changes() {
        let mut log = sample();
        let empty: [&[u8]; 0] = [];
        assert_eq!(log.append(writer(3, 0), &empty), Err(LogError::EmptyBatch));
        assert_eq!(log.next_offset(), 6);
        assert_eq!(log.batch_count(), 3);
    }

    #[test]
    fn empty_records_and_batches_count_their_overheads_against_the_byte_limit() {
        let mut log = PartitionLog::new();
        for sequence in 0..1000 {
            log.append(writer(1, sequence), &[b"".as_slice(), b""])
                .unwrap();
        }
        let limits = ReadLimits {
            max_bytes: 1000,
            max_records: usize::MAX,
            record_overhead: 5,
            batch_overhead: 40,
        };
        // Each batch costs 40 + 2 * 5 = 50: twenty of them fit in 1000 bytes.
        let read = log.read(0, limits).unwrap();
        assert_eq!(read.len(), 20);
        assert_eq!(flat(&read).len(), 40);
        // Without overheads, empty records cost nothing and everything comes back at once.
        let free = ReadLimits {
            record_overhead: 0,
            batch_overhead: 0,
            max_records: usize::MAX,
            ..limits
        };
        assert_eq!(flat(&log.read(0, free).unwrap()).len(), 2000);
    }

    #[test]
    fn empty_records_are_allowed() {
        let mut log = PartitionLog::new();
        log.append(writer(1, 0), &[b"".as_slice(), b"x"]).unwrap();
        let read = flat(&log.read(0, ReadLimits::default()).unwrap());
        assert_eq!(read, vec![(0, Bytes::new()), (1, Bytes::from_static(b"x"))]);
    }
}

#[cfg(test)]
mod segment_tests {
    use super::*;

    #[test]
    fn reads_cross_segment_and_chunk_boundaries() {
        let mut log = PartitionLog::new();
        let big = vec![7u8; 300 * 1024];
        let batches = Segment::BATCHES * 2 + 10;
        for i in 0..batches {
            let writer = Writer {
                producer_id: 1,
                epoch: 0,
                base_sequence: i as i32,
            };
            // Every hundredth batch is large, so chunks fill up and new ones start.
            let payload: &[u8] = if i % 100 == 0 { &big } else { b"ab" };
            log.append(writer, &[payload, b"c"]).unwrap();
        }
        assert_eq!(log.batch_count(), batches);
        assert_eq!(log.next_offset(), 2 * batches as i64);
        let all = ReadLimits {
            max_bytes: usize::MAX,
            max_records: usize::MAX,
            ..ReadLimits::default()
        };
        let read = log.read(0, all).unwrap();
        assert_eq!(read.len(), batches);
        for (i, slice) in read.iter().enumerate() {
            assert_eq!(slice.first_offset, 2 * i as i64);
            assert_eq!(slice.writer.base_sequence, i as i32);
            let expected = if i % 100 == 0 { big.len() } else { 2 };
            assert_eq!(slice.records[0].len(), expected);
            assert_eq!(slice.records[1].as_ref(), b"c");
        }
        // A read starting inside a later segment, mid-batch.
        let offset = 2 * (Segment::BATCHES as i64 + 5) + 1;
        let tail = log.read(offset, all).unwrap();
        assert_eq!(tail[0].first_offset, offset);
        assert_eq!(tail[0].records, vec![bytes::Bytes::from_static(b"c")]);
        assert_eq!(tail.len(), batches - Segment::BATCHES - 5);
    }
}
