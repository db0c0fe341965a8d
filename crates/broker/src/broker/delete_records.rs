//! DeleteRecords through the broker: a partition's start offset moved up, so what lies below it
//! is never served again and its storage is given back.
//!
//! Producer state outlives the records: a durable partition's state is snapshotted (covering
//! everything appended so far) before the start moves, so a restart replays from the snapshot
//! and never needs the deleted batches; a producer's retry of a deleted batch is still a
//! DUPLICATE, as it is after retention.

use minibroker_log::LogError;

use crate::{Broker, BrokerError};

/// The offset a DeleteRecords request names for "up to the high watermark".
pub const HIGH_WATERMARK: i64 = -1;

impl Broker {
    /// Deletes the records of `topic`'s partition `index` below `before` ([`HIGH_WATERMARK`]: all of
    /// them) and returns the partition's start offset after it (Kafka's low watermark). An
    /// offset at or below the start changes nothing. Blocking: a durable partition saves a
    /// snapshot and its new start, synced, before it answers.
    ///
    /// # Errors
    /// Unknown topic or partition; [`LogError::OffsetOutOfRange`] for an offset past the end
    /// or below zero (other than [`HIGH_WATERMARK`]); a storage error (read-only partition,
    /// failed snapshot or save), with nothing deleted.
    pub fn delete_records(&self, topic: &str, index: u32, before: i64) -> Result<i64, BrokerError> {
        let topic = self.topics.get(topic)?;
        let partition = topic.partition(index)?;
        let (start, end) = {
            let data = partition.log();
            (data.log.start_offset(), data.log.next_offset())
        };
        let before = if before == HIGH_WATERMARK {
            end
        } else {
            before
        };
        if !(0..=end).contains(&before) {
            return Err(LogError::OffsetOutOfRange {
                requested: before,
                start,
                end,
            }
            .into());
        }
        if before <= start {
            return Ok(start);
        }
        partition.refuse_if_read_only()?;
        if self.data.is_some() {
            let snapshot = self.take_snapshot(partition);
            // `None`: the partition failed on the way (the check above raced it).
            partition.refuse_if_read_only()?;
            if let Some(snapshot) = snapshot {
                snapshot
                    .try_write()
                    .map_err(|source| BrokerError::Storage {
                        what: "saving producer state before deleting records",
                        source,
                    })?;
            }
        }
        let mut data = partition.log();
        let released = data.log.delete_records(before)?;
        let start = self.dropped_from_front(&mut data, released);
        tracing::info!(
            topic = topic.name,
            partition = index,
            start_offset = start,
            bytes = released.bytes,
            "records deleted"
        );
        Ok(start)
    }
}
