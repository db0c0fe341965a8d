//! Log compaction's rule, shared by both logs: which records a cleaning pass keeps.
//!
//! A compacted partition keeps, in the part of the log that may be cleaned (sealed segments, or
//! an in-memory log's full chunks, old enough by `min.compaction.lag.ms`), the newest record of
//! each key. A pass builds an [`OffsetMap`] (key → offset of its newest record) over the part not
//! yet mapped (the dirty part), then rewrites everything from the start of the log to the end of
//! what it mapped, keeping a record unless the map holds a newer offset for its key, or it is a
//! tombstone the map has seen whose batch's delete horizon has passed. As Kafka does (KIP-534),
//! `delete.retention.ms` counts from the pass that first sees a tombstone, not from the
//! tombstone's own timestamp, which a client chose: that pass keeps it and stamps its batch with
//! a delete horizon (`minibroker_records::delete_horizon`) of its time plus the retention, and
//! a pass after the horizon removes it. A pass is due for the tombstones alone once the earliest
//! horizon it left passes ([`CleanStats::earliest_horizon`], [`CleanRules::sweep`]).
//!
//! Offsets never change: a batch keeps its header and only loses records
//! (`minibroker_records::retain_records`). Transactions are compacted as Kafka compacts them: a
//! committed transaction's records are mapped and cleaned like any others (so a later tombstone
//! hides them, and once it goes they do not come back), while an aborted transaction's batches and
//! every marker are passed over and kept as written (an aborted record must hide nothing), and
//! nothing at or past the last stable offset is mapped (an open transaction may still abort). What
//! exactly-once needs stays: the last batch of every producer is kept, at least as its header, so
//! the sequences it took are still in the log when producer state is rebuilt from it. The last
//! batch of each piece (segment or chunk) is kept too, so each still ends where it did and the next
//! begins after it.
//! A batch left with no records is otherwise dropped.
//!
//! The map has a fixed budget of key bytes ([`OffsetMap::new`]): a pass maps as much of the
//! dirty part as fits, and the next pass goes on from there.

use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::LogError;
use minibroker_records::{
    KeyedRecord, Retained, for_each_record, is_control, is_transactional, retain_records,
};

/// Bytes an entry of the offset map costs besides its key (the offset, the map's own slot and
/// the key's allocation), so a budget bounds memory whatever the keys' sizes.
const ENTRY_OVERHEAD: usize = 48;

/// The newest offset of each key in the part of the log mapped so far, within a byte budget.
#[derive(Debug)]
pub struct OffsetMap {
    newest: HashMap<Box<[u8]>, i64>,
    bytes: usize,
    budget: usize,
    /// One past the last offset mapped.
    end: i64,
}

impl OffsetMap {
    /// An empty map of at most `budget` bytes, mapping from `start`.
    #[must_use]
    pub fn new(budget: usize, start: i64) -> Self {
        Self {
            newest: HashMap::new(),
            bytes: 0,
            budget,
            end: start,
        }
    }

    /// One past the last offset mapped.
    #[must_use]
    pub fn end(&self) -> i64 {
        self.end
    }

    /// How many keys it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.newest.len()
    }

    /// Whether it holds no key.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.newest.is_empty()
    }

    /// Maps the records of `batch` (the next stored batch, at or after [`Self::end`]), or
    /// returns `false`, leaving [`Self::end`] before it and adding none of its new keys, when
    /// those would pass the budget. A batch the rules pass over goes through
    /// [`Self::pass_over`] instead.
    ///
    /// # Errors
    /// [`LogError::Damaged`] for a stored batch that does not read.
    pub fn add(&mut self, batch: &[u8]) -> Result<bool, LogError> {
        let end = minibroker_records::end_offset(batch);
        // Keys already mapped move on in place (no allocation); a batch refused for its new
        // keys may have moved some of them, which is harmless: each then names a newer record
        // that is in the log, past what the pass rewrites or kept by it (`CleanRules::clean`).
        let newest = &mut self.newest;
        let mut fresh: Vec<(Box<[u8]>, i64)> = Vec::new();
        for_each_record(batch, |record| {
            if let Some(key) = record.key {
                match newest.get_mut(key) {
                    Some(offset) => *offset = record.offset,
                    None => fresh.push((key.into(), record.offset)),
                }
            }
        })
        .map_err(damaged)?;
        let added: usize = fresh
            .iter()
            .map(|(key, _)| key.len() + ENTRY_OVERHEAD)
            .sum();
        // One batch is always mapped, whatever its keys, so a pass always gets on.
        if self.bytes + added > self.budget && !self.newest.is_empty() {
            return Ok(false);
        }
        for (key, offset) in fresh {
            let len = key.len();
            if self.newest.insert(key, offset).is_none() {
                self.bytes += len + ENTRY_OVERHEAD;
            }
        }
        self.end = end;
        Ok(true)
    }

    /// Moves past `batch` without mapping its records ([`CleanRules::passes_over`]).
    pub fn pass_over(&mut self, batch: &[u8]) {
        self.end = minibroker_records::end_offset(batch);
    }
}

fn damaged(error: minibroker_records::RecordsError) -> LogError {
    LogError::Damaged(format!(
        "a stored batch does not read for compaction: {error}"
    ))
}

/// What a pass keeps besides the newest record of each key.
#[derive(Debug, Clone)]
pub struct CleanRules {
    /// The pass's time: tombstones whose batch's delete horizon is at or before it go.
    pub now_ms: i64,
    /// The topic's `delete.retention.ms`: a tombstone seen for the first time gets a delete
    /// horizon this far from [`Self::now_ms`].
    pub delete_retention_ms: i64,
    /// Rewrite the cleaned part even with nothing dirty: a delete horizon has passed.
    pub sweep: bool,
    /// Base offsets of the batches kept at least as their header: each producer's last batch.
    pub kept_batches: HashSet<i64>,
    /// The partition's last stable offset when the pass was planned: nothing at or past it is
    /// mapped, since a transaction still open there may abort.
    pub stable_offset: i64,
    /// The partition's aborted transactions: (producer id, first offset) → the ABORT marker's
    /// offset. Their batches are passed over.
    pub aborted: BTreeMap<(i64, i64), i64>,
}

impl Default for CleanRules {
    fn default() -> Self {
        Self {
            now_ms: 0,
            delete_retention_ms: 0,
            sweep: false,
            kept_batches: HashSet::new(),
            stable_offset: i64::MAX,
            aborted: BTreeMap::new(),
        }
    }
}

/// What cleaning one batch gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchCleaned {
    /// The batch as it was.
    Whole,
    /// The batch with fewer records (perhaps none: its header keeps its offsets).
    Rewritten(Bytes),
    /// Nothing of it stays.
    Dropped,
}

impl CleanRules {
    /// Whether a pass leaves `batch` out of its map and keeps it as written: a transaction's
    /// marker, or a batch of an aborted transaction.
    #[must_use]
    pub fn passes_over(&self, batch: &[u8]) -> bool {
        if is_control(batch) {
            return true;
        }
        if !is_transactional(batch) {
            return false;
        }
        let producer_id = minibroker_records::producer_id(batch);
        let offset = minibroker_records::base_offset(batch);
        self.aborted
            .range((producer_id, i64::MIN)..=(producer_id, offset))
            .next_back()
            .is_some_and(|(_, marker)| offset <= *marker)
    }

    /// Cleans one stored batch against `map`; `last_in_piece` says it ends its segment or chunk
    /// (kept at least as its header). The delete horizon of a tombstone it keeps is noted in
    /// `stats`.
    ///
    /// # Errors
    /// [`LogError::Damaged`] for a stored batch that does not read.
    pub fn clean(
        &self,
        map: &OffsetMap,
        batch: &[u8],
        last_in_piece: bool,
        stats: &mut CleanStats,
    ) -> Result<BatchCleaned, LogError> {
        let base = minibroker_records::base_offset(batch);
        if self.passes_over(batch) || (is_transactional(batch) && base >= map.end) {
            return Ok(BatchCleaned::Whole);
        }
        let horizon = minibroker_records::delete_horizon(batch);
        let keeps_a_seen_tombstone = std::cell::Cell::new(false);
        let keep = |record: KeyedRecord<'_>| {
            let Some(key) = record.key else {
                return true;
            };
            let superseded = map
                .newest
                .get(key)
                .is_some_and(|newest| *newest > record.offset);
            let seen = record.tombstone && record.offset < map.end;
            let expired = seen && horizon.is_some_and(|horizon| horizon <= self.now_ms);
            let kept = !superseded && !expired;
            if kept && seen {
                keeps_a_seen_tombstone.set(true);
            }
            kept
        };
        let stamp = self.now_ms.saturating_add(self.delete_retention_ms);
        let retained = retain_records(batch, keep, || {
            (keeps_a_seen_tombstone.get() && horizon.is_none()).then_some(stamp)
        })
        .map_err(damaged)?;
        if keeps_a_seen_tombstone.get() {
            let kept_horizon = horizon.unwrap_or(stamp);
            stats.earliest_horizon = Some(
                stats
                    .earliest_horizon
                    .map_or(kept_horizon, |earliest| earliest.min(kept_horizon)),
            );
        }
        match retained {
            Retained::Whole => Ok(BatchCleaned::Whole),
            Retained::Rewritten(rewritten, left) => {
                if left == 0 && !last_in_piece && !self.kept_batches.contains(&base) {
                    Ok(BatchCleaned::Dropped)
                } else {
                    Ok(BatchCleaned::Rewritten(rewritten))
                }
            }
        }
    }
}

/// How fast a pass may read and write, in bytes per second (`None`: as fast as it can): the
/// pass sleeps whenever it is ahead of the rate.
#[derive(Debug)]
pub struct Throttle {
    bytes_per_second: Option<u64>,
    started: std::time::Instant,
    done: u64,
}

impl Throttle {
    /// A throttle at `bytes_per_second`.
    #[must_use]
    pub fn new(bytes_per_second: Option<u64>) -> Self {
        Self {
            bytes_per_second,
            started: std::time::Instant::now(),
            done: 0,
        }
    }

    /// Counts `bytes` read or written, sleeping while the pass is ahead of the rate.
    pub fn account(&mut self, bytes: u64) {
        self.done += bytes;
        let Some(rate) = self.bytes_per_second.filter(|rate| *rate > 0) else {
            return;
        };
        let due = std::time::Duration::from_secs_f64(self.done as f64 / rate as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}

/// What a pass did, for the broker's metrics and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Bytes of the pieces rewritten, before and after.
    pub bytes_before: u64,
    /// Their bytes after.
    pub bytes_after: u64,
    /// Batches dropped whole.
    pub batches_dropped: u64,
    /// Keys in the offset map.
    pub keys: u64,
    /// The earliest delete horizon of the tombstones the pass kept: a pass is due for them then.
    pub earliest_horizon: Option<i64>,
}

/// A segment or chunk a pass reads: where it starts and ends, and its batches in order.
pub(crate) trait Piece {
    /// Its first offset.
    fn base(&self) -> i64;
    /// One past its last offset.
    fn end(&self) -> i64;
    /// Calls `each` with its batches in order until it returns `false`.
    fn for_each_batch(
        &self,
        each: &mut dyn FnMut(Bytes) -> Result<bool, LogError>,
    ) -> Result<(), LogError>;
}

/// One cleaning pass over `pieces` (the cleanable part of a log, from its start, in order), of
/// which the offsets below `cleaned_through` were mapped by earlier passes: maps what follows
/// within `budget`, then hands `keep` each batch that stays in each piece it rewrites (its index
/// and the batch, whole or rewritten). Returns the map's end (the new `cleaned_through`) and how
/// many pieces were rewritten (the first ones), or `None` when nothing is dirty.
///
/// # Errors
/// [`LogError::Damaged`] for a batch that does not read, and what `read` or `keep` return.
pub(crate) fn run_pass<P: Piece>(
    pieces: &[P],
    cleaned_through: i64,
    budget: usize,
    rules: &CleanRules,
    throttle: &mut Throttle,
    stats: &mut CleanStats,
    keep: &mut dyn FnMut(usize, Bytes) -> Result<(), LogError>,
) -> Result<Option<(i64, usize)>, LogError> {
    let mut map = OffsetMap::new(budget, cleaned_through);
    for piece in pieces.iter().filter(|piece| piece.end() > cleaned_through) {
        let mut full = false;
        piece.for_each_batch(&mut |batch| {
            throttle.account(batch.len() as u64);
            let end = minibroker_records::end_offset(&batch);
            if end <= map.end() {
                return Ok(true);
            }
            if end > rules.stable_offset {
                // An open transaction's batches (or what follows them): not mapped yet.
                full = true;
                return Ok(false);
            }
            if rules.passes_over(&batch) {
                map.pass_over(&batch);
                return Ok(true);
            }
            full = !map.add(&batch)?;
            Ok(!full)
        })?;
        if full {
            break;
        }
    }
    if map.end() <= cleaned_through && !rules.sweep {
        return Ok(None);
    }
    stats.keys = map.len() as u64;
    let rewritten = pieces.partition_point(|piece| piece.base() < map.end());
    for (index, piece) in pieces[..rewritten].iter().enumerate() {
        let mut held: Option<Bytes> = None;
        let mut pass_on = |batch: Bytes, last: bool, stats: &mut CleanStats| {
            throttle.account(batch.len() as u64);
            stats.bytes_before += batch.len() as u64;
            let kept = match rules.clean(&map, &batch, last, stats)? {
                BatchCleaned::Whole => Some(batch),
                BatchCleaned::Rewritten(rewritten) => Some(rewritten),
                BatchCleaned::Dropped => {
                    stats.batches_dropped += 1;
                    None
                }
            };
            if let Some(kept) = kept {
                stats.bytes_after += kept.len() as u64;
                throttle.account(kept.len() as u64);
                keep(index, kept)?;
            }
            Ok::<(), LogError>(())
        };
        piece.for_each_batch(&mut |batch| {
            if let Some(previous) = held.replace(batch) {
                pass_on(previous, false, stats)?;
            }
            Ok(true)
        })?;
        if let Some(last) = held {
            pass_on(last, true, stats)?;
        }
    }
    Ok(Some((map.end(), rewritten)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use minibroker_records::{NewRecord, Writer, encode, set_base_offset};

    fn batch(base: i64, producer_id: i64, records: &[(&str, Option<&str>, i64)]) -> Bytes {
        let writer = Writer {
            producer_id,
            epoch: 0,
            base_sequence: base as i32,
        };
        let records: Vec<NewRecord> = records
            .iter()
            .map(|(key, value, timestamp)| NewRecord {
                key: Some(Bytes::copy_from_slice(key.as_bytes())),
                value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                headers: Vec::new(),
                timestamp: Some(*timestamp),
            })
            .collect();
        let mut bytes = encode(writer, &records, 0).unwrap().to_vec();
        set_base_offset(&mut bytes, base);
        bytes.into()
    }

    fn kept_keys(cleaned: &BatchCleaned, original: &[u8]) -> Vec<i64> {
        let bytes: &[u8] = match cleaned {
            BatchCleaned::Whole => original,
            BatchCleaned::Rewritten(bytes) => bytes,
            BatchCleaned::Dropped => return Vec::new(),
        };
        let mut offsets = Vec::new();
        for_each_record(bytes, |r| offsets.push(r.offset)).unwrap();
        offsets
    }

    /// What `cleaned` holds of `original`: (offset, timestamp) of each record kept.
    fn kept_records(cleaned: &BatchCleaned, original: &[u8]) -> Vec<(i64, i64)> {
        let bytes: &[u8] = match cleaned {
            BatchCleaned::Whole => original,
            BatchCleaned::Rewritten(bytes) => bytes,
            BatchCleaned::Dropped => return Vec::new(),
        };
        let mut records = Vec::new();
        for_each_record(bytes, |r| records.push((r.offset, r.timestamp))).unwrap();
        records
    }

    #[test]
    fn the_newest_record_of_each_key_stays_and_a_tombstone_goes_after_its_horizon() {
        let first = batch(0, 1, &[("a", Some("1"), 10), ("b", Some("1"), 10)]);
        let second = batch(2, 1, &[("a", Some("2"), 20), ("b", None, 20)]);
        let mut map = OffsetMap::new(1 << 20, 0);
        for b in [&first, &second] {
            assert!(map.add(b).unwrap());
        }
        assert_eq!((map.len(), map.end()), (2, 4));
        let rules = CleanRules {
            now_ms: 1_000,
            delete_retention_ms: 100,
            kept_batches: HashSet::from([4]),
            ..CleanRules::default()
        };
        let mut stats = CleanStats::default();
        // Both records superseded, not the last batch of anything: dropped.
        assert_eq!(
            rules.clean(&map, &first, false, &mut stats).unwrap(),
            BatchCleaned::Dropped
        );
        // Ends its piece: kept as an empty header.
        let emptied = rules.clean(&map, &first, true, &mut stats).unwrap();
        assert!(matches!(emptied, BatchCleaned::Rewritten(_)));
        assert!(kept_keys(&emptied, &first).is_empty());
        // b's tombstone is seen for the first time, however old its own timestamp: it stays, its
        // batch stamped with the horizon, every record with its own timestamp.
        let stamped = rules.clean(&map, &second, false, &mut stats).unwrap();
        assert_eq!(kept_records(&stamped, &second), [(2, 20), (3, 20)]);
        let BatchCleaned::Rewritten(stamped) = stamped else {
            panic!("stamped: {stamped:?}")
        };
        assert_eq!(minibroker_records::delete_horizon(&stamped), Some(1_100));
        assert_eq!(stats.earliest_horizon, Some(1_100));
        // Before its horizon it stays as it is; from it, it goes.
        let before = CleanRules {
            now_ms: 1_099,
            ..rules.clone()
        };
        assert_eq!(
            before.clean(&map, &stamped, false, &mut stats).unwrap(),
            BatchCleaned::Whole
        );
        let after = CleanRules {
            now_ms: 1_100,
            ..rules.clone()
        };
        let mut swept = CleanStats::default();
        let cleaned = after.clean(&map, &stamped, false, &mut swept).unwrap();
        assert_eq!(kept_records(&cleaned, &stamped), [(2, 20)]);
        assert_eq!(swept.earliest_horizon, None);
        // Past what was mapped, a tombstone is not seen: untouched.
        let short = {
            let mut map = OffsetMap::new(1 << 20, 0);
            map.add(&first).unwrap();
            map
        };
        assert_eq!(
            rules.clean(&short, &second, false, &mut stats).unwrap(),
            BatchCleaned::Whole
        );
    }

    #[test]
    fn the_map_refuses_a_batch_whose_new_keys_pass_its_budget_and_adds_none_of_them() {
        let mut map = OffsetMap::new(2 * (1 + ENTRY_OVERHEAD), 0);
        assert!(
            map.add(&batch(0, 1, &[("a", Some("1"), 0), ("b", Some("1"), 0)]))
                .unwrap()
        );
        // Known keys cost nothing more.
        assert!(map.add(&batch(2, 1, &[("a", Some("2"), 0)])).unwrap());
        assert!(
            !map.add(&batch(3, 1, &[("a", Some("3"), 0), ("c", Some("1"), 0)]))
                .unwrap()
        );
        assert_eq!((map.len(), map.end()), (2, 3));
        assert!(!map.newest.contains_key(&b"c"[..]));
        // A known key moved on to the refused batch's record: it names a newer record, and
        // one the pass keeps (past the map's end).
        assert_eq!(map.newest.get(&b"a"[..]), Some(&3));
    }
}
