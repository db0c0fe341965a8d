//! One stored batch and views of it handed to readers.

use bytes::{Bytes, BytesMut};

use crate::LogError;

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

/// A batch as stored: records in one buffer, each ending at `ends[i]`.
#[derive(Debug, Clone)]
pub struct StoredBatch {
    base_offset: i64,
    writer: Writer,
    data: Bytes,
    ends: Box<[u32]>,
}

impl StoredBatch {
    /// Copies `records` into one contiguous buffer.
    pub(crate) fn new<R: AsRef<[u8]>>(
        base_offset: i64,
        writer: Writer,
        records: &[R],
    ) -> Result<Self, LogError> {
        if records.is_empty() {
            return Err(LogError::EmptyBatch);
        }
        let total: usize = records.iter().map(|r| r.as_ref().len()).sum();
        if u32::try_from(total).is_err() {
            return Err(LogError::BatchTooLarge);
        }
        let mut data = BytesMut::with_capacity(total);
        let mut ends = Vec::with_capacity(records.len());
        for record in records {
            data.extend_from_slice(record.as_ref());
            // Cannot truncate: the total was checked above.
            ends.push(data.len() as u32);
        }
        Ok(Self {
            base_offset,
            writer,
            data: data.freeze(),
            ends: ends.into_boxed_slice(),
        })
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
        self.ends.len()
    }

    /// One past the offset of the batch's last record.
    #[must_use]
    pub fn end_offset(&self) -> i64 {
        self.base_offset + self.ends.len() as i64
    }

    /// Total size of the records in bytes.
    #[must_use]
    pub fn byte_len(&self) -> usize {
        self.data.len()
    }

    /// The record at `index` within the batch, sharing the batch's buffer.
    #[must_use]
    pub fn record(&self, index: usize) -> Bytes {
        let start = if index == 0 {
            0
        } else {
            self.ends[index - 1] as usize
        };
        self.data.slice(start..self.ends[index] as usize)
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
