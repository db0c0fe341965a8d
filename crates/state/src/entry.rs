//! What the broker remembers about one producer on one partition.
//!
//! An entry holds the producer's current epoch and the metadata of its last
//! [`CACHED_BATCHES`] accepted batches, newest first. The last accepted sequence is the newest
//! batch's last sequence, so it is not stored twice. The cache is a fixed array rather than a
//! `VecDeque` so an entry is one flat allocation-free value (it lives inline in the shard's map).

use crate::SequenceRange;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerEntry {
    epoch: i16,
    cached: u8,
    /// Newest first; only the first `cached` slots are meaningful.
    batches: [RawBatch; CACHED_BATCHES],
}

/// The compact form kept in the cache: the offset uses [`NO_OFFSET`] instead of an `Option`, which
/// keeps the slot at 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct RawBatch {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: i64,
}

impl RawBatch {
    fn public(self) -> BatchMetadata {
        BatchMetadata {
            first_sequence: self.first_sequence,
            last_sequence: self.last_sequence,
            base_offset: (self.base_offset != NO_OFFSET).then_some(self.base_offset),
        }
    }
}

impl ProducerEntry {
    /// The entry created by a producer's first accepted batch on a partition.
    pub(crate) fn new(epoch: i16, batch: SequenceRange, base_offset: i64) -> Self {
        let mut entry = Self {
            epoch,
            cached: 0,
            batches: [RawBatch::default(); CACHED_BATCHES],
        };
        entry.push(batch, base_offset);
        entry
    }

    /// Records an accepted batch. A new epoch starts a new session, whose cache starts empty.
    pub(crate) fn record(&mut self, epoch: i16, batch: SequenceRange, base_offset: i64) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.cached = 0;
        }
        self.push(batch, base_offset);
    }

    fn push(&mut self, batch: SequenceRange, base_offset: i64) {
        self.batches.copy_within(0..CACHED_BATCHES - 1, 1);
        self.batches[0] = RawBatch {
            first_sequence: batch.first(),
            last_sequence: batch.last(),
            base_offset,
        };
        self.cached = (self.cached + 1).min(CACHED_BATCHES as u8);
    }

    /// The producer's current epoch on this partition.
    #[must_use]
    pub fn epoch(&self) -> i16 {
        self.epoch
    }

    /// The last sequence accepted in the current epoch.
    #[must_use]
    pub fn last_sequence(&self) -> i32 {
        // An entry is only ever created with one batch and the cache is refilled on an epoch
        // change in the same call, so slot 0 always holds the newest batch.
        self.batches[0].last_sequence
    }

    /// The cached batches, newest first.
    pub fn batches(&self) -> impl ExactSizeIterator<Item = BatchMetadata> + '_ {
        self.batches[..usize::from(self.cached)]
            .iter()
            .map(|raw| raw.public())
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
        let mut entry = ProducerEntry::new(0, seq(0), 100);
        for s in 1..8 {
            entry.record(0, seq(s), 100 + i64::from(s));
        }
        let firsts: Vec<i32> = entry.batches().map(|b| b.first_sequence).collect();
        assert_eq!(firsts, vec![7, 6, 5, 4, 3]);
        assert_eq!(entry.last_sequence(), 7);
        assert_eq!(entry.cached_batch(seq(3)).unwrap().base_offset, Some(103));
        assert_eq!(entry.cached_batch(seq(2)), None);
    }

    #[test]
    fn new_epoch_clears_the_cache() {
        let mut entry = ProducerEntry::new(0, seq(0), 0);
        entry.record(0, seq(1), 1);
        entry.record(1, seq(0), 2);
        assert_eq!(entry.epoch(), 1);
        assert_eq!(entry.batches().len(), 1);
        assert_eq!(entry.cached_batch(seq(1)), None);
    }

    #[test]
    fn no_offset_is_reported_as_none() {
        let entry = ProducerEntry::new(0, seq(0), NO_OFFSET);
        assert_eq!(entry.batches().next().unwrap().base_offset, None);
    }

    #[test]
    fn entry_is_compact() {
        assert!(std::mem::size_of::<ProducerEntry>() <= 88);
    }
}
