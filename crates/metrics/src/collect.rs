//! [`BrokerCollector`]: every metric, read from the broker at scrape time.
//!
//! Nothing is counted twice: the broker keeps its own atomic counters (per partition, per
//! connection) and this collector turns them into Prometheus families when `/metrics` is read,
//! so serving metrics adds no work to the request path beyond those counters.

use minibroker_broker::stats::{HistogramSnapshot, LATENCY_BUCKETS_US};
use minibroker_broker::{Outcome, OutcomeCounts, PartitionMetrics};
use minibroker_host::Node;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Reads a broker's figures, and its listeners', on every scrape.
#[derive(Debug)]
pub struct BrokerCollector(pub Arc<Node>);

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// One family: its name, help, type, and (labels, value) samples.
fn family<'a, V: Copy>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (Labels<'a>, V)>,
    encode: impl Fn(V, MetricEncoder) -> Result<(), std::fmt::Error>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        if labels.is_empty() {
            // A single, unlabelled sample: no `{}` after its name.
            return encode(value, metric);
        }
        let labels: Vec<(&str, Cow<'_, str>)> = labels
            .iter()
            .map(|(name, value)| (*name, escaped(value)))
            .collect();
        encode(value, metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A label value as the exposition format must carry it: backslash, double quote and line feed
/// escaped (the encoder writes values as they are). A group id is any string a client chose:
/// unescaped, one could close its sample and write series of its own, or an early `# EOF`.
fn escaped(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn counter(value: u64, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
    ConstCounter::new(value).encode(encoder)
}

fn gauge(value: i64, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
    ConstGauge::new(value).encode(encoder)
}

fn ratio(value: f64, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
    ConstGauge::new(value).encode(encoder)
}

fn histogram(
    snapshot: &HistogramSnapshot,
    mut encoder: MetricEncoder,
) -> Result<(), std::fmt::Error> {
    // Per-bucket counts: the encoder makes them cumulative.
    let buckets: Vec<(f64, u64)> = snapshot
        .buckets
        .iter()
        .enumerate()
        .map(|(index, count)| {
            let bound = LATENCY_BUCKETS_US
                .get(index)
                .map_or(f64::MAX, |us| *us as f64 / 1e6); // MAX is how the encoder spells +Inf
            (bound, *count)
        })
        .collect();
    encoder.encode_histogram::<NoLabelSet>(
        snapshot.sum_ns as f64 / 1e9,
        snapshot.count(),
        &buckets,
        None,
    )
}

impl Collector for BrokerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let node = &self.0;
        let broker = node.broker();
        let partitions = broker.partition_metrics();
        // Per topic sums of the per-partition counters.
        let mut topics: BTreeMap<&str, TopicSums> = BTreeMap::new();
        for p in &partitions {
            topics.entry(&p.topic).or_default().add(p);
        }
        family(
            &mut encoder,
            "minibroker_produce_outcomes",
            "Produce requests by topic and outcome of the exactly-once rule",
            MetricType::Counter,
            topics.iter().flat_map(|(topic, sums)| {
                Outcome::ALL.iter().map(move |outcome| {
                    (
                        vec![("topic", *topic), ("outcome", outcome_label(*outcome))],
                        sums.outcomes.get(*outcome),
                    )
                })
            }),
            counter,
        )?;
        let flows: [(TopicCounter, &str, &str); 5] = [
            (
                |s| s.records_in,
                "minibroker_records_in",
                "Records appended, by topic",
            ),
            (
                |s| s.bytes_in,
                "minibroker_bytes_in",
                "Batch bytes appended, by topic",
            ),
            (
                |s| s.records_out,
                "minibroker_records_out",
                "Records handed out by fetches, by topic",
            ),
            (
                |s| s.bytes_out,
                "minibroker_bytes_out",
                "Batch bytes handed out by fetches, by topic",
            ),
            (
                |s| s.bytes_cleaned,
                "minibroker_cleaner_bytes_cleaned",
                "Bytes of segments log compaction rewrote (as they were before), by topic",
            ),
        ];
        for (value, name, help) in flows {
            family(
                &mut encoder,
                name,
                help,
                MetricType::Counter,
                topics
                    .iter()
                    .map(|(topic, sums)| (vec![("topic", *topic)], value(sums))),
                counter,
            )?;
        }
        let indexes: Vec<String> = partitions.iter().map(|p| p.partition.to_string()).collect();
        let by_partition = |value: fn(&PartitionMetrics) -> i64| {
            partitions.iter().zip(&indexes).map(move |(p, index)| {
                (
                    vec![("topic", p.topic.as_str()), ("partition", index.as_str())],
                    value(p),
                )
            })
        };
        family(
            &mut encoder,
            "minibroker_log_start_offset",
            "First offset each partition holds",
            MetricType::Gauge,
            by_partition(|p| p.log_start_offset),
            gauge,
        )?;
        family(
            &mut encoder,
            "minibroker_log_end_offset",
            "Next offset each partition will write",
            MetricType::Gauge,
            by_partition(|p| p.log_end_offset),
            gauge,
        )?;
        family(
            &mut encoder,
            "minibroker_lso_lag",
            "Offsets between each partition's last stable offset and its end: what open transactions hold back from read_committed consumers",
            MetricType::Gauge,
            by_partition(|p| p.log_end_offset - p.last_stable_offset),
            gauge,
        )?;
        let compacted: Vec<(Labels<'_>, f64)> = partitions
            .iter()
            .zip(&indexes)
            .filter_map(|(p, index)| {
                let (dirty, all) = p.cleanable?;
                let share = if all == 0 {
                    0.0
                } else {
                    dirty as f64 / all as f64
                };
                Some((
                    vec![("topic", p.topic.as_str()), ("partition", index.as_str())],
                    share,
                ))
            })
            .collect();
        family(
            &mut encoder,
            "minibroker_cleaner_dirty_ratio",
            "Each compacted partition's share of what compaction may clean that it has not yet (compared with min.cleanable.dirty.ratio)",
            MetricType::Gauge,
            compacted,
            ratio,
        )?;
        family(
            &mut encoder,
            "minibroker_partition_read_only",
            "1 for a partition that stopped taking writes after a storage error",
            MetricType::Gauge,
            by_partition(|p| i64::from(p.read_only)),
            gauge,
        )?;
        let (charged, limit) = broker.storage_charged();
        let connections = node.connection_counts();
        for (name, help, value) in [
            (
                "minibroker_stored_bytes",
                "Batch bytes stored across all partitions",
                partitions.iter().map(|p| p.stored_bytes).sum::<u64>() as i64,
            ),
            (
                "minibroker_storage_charged_bytes",
                "Bytes charged to max_stored_bytes",
                charged as i64,
            ),
            (
                "minibroker_storage_limit_bytes",
                "max_stored_bytes",
                limit as i64,
            ),
            (
                "minibroker_producer_state_entries",
                "Producer state entries (one per producer per partition)",
                broker.producer_state_entries() as i64,
            ),
            (
                "minibroker_connections_open",
                "Connections open now, both protocols",
                connections.open as i64,
            ),
            (
                "minibroker_transactions_open",
                "Transactions open now (Ongoing, or being ended)",
                node.transactions().open_count() as i64,
            ),
        ] {
            family(
                &mut encoder,
                name,
                help,
                MetricType::Gauge,
                [(Vec::new(), value)],
                gauge,
            )?;
        }
        let ended = node.transactions().counts();
        let logins = node.logins();
        for (name, help, value) in [
            (
                "minibroker_sasl_logins",
                "SASL logins that succeeded",
                logins.succeeded.load(std::sync::atomic::Ordering::Relaxed),
            ),
            (
                "minibroker_sasl_login_failures",
                "SASL logins refused: wrong passwords, unknown users, malformed exchanges",
                logins.failed.load(std::sync::atomic::Ordering::Relaxed),
            ),
            (
                "minibroker_transactions_committed",
                "Transactions committed (their COMMIT markers written)",
                ended.committed,
            ),
            (
                "minibroker_transactions_aborted",
                "Transactions aborted (timeouts and fenced ones included)",
                ended.aborted,
            ),
            (
                "minibroker_transactions_timed_out",
                "Transactions the broker aborted at their timeout",
                ended.timed_out,
            ),
            (
                "minibroker_connections_accepted",
                "Connections accepted and served",
                connections.accepted,
            ),
            (
                "minibroker_connections_refused",
                "Connections refused over max_connections",
                connections.refused,
            ),
        ] {
            family(
                &mut encoder,
                name,
                help,
                MetricType::Counter,
                [(Vec::new(), value)],
                counter,
            )?;
        }
        if let Some(timings) = node.timings() {
            let snapshot = timings.snapshot();
            let mut metric = encoder.encode_descriptor(
                "minibroker_request_duration_seconds",
                "Time to serve a request, by protocol and kind",
                None,
                MetricType::Histogram,
            )?;
            for ((protocol, kind), histogram_snapshot) in &snapshot {
                let labels: Labels = vec![("protocol", protocol), ("kind", kind)];
                histogram(histogram_snapshot, metric.encode_family(&labels)?)?;
            }
        }
        let fsyncs: Vec<_> = partitions
            .iter()
            .zip(&indexes)
            .filter(|(p, _)| p.fsync.count() > 0)
            .collect();
        if !fsyncs.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "minibroker_fsync_duration_seconds",
                "Time each partition's fsyncs took",
                None,
                MetricType::Histogram,
            )?;
            for (p, index) in fsyncs {
                let labels: Labels = vec![("topic", p.topic.as_str()), ("partition", index)];
                histogram(&p.fsync, metric.encode_family(&labels)?)?;
            }
        }
        self.encode_group_lag(&mut encoder)
    }
}

impl BrokerCollector {
    /// Each group's lag per partition it has committed: the log end minus the committed offset.
    fn encode_group_lag(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (broker, groups) = (self.0.broker(), self.0.groups());
        let mut lags = Vec::new();
        for (group, _, _) in groups.list() {
            for ((topic, partition), committed) in groups.committed(&group, None) {
                let Ok(index) = u32::try_from(partition) else {
                    continue;
                };
                if let Ok((_, end)) = broker.offsets(&topic, index) {
                    lags.push((
                        group.clone(),
                        topic,
                        partition.to_string(),
                        (end - committed.offset).max(0),
                    ));
                }
            }
        }
        family(
            encoder,
            "minibroker_group_lag",
            "Records between a group's committed offset and the log end, per partition",
            MetricType::Gauge,
            lags.iter().map(|(group, topic, partition, lag)| {
                (
                    vec![
                        ("group", group.as_str()),
                        ("topic", topic.as_str()),
                        ("partition", partition.as_str()),
                    ],
                    *lag,
                )
            }),
            gauge,
        )
    }
}

/// The outcome's label value.
fn outcome_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Accepted => "accepted",
        Outcome::Duplicate => "duplicate",
        Outcome::OutOfOrder => "out_of_order",
        Outcome::FencedEpoch => "fenced_epoch",
    }
}

/// One of a topic's summed counters.
type TopicCounter = fn(&TopicSums) -> u64;

/// One topic's counters: its partitions' summed.
#[derive(Debug, Default)]
struct TopicSums {
    outcomes: OutcomeCounts,
    records_in: u64,
    bytes_in: u64,
    records_out: u64,
    bytes_out: u64,
    bytes_cleaned: u64,
}

impl TopicSums {
    fn add(&mut self, partition: &PartitionMetrics) {
        self.outcomes = self.outcomes + partition.outcomes;
        self.records_in += partition.records_in;
        self.bytes_in += partition.bytes_in;
        self.records_out += partition.records_out;
        self.bytes_out += partition.bytes_out;
        self.bytes_cleaned += partition.bytes_cleaned;
    }
}
