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
//! count × { producer_id:i64 epoch:i16 last_timestamp:i64 [v2: in_transaction:u8] cached:u8
//!           cached × { first_sequence:i32 last_sequence:i32 base_offset:i64 (-1: none) } }
//! v2: open:u32    open × { producer_id:i64 first_offset:i64 }
//! v2: aborted:u32 aborted × { producer_id:i64 first_offset:i64 last_offset:i64 }
//! crc32c:u32 (of everything before it)
//! ```
//!
//! All integers are big-endian; the cached batches are listed newest first. Version 2 added the
//! partition's transactions ([`PartitionTransactions`]) and lets an entry hold no batch (a marker
//! raised its epoch); version 1 files, written before transactions, still load, with none open or
//! aborted.

use minibroker_envelope::{FieldWriter, Fields};
use thiserror::Error;

use crate::{
    AbortedTransaction, BatchMetadata, CACHED_BATCHES, PartitionTransactions, ProducerEntry,
};

const MAGIC: &[u8; 4] = b"MBPS";
/// The version written.
const VERSION: u8 = 2;
/// The oldest version read.
const OLDEST_VERSION: u8 = 1;

/// One partition's producer state, as a snapshot holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Each producer's id and entry.
    pub producers: Vec<(i64, ProducerEntry)>,
    /// The partition's open and aborted transactions.
    pub transactions: PartitionTransactions,
}

/// Why a snapshot was not loaded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SnapshotError {
    /// The bytes end early, have the wrong magic or version, or fail their checksum.
    #[error("the snapshot is damaged: {0}")]
    Damaged(&'static str),
    /// An entry no sequence of accepted batches could have left.
    #[error("the snapshot holds an impossible entry for producer {0}")]
    BadEntry(i64),
    /// Transactions no sequence of appends could have left.
    #[error("the snapshot holds impossible transactions")]
    BadTransactions,
}

/// Encodes one partition's producers (id and entry each) and transactions.
#[must_use]
pub fn encode_snapshot(
    producers: &[(i64, ProducerEntry)],
    transactions: &PartitionTransactions,
) -> Vec<u8> {
    let mut out = FieldWriter::with_capacity(
        12 + producers.len() * (20 + CACHED_BATCHES * 16)
            + transactions.open().len() * 16
            + transactions.aborted().len() * 24,
    );
    out.count(producers.len());
    for (producer_id, entry) in producers {
        out.int(producer_id.to_be_bytes());
        out.int(entry.epoch().to_be_bytes());
        out.int(entry.last_timestamp().to_be_bytes());
        out.u8(u8::from(entry.in_transaction()));
        out.u8(entry.batches().len() as u8);
        for batch in entry.batches() {
            out.int(batch.first_sequence.to_be_bytes());
            out.int(batch.last_sequence.to_be_bytes());
            out.int(batch.base_offset.unwrap_or(-1).to_be_bytes());
        }
    }
    out.count(transactions.open().len());
    for (producer_id, first_offset) in transactions.open() {
        out.int(producer_id.to_be_bytes());
        out.int(first_offset.to_be_bytes());
    }
    out.count(transactions.aborted().len());
    for aborted in transactions.aborted() {
        out.int(aborted.producer_id.to_be_bytes());
        out.int(aborted.first_offset.to_be_bytes());
        out.int(aborted.last_offset.to_be_bytes());
    }
    minibroker_envelope::seal(MAGIC, VERSION, &out.into_body())
}

/// Decodes what [`encode_snapshot`] wrote, or a version 1 snapshot.
///
/// # Errors
/// [`SnapshotError`] for bytes that are damaged in any way.
pub fn decode_snapshot(data: &[u8]) -> Result<Snapshot, SnapshotError> {
    use minibroker_envelope::SealError;
    let (version, body) =
        minibroker_envelope::unseal_versions(MAGIC, OLDEST_VERSION..=VERSION, data).map_err(
            |error| match error {
                SealError::TooShort(_) => SnapshotError::Damaged("too short"),
                SealError::Checksum => SnapshotError::Damaged("checksum mismatch"),
                SealError::Kind { .. } => {
                    SnapshotError::Damaged("not a snapshot of a version this broker reads (1-2)")
                }
            },
        )?;
    let mut reader = Reader(Fields::new(body));
    let count = u32::from_be_bytes(reader.take()?);
    let mut producers = Vec::with_capacity((count as usize).min(body.len() / 19));
    for _ in 0..count {
        let producer_id = i64::from_be_bytes(reader.take()?);
        let epoch = i16::from_be_bytes(reader.take()?);
        let last_timestamp = i64::from_be_bytes(reader.take()?);
        let in_transaction = match version {
            1 => false,
            _ => match reader.take()? {
                [0] => false,
                [1] => true,
                _ => return Err(SnapshotError::BadEntry(producer_id)),
            },
        };
        let [cached] = reader.take()?;
        if version == 1 && cached == 0 {
            return Err(SnapshotError::BadEntry(producer_id));
        }
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
        let entry = ProducerEntry::from_parts(epoch, last_timestamp, &batches, in_transaction)
            .filter(|_| producer_id >= 0)
            .ok_or(SnapshotError::BadEntry(producer_id))?;
        producers.push((producer_id, entry));
    }
    let transactions = match version {
        1 => PartitionTransactions::default(),
        _ => decode_transactions(&mut reader, body.len())?,
    };
    if reader.0.remaining() > 0 {
        return Err(SnapshotError::Damaged("bytes after the last entry"));
    }
    Ok(Snapshot {
        producers,
        transactions,
    })
}

fn decode_transactions(
    reader: &mut Reader<'_>,
    body_len: usize,
) -> Result<PartitionTransactions, SnapshotError> {
    let count = u32::from_be_bytes(reader.take()?) as usize;
    let mut open = Vec::with_capacity(count.min(body_len / 16));
    for _ in 0..count {
        open.push((
            i64::from_be_bytes(reader.take()?),
            i64::from_be_bytes(reader.take()?),
        ));
    }
    let count = u32::from_be_bytes(reader.take()?) as usize;
    let mut aborted = Vec::with_capacity(count.min(body_len / 24));
    for _ in 0..count {
        aborted.push(AbortedTransaction {
            producer_id: i64::from_be_bytes(reader.take()?),
            first_offset: i64::from_be_bytes(reader.take()?),
            last_offset: i64::from_be_bytes(reader.take()?),
        });
    }
    PartitionTransactions::from_parts(&open, &aborted).ok_or(SnapshotError::BadTransactions)
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
        // A producer whose epoch a marker raised, with no batch since, and one in a transaction.
        let header = |id, epoch, first| {
            BatchHeader::new(id, 7, epoch, SequenceRange::single(first).unwrap()).unwrap()
        };
        let keep = |_| Ok::<_, std::convert::Infallible>(0);
        manager.append_batch(&header(10, 0, 0), keep).unwrap();
        manager.replay_marker(7, 10, 1, 0);
        manager
            .append_batch(&header(11, 0, 0).transactional(true), keep)
            .unwrap();
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

    fn transactions() -> PartitionTransactions {
        let mut transactions = PartitionTransactions::default();
        transactions.record_batch(11, 40);
        transactions.record_batch(12, 41);
        transactions.record_marker((12, 0), 42, false);
        transactions
    }

    #[test]
    fn snapshots_round_trip() {
        let snapshot = Snapshot {
            producers: state(),
            transactions: transactions(),
        };
        assert_eq!(snapshot.producers.len(), 5);
        assert!(snapshot.producers.iter().any(|(_, e)| e.in_transaction()));
        assert!(
            snapshot
                .producers
                .iter()
                .any(|(_, e)| e.batches().len() == 0)
        );
        let bytes = encode_snapshot(&snapshot.producers, &snapshot.transactions);
        assert_eq!(decode_snapshot(&bytes).unwrap(), snapshot);
        let empty = PartitionTransactions::default();
        assert_eq!(
            decode_snapshot(&encode_snapshot(&[], &empty)).unwrap(),
            Snapshot::default()
        );
    }

    /// A version 1 snapshot, as brokers before transactions wrote it: one producer at epoch 2,
    /// last seen at 1000, with one batch of sequences 0..=1 at offset 5.
    #[test]
    fn a_version_1_snapshot_still_loads() {
        let mut body = FieldWriter::with_capacity(64);
        body.count(1);
        body.int(9i64.to_be_bytes());
        body.int(2i16.to_be_bytes());
        body.int(1000i64.to_be_bytes());
        body.u8(1);
        body.int(0i32.to_be_bytes());
        body.int(1i32.to_be_bytes());
        body.int(5i64.to_be_bytes());
        let bytes = minibroker_envelope::seal(MAGIC, 1, &body.into_body());
        let snapshot = decode_snapshot(&bytes).unwrap();
        assert_eq!(snapshot.transactions, PartitionTransactions::default());
        let (id, entry) = snapshot.producers[0];
        assert_eq!((id, entry.epoch(), entry.last_sequence()), (9, 2, Some(1)));
        assert!(!entry.in_transaction());
        let newer = minibroker_envelope::seal(MAGIC, 3, b"");
        assert!(matches!(
            decode_snapshot(&newer),
            Err(SnapshotError::Damaged(_))
        ));
    }

    #[test]
    fn every_damaged_byte_is_detected() {
        let bytes = encode_snapshot(&state(), &transactions());
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
        assert!(ProducerEntry::from_parts(0, 0, &[batch(5, 6), batch(0, 1)], false).is_none());
        assert!(ProducerEntry::from_parts(-1, 0, &[batch(0, 1)], false).is_none());
        assert!(ProducerEntry::from_parts(0, 0, &[batch(2, 3), batch(0, 1)], false).is_some());
        let six = [batch(0, 0); CACHED_BATCHES + 1];
        assert!(ProducerEntry::from_parts(0, 0, &six, false).is_none());
    }
}
