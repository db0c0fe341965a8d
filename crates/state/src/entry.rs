//! What the broker remembers about one producer on one partition.
//!
//! An entry holds the producer's current epoch and the metadata of its last
//! [`CACHED_BATCHES`] accepted batches of that epoch, newest first. The last accepted sequence is
//! the newest batch's last sequence, so it is not stored twice. A transaction marker may raise the
//! epoch without a batch (an abort that fences the producer's older instance): the entry then holds
//! no batch, and the producer's next batch must start a session at sequence 0. While a batch of
//! the producer's open transaction is in the partition the entry says so, and it does not expire. The cache is a fixed array rather than a
//! `VecDeque` so an entry is one flat, allocation-free value (it lives inline in the shard's map).

use crate::{SequenceRange, next_sequence};

/// How many recent batches an entry remembers for answering duplicates with their offsets.
/// Kafka keeps five, matching its limit of five in-flight requests per connection.
pub const CACHED_BATCHES: usize = 5;

/// The base offset recorded for a batch appended without a log (the seed API); never reported.
pub(crate) const NO_OFFSET: i64 = -1;

/// Metadata of one accepted batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchMetadata {
    /// First sequence the batch occupied.
    pub first_sequence: i32,
    /// Last sequence the batch occupied.
    pub last_sequence: i32,
    /// Offset of the batch's first record in the partition log, if it was appended to one.
    pub base_offset: Option<i64>,
}

/// The state of one (partition, producer id) pair. Only an ACCEPTED batch changes it.
///
/// Within an epoch the accepted batches are contiguous (each starts right after the one
/// before), so only each batch's *last* sequence is stored, plus the first sequence of the oldest
/// cached batch; the others' first sequences follow. That keeps an entry at 80 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerEntry {
    /// Base offsets of the cached batches, newest first ([`NO_OFFSET`] when appended without a
    /// log).
    base_offsets: [i64; CACHED_BATCHES],
    /// Last sequences of the cached batches, newest first.
    last_sequences: [i32; CACHED_BATCHES],
    /// When the last batch was accepted (the broker's clock, milliseconds): idle entries expire.
    last_timestamp: i64,
    /// First sequence of the oldest cached batch.
    oldest_first_sequence: i32,
    epoch: i16,
    /// How many slots hold batches (0 to [`CACHED_BATCHES`]; 0 only after a marker raised the
    /// epoch).
    cached: u8,
    /// Whether the producer has a transaction open on the partition (a transactional batch
    /// written, its marker not yet).
    in_transaction: bool,
}

impl ProducerEntry {
    /// The entry created by a producer's first accepted batch on a partition.
    pub(crate) fn new(epoch: i16, batch: SequenceRange, base_offset: i64, now_ms: i64) -> Self {
        let mut entry = Self {
            base_offsets: [NO_OFFSET; CACHED_BATCHES],
            last_sequences: [0; CACHED_BATCHES],
            last_timestamp: now_ms,
            oldest_first_sequence: batch.first(),
            epoch,
            cached: 0,
            in_transaction: false,
        };
        entry.push(batch, base_offset);
        entry
    }

    /// The entry a transaction marker leaves for a producer with no batch on the partition yet:
    /// its epoch only.
    pub(crate) fn fenced_at(epoch: i16, now_ms: i64) -> Self {
        Self {
            base_offsets: [NO_OFFSET; CACHED_BATCHES],
            last_sequences: [0; CACHED_BATCHES],
            last_timestamp: now_ms,
            oldest_first_sequence: 0,
            epoch,
            cached: 0,
            in_transaction: false,
        }
    }

    /// Records an accepted batch. A new epoch starts a new session, whose cache starts empty.
    pub(crate) fn record(
        &mut self,
        epoch: i16,
        batch: SequenceRange,
        base_offset: i64,
        now_ms: i64,
    ) {
        self.raise_epoch(epoch);
        self.last_timestamp = self.last_timestamp.max(now_ms);
        self.push(batch, base_offset);
    }

    /// Moves the entry to `epoch`, a new session whose cache starts empty (nothing changes for
    /// the current epoch).
    fn raise_epoch(&mut self, epoch: i16) {
        if epoch != self.epoch {
            // Cleared, not just emptied: equal entries are then equal in every slot.
            self.epoch = epoch;
            self.cached = 0;
            self.oldest_first_sequence = 0;
            self.base_offsets = [NO_OFFSET; CACHED_BATCHES];
            self.last_sequences = [0; CACHED_BATCHES];
        }
    }

    /// Records a transaction marker written at `epoch` (never below the entry's): the open
    /// transaction is closed, and a higher epoch starts a session with no batch yet.
    pub(crate) fn end_transaction(&mut self, epoch: i16, now_ms: i64) {
        self.raise_epoch(epoch);
        self.in_transaction = false;
        self.last_timestamp = self.last_timestamp.max(now_ms);
    }

    /// Marks the producer's transaction open on the partition (a transactional batch was
    /// written).
    pub(crate) fn begin_transaction(&mut self) {
        self.in_transaction = true;
    }

    /// Whether the producer has a transaction open on the partition.
    #[must_use]
    pub fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// An entry rebuilt from its parts (a snapshot), newest batch first; `None` unless the parts
    /// describe an entry the rule could have made: up to [`CACHED_BATCHES`] batches of
    /// non-negative sequences, each beginning right after the one before (none only when a marker
    /// raised the epoch).
    #[must_use]
    pub fn from_parts(
        epoch: i16,
        last_timestamp: i64,
        batches: &[BatchMetadata],
        in_transaction: bool,
    ) -> Option<Self> {
        if epoch < 0 || batches.len() > CACHED_BATCHES {
            return None;
        }
        let mut entry = Self::fenced_at(epoch, last_timestamp);
        entry.in_transaction = in_transaction;
        for batch in batches.iter().rev() {
            let range = SequenceRange::between(batch.first_sequence, batch.last_sequence)?;
            if let Some(last) = entry.last_sequence()
                && batch.first_sequence != next_sequence(last)
            {
                return None;
            }
            entry.push(range, batch.base_offset.unwrap_or(NO_OFFSET));
        }
        Some(entry)
    }

    /// When the producer's last batch here was accepted (the broker's clock, milliseconds).
    #[must_use]
    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }

    fn push(&mut self, batch: SequenceRange, base_offset: i64) {
        let cached = usize::from(self.cached);
        if cached == 0 {
            self.oldest_first_sequence = batch.first();
        } else if cached == CACHED_BATCHES {
            // The oldest batch falls out; the next oldest starts right after it.
            self.oldest_first_sequence = next_sequence(self.last_sequences[CACHED_BATCHES - 1]);
        }
        self.base_offsets.copy_within(0..CACHED_BATCHES - 1, 1);
        self.last_sequences.copy_within(0..CACHED_BATCHES - 1, 1);
        self.base_offsets[0] = base_offset;
        self.last_sequences[0] = batch.last();
        self.cached = (self.cached + 1).min(CACHED_BATCHES as u8);
    }

    /// The producer's current epoch on this partition.
    #[must_use]
    pub fn epoch(&self) -> i16 {
        self.epoch
    }

    /// The last sequence accepted in the current epoch; `None` when a marker raised the epoch
    /// and no batch followed yet.
    #[must_use]
    pub fn last_sequence(&self) -> Option<i32> {
        // Slot 0 holds the newest batch whenever any is cached.
        (self.cached > 0).then_some(self.last_sequences[0])
    }

    /// The cached batches, newest first.
    pub fn batches(&self) -> impl ExactSizeIterator<Item = BatchMetadata> + '_ {
        let cached = usize::from(self.cached);
        (0..cached).map(move |i| BatchMetadata {
            first_sequence: if i + 1 < cached {
                next_sequence(self.last_sequences[i + 1])
            } else {
                self.oldest_first_sequence
            },
            last_sequence: self.last_sequences[i],
            base_offset: (self.base_offsets[i] != NO_OFFSET).then_some(self.base_offsets[i]),
        })
    }

    /// The cached batch that occupied exactly `range`, if any.
    #[must_use]
    pub fn cached_batch(&self, range: SequenceRange) -> Option<BatchMetadata> {
        self.batches().find(|batch| {
            batch.first_sequence == range.first() && batch.last_sequence == range.last()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(s: i32) -> SequenceRange {
        SequenceRange::single(s).unwrap()
    }

    #[test]
    fn cache_keeps_the_last_five_newest_first() {
        let mut entry = ProducerEntry::new(0, seq(0), 100, 0);
        for s in 1..8 {
            entry.record(0, seq(s), 100 + i64::from(s), 0);
        }
        let firsts: Vec<i32> = entry.batches().map(|b| b.first_sequence).collect();
        assert_eq!(firsts, vec![7, 6, 5, 4, 3]);
        assert_eq!(entry.last_sequence(), Some(7));
        assert_eq!(entry.cached_batch(seq(3)).unwrap().base_offset, Some(103));
        assert_eq!(entry.cached_batch(seq(2)), None);
    }

    #[test]
    fn new_epoch_clears_the_cache() {
        let mut entry = ProducerEntry::new(0, seq(0), 0, 0);
        entry.record(0, seq(1), 1, 0);
        entry.record(1, seq(0), 2, 0);
        assert_eq!(entry.epoch(), 1);
        assert_eq!(entry.batches().len(), 1);
        assert_eq!(entry.cached_batch(seq(1)), None);
    }

    #[test]
    fn a_marker_at_a_higher_epoch_leaves_no_batch() {
        let mut entry = ProducerEntry::new(0, seq(0), 0, 0);
        entry.begin_transaction();
        entry.end_transaction(0, 5);
        assert_eq!((entry.epoch(), entry.last_sequence()), (0, Some(0)));
        assert!(!entry.in_transaction());
        entry.end_transaction(1, 6);
        assert_eq!((entry.epoch(), entry.last_sequence()), (1, None));
        assert_eq!(entry.batches().len(), 0);
        assert_eq!(entry, ProducerEntry::fenced_at(1, 6));
    }

    #[test]
    fn no_offset_is_reported_as_none() {
        let entry = ProducerEntry::new(0, seq(0), NO_OFFSET, 0);
        assert_eq!(entry.batches().next().unwrap().base_offset, None);
    }

    #[test]
    fn entry_is_compact() {
        assert_eq!(std::mem::size_of::<ProducerEntry>(), 80);
    }

    #[test]
    fn multi_sequence_batches_keep_their_first_sequences_as_they_age() {
        let span = |first, count| SequenceRange::spanning(first, count).unwrap();
        let mut entry = ProducerEntry::new(0, span(0, 3), 0, 0); // 0..=2
        let mut next = 3;
        for count in [2, 4, 1, 5, 3, 2] {
            entry.record(0, span(next, count), i64::from(next), 0);
            next += count as i32;
        }
        let ranges: Vec<(i32, i32)> = entry
            .batches()
            .map(|b| (b.first_sequence, b.last_sequence))
            .collect();
        assert_eq!(ranges, vec![(18, 19), (15, 17), (10, 14), (9, 9), (5, 8)]);
    }
}
