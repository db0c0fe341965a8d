//! Log compaction through the broker: which partitions are compacted, when, and with what the
//! rule needs from the rest of the broker (each producer's last batch, kept for exactly-once).
//! The rule itself is `minibroker_log`'s (`cleaner`); here a pass is planned under the
//! partition's lock, run on the calling thread (the cleaner's own, or a caller's blocking one)
//! without it, and swapped in under it again, so produces and fetches of the partition wait
//! only for the plan and the swap.
//!
//! The cleaner visits every partition of a topic whose `cleanup.policy` includes `compact`
//! every `cleaner_interval_ms`, and runs a pass where the bytes not yet compacted are at least
//! `min.cleanable.dirty.ratio` of what may be compacted (sealed segments, or an in-memory log's
//! full chunks, whose newest record is older than `min.compaction.lag.ms`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use minibroker_log::{CleanRules, CleanStats};

use crate::clock::now_millis;
use crate::partition::Partition;
use crate::stats::PartitionStats;
use crate::topic_settings::Compaction;
use crate::{Broker, BrokerError};

impl Broker {
    /// One pass over `topic`/`partition` now, whatever its dirty ratio (blocking). `None` when
    /// it is not compacted or nothing is dirty.
    ///
    /// # Errors
    /// Unknown topic or partition; a storage error of the pass (the log is unchanged, or
    /// holds the segments swapped before it).
    pub fn compact_now(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Option<CleanStats>, BrokerError> {
        let found = self.topics.get(topic)?;
        let target = found.partition(partition)?;
        match found.settings().compaction {
            Some(compaction) => self.compact(target, compaction, now_millis(), true),
            None => Ok(None),
        }
    }

    /// A pass over every compacted partition dirty enough (blocking); the cleaner's tick.
    pub fn run_cleaner(&self, now_ms: i64) {
        for topic in self.topics.list() {
            let Some(compaction) = topic.settings().compaction else {
                continue;
            };
            for (index, partition) in topic.partitions().iter().enumerate() {
                match self.compact(partition, compaction, now_ms, false) {
                    Ok(Some(stats)) => tracing::info!(
                        topic = topic.name,
                        partition = index,
                        before = stats.bytes_before,
                        after = stats.bytes_after,
                        keys = stats.keys,
                        "compacted"
                    ),
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(topic = topic.name, partition = index, %error, "compaction failed");
                    }
                }
            }
        }
    }

    fn compact(
        &self,
        partition: &Partition,
        compaction: Compaction,
        now_ms: i64,
        force: bool,
    ) -> Result<Option<CleanStats>, BrokerError> {
        if partition.is_read_only() {
            return Ok(None);
        }
        // One pass at a time per partition (the cleaner's tick and `compact_now` may meet).
        let Some(_cleaning) = partition.start_cleaning() else {
            return Ok(None);
        };
        let cutoff = compaction.cutoff(now_ms);
        let plan = {
            let mut data = partition.log();
            let (dirty, all) = data.log.cleanable_bytes(cutoff);
            let due = dirty > 0 && dirty * 1000 >= u64::from(compaction.min_dirty_per_mille) * all;
            // Tombstones a pass kept until their delete horizon: due once it has passed.
            let sweep = data.delete_horizon.is_some_and(|horizon| horizon <= now_ms);
            if !force && !due && !sweep {
                return Ok(None);
            }
            let stable = data.transactions.last_stable_offset(data.log.next_offset());
            let aborted = data
                .transactions
                .aborted()
                .map(|txn| ((txn.producer_id, txn.first_offset), txn.last_offset))
                .collect::<BTreeMap<_, _>>();
            data.log
                .clean_plan(cutoff, sweep)
                .map(|plan| (plan, stable, aborted, sweep))
        };
        let Some((plan, stable_offset, aborted, sweep)) = plan else {
            return Ok(None);
        };
        // Each producer's last batch stays, at least as its header. Read once a pass is due (a
        // batch appended since the plan is past what the pass rewrites).
        let kept_batches: HashSet<i64> = self
            .state
            .producers(partition.id)
            .iter()
            .filter_map(|producer| producer.entry.batches().next()?.base_offset)
            .collect();
        let rules = CleanRules {
            now_ms,
            delete_retention_ms: compaction.delete_retention_ms,
            sweep,
            kept_batches,
            stable_offset,
            aborted,
        };
        let mut stats = CleanStats::default();
        let budget = usize::try_from(self.config.cleaner_offset_map_bytes).unwrap_or(usize::MAX);
        let rate = self.config.cleaner_io_max_bytes_per_second;
        let cleaned = match plan.run(budget, &rules, rate, &mut stats) {
            Ok(Some(cleaned)) => cleaned,
            // Nothing dirty, or the topic was deleted while the pass ran.
            Ok(None) => return Ok(None),
            // (What it read after that may have been another topic's files: it is dropped.)
            Err(error) if error.is_deleted() || partition.is_deleted() => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        let mut data = partition.log();
        let (released, cleaned_up) = data.log.commit_clean(cleaned);
        data.delete_horizon = stats.earliest_horizon;
        self.give_back(&mut data, released);
        drop(data);
        if let Some(cleaned_up) = cleaned_up {
            cleaned_up.finish()?;
        }
        PartitionStats::add(&partition.stats.bytes_cleaned, stats.bytes_before);
        Ok(Some(stats))
    }

    /// The cleaner, for as long as the returned future runs (the host spawns it beside
    /// [`Self::maintain`]): a pass over every compacted partition dirty enough each
    /// `cleaner_interval_ms`, on a thread of its own at a lower scheduling priority (nice 10),
    /// so on a machine of few cores the cleaner takes the CPU time the broker's threads leave
    /// rather than competing with the produce path. The thread holds the broker only during a
    /// tick, and ends once the future is dropped (after the pass it may be in).
    pub async fn clean(self: Arc<Self>) {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let broker = Arc::downgrade(&self);
        let interval = Duration::from_millis(self.config.cleaner_interval_ms);
        drop(self);
        let spawned = std::thread::Builder::new()
            .name("minibroker-cleaner".into())
            .spawn(move || {
                if let Err(error) = rustix::process::nice(10) {
                    tracing::debug!(%error, "the cleaner keeps its scheduling priority");
                }
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(interval)
                {
                    let Some(broker) = broker.upgrade() else {
                        return;
                    };
                    let pass = std::panic::AssertUnwindSafe(|| broker.run_cleaner(now_millis()));
                    if std::panic::catch_unwind(pass).is_err() {
                        tracing::error!("the cleaner panicked; it goes on at the next tick");
                    }
                }
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "the cleaner could not start");
        }
        // Dropping the future drops `stop`, which ends the thread.
        let _stop = stop;
        std::future::pending::<()>().await;
    }
}
