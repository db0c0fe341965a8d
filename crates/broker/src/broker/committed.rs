//! A broker of a cluster keeps, besides nothing else, a copy of what the cluster's database
//! committed: the database judged and numbered each batch (`minibroker_cluster`), so here a batch
//! is only placed at the offset it was given, without the rule. Fetch, ListOffsets and Metadata
//! then read this copy exactly as they read a single broker's own log, and never see a batch the
//! database has not committed. Transactional batches and markers are placed as they were judged
//! there, opening and ending their transactions in the copy, so the copy's last stable offset and
//! aborted transactions are the database's.

use minibroker_records::Inspected;

use super::{AppendedHere, Write};
use crate::topics::CreateCheck;
use crate::{Broker, BrokerError};

/// Where a committed batch landed in the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// Appended at its offset.
    Appended,
    /// The copy held it already (it begins below the copy's end).
    Held,
}

impl Broker {
    /// `topic` with at least `partitions` partitions, as the cluster has it: created, or grown,
    /// when this broker's copy has fewer.
    ///
    /// # Errors
    /// A bad name, or a partition or storage limit of this broker.
    pub fn hold_topic(&self, topic: &str, partitions: u32) -> Result<(), BrokerError> {
        match self.topics.get(topic) {
            Ok(found) if found.partition_count() >= partitions => Ok(()),
            Ok(_) => self.create_partitions(topic, partitions, false),
            Err(error) if error.kind() == crate::ErrorKind::UnknownTopic => {
                match self.create_topic(topic, partitions) {
                    // Created meanwhile (by a request of this broker's own).
                    Err(error) if error.kind() == crate::ErrorKind::TopicAlreadyExists => {
                        self.hold_topic(topic, partitions)
                    }
                    created => created,
                }
            }
            Err(error) => Err(error),
        }
    }

    /// Places `batch`, which the cluster committed at `base_offset` of `topic`/`partition`, in
    /// this broker's copy, and wakes the fetches waiting there.
    ///
    /// # Errors
    /// An unknown topic or partition; a batch that does not read; a gap (`base_offset` past
    /// the copy's end: a batch before it is missing); a storage limit.
    pub fn place_committed(
        &self,
        topic: &str,
        partition: u32,
        base_offset: i64,
        batch: &[u8],
    ) -> Result<Placed, BrokerError> {
        let found = self.topics.get_or_create(
            topic,
            CreateCheck {
                partition,
                bytes: 0,
            },
        )?;
        let target = found.partition(partition)?;
        let end = target.log().log.next_offset();
        if base_offset < end {
            return Ok(Placed::Held);
        }
        if base_offset > end {
            return Err(BrokerError::CopyGap {
                topic: topic.to_owned(),
                partition,
                end,
                base_offset,
            });
        }
        let inspected = Inspected::new(batch)?;
        let info = *inspected.info();
        // A marker ends its transaction in the copy as it did in the database; a transactional
        // batch opens or joins one.
        let marker = if info.control {
            minibroker_records::marker(&bytes::Bytes::copy_from_slice(batch))?
        } else {
            None
        };
        let write = marker.map_or(Write::Placed, |marker| Write::Marker {
            commit: marker.commit,
        });
        let now_ms = crate::clock::now_millis();
        let mut appended = AppendedHere::default();
        self.append(target, batch, &info, write, now_ms, &mut appended)?;
        let verdict = minibroker_state::Verdict {
            outcome: minibroker_state::Outcome::Accepted,
            base_offset: Some(base_offset),
            known_producer: true,
        };
        Self::count(target, &verdict, &info, batch.len());
        Ok(Placed::Appended)
    }

    /// Moves the start of this broker's copy of `topic`/`partition` up to `start`, where the
    /// cluster's start now is (DeleteRecords or retention on any broker), and returns the copy's
    /// start after it. A copy that ends below `start` starts again, empty, at `start`: what it
    /// lacked was deleted before it was copied.
    ///
    /// # Errors
    /// An unknown topic or partition.
    pub fn follow_committed_start(
        &self,
        topic: &str,
        partition: u32,
        start: i64,
    ) -> Result<i64, BrokerError> {
        let found = self.topics.get(topic)?;
        let target = found.partition(partition)?;
        let mut data = target.log();
        if start <= data.log.start_offset() {
            return Ok(data.log.start_offset());
        }
        let released = data.log.restart_at(start)?;
        Ok(self.dropped_from_front(&mut data, released))
    }

    /// The transactions open in this broker's copy of `topic`/`partition` become `open`
    /// (producer id, first offset): a copy that starts again at a new offset (it skipped what
    /// lay before) learns from the cluster which transactions begun before it are still open,
    /// so its last stable offset holds back for them.
    ///
    /// # Errors
    /// An unknown topic or partition.
    pub fn follow_open_transactions(
        &self,
        topic: &str,
        partition: u32,
        open: &[(i64, i64)],
    ) -> Result<(), BrokerError> {
        let found = self.topics.get(topic)?;
        let target = found.partition(partition)?;
        target.log().transactions.replace_open(open.iter().copied());
        Ok(())
    }

    /// Drops the oldest batches of this broker's copy of `topic`/`partition` while it would
    /// still hold `bytes` without them: the copy is a cache, and what it no longer holds is
    /// read from the cluster. Returns the bytes the copy holds after it.
    ///
    /// # Errors
    /// An unknown topic or partition.
    pub fn trim_copy(&self, topic: &str, partition: u32, bytes: usize) -> Result<u64, BrokerError> {
        let found = self.topics.get(topic)?;
        let target = found.partition(partition)?;
        let mut data = target.log();
        let released = data.log.trim_to(bytes);
        if released != minibroker_log::Released::default() {
            self.dropped_from_front(&mut data, released);
        }
        Ok(data.log.stored_bytes())
    }
}
