//! What a durable broker does besides serving requests: rebuild producer state at start,
//! snapshot it, sync and snapshot at clean shutdown, and the periodic work (the interval flush,
//! retention, expiry of idle producers).
//!
//! Recovery follows Kafka's `ProducerStateManager`: a partition loads its newest valid snapshot
//! (a damaged one is skipped for the one before, or for none) and replays the batches stored
//! after it. The log is the truth — it holds only batches the rule accepted, in the order it
//! accepted them — so replay records each batch without judging it, and the state ends exactly as
//! it was when the last surviving batch was appended. A batch acknowledged before a crash and
//! resent after it is then answered DUPLICATE with its original offset. The partition's
//! transactions come back the same way: the snapshot holds the open and aborted ones, and replay
//! reopens a transaction at its first transactional batch and ends it at its marker.

use minibroker_log::Released;
use minibroker_records::{NO_PRODUCER_ID, now_millis};
use minibroker_state::{BatchHeader, SequenceRange, decode_snapshot, encode_snapshot};
use std::sync::Arc;
use std::time::Duration;

use crate::budget::PRODUCER_ENTRY_BYTES;
use crate::config::FlushPolicy;
use crate::error::DataDirProblem;
use crate::partition::{Partition, PartitionData};
use crate::snapshot::TakenSnapshot;
use crate::{Broker, ServerError};

impl Broker {
    /// Rebuilds every durable partition's producer state.
    pub(super) fn recover(&self) -> Result<(), ServerError> {
        if self.data.is_none() {
            return Ok(());
        }
        for topic in self.topics.list() {
            for (index, partition) in topic.partitions().iter().enumerate() {
                let replayed = self.recover_partition(partition).map_err(|problem| {
                    ServerError::data_dir(format!("{}/{index}", topic.name), problem)
                })?;
                tracing::info!(topic = topic.name, partition = index, replayed, "recovered");
            }
        }
        Ok(())
    }

    /// Loads the partition's newest valid snapshot and replays the batches after it; returns how
    /// many batches were replayed. Runs before the broker serves anyone, so holding the
    /// partition's lock while replaying into the state's shard (the reverse of the append path's
    /// order) cannot deadlock.
    fn recover_partition(&self, partition: &Partition) -> Result<u64, DataDirProblem> {
        let now_ms = now_millis();
        let mut data = partition.log();
        let PartitionData {
            log, transactions, ..
        } = &mut *data;
        let Some(log) = log.durable() else {
            return Ok(0);
        };
        let mut from = log.start_offset();
        let snapshots = log
            .snapshots()
            .newest_first(log.next_offset())
            .map_err(|source| DataDirProblem::Io {
                what: "listing snapshots",
                source,
            })?;
        for (offset, bytes) in snapshots {
            match decode_snapshot(&bytes) {
                Ok(snapshot) => {
                    self.state.restore(partition.id, snapshot.producers);
                    *transactions = snapshot.transactions;
                    from = offset.max(from);
                    break;
                }
                Err(error) => tracing::warn!(offset, %error, "skipping a damaged snapshot"),
            }
        }
        let mut replayed = 0u64;
        let mut bad = None;
        log.for_each_batch(from, |batch| {
            // A compacted batch may hold fewer records than the offsets and sequences it took.
            let Ok(info) = minibroker_records::inspect_kept(batch) else {
                bad = Some(minibroker_records::base_offset(batch));
                return false;
            };
            replayed += 1;
            let base_offset = minibroker_records::base_offset(batch);
            if info.producer_id == NO_PRODUCER_ID {
                return true;
            }
            if info.control {
                match minibroker_records::marker(batch) {
                    Ok(Some(marker)) => {
                        self.state.replay_marker(
                            partition.id,
                            info.producer_id,
                            info.epoch,
                            now_ms,
                        );
                        transactions.record_marker(
                            (info.producer_id, info.epoch),
                            base_offset,
                            marker.commit,
                        );
                    }
                    _ => bad = Some(base_offset),
                }
                return bad.is_none();
            }
            let header = SequenceRange::spanning(info.base_sequence, info.offset_count)
                .ok()
                .and_then(|sequences| {
                    BatchHeader::new(info.producer_id, partition.id, info.epoch, sequences).ok()
                });
            match header {
                // Replayed producers count as active now: a restart never expires anyone.
                Some(header) => {
                    let header = header.transactional(info.transactional).at(now_ms);
                    self.state.replay(&header, base_offset);
                    if info.transactional {
                        transactions.record_batch(info.producer_id, base_offset);
                    }
                }
                None => bad = Some(base_offset),
            }
            bad.is_none()
        })?;
        if let Some(offset) = bad {
            return Err(DataDirProblem::Content(format!(
                "the stored batch at offset {offset} has impossible producer fields"
            )));
        }
        drop(data);
        let producers = self.state.partition_len(partition.id);
        let charge = producers as u64 * PRODUCER_ENTRY_BYTES;
        let mut data = partition.log();
        if !self.budget.try_charge(charge) {
            tracing::warn!(
                producers,
                "recovered producer state exceeds max_stored_bytes"
            );
        } else {
            data.held += charge;
        }
        Ok(replayed)
    }

    /// Writes the partition's producer state to a snapshot file named by the offset it covers
    /// up to. A failure is logged: recovery then replays from an older snapshot.
    pub(super) fn save_snapshot(&self, partition: &Partition) {
        if let Some(snapshot) = self.take_snapshot(partition) {
            snapshot.write();
        }
    }

    /// The partition's producer state now, with the offset it covers up to, ready to be
    /// written ([`TakenSnapshot::write`]); `None` in memory, or on a read-only partition (its
    /// state may hold batches that were forgotten unwritten, which no snapshot may claim).
    pub(super) fn take_snapshot(&self, partition: &Partition) -> Option<TakenSnapshot> {
        if partition.is_read_only() {
            return None;
        }
        // Pending batches are written first: the snapshot must never cover a batch that a
        // crash could still lose.
        let (producers, at) = self.state.partition_snapshot(partition.id, || {
            let mut data = partition.log();
            let transactions = data.transactions.clone();
            let log = data.log.durable()?;
            Some(
                log.write_pending()
                    .map(|()| (log.next_offset(), log.snapshots(), transactions)),
            )
        });
        let (offset, store, transactions) = at?.ok()?;
        // A write that failed on the way fails the partition: nothing may be claimed then.
        (!partition.is_read_only()).then(|| TakenSnapshot {
            offset,
            store,
            bytes: encode_snapshot(&producers, &transactions),
        })
    }

    /// Clean shutdown of a durable broker: syncs every partition and snapshots its producer
    /// state, so the next start replays nothing. Call it once the listeners have stopped.
    pub fn close(&self) {
        if self.data.is_none() {
            return;
        }
        for topic in self.topics.list() {
            for partition in topic.partitions() {
                partition.sync_now();
                self.save_snapshot(partition);
            }
        }
        tracing::info!("synced every partition and saved producer state");
    }

    /// Runs retention on every partition (an in-memory one's oldest chunks, a durable one's
    /// oldest segments) and forgets producers idle for longer than `producer_id_expiration_ms`,
    /// as of `now_ms`.
    pub fn run_maintenance(&self, now_ms: i64) {
        let expiration = i64::try_from(self.config.producer_id_expiration_ms).unwrap_or(i64::MAX);
        let expired = self.state.expire(now_ms, expiration);
        if expired > 0 {
            tracing::debug!(expired, "forgot idle producers");
        }

        for topic in self.topics.list() {
            let retention = topic.settings().retention;
            if retention == minibroker_log::Retention::default() {
                continue;
            }
            for (index, partition) in topic.partitions().iter().enumerate() {
                let mut data = partition.log();
                match data.log.apply_retention(retention, now_ms) {
                    Ok(released) if released == Released::default() => {}
                    Ok(released) => {
                        let start = self.dropped_from_front(&mut data, released);
                        tracing::info!(
                            topic = topic.name,
                            partition = index,
                            batches = released.batches,
                            bytes = released.bytes,
                            start_offset = start,
                            "retention dropped old batches"
                        );
                    }
                    Err(error) => tracing::warn!(topic = topic.name, %error, "retention failed"),
                }
            }
        }
    }

    /// Syncs every durable partition (the `interval` flush policy's tick).
    pub fn flush_all(&self) {
        for topic in self.topics.list() {
            for partition in topic.partitions() {
                if !partition.is_read_only() {
                    partition.sync_now();
                }
            }
        }
    }

    /// The periodic work, for as long as the returned future runs (the host spawns it, and
    /// drops it at shutdown): retention and expiry every `maintenance_interval_ms`, and with
    /// `flush = "interval:<ms>"` a sync of every partition each interval. Blocking file work
    /// runs on tokio's blocking threads.
    pub async fn maintain(self: Arc<Self>) {
        let maintenance = Duration::from_millis(self.config.maintenance_interval_ms);
        let flush = match self.config.flush {
            FlushPolicy::Interval(ms) if self.data.is_some() => Duration::from_millis(ms),
            _ => maintenance,
        };
        let mut last_maintenance = tokio::time::Instant::now();
        let mut ticks = tokio::time::interval(flush.min(maintenance));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let due = last_maintenance.elapsed() >= maintenance;
            if due {
                last_maintenance = tokio::time::Instant::now();
            }
            let worker = Arc::clone(&self);
            let work = tokio::task::spawn_blocking(move || {
                if matches!(worker.config.flush, FlushPolicy::Interval(_)) {
                    worker.flush_all();
                }
                if due {
                    worker.run_maintenance(now_millis());
                }
            });
            if let Err(error) = work.await {
                tracing::error!(%error, "maintenance panicked");
            }
        }
    }
}
