//! `check`'s read side: consumers in groups read the topic while the producers write it, commit
//! their offsets after every poll that showed them records, and are restarted on purpose (each
//! leaves its group once and joins again as a new member, so the group rebalances under load and
//! partitions move between members at their committed offsets). Once the producers are done and
//! the topic has been read back, the consumers are told where each partition ends and read on
//! until their group has reached every end. What each was shown goes to the verifier
//! ([`minibroker_verify::check_consumers`]).
//!
//! One group reads `read_committed`; with `--transactional` another reads `read_uncommitted`,
//! and the `read_committed` one's members are processors ([`crate::check_processor`]): what they
//! read goes to a second topic, with their offsets, in transactions. The consumers talk to the
//! broker directly, not through the faulty network.

use anyhow::Result;
use minibroker_kafka_client::{KafkaConsumer, KafkaConsumerConfig};
use minibroker_verify::{ConsumerLog, GroupRead};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::check_processor::Processor;

/// How long the consumers may take, once told where the partitions end, to reach the ends.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(60);

/// How often a consumer heartbeats: often, so a rebalance reaches every member while the
/// producers still write.
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

/// The pause of a consumer given no partition, between polls.
const IDLE_PAUSE: Duration = Duration::from_millis(50);

/// Where each partition ends, once known.
type Ends = Option<Arc<BTreeMap<i32, i64>>>;

/// The groups reading, and how to tell them where the partitions end.
pub struct Readers {
    groups: Vec<(String, bool)>,
    tasks: JoinSet<(usize, Vec<ConsumerLog>, Option<String>)>,
    ends: watch::Sender<Ends>,
    /// (group index, partition) → the position its latest owner reached.
    progress: Arc<Mutex<HashMap<(usize, i32), i64>>>,
}

/// What the readers did: each group's reads, and why any consumer stopped early.
pub struct ReadersRun {
    pub groups: Vec<GroupRead>,
    pub failures: Vec<String>,
}

/// What every consumer of one [`Readers`] shares.
#[derive(Clone)]
struct Shared {
    kafka: String,
    ends: watch::Receiver<Ends>,
    progress: Arc<Mutex<HashMap<(usize, i32), i64>>>,
    /// Records sent by the producers so far, and in all.
    sent: Arc<AtomicUsize>,
    /// With processors: (the topic read, the topic they write).
    pipeline: Option<(String, String)>,
}

impl Readers {
    /// Starts `per_group` consumers in each group of `topic` on the broker at `kafka`: one
    /// group at `read_committed`, and with a `processed` topic (`--transactional`) one at
    /// `read_uncommitted`, the first group's members then writing to `processed` in
    /// transactions. Consumer `i` of `n` restarts once `sent` reaches `(i + 1) / (n + 1)` of
    /// `total`.
    pub fn start(
        kafka: &str,
        (topic, processed): (&str, Option<&str>),
        per_group: usize,
        (sent, total): (Arc<AtomicUsize>, usize),
    ) -> Self {
        let mut groups = vec![(format!("{topic}-read-committed"), true)];
        if processed.is_some() {
            groups.push((format!("{topic}-read-uncommitted"), false));
        }
        let (ends, watching) = watch::channel(None);
        let shared = Shared {
            kafka: kafka.to_owned(),
            ends: watching,
            progress: Arc::default(),
            sent,
            pipeline: processed.map(|processed| (topic.to_owned(), processed.to_owned())),
        };
        let mut tasks = JoinSet::new();
        for (index, (group, read_committed)) in groups.iter().enumerate() {
            for slot in 0..per_group {
                let config = KafkaConsumerConfig {
                    heartbeat_interval: HEARTBEAT_INTERVAL,
                    ..KafkaConsumerConfig::new(group, topic, *read_committed)
                };
                let restart_at = total * (slot + 1) / (per_group + 1);
                let label = format!(
                    "{}-{slot}",
                    if *read_committed {
                        "committed"
                    } else {
                        "uncommitted"
                    }
                );
                let shared = shared.clone();
                tasks.spawn(async move {
                    let (logs, failure) = read(&shared, index, &label, config, restart_at).await;
                    (index, logs, failure)
                });
            }
        }
        Self {
            groups,
            tasks,
            ends,
            progress: shared.progress,
        }
    }

    /// Tells the consumers where each partition ends, waits for them to get there (or for
    /// [`CATCH_UP_WITHIN`]), and returns what each group was shown.
    pub async fn finish(mut self, ends: BTreeMap<i32, i64>) -> ReadersRun {
        let ends = Arc::new(ends);
        self.ends.send_replace(Some(Arc::clone(&ends)));
        let mut groups: Vec<GroupRead> = self
            .groups
            .iter()
            .map(|(group, read_committed)| GroupRead {
                group: group.clone(),
                read_committed: *read_committed,
                ..GroupRead::default()
            })
            .collect();
        let mut failures = Vec::new();
        while let Some(joined) = self.tasks.join_next().await {
            match joined {
                Ok((index, mut logs, failure)) => {
                    groups[index].consumers.append(&mut logs);
                    failures.extend(failure);
                }
                Err(error) => failures.push(format!("a consumer's task failed: {error}")),
            }
        }
        let progress = self
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (index, group) in groups.iter_mut().enumerate() {
            group.caught_up = ends.iter().all(|(&partition, &end)| {
                progress
                    .get(&(index, partition))
                    .is_some_and(|&at| at >= end)
            });
        }
        ReadersRun { groups, failures }
    }
}

/// One consumer slot of group `index`: joins, reads, restarts once at `restart_at` records
/// sent, and reads until its partitions reach their ends. Every member's log, and why it
/// stopped early, if it did.
async fn read(
    shared: &Shared,
    index: usize,
    label: &str,
    config: KafkaConsumerConfig,
    restart_at: usize,
) -> (Vec<ConsumerLog>, Option<String>) {
    let mut logs: Vec<ConsumerLog> = Vec::new();
    loop {
        let mut log = ConsumerLog {
            name: format!("{label}.{}", logs.len()),
            ..ConsumerLog::default()
        };
        // Only the first member of the slot restarts.
        let restart_at = logs.is_empty().then_some(restart_at);
        let ended = member(shared, (index, label), &config, &mut log, restart_at).await;
        logs.push(log);
        match ended {
            Ok(Ending::Restart) => {}
            Ok(Ending::Done) => return (logs, None),
            Err(error) => return (logs, Some(format!("consumer {label}: {error}"))),
        }
    }
}

/// How a member stopped.
enum Ending {
    /// Left on purpose, to join again as a new member.
    Restart,
    /// Its partitions reached their ends (or the time to get there ran out).
    Done,
}

/// One member, from its join to its leaving.
async fn member(
    shared: &Shared,
    (index, slot): (usize, &str),
    config: &KafkaConsumerConfig,
    log: &mut ConsumerLog,
    restart_at: Option<usize>,
) -> Result<Ending> {
    // The read_committed group's members process, when there is a topic to write.
    let mut processor = match &shared.pipeline {
        Some((input, output)) if config.read_committed => Some(
            Processor::start(&shared.kafka, (input, output), &format!("{output}-{slot}")).await?,
        ),
        _ => None,
    };
    let mut consumer = KafkaConsumer::join(&shared.kafka, config.clone()).await?;
    let mut ends = shared.ends.clone();
    let mut deadline: Option<Instant> = None;
    loop {
        let polled = consumer.poll().await?;
        log.assignments.extend(consumer.take_assignments());
        if polled.iter().any(|p| !p.records.is_empty()) {
            match processor.as_mut() {
                Some(processor) => processor.process(&mut consumer, &polled).await?,
                None => {
                    consumer.commit().await?;
                }
            }
            log.assignments.extend(consumer.take_assignments());
        }
        log.polls
            .extend(polled.into_iter().filter(|p| !p.records.is_empty()));
        {
            let mut progress = shared
                .progress
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (&partition, &position) in consumer.positions() {
                progress.insert((index, partition), position);
            }
        }
        let known = ends.borrow_and_update().clone();
        let restart = restart_at.is_some_and(|at| shared.sent.load(Ordering::Acquire) >= at);
        let done = known.is_some_and(|ends| {
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + CATCH_UP_WITHIN);
            let reached = consumer
                .positions()
                .iter()
                .all(|(partition, &at)| ends.get(partition).is_none_or(|&end| at >= end));
            reached || Instant::now() >= deadline
        });
        if restart || done {
            // A processor's offsets went with its transactions.
            if processor.is_none() {
                consumer.commit().await?;
            }
            consumer.leave().await?;
            return Ok(if restart {
                Ending::Restart
            } else {
                Ending::Done
            });
        }
        if consumer.positions().is_empty() {
            tokio::time::sleep(IDLE_PAUSE).await;
        }
    }
}
