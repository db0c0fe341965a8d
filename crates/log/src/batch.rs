//! Checks and lookups on one stored batch, shared by both logs.

use bytes::Bytes;

use crate::LogError;

/// Refuses what no log stores: no records, a batch shorter than a header, or one of 4 GiB or
/// more. The caller has checked the rest (`minibroker_records::inspect`).
pub(crate) fn check_appendable(
    batch: &[u8],
    record_count: u32,
    next_offset: i64,
) -> Result<(), LogError> {
    if next_offset.checked_add(i64::from(record_count)).is_none() {
        // Only a damaged log gets here: 2^63 offsets are never written.
        return Err(LogError::Damaged(format!(
            "the log's next offset {next_offset} leaves no room for {record_count} more"
        )));
    }
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
pub fn first_record_at_or_after(batch: &[u8], timestamp: i64) -> Option<(i64, i64)> {
    let info = minibroker_records::inspect_kept(batch).ok()?;
    if info.compressed {
        return Some((
            minibroker_records::base_offset(batch),
            minibroker_records::max_timestamp(batch),
        ));
    }
    // Decoding wants an owned buffer; this is one batch, for a rare request.
    let decoded = minibroker_records::decode(&Bytes::copy_from_slice(batch)).ok()?;
    decoded
        .records
        .iter()
        .find(|record| record.timestamp >= timestamp)
        .map(|record| (record.offset, record.timestamp))
}
