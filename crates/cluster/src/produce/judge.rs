//! A window's batches judged in arrival order by `minibroker_state::decide_and_record`, the
//! function a single broker runs under its shard lock, against the producers' rows the window
//! holds: read under the partitions' locks, or known from the broker's last windows.
//!
//! A window may be judged before it knows where its partitions end (see [`super::known`]), so
//! every batch it takes is given an offset [`PROVISIONAL`] past the partition's end, relative
//! to what the window took of it before. Once the partitions' rows are locked and read, those
//! offsets become real ([`settle`]); the database makes the same change to what it stores (see
//! [`super::statements`]).

use bytes::Bytes;
use minibroker_state::{BatchMetadata, Outcome, ProducerEntry, Verdict, decide_and_record};
use std::collections::{BTreeMap, HashMap};

use super::known::KnownRow;
use super::{
    Append, AppendRefused, Appended, Committed, PartitionKey, ProducerKey, TransactionFits,
};

/// Where a window's offsets start before it knows its partitions' ends: offsets at or past
/// this are that far past the end (a partition never grows this long: 2^62 offsets).
pub(super) const PROVISIONAL: i64 = 1 << 62;

/// A partition as the window holds it (its row locked).
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    pub(super) log_start_offset: i64,
    pub(super) high_watermark: i64,
}

/// A producer's entry as the window holds it, and the version of its row (`None`: it has none
/// yet).
pub(super) type Holding = (ProducerEntry, Option<i64>);

/// A window judged.
#[derive(Debug)]
pub(super) struct Judged {
    /// Each batch's verdict (its offsets provisional), or why it was refused.
    pub(super) verdicts: Vec<Result<(Verdict, PartitionKey), AppendRefused>>,
    /// What storing the accepted batches writes.
    pub(super) writes: Writes,
    /// Every producer the window judged, as it leaves them.
    pub(super) entries: HashMap<ProducerKey, Holding>,
    /// The producers whose rows it changes, each with its row's new version.
    pub(super) changed: BTreeMap<ProducerKey, i64>,
}

/// The accepted batches, as the columns of their insert.
#[derive(Debug, Default)]
pub(super) struct Writes {
    pub(super) topic_ids: Vec<i64>,
    pub(super) partitions: Vec<i32>,
    /// Each batch's offset past its partition's end before the window.
    pub(super) relatives: Vec<i64>,
    pub(super) offsets: Vec<i64>,
    pub(super) batches: Vec<Bytes>,
    pub(super) max_timestamps: Vec<i64>,
    /// The offsets the window takes of each partition.
    pub(super) taken: BTreeMap<PartitionKey, i64>,
}

/// Judges `appends` in order against `entries`; with `held`, a batch for a partition not in it
/// is refused (without, every partition is taken to be there: the server checks). A
/// transactional batch the rule takes must fit its transaction: its partition in `added` at
/// its epoch; a plain one, no transaction of its producer open on the partition (as a single
/// broker's partition checks, `minibroker_broker`'s `check_fits`).
pub(super) fn judge(
    appends: &[Append],
    mut entries: HashMap<ProducerKey, Holding>,
    held: Option<&HashMap<PartitionKey, Held>>,
    fits: &TransactionFits,
) -> Judged {
    let mut writes = Writes::default();
    let mut changed = BTreeMap::new();
    let verdicts = appends
        .iter()
        .map(|append| {
            let key = (append.topic_id, append.partition);
            if held.is_some_and(|held| !held.contains_key(&key)) {
                return Err(AppendRefused::UnknownPartition {
                    topic_id: append.topic_id,
                    partition: append.partition,
                });
            }
            if append.offsets == 0 || append.bytes.len() < minibroker_records::HEADER_LEN {
                return Err(AppendRefused::NotABatch {
                    bytes: append.bytes.len(),
                    offsets: append.offsets,
                });
            }
            let verdict = judge_one(append, &mut entries, &mut writes, &mut changed, fits)?;
            Ok((verdict, key))
        })
        .collect();
    Judged {
        verdicts,
        writes,
        entries,
        changed,
    }
}

fn judge_one(
    append: &Append,
    entries: &mut HashMap<ProducerKey, Holding>,
    writes: &mut Writes,
    changed: &mut BTreeMap<ProducerKey, i64>,
    transactions: &TransactionFits,
) -> Result<Verdict, AppendRefused> {
    let Some(header) = &append.header else {
        // Not idempotent: always stored.
        return Ok(Verdict {
            outcome: Outcome::Accepted,
            base_offset: Some(writes.store(append)),
            known_producer: false,
        });
    };
    let producer = (append.topic_id, append.partition, header.producer_id());
    let stored = entries.get_mut(&producer).map(|(entry, _)| entry);
    let open = stored.as_ref().is_some_and(|entry| entry.in_transaction());
    let fits = || {
        let key = (producer.0, producer.1, producer.2, header.epoch());
        if header.is_transactional() && !transactions.added.contains(&key) {
            return Err(AppendRefused::NotAddedToTransaction {
                producer_id: header.producer_id(),
                epoch: header.epoch(),
            });
        }
        if header.is_transactional() && transactions.refused.contains(&key) {
            return Err(AppendRefused::AbortedEpoch {
                producer_id: header.producer_id(),
                epoch: header.epoch(),
            });
        }
        if !header.is_transactional() && open {
            return Err(AppendRefused::InTransaction {
                producer_id: header.producer_id(),
            });
        }
        Ok(())
    };
    let (verdict, created) = decide_and_record(stored, header, |_| {
        fits()?;
        Ok(writes.store(append))
    })?;
    if let Some(created) = created {
        entries.insert(producer, (created, None));
    }
    if verdict.outcome == Outcome::Accepted {
        changed.entry(producer).or_insert_with(new_version);
    }
    Ok(verdict)
}

impl Writes {
    /// Takes `append`'s offsets of its partition; its (provisional) base offset.
    fn store(&mut self, append: &Append) -> i64 {
        let taken = self
            .taken
            .entry((append.topic_id, append.partition))
            .or_default();
        let relative = *taken;
        *taken += i64::from(append.offsets);
        self.topic_ids.push(append.topic_id);
        self.partitions.push(append.partition);
        self.relatives.push(relative);
        self.offsets.push(i64::from(append.offsets));
        self.max_timestamps
            .push(minibroker_records::max_timestamp(&append.bytes));
        self.batches.push(append.bytes.clone());
        PROVISIONAL + relative
    }
}

/// A new version for a changed row: random, so no other writer's is ever the same.
fn new_version() -> i64 {
    let (high, _) = uuid::Uuid::new_v4().as_u64_pair();
    i64::from_ne_bytes(high.to_ne_bytes())
}

/// `offset` made real, given the partition's high watermark before the window.
fn settled(offset: i64, high_watermark: i64) -> i64 {
    if offset >= PROVISIONAL {
        high_watermark + (offset - PROVISIONAL)
    } else {
        offset
    }
}

/// The window's answers and the rows it leaves, once its partitions are locked and read.
pub(super) fn settle(judged: &Judged, held: &HashMap<PartitionKey, Held>) -> Committed {
    let answers = judged
        .verdicts
        .iter()
        .map(|judged| {
            let (verdict, key) = (*judged)?;
            let Some(partition) = held.get(&key) else {
                return Err(AppendRefused::UnknownPartition {
                    topic_id: key.0,
                    partition: key.1,
                });
            };
            let base_offset = verdict
                .base_offset
                .map(|offset| settled(offset, partition.high_watermark));
            Ok(Appended {
                verdict: Verdict {
                    base_offset,
                    ..verdict
                },
                log_start_offset: partition.log_start_offset,
            })
        })
        .collect();
    let left = judged
        .entries
        .iter()
        .filter_map(|(key, (entry, read_version))| {
            let version = judged.changed.get(key).copied().or(*read_version)?;
            let partition = held.get(&(key.0, key.1))?;
            let entry = settled_entry(entry, partition.high_watermark)?;
            Some((*key, KnownRow { entry, version }))
        })
        .collect();
    (answers, left)
}

/// `entry` with its provisional offsets made real.
fn settled_entry(entry: &ProducerEntry, high_watermark: i64) -> Option<ProducerEntry> {
    let batches: Vec<BatchMetadata> = entry
        .batches()
        .map(|batch| BatchMetadata {
            base_offset: batch
                .base_offset
                .map(|offset| settled(offset, high_watermark)),
            ..batch
        })
        .collect();
    ProducerEntry::from_parts(
        entry.epoch(),
        entry.last_timestamp(),
        &batches,
        entry.in_transaction(),
    )
}
