//! Producer-state snapshots: one partition's entries as bytes, and back.
//!
//! A durable broker saves a partition's producer state when a segment rolls and at clean
//! shutdown, so recovery replays only the batches after the snapshot instead of the whole log
//! (Kafka's `ProducerStateManager` snapshot files do the same). The format is small and fixed,
//! in the envelope every small file of the data directory shares (`minibroker_envelope`: magic,
//! version, body, CRC-32C of all of it), so a damaged snapshot is recognised and skipped
//! (recovery then uses an older one, or replays the whole log), never half-loaded:
//!
//! ```text
//! "MBPS" version:u8 count:u32
//! count × { producer_id:i64 epoch:i16 last_timestamp:i64 cached:u8
//!           cached × { first_sequence:i32 last_sequence:i32 base_offset:i64 (-1: none) } }
//! crc32c:u32 (of everything before it)
//! ```
//!
//! All integers are big-endian; the cached batches are listed newest first.

use minibroker_envelope::{FieldWriter, Fields};
use thiserror::Error;

use crate::{BatchMetadata, CACHED_BATCHES, ProducerEntry};

const MAGIC: &[u8; 4] = b"MBPS";
const VERSION: u8 = 1;

/// Why a snapshot was not loaded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SnapshotError {
    /// The bytes end early, have the wrong magic or version, or fail their checksum.
    #[error("the snapshot is damaged: {0}")]
    Damaged(&'static str),
    /// An entry no sequence of accepted batches could have left.
    #[error("the snapshot holds an impossible entry for producer {0}")]
    BadEntry(i64),
}

/// Encodes one partition's producers (id and entry each).
#[must_use]
pub fn encode_snapshot(producers: &[(i64, ProducerEntry)]) -> Vec<u8> {
    let mut out = FieldWriter::with_capacity(4 + producers.len() * (19 + CACHED_BATCHES * 16));
    out.count(producers.len());
    for (producer_id, entry) in producers {
        out.int(producer_id.to_be_bytes());
        out.int(entry.epoch().to_be_bytes());
        out.int(entry.last_timestamp().to_be_bytes());
        out.u8(entry.batches().len() as u8);
        for batch in entry.batches() {
            out.int(batch.first_sequence.to_be_bytes());
            out.int(batch.last_sequence.to_be_bytes());
            out.int(batch.base_offset.unwrap_or(-1).to_be_bytes());
        }
    }
    minibroker_envelope::seal(MAGIC, VERSION, &out.into_body())
}

/// Decodes what [`encode_snapshot`] wrote.
///
/// # Errors
/// [`SnapshotError`] for bytes that are damaged in any way.
pub fn decode_snapshot(data: &[u8]) -> Result<Vec<(i64, ProducerEntry)>, SnapshotError> {
    use minibroker_envelope::SealError;
    let body = minibroker_envelope::unseal(MAGIC, VERSION, data).map_err(|error| match error {
        SealError::TooShort(_) => SnapshotError::Damaged("too short"),
        SealError::Checksum => SnapshotError::Damaged("checksum mismatch"),
        SealError::Kind { .. } => SnapshotError::Damaged("not a version 1 snapshot"),
    })?;
    let mut reader = Reader(Fields::new(body));
    let count = u32::from_be_bytes(reader.take()?);
    let mut producers = Vec::with_capacity((count as usize).min(body.len() / 19));
    for _ in 0..count {
        let producer_id = i64::from_be_bytes(reader.take()?);
        let epoch = i16::from_be_bytes(reader.take()?);
        let last_timestamp = i64::from_be_bytes(reader.take()?);
        let [cached] = reader.take()?;
        if usize::from(cached) > CACHED_BATCHES {
            return Err(SnapshotError::BadEntry(producer_id));
        }
        let mut batches = Vec::with_capacity(usize::from(cached));
        for _ in 0..cached {
            let first_sequence = i32::from_be_bytes(reader.take()?);
            let last_sequence = i32::from_be_bytes(reader.take()?);
            let offset = i64::from_be_bytes(reader.take()?);
            batches.push(BatchMetadata {
                first_sequence,
                last_sequence,
                base_offset: (offset >= 0).then_some(offset),
            });
        }
        let entry = ProducerEntry::from_parts(epoch, last_timestamp, &batches)
            .filter(|_| producer_id >= 0)
            .ok_or(SnapshotError::BadEntry(producer_id))?;
        producers.push((producer_id, entry));
    }
    if reader.0.remaining() > 0 {
        return Err(SnapshotError::Damaged("bytes after the last entry"));
    }
    Ok(producers)
}

/// The body's fields, a short body being damage.
struct Reader<'a>(Fields<'a>);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        self.0.take().ok_or(SnapshotError::Damaged("ends early"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchHeader, ProducerStateManager, SequenceRange};

    fn state() -> Vec<(i64, ProducerEntry)> {
        let manager = ProducerStateManager::with_shards(1);
        for producer in 1..4i64 {
            for sequence in 0..(producer * 3) as i32 {
                let header = BatchHeader::new(
                    producer,
                    7,
                    (sequence / 4) as i16,
                    SequenceRange::spanning(sequence % 4 * 2, 2).unwrap(),
                )
                .unwrap()
                .at(1_000 + i64::from(sequence));
                let _ = manager.append_batch(&header, |_| {
                    Ok::<_, std::convert::Infallible>(i64::from(sequence) * 10)
                });
            }
        }
        manager.partition_snapshot(7, || ()).0
    }

    #[test]
    fn snapshots_round_trip() {
        let producers = state();
        assert_eq!(producers.len(), 3);
        assert_eq!(
            decode_snapshot(&encode_snapshot(&producers)).unwrap(),
            producers
        );
        assert_eq!(decode_snapshot(&encode_snapshot(&[])).unwrap(), vec![]);
    }

    #[test]
    fn every_damaged_byte_is_detected() {
        let bytes = encode_snapshot(&state());
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert!(decode_snapshot(&damaged).is_err(), "byte {at}");
        }
        for len in 0..bytes.len() {
            assert!(decode_snapshot(&bytes[..len]).is_err(), "cut at {len}");
        }
    }

    #[test]
    fn impossible_entries_are_refused_even_with_a_good_checksum() {
        let batch = |first, last| BatchMetadata {
            first_sequence: first,
            last_sequence: last,
            base_offset: Some(0),
        };
        // Newest first: 5..=6 does not follow 0..=1.
        assert!(ProducerEntry::from_parts(0, 0, &[batch(5, 6), batch(0, 1)]).is_none());
        assert!(ProducerEntry::from_parts(0, 0, &[]).is_none());
        assert!(ProducerEntry::from_parts(-1, 0, &[batch(0, 1)]).is_none());
        assert!(ProducerEntry::from_parts(0, 0, &[batch(2, 3), batch(0, 1)]).is_some());
    }
}
