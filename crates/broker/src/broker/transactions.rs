//! The partition side of transactions (KIP-98): the coordinator adds a partition to a producer's
//! transaction, the producer's transactional batches are accepted there only then, and the
//! coordinator's COMMIT or ABORT marker ends it. Each partition keeps its open and aborted
//! transactions (`minibroker_state::PartitionTransactions`) beside its log, under the log's lock,
//! so the last stable offset a `read_committed` fetch reads up to always agrees with the log.
//!
//! A marker goes through the exactly-once rule's shard lock like a batch (`ProducerStateManager::
//! end_transaction`): it is refused if the producer's epoch on the partition is above the
//! marker's, and a higher epoch fences the producer's older instance there.

use minibroker_records::{BatchInfo, Marker};
use minibroker_state::MarkerVerdict;

use super::{AppendedHere, Write};
use crate::unacknowledged::{Left, Unacknowledged};
use crate::{Broker, BrokerError};

/// What a fetch may see of transactions, as Kafka's `isolation_level` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Everything up to the high watermark, aborted records included.
    #[default]
    ReadUncommitted,
    /// Only up to the last stable offset, with the aborted transactions to drop.
    ReadCommitted,
}

/// Refuses a producer's batch that does not fit its transaction on the partition: a
/// transactional batch its coordinator has not added the partition for at this epoch (KIP-890
/// part 1: a late batch of an ended transaction would open one no coordinator ever ends), one of
/// an epoch whose abort came here before any of its batches (it may be that transaction's late
/// batch; the producer must move to a new epoch), or a plain batch while its transaction is open
/// here.
pub(super) fn check_fits(
    transactions: &minibroker_state::PartitionTransactions,
    info: &BatchInfo,
) -> Result<(), BrokerError> {
    if info.transactional {
        if !transactions.is_expected(info.producer_id, info.epoch) {
            return Err(not_added(info));
        }
        if transactions.was_aborted_unwritten(info.producer_id, info.epoch) {
            return Err(BrokerError::AbortedEpoch {
                producer_id: info.producer_id,
                epoch: info.epoch,
            });
        }
    } else if transactions.is_open(info.producer_id) {
        return Err(BrokerError::InvalidTxnState {
            producer_id: info.producer_id,
            epoch: info.epoch,
            reason: "a non-transactional batch while the producer's transaction is open on the partition",
        });
    }
    Ok(())
}

/// The refusal of a transactional batch for a partition its transaction has not added.
pub(super) fn not_added(info: &BatchInfo) -> BrokerError {
    BrokerError::NotAddedToTransaction {
        producer_id: info.producer_id,
        epoch: info.epoch,
    }
}

impl Broker {
    /// The transaction coordinator added `topic`/`partition` to the ongoing transaction of
    /// `producer_id` at `epoch`: its transactional batches are accepted there until the marker.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn add_to_transaction(
        &self,
        topic: &str,
        partition: u32,
        producer_id: i64,
        epoch: i16,
    ) -> Result<(), BrokerError> {
        let topic = self.topics.get(topic)?;
        let partition = topic.partition(partition)?;
        partition.log().transactions.expect(producer_id, epoch);
        Ok(())
    }

    /// Whether `topic`/`partition` takes the transactional batches of `producer_id` at `epoch`:
    /// its coordinator added it to the producer's transaction at that epoch. A Produce that adds
    /// its partitions itself (v12) asks first, and adds only those that do not.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn expects_transactional(
        &self,
        topic: &str,
        partition: u32,
        producer_id: i64,
        epoch: i16,
    ) -> Result<bool, BrokerError> {
        let topic = self.topics.get(topic)?;
        let partition = topic.partition(partition)?;
        Ok(partition.log().transactions.is_expected(producer_id, epoch))
    }

    /// Writes the COMMIT (`commit`) or ABORT marker that ends the transaction of `producer_id` at
    /// `epoch` on `topic`/`partition`, and wakes the fetches waiting there (a `read_committed`
    /// one waits for the last stable offset to move). Like a produce, the marker is stored only
    /// once `unacknowledged.commit()` returns `Ok`; the coordinator completes the transaction
    /// after that.
    ///
    /// # Errors
    /// Unknown topic or partition; [`BrokerError::MarkerFenced`] when the producer's epoch on the
    /// partition is above `epoch`; a full store; a storage error (the partition is read-only).
    pub fn write_marker(
        &self,
        unacknowledged: &mut Unacknowledged,
        topic: &str,
        partition: u32,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<(), BrokerError> {
        let target = unacknowledged
            .get(&self.topics, topic)?
            .partition(partition)?;
        target.refuse_if_read_only()?;
        let now_ms = crate::clock::now_millis();
        let marker = Marker {
            commit,
            // One coordinator, whose epoch never changes.
            coordinator_epoch: 0,
        };
        let batch = minibroker_records::encode_marker(producer_id, epoch, marker, now_ms)?;
        let info = minibroker_records::inspect(&batch)?;
        let mut appended = AppendedHere::default();
        let written = self
            .state
            .end_transaction(target.id, producer_id, epoch, now_ms, || {
                let write = Write::Marker { commit };
                self.append(target, &batch, &info, write, now_ms, &mut appended)
            })?;
        let offset = match written {
            MarkerVerdict::Written(offset) => offset,
            MarkerVerdict::Fenced { current } => {
                return Err(BrokerError::MarkerFenced {
                    producer_id,
                    epoch,
                    current,
                });
            }
        };
        target.appended.notify();
        let snapshot = appended
            .rolled
            .then(|| self.take_snapshot(target))
            .flatten();
        let left = Left {
            sync_through: self.must_sync().then_some(offset + 1),
            snapshot,
            write_back: appended.write_back,
        };
        unacknowledged.note(topic, partition, self.data.is_some(), left);
        Ok(())
    }

    /// The open transactions of `topic`/`partition`: (producer id, first offset), by producer id.
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn open_transactions(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Vec<(i64, i64)>, BrokerError> {
        let topic = self.topics.get(topic)?;
        let data = topic.partition(partition)?.log();
        Ok(data.transactions.open().collect())
    }

    /// The offset below which every transaction of `topic`/`partition` has ended (what a
    /// `read_committed` consumer's latest offset is).
    ///
    /// # Errors
    /// Unknown topic or partition out of range.
    pub fn last_stable_offset(&self, topic: &str, partition: u32) -> Result<i64, BrokerError> {
        let topic = self.topics.get(topic)?;
        let data = topic.partition(partition)?.log();
        Ok(data.transactions.last_stable_offset(data.log.next_offset()))
    }
}
