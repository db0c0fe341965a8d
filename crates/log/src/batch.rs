//! One stored batch and views of it handed to readers.

use bytes::Bytes;

/// Who wrote a batch: the producer metadata stored beside its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Writer {
    /// The producer id.
    pub producer_id: i64,
    /// The producer's epoch when it wrote the batch.
    pub epoch: i16,
    /// The first sequence the batch occupied.
    pub base_sequence: i32,
}

/// A batch as stored: its records back to back in `data` (a slice of one of the log's chunks),
/// record `i` ending at `ends[first_end + i]` of the log's shared end-position table.
#[derive(Debug, Clone)]
pub struct StoredBatch {
    base_offset: i64,
    writer: Writer,
    data: Bytes,
    /// Index of this batch's first record in the log's end-position table.
    first_end: usize,
    record_count: u32,
}

impl StoredBatch {
    pub(crate) fn new(
        base_offset: i64,
        writer: Writer,
        data: Bytes,
        first_end: usize,
        record_count: u32,
    ) -> Self {
        Self {
            base_offset,
            writer,
            data,
            first_end,
            record_count,
        }
    }

    /// Offset of the batch's first record.
    #[must_use]
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// Who wrote it.
    #[must_use]
    pub fn writer(&self) -> Writer {
        self.writer
    }

    /// Number of records.
    #[must_use]
    pub fn record_count(&self) -> usize {
        self.record_count as usize
    }

    /// One past the offset of the batch's last record.
    #[must_use]
    pub fn end_offset(&self) -> i64 {
        self.base_offset + i64::from(self.record_count)
    }

    /// Total size of the records in bytes.
    #[must_use]
    pub fn byte_len(&self) -> usize {
        self.data.len()
    }

    /// The record at `index` within the batch, sharing the log's buffer; `ends` is the log's
    /// end-position table.
    pub(crate) fn record(&self, ends: &[u32], index: usize) -> Bytes {
        let start = if index == 0 {
            0
        } else {
            ends[self.first_end + index - 1] as usize
        };
        self.data
            .slice(start..ends[self.first_end + index] as usize)
    }
}

/// Records handed to a reader from one stored batch: possibly a suffix of it (when a read starts
/// mid-batch) or a prefix (when a read limit stops inside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSlice {
    /// Offset of the first record in `records`.
    pub first_offset: i64,
    /// Offset of the stored batch's first record.
    pub batch_base_offset: i64,
    /// Who wrote the batch.
    pub writer: Writer,
    /// The records, in offset order.
    pub records: Vec<Bytes>,
}
