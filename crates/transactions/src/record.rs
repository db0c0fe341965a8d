//! A transactional id's record: what the coordinator keeps durable for it, in the checksummed
//! envelope every small file of the data directory shares (`minibroker_envelope`), so a
//! damaged record is refused with its reason, never half-read:
//!
//! ```text
//! "MBTX" version:u8 (1 or 2)
//! transactional_id:string producer_id:i64 epoch:i16 timeout_ms:u64 state:u8
//! start_ms:i64 (-1: none) last_update_ms:i64
//! partitions:u32 × { topic:string index:u32 }
//! groups:u32 × { group:string }
//! version 2 only: previous_producer_id:i64 previous_epoch:i16 next_producer_id:i64 (-1: none)
//! crc32c:u32 (of everything before it)
//! ```
//!
//! Version 2 adds what an end that bumped the epoch (KIP-890 part 2) leaves: the pair it was
//! asked with, which its retry carries, and the producer id it completes with when the epoch
//! ran out. A record with neither is written as version 1, which older brokers read.
//!
//! Integers are big-endian; a string is its u32 byte length, then UTF-8. The state is Kafka's
//! id ([`TxnState::id`]); PrepareEpochFence, which is never current, is never stored.
//!
//! An add to a transaction already open (AddPartitionsToTxn, AddOffsetsToTxn) that changes
//! nothing else is written as an [`Addition`]: only what it added, so a transaction's record
//! is never written again whole for each partition or group it adds (250 adds of 30 KB
//! group ids wrote 1,434 MiB when every add wrote the whole record; they write 7.6 MiB now):
//!
//! ```text
//! "MBTA" version:u8 (1)
//! transactional_id:string producer_id:i64 epoch:i16 last_update_ms:i64
//! partitions:u32 × { topic:string index:u32 }
//! groups:u32 × { group:string }
//! crc32c:u32
//! ```
//!
//! It applies to the id's state as the records before it left it, which must be that
//! producer's open transaction at that epoch.

use minibroker_envelope::{FieldWriter, Fields, SealError};
use thiserror::Error;

use crate::{Transaction, TxnState};

/// The magic every whole record starts with.
pub(crate) const MAGIC: &[u8; 4] = b"MBTX";
/// The record without an epoch bump's fields.
const VERSION: u8 = 1;
/// The record with them.
const BUMP_VERSION: u8 = 2;

/// The magic an [`Addition`] starts with.
pub(crate) const ADDITION_MAGIC: &[u8; 4] = b"MBTA";
const ADDITION_VERSION: u8 = 1;

/// What an add appended to an open transaction, and nothing else (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Addition {
    pub(crate) transactional_id: String,
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
    pub(crate) last_update_ms: i64,
    pub(crate) partitions: Vec<(String, u32)>,
    pub(crate) groups: Vec<String>,
}

/// One record of the transaction log: an id's whole state, or an addition to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The id's whole state.
    Whole(Transaction),
    /// Partitions and groups added to its open transaction.
    Addition(Addition),
}

impl Entry {
    /// The transactional id the record is of.
    pub(crate) fn transactional_id(&self) -> &str {
        match self {
            Self::Whole(txn) => txn.transactional_id(),
            Self::Addition(addition) => &addition.transactional_id,
        }
    }

    /// The record in `bytes`, by its magic.
    ///
    /// # Errors
    /// As [`Transaction::decode`].
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        if bytes.starts_with(ADDITION_MAGIC) {
            Addition::decode(bytes).map(Self::Addition)
        } else {
            Transaction::decode(bytes).map(Self::Whole)
        }
    }
}

impl Addition {
    /// Its record.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = FieldWriter::with_capacity(64);
        out.string(&self.transactional_id);
        out.int(self.producer_id.to_be_bytes());
        out.int(self.epoch.to_be_bytes());
        out.int(self.last_update_ms.to_be_bytes());
        put_partitions_and_groups(&mut out, self.partitions.iter(), self.groups.iter());
        minibroker_envelope::seal(ADDITION_MAGIC, ADDITION_VERSION, &out.into_body())
    }

    fn decode(record: &[u8]) -> Result<Self, RecordError> {
        let body = minibroker_envelope::unseal(ADDITION_MAGIC, ADDITION_VERSION, record)?;
        let mut fields = Fields::new(body);
        let short = RecordError::Damaged("it ends early, or holds a string that is not UTF-8");
        let mut read = || -> Option<Self> {
            let transactional_id = fields.string()?;
            let producer_id = i64::from_be_bytes(fields.take()?);
            let epoch = i16::from_be_bytes(fields.take()?);
            let last_update_ms = i64::from_be_bytes(fields.take()?);
            let (partitions, groups) = partitions_and_groups(&mut fields)?;
            Some(Self {
                transactional_id,
                producer_id,
                epoch,
                last_update_ms,
                partitions,
                groups,
            })
        };
        let addition = read().ok_or(short)?;
        if fields.remaining() > 0 {
            return Err(RecordError::Damaged("bytes after the last group"));
        }
        Ok(addition)
    }
}

/// Why a record was not read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordError {
    /// Not a whole record of this version: too short, another kind, or a failed checksum.
    #[error("the transaction record is damaged: {0}")]
    Sealed(#[from] SealError),
    /// The checksum holds but the fields do not: bytes missing or left over, a bad string.
    #[error("the transaction record is damaged: {0}")]
    Damaged(&'static str),
    /// Fields no sequence of transitions could have left.
    #[error("the transaction record is impossible: {0}")]
    Impossible(&'static str),
}

/// A transaction's partitions and groups, as both records write them.
fn put_partitions_and_groups<'a>(
    out: &mut FieldWriter,
    partitions: impl Iterator<Item = &'a (String, u32)> + Clone,
    groups: impl Iterator<Item = &'a String> + Clone,
) {
    out.count(partitions.clone().count());
    for (topic, index) in partitions {
        out.string(topic);
        out.int(index.to_be_bytes());
    }
    out.count(groups.clone().count());
    for group in groups {
        out.string(group);
    }
}

/// What [`put_partitions_and_groups`] wrote, in any collection.
fn partitions_and_groups<P, G>(fields: &mut Fields<'_>) -> Option<(P, G)>
where
    P: Default + Extend<(String, u32)>,
    G: Default + Extend<String>,
{
    let mut partitions = P::default();
    for _ in 0..fields.count()? {
        let topic = fields.string()?;
        partitions.extend([(topic, u32::from_be_bytes(fields.take()?))]);
    }
    let mut groups = G::default();
    for _ in 0..fields.count()? {
        groups.extend([fields.string()?]);
    }
    Some((partitions, groups))
}

impl Transaction {
    /// The record of this id, to write before a changed transaction's answer.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let (id, producer_id, epoch, timeout_ms, state, start_ms, last_update_ms) = self.parts();
        let mut out = FieldWriter::with_capacity(64);
        out.string(id);
        out.int(producer_id.to_be_bytes());
        out.int(epoch.to_be_bytes());
        out.int(timeout_ms.to_be_bytes());
        out.u8(state.id());
        out.int(start_ms.unwrap_or(-1).to_be_bytes());
        out.int(last_update_ms.to_be_bytes());
        put_partitions_and_groups(&mut out, self.partitions(), self.groups());
        let version = match self.bump_parts() {
            (None, None) => VERSION,
            (previous, next_producer_id) => {
                let (previous_producer_id, previous_epoch) = previous.unwrap_or((-1, -1));
                out.int(previous_producer_id.to_be_bytes());
                out.int(previous_epoch.to_be_bytes());
                out.int(next_producer_id.unwrap_or(-1).to_be_bytes());
                BUMP_VERSION
            }
        };
        minibroker_envelope::seal(MAGIC, version, &out.into_body())
    }

    /// The transaction a record written by [`Self::encode`] holds.
    ///
    /// # Errors
    /// [`RecordError`] for bytes that are damaged, or fields no transition leaves.
    pub fn decode(record: &[u8]) -> Result<Self, RecordError> {
        let (version, body) =
            minibroker_envelope::unseal_versions(MAGIC, VERSION..=BUMP_VERSION, record)?;
        let mut fields = Fields::new(body);
        let short = RecordError::Damaged("it ends early, or holds a string that is not UTF-8");
        let mut read = || -> Option<Self> {
            let id = fields.string()?;
            let producer_id = i64::from_be_bytes(fields.take()?);
            let epoch = i16::from_be_bytes(fields.take()?);
            let timeout_ms = u64::from_be_bytes(fields.take()?);
            let state = fields.u8()?;
            let start_ms = i64::from_be_bytes(fields.take()?);
            let last_update_ms = i64::from_be_bytes(fields.take()?);
            let (partitions, groups) = partitions_and_groups(&mut fields)?;
            let mut bump = (None, None);
            if version == BUMP_VERSION {
                let previous_producer_id = i64::from_be_bytes(fields.take()?);
                let previous_epoch = i16::from_be_bytes(fields.take()?);
                let next_producer_id = i64::from_be_bytes(fields.take()?);
                bump = (
                    (previous_producer_id >= 0).then_some((previous_producer_id, previous_epoch)),
                    (next_producer_id >= 0).then_some(next_producer_id),
                );
            }
            let txn = Self::from_parts(
                id,
                (producer_id, epoch, timeout_ms),
                TxnState::from_id(state).unwrap_or(TxnState::PrepareEpochFence),
                ((start_ms >= 0).then_some(start_ms), last_update_ms),
                partitions,
                groups,
            );
            Some(txn.with_bump_parts(bump))
        };
        let txn = read().ok_or(short)?;
        if fields.remaining() > 0 {
            return Err(RecordError::Damaged("bytes after the last field"));
        }
        txn.check()?;
        Ok(txn)
    }

    /// Refuses what no sequence of transitions leaves behind.
    fn check(&self) -> Result<(), RecordError> {
        let impossible = |why| Err(RecordError::Impossible(why));
        if self.producer_id() < 0 || self.epoch() < 0 {
            return impossible("a negative producer id or epoch");
        }
        let (previous, next_producer_id) = self.bump_parts();
        if previous.is_some_and(|(_, epoch)| epoch < 0) {
            return impossible("a negative previous epoch");
        }
        if next_producer_id.is_some() && !self.state().is_preparing() {
            return impossible("a next producer id with no end being written");
        }
        let open = matches!(
            self.state(),
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
        );
        let (.., start_ms, _) = self.parts();
        match self.state() {
            TxnState::PrepareEpochFence => impossible("an unknown or passing state"),
            _ if open && start_ms.is_none() => impossible("an open transaction with no start"),
            _ if !open
                && (self.partitions().next().is_some() || self.groups().next().is_some()) =>
            {
                impossible("partitions or groups with no open transaction")
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EndEpoch;

    fn committing() -> Transaction {
        let mut txn = Transaction::new("pipeline-7", 1042, 30_000, 0);
        txn.init(None, 30_000, None, 5).unwrap();
        txn.add_partitions(1042, 1, [("out".to_owned(), 2), ("out".to_owned(), 0)], 10)
            .unwrap();
        txn.add_group(1042, 1, "readers", 11).unwrap();
        txn.end((1042, 1), true, EndEpoch::Kept, 12).unwrap();
        txn
    }

    #[test]
    fn every_state_a_transition_leaves_round_trips() {
        let mut txn = committing();
        assert_eq!(Transaction::decode(&txn.encode()), Ok(txn.clone()));
        txn.complete(13).unwrap();
        assert_eq!(Transaction::decode(&txn.encode()), Ok(txn.clone()));
        let fresh = Transaction::new("", 0, 0, 0);
        assert_eq!(Transaction::decode(&fresh.encode()), Ok(fresh));
    }

    #[test]
    fn what_a_bumping_end_leaves_round_trips_in_version_2_and_the_rest_stays_version_1() {
        let mut txn = Transaction::new("pipeline-7", 1042, 30_000, 0);
        txn.add_partitions(1042, 0, [("out".to_owned(), 0)], 10)
            .unwrap();
        assert_eq!(txn.encode()[4], VERSION);
        let bumped = EndEpoch::Bumped {
            spare_producer_id: None,
        };
        txn.end((1042, 0), true, bumped, 12).unwrap();
        let record = txn.encode();
        assert_eq!(record[4], BUMP_VERSION);
        assert_eq!(Transaction::decode(&record), Ok(txn.clone()));
        txn.complete(13).unwrap();
        let completed = Transaction::decode(&txn.encode()).unwrap();
        assert_eq!(completed, txn);
        // Its retry is still known after a restart.
        let mut restored = completed;
        assert_eq!(
            restored.end((1042, 0), true, bumped, 14),
            Ok(crate::Change::Unchanged)
        );
    }

    #[test]
    fn an_addition_holds_only_what_was_added_and_replays_to_the_whole_state() {
        let mut before = Transaction::new("pipeline-7", 1042, 30_000, 0);
        before
            .add_partitions(1042, 0, [("out".to_owned(), 0)], 10)
            .unwrap();
        let mut after = before.clone();
        after
            .add_partitions(1042, 0, [("out".to_owned(), 1)], 11)
            .unwrap();
        after.add_group(1042, 0, "readers", 12).unwrap();
        let addition = after.addition_since(&before).expect("an addition");
        assert_eq!(addition.partitions, [("out".to_owned(), 1)]);
        assert_eq!(addition.groups, ["readers"]);
        let record = addition.encode();
        let Ok(Entry::Addition(read)) = Entry::decode(&record) else {
            panic!("an addition reads back");
        };
        let mut replayed = before.clone();
        replayed.apply_addition(read).unwrap();
        assert_eq!(replayed, after);
        for at in 0..record.len() {
            let mut damaged = record.clone();
            damaged[at] ^= 0x10;
            assert!(Entry::decode(&damaged).is_err(), "byte {at}");
        }
        // An end is not an addition; nor is an add that opens the transaction.
        let mut ended = after.clone();
        ended.end((1042, 0), true, EndEpoch::Kept, 13).unwrap();
        assert_eq!(ended.addition_since(&after), None);
        let fresh = Transaction::new("pipeline-7", 1042, 30_000, 0);
        assert_eq!(before.addition_since(&fresh), None);
        // An addition to no open transaction of its producer does not replay.
        let addition = after.addition_since(&before).unwrap();
        assert!(fresh.clone().apply_addition(addition).is_err());
    }

    #[test]
    fn every_damaged_byte_is_refused() {
        let record = committing().encode();
        for at in 0..record.len() {
            let mut damaged = record.clone();
            damaged[at] ^= 0x10;
            assert!(Transaction::decode(&damaged).is_err(), "byte {at}");
        }
        assert!(Transaction::decode(&record[..record.len() - 1]).is_err());
    }

    #[test]
    fn impossible_fields_are_refused_even_with_a_good_checksum() {
        let reseal = |edit: &dyn Fn(&mut Vec<u8>)| {
            let record = committing().encode();
            let mut body = minibroker_envelope::unseal(MAGIC, VERSION, &record)
                .unwrap()
                .to_vec();
            edit(&mut body);
            Transaction::decode(&minibroker_envelope::seal(MAGIC, VERSION, &body))
        };
        // The state byte: after the id (4 + 10 bytes), producer id, epoch and timeout.
        let state_at = 4 + "pipeline-7".len() + 8 + 2 + 8;
        assert!(matches!(
            reseal(&|body| body[state_at] = 7),
            Err(RecordError::Impossible(_))
        ));
        assert!(matches!(
            reseal(&|body| body[state_at] = 0),
            Err(RecordError::Impossible(_))
        ));
        assert!(matches!(
            reseal(&|body| body[state_at] = 99),
            Err(RecordError::Impossible(_))
        ));
        assert!(matches!(
            reseal(&|body| body.push(0)),
            Err(RecordError::Damaged(_))
        ));
        assert!(matches!(
            reseal(&|body| body.truncate(body.len() - 1)),
            Err(RecordError::Damaged(_))
        ));
    }
}
