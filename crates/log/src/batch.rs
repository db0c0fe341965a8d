//! One stored batch.

use bytes::Bytes;

/// A Kafka v2 record batch as the log stores it: its bytes exactly as the producer sent them,
/// stamped with its base offset (a slice of one of the log's chunks).
#[derive(Debug, Clone)]
pub struct StoredBatch {
    base_offset: i64,
    record_count: u32,
    data: Bytes,
}

impl StoredBatch {
    pub(crate) fn new(base_offset: i64, record_count: u32, data: Bytes) -> Self {
        Self {
            base_offset,
            record_count,
            data,
        }
    }

    /// Offset of the batch's first record.
    #[must_use]
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// Number of records.
    #[must_use]
    pub fn record_count(&self) -> u32 {
        self.record_count
    }

    /// One past the offset of the batch's last record.
    #[must_use]
    pub fn end_offset(&self) -> i64 {
        self.base_offset + i64::from(self.record_count)
    }

    /// The batch's bytes, sharing the log's buffer.
    #[must_use]
    pub fn bytes(&self) -> &Bytes {
        &self.data
    }
}
