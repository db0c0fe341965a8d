//! Compaction of an in-memory log (`crate::cleaner`'s rule): its full chunks are the pieces. A
//! pass is planned under the partition's lock ([`MemoryLog::clean_plan`]: the chunks' frozen
//! bytes, shared, not copied), run without it ([`MemoryClean::run`]: the new chunks built), and
//! its chunks swapped in under the lock again ([`MemoryLog::commit_clean`]); the chunk being
//! filled is never touched.

use bytes::{Bytes, BytesMut};

use super::{Chunk, Entry, MemoryLog};
use crate::cleaner::{CleanRules, CleanStats, Piece, Throttle, run_pass};
use crate::{LogError, Released};

/// One full chunk, as a pass reads it.
#[derive(Debug)]
struct MemoryPiece {
    first_offset: i64,
    end: i64,
    batches: Vec<Bytes>,
}

impl Piece for MemoryPiece {
    fn base(&self) -> i64 {
        self.first_offset
    }

    fn end(&self) -> i64 {
        self.end
    }

    fn for_each_batch(
        &self,
        each: &mut dyn FnMut(Bytes) -> Result<bool, LogError>,
    ) -> Result<(), LogError> {
        for batch in &self.batches {
            if !each(batch.clone())? {
                break;
            }
        }
        Ok(())
    }
}

/// A pass planned over an in-memory log's cleanable chunks.
#[derive(Debug)]
pub struct MemoryClean {
    pieces: Vec<MemoryPiece>,
    cleaned_through: i64,
}

/// A pass's chunks, to swap in ([`MemoryLog::commit_clean`]).
#[derive(Debug)]
pub struct MemoryCleaned {
    chunks: Vec<NewChunk>,
    cleaned_through: i64,
}

/// A rewritten chunk, built outside the lock: its first offset, bytes and batches.
#[derive(Debug)]
struct NewChunk {
    first_offset: i64,
    bytes: Bytes,
    entries: Vec<Entry>,
    max_timestamp: i64,
}

impl NewChunk {
    fn new(first_offset: i64, batches: &[Bytes]) -> Self {
        let mut bytes = BytesMut::with_capacity(batches.iter().map(Bytes::len).sum());
        let mut entries = Vec::with_capacity(batches.len());
        let mut max_timestamp = i64::MIN;
        for batch in batches {
            let base_offset = minibroker_records::base_offset(batch);
            entries.push(Entry {
                base_offset,
                // A stored batch spans at most the u32 its record count was.
                offsets: (minibroker_records::end_offset(batch) - base_offset) as u32,
                start: bytes.len() as u32,
                len: batch.len() as u32,
            });
            max_timestamp = max_timestamp.max(minibroker_records::max_timestamp(batch));
            bytes.extend_from_slice(batch);
        }
        Self {
            first_offset,
            bytes: bytes.freeze(),
            entries,
            max_timestamp,
        }
    }
}

impl MemoryClean {
    /// Runs the pass (no lock needed): maps the dirty chunks within `map_budget` bytes of keys
    /// and rewrites the chunks up to what it mapped. `None` when nothing is dirty.
    ///
    /// # Errors
    /// [`LogError::Damaged`] for a stored batch that does not read.
    pub fn run(
        self,
        map_budget: usize,
        rules: &CleanRules,
        stats: &mut CleanStats,
    ) -> Result<Option<MemoryCleaned>, LogError> {
        let mut chunks: Vec<(i64, Vec<Bytes>)> = self
            .pieces
            .iter()
            .map(|piece| (piece.first_offset, Vec::new()))
            .collect();
        let mut throttle = Throttle::new(None);
        let mut keep = |index: usize, batch: Bytes| {
            chunks[index].1.push(batch);
            Ok(())
        };
        let Some((cleaned_through, rewritten)) = run_pass(
            &self.pieces,
            self.cleaned_through,
            map_budget,
            rules,
            &mut throttle,
            stats,
            &mut keep,
        )?
        else {
            return Ok(None);
        };
        chunks.truncate(rewritten);
        Ok(Some(MemoryCleaned {
            chunks: chunks
                .iter()
                .map(|(first_offset, batches)| NewChunk::new(*first_offset, batches))
                .collect(),
            cleaned_through,
        }))
    }
}

impl MemoryLog {
    /// The full chunks (oldest first) whose newest record is at or before `cutoff_ms`
    /// (`min.compaction.lag.ms` ago), as a pass to run; `None` when none of them is dirty (or,
    /// with `sweep`, when there are none).
    pub fn clean_plan(&mut self, cutoff_ms: i64, sweep: bool) -> Option<MemoryClean> {
        self.freeze_written();
        let full = self.chunks.len().saturating_sub(1);
        let pieces: Vec<MemoryPiece> = self
            .chunks
            .iter()
            .take(full)
            .take_while(|chunk| chunk.max_timestamp <= cutoff_ms)
            .map(|chunk| MemoryPiece {
                first_offset: chunk.first_offset,
                end: chunk
                    .entries
                    .last()
                    .map_or(chunk.first_offset, Entry::end_offset),
                batches: chunk
                    .entries
                    .iter()
                    .map(|entry| chunk.slice(entry))
                    .collect(),
            })
            .collect();
        let cleaned_through = self.cleaned_through.max(self.start_offset());
        let dirty = pieces.iter().any(|piece| piece.end > cleaned_through);
        (dirty || (sweep && !pieces.is_empty())).then_some(MemoryClean {
            pieces,
            cleaned_through,
        })
    }

    /// Bytes of the full chunks whose newest record is at or before `cutoff_ms`: (dirty, all).
    #[must_use]
    pub fn cleanable_bytes(&self, cutoff_ms: i64) -> (u64, u64) {
        let full = self.chunks.len().saturating_sub(1);
        self.chunks
            .iter()
            .take(full)
            .take_while(|chunk| chunk.max_timestamp <= cutoff_ms)
            .fold((0, 0), |(dirty, all), chunk| {
                let end = chunk.entries.last().map_or(0, Entry::end_offset);
                let bytes = chunk.bytes as u64;
                let dirty_bytes = if end > self.cleaned_through { bytes } else { 0 };
                (dirty + dirty_bytes, all + bytes)
            })
    }

    /// Swaps in what a pass kept of each chunk it rewrote (a chunk retention dropped meanwhile
    /// is passed over); returns what was freed.
    pub fn commit_clean(&mut self, cleaned: MemoryCleaned) -> Released {
        let mut freed = Released::default();
        for new in cleaned.chunks {
            let Some(chunk) = self
                .chunks
                .iter_mut()
                .find(|chunk| chunk.first_offset == new.first_offset)
            else {
                continue;
            };
            let len = new.bytes.len();
            freed += Released {
                batches: (chunk.entries.len() - new.entries.len()) as u64,
                // A little larger with a delete horizon's rebased timestamp deltas.
                bytes: chunk.bytes.saturating_sub(len) as u64,
            };
            self.stored_bytes = self.stored_bytes - chunk.bytes + len;
            self.batch_count -= chunk.entries.len() - new.entries.len();
            *chunk = Chunk {
                first_offset: new.first_offset,
                bytes: len,
                pieces: vec![(0, new.bytes)],
                entries: new.entries,
                max_timestamp: new.max_timestamp,
                max_timestamp_before: chunk.max_timestamp_before,
                rest: None,
            };
        }
        self.cleaned_through = self.cleaned_through.max(cleaned.cleaned_through);
        freed
    }
}
