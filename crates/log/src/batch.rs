//! One stored batch.

use bytes::Bytes;

use crate::LogError;

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

/// Refuses what no log stores: no records, a batch shorter than a header, or one of 4 GiB or
/// more. The caller has checked the rest (`minibroker_records::inspect`).
pub(crate) fn check_appendable(batch: &[u8], record_count: u32) -> Result<(), LogError> {
    if record_count == 0
        || batch.len() < minibroker_records::HEADER_LEN
        || u32::try_from(batch.len()).is_err()
    {
        return Err(LogError::BadBatch {
            bytes: batch.len(),
            records: record_count,
        });
    }
    Ok(())
}

/// The offset and timestamp of the first record of `batch` whose timestamp is at least
/// `timestamp` (Kafka's ListOffsets by time, once the batch that holds the answer is found by its
/// header). A compressed batch is not decompressed by the broker: it answers with its first
/// offset and its largest timestamp.
pub(crate) fn first_record_at_or_after(batch: &Bytes, timestamp: i64) -> Option<(i64, i64)> {
    let info = minibroker_records::inspect(batch).ok()?;
    if info.compressed {
        return Some((
            minibroker_records::base_offset(batch),
            minibroker_records::max_timestamp(batch),
        ));
    }
    let decoded = minibroker_records::decode(batch).ok()?;
    decoded
        .records
        .iter()
        .find(|record| record.timestamp >= timestamp)
        .map(|record| (record.offset, record.timestamp))
}
