//! `bench --transactional`: what transactions cost, as ratios measured in one run against the
//! same embedded broker's Kafka listener.
//!
//! - **Produce**: each connection is a producer writing every partition with `--in-flight`
//!   requests outstanding; a transactional one commits every `--commit-interval-ms` (with
//!   `--transaction-version 2`, the default, as KIP-890 part 2 clients do: Produce v12 batches
//!   that add their own partitions, then EndTxn v5, which writes a marker to every partition and
//!   answers the next epoch; with 1, AddPartitionsToTxn, Produce v9 batches, EndTxn v3), an
//!   idempotent one only drains its window at the same interval, so the two differ by the
//!   transaction alone. The phases alternate in pairs (idempotent, transactional; `--pairs`,
//!   five) and the headline is the median over the pairs of transactional records/s over
//!   idempotent records/s, with its spread.
//! - **Fetch**: a topic of committed and (one in ten) aborted transactions is read whole, again
//!   and again, `read_uncommitted` and `read_committed` alternately (fifty pairs); the headline
//!   is the median over the pairs of the time of a `read_committed` read over a
//!   `read_uncommitted` one, with its spread.
//!
//! As on `bench`'s main path, the broker runs on a core of its own and the producers and
//! readers on the other (`pairs`), and the report ends with the machine's steal time.
//!
//! With `--cluster URL`, the same through three brokers of a cluster on that database (all on
//! the server's core): idempotent producers take the brokers in turn, and each transactional
//! producer talks to its transactional id's coordinator, as clients do; the transaction
//! protocol is 1, the one a cluster finalizes.

use anyhow::{Context, Result, bail};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, BrokerId, EndTxnRequest,
    EndTxnResponse, FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse,
    ProduceRequest, ProduceResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_broker::FlushPolicy;
use minibroker_kafka_client::KafkaConnection;
use minibroker_native::EmbeddedBroker;
use minibroker_records::{NewRecord, Writer};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::embedded_config;
use super::pairs::{Pinned, Spread};

/// What the transactional bench runs.
pub struct Settings {
    /// Connections, each one producer.
    pub connections: usize,
    /// Partitions of each topic.
    pub partitions: u32,
    /// Records per produce request.
    pub records_per_batch: usize,
    /// Bytes per record.
    pub record_size: usize,
    /// Produce requests outstanding per connection.
    pub in_flight: usize,
    /// How long each produce phase runs.
    pub duration: Duration,
    /// How often a transactional producer commits.
    pub commit_interval: Duration,
    /// Pairs of produce phases (idempotent, then transactional).
    pub pairs: usize,
    /// The transaction protocol: 2 is KIP-890 part 2 (an epoch bump at every end), 1 the one
    /// before it.
    pub transaction_version: i16,
    /// With a data directory (`--data-dir`): the broker stores in its `bench-transactional`
    /// folder (cleared first, deleted after) under this flush policy, its transaction
    /// coordinator's log included; in memory otherwise.
    pub durable: Option<(PathBuf, FlushPolicy)>,
    /// With `--cluster`: the database, and how long its brokers gather batches.
    pub cluster: Option<(String, Duration)>,
    /// Print JSON.
    pub json: bool,
}

/// What the bench measures: one embedded broker, or the brokers of a cluster.
enum Brokers {
    Embedded(EmbeddedBroker),
    Cluster(Vec<(minibroker_host::Host, String)>),
}

impl Brokers {
    /// Their Kafka addresses.
    fn addrs(&self, embedded: &str) -> Vec<String> {
        match self {
            Self::Embedded(_) => vec![embedded.to_owned()],
            Self::Cluster(brokers) => brokers.iter().map(|(_, addr)| addr.clone()).collect(),
        }
    }

    /// Creates topic `name` of `partitions` partitions.
    async fn create_topic(&self, name: &str, partitions: u32) -> Result<()> {
        match self {
            Self::Embedded(broker) => Ok(broker.broker.create_topic(name, partitions)?),
            Self::Cluster(brokers) => {
                let cluster = brokers[0]
                    .0
                    .node()
                    .cluster()
                    .context("a cluster's broker")?;
                let partitions = i32::try_from(partitions)?;
                cluster.create_topic(name, partitions, &[]).await?;
                Ok(())
            }
        }
    }
}

/// Produce before KIP-890 part 2, and with it (a transactional batch adds its own partition).
const PRODUCE_VERSION: i16 = 9;
const PART_2_PRODUCE_VERSION: i16 = 12;
const FETCH_VERSION: i16 = 11;

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

pub async fn run(settings: Settings) -> Result<()> {
    if settings.connections == 0 || settings.partitions == 0 || settings.in_flight == 0 {
        bail!("--connections, --partitions and --in-flight must be at least 1");
    }
    tokio::task::spawn_blocking(move || run_pinned(&settings)).await?
}

/// The broker on the server's core, the producers and readers on the generator's (see
/// `pairs`).
fn run_pinned(settings: &Settings) -> Result<()> {
    let sides = Pinned::new()?;
    let mut config = embedded_config(settings.partitions, Some(16 << 30));
    config.broker.retention_bytes = Some(16 << 20);
    let dir = match &settings.durable {
        Some((dir, flush)) => {
            let dir = super::durable::fresh_dir(&dir.join("bench-transactional"))?;
            config.broker.data_dir = Some(dir.clone());
            config.broker.flush = *flush;
            Some(dir)
        }
        None => None,
    };
    let (broker, kafka) = match &settings.cluster {
        Some((url, flush)) => {
            let brokers = super::cluster::start_brokers(
                &sides,
                url,
                &config,
                *flush,
                super::cluster::BROKERS,
            )?;
            let kafka = brokers[0].1.clone();
            (Brokers::Cluster(brokers), kafka)
        }
        None => sides.on_server(async move {
            let broker = EmbeddedBroker::start(config).await?;
            let kafka = minibroker_kafka::serve_on_loopback(&broker.host).await?;
            anyhow::Ok((Brokers::Embedded(broker), kafka.to_string()))
        })??,
    };
    let addrs = broker.addrs(&kafka);
    if !settings.json {
        println!(
            "workload: {} producer(s) x {} in flight, {} record(s) of {} B per request, {} partition(s), commit every {} ms, transaction version {}",
            settings.connections,
            settings.in_flight,
            settings.records_per_batch,
            settings.record_size,
            settings.partitions,
            settings.commit_interval.as_millis(),
            settings.transaction_version
        );
        if let Some((url, _)) = &settings.cluster {
            println!("  through {} brokers of the cluster on {url}", addrs.len());
        }
        match &settings.durable {
            Some((dir, flush)) => println!(
                "  durable in {}, flush {flush}",
                dir.join("bench-transactional").display()
            ),
            None if settings.cluster.is_none() => println!("  in memory"),
            None => {}
        }
    }
    let cpu_at_start = super::steal::CpuTimes::now();
    let measured = sides.generator.block_on(async {
        let mut produce = Vec::new();
        for round in 0..settings.pairs.max(1) {
            let mut rates = [0.0; 2];
            let sides = [
                (false, "idem", "idempotent"),
                (true, "txn", "transactional"),
            ];
            for (slot, (transactions, short, name)) in sides.into_iter().enumerate() {
                let topic = format!("bench-{short}-{round}");
                broker.create_topic(&topic, settings.partitions).await?;
                rates[slot] = produce_phase(&addrs, &topic, settings, transactions, round).await?;
                if !settings.json {
                    let rate = rates[slot];
                    println!("  {name:<14} round {round}: {rate:>12.0} records/s");
                }
            }
            produce.push((rates[0], rates[1]));
        }
        let reads = fetch_phase(&broker, &kafka, settings).await?;
        anyhow::Ok((produce, reads))
    });
    let steal = super::steal::steal_percent(cpu_at_start);
    match broker {
        Brokers::Embedded(broker) => sides.on_server(async move { broker.stop().await })??,
        Brokers::Cluster(brokers) => {
            for (host, _) in brokers {
                sides.on_server(host.stop())??;
            }
        }
    }
    if let Some(dir) = &dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    let (produce, reads) = measured?;
    let produce_ratios = Spread::of(
        produce
            .iter()
            .map(|(idempotent, transactional)| transactional / idempotent),
    );
    let read_ratios = Spread::of(
        reads
            .iter()
            .map(|(uncommitted, committed)| committed.as_secs_f64() / uncommitted.as_secs_f64()),
    );
    let mean = |pick: fn(&(Duration, Duration)) -> Duration| {
        reads.iter().map(pick).sum::<Duration>().as_secs_f64() / reads.len().max(1) as f64
    };
    let (uncommitted, committed) = (mean(|pair| pair.0), mean(|pair| pair.1));
    if settings.json {
        println!(
            "{}",
            json!({
                "idempotent_records_per_sec": produce.iter().map(|pair| pair.0).collect::<Vec<_>>(),
                "transactional_records_per_sec": produce.iter().map(|pair| pair.1).collect::<Vec<_>>(),
                "transactional_over_idempotent": produce_ratios.median,
                "transactional_over_idempotent_spread": produce_ratios.to_json(),
                "read_uncommitted_read_secs": uncommitted,
                "read_committed_read_secs": committed,
                "read_committed_over_read_uncommitted": read_ratios.median,
                "read_committed_over_read_uncommitted_spread": read_ratios.to_json(),
                "steal_percent": steal,
            })
        );
    } else {
        println!(
            "  read a topic of transactions: read_uncommitted {:.2} ms, read_committed {:.2} ms (means)",
            uncommitted * 1e3,
            committed * 1e3
        );
        // A cluster's commit is a database transaction (its markers, its state) where one
        // broker's is a write to its own log.
        let target = if settings.cluster.is_some() { 0.8 } else { 0.9 };
        println!(
            "transactional / idempotent records/s, median (lowest-highest) of {} pairs: {produce_ratios} (target >= {target})",
            produce.len()
        );
        println!(
            "read_committed / read_uncommitted read time, median (lowest-highest) of {} pairs: {read_ratios} (target <= 1.1)",
            reads.len()
        );
        if let Some(steal) = steal {
            println!("steal time during the run: {steal:.1}% of the machine's CPU time");
        }
    }
    Ok(())
}

/// Every producer writing `topic` for the phase's duration, each through the broker of `addrs`
/// its turn gives (a transactional one through its id's coordinator); returns the records/s
/// acknowledged.
async fn produce_phase(
    addrs: &[String],
    topic: &str,
    settings: &Settings,
    transactions: bool,
    round: usize,
) -> Result<f64> {
    let started = Instant::now();
    let mut producers = tokio::task::JoinSet::new();
    for index in 0..settings.connections {
        let id = transactions.then(|| format!("bench-{round}-{index}"));
        let (kafka, topic) = (addrs[index % addrs.len()].clone(), topic.to_owned());
        let job = Job {
            partitions: settings.partitions,
            records_per_batch: settings.records_per_batch,
            record_size: settings.record_size,
            in_flight: settings.in_flight,
            until: started + settings.duration,
            commit_interval: settings.commit_interval,
            part_2: settings.transaction_version >= 2,
        };
        producers.spawn(async move { produce(&kafka, &topic, id.as_deref(), job).await });
    }
    let mut records = 0u64;
    while let Some(done) = producers.join_next().await {
        records += done.context("a producer task")??;
    }
    Ok(records as f64 / started.elapsed().as_secs_f64())
}

/// One producer's share of a phase.
#[derive(Debug, Clone, Copy)]
struct Job {
    partitions: u32,
    records_per_batch: usize,
    record_size: usize,
    in_flight: usize,
    until: Instant,
    commit_interval: Duration,
    /// KIP-890 part 2 (both phases use its Produce version, so they differ by the transaction).
    part_2: bool,
}

impl Job {
    fn produce_version(&self) -> i16 {
        if self.part_2 {
            PART_2_PRODUCE_VERSION
        } else {
            PRODUCE_VERSION
        }
    }
}

/// A connection for a producer through `kafka`: for a transactional one, to its id's
/// coordinator (FindCoordinator names it; on one broker, that broker).
async fn connect_producer(kafka: &str, transactional_id: Option<&str>) -> Result<KafkaConnection> {
    let mut conn = KafkaConnection::connect(kafka).await?;
    let Some(id) = transactional_id else {
        return Ok(conn);
    };
    match conn.find_coordinator(id, 1).await? {
        Ok(coordinator) => Ok(KafkaConnection::connect(coordinator.addr).await?),
        Err(code) => bail!(
            "FindCoordinator answered {}",
            minibroker_kafka_client::error_name(code)
        ),
    }
}

async fn init(conn: &mut KafkaConnection, transactional_id: Option<&str>) -> Result<(i64, i16)> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(|id| TransactionalId(text(id))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let answer: InitProducerIdResponse = conn.call(ApiKey::InitProducerId, 4, &request).await?;
    if answer.error_code != 0 {
        bail!(
            "InitProducerId answered {}",
            minibroker_kafka_client::error_name(answer.error_code)
        );
    }
    Ok((answer.producer_id.0, answer.producer_epoch))
}

fn produce_request(
    transactional_id: Option<&str>,
    topic: &str,
    partition: u32,
    batch: Bytes,
) -> ProduceRequest {
    ProduceRequest::default()
        .with_transactional_id(transactional_id.map(|id| TransactionalId(text(id))))
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(text(topic)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition as i32)
                        .with_records(Some(batch)),
                ]),
        ])
}

/// Writes until `job.until`, committing every `commit_interval` when transactional; returns
/// the records acknowledged (in committed transactions, when transactional).
async fn produce(
    kafka: &str,
    topic: &str,
    transactional_id: Option<&str>,
    job: Job,
) -> Result<u64> {
    let mut conn = connect_producer(kafka, transactional_id).await?;
    let mut producer = init(&mut conn, transactional_id).await?;
    let records = vec![NewRecord::value(vec![b'x'; job.record_size]); job.records_per_batch];
    let mut templates = templates(
        producer,
        transactional_id.is_some(),
        &records,
        job.partitions,
    )?;
    let mut sequences = vec![0i32; job.partitions as usize];
    let mut acknowledged = 0u64;
    let per_batch = job.records_per_batch as u64;
    let mut next_partition = 0u32;
    let version = job.produce_version();
    while Instant::now() < job.until {
        if let Some(id) = transactional_id
            && !job.part_2
        {
            add_partitions(&mut conn, id, producer, topic, job.partitions).await?;
        }
        let commit_at = (Instant::now() + job.commit_interval).min(job.until);
        let mut outstanding = 0usize;
        let mut written = 0u64;
        while Instant::now() < commit_at {
            let partition = next_partition;
            next_partition = (next_partition + 1) % job.partitions;
            let template = &mut templates[partition as usize];
            minibroker_records::set_base_sequence(template, sequences[partition as usize]);
            sequences[partition as usize] += job.records_per_batch as i32;
            let request = produce_request(
                transactional_id,
                topic,
                partition,
                Bytes::copy_from_slice(template),
            );
            conn.send(ApiKey::Produce, version, &request).await?;
            outstanding += 1;
            if outstanding == job.in_flight {
                written += receive_produced(&mut conn, version).await? * per_batch;
                outstanding -= 1;
            }
        }
        for _ in 0..outstanding {
            written += receive_produced(&mut conn, version).await? * per_batch;
        }
        if let Some(id) = transactional_id {
            let next = end_with(&mut conn, id, producer, true, job.part_2).await?;
            if next != producer {
                // A new epoch: new batches, each partition's sequence from 0.
                producer = next;
                templates = templates_for(producer, &records, job.partitions)?;
                sequences.fill(0);
            }
        }
        acknowledged += written;
    }
    Ok(acknowledged)
}

/// One batch per partition of `records` from `producer`, its base sequence set before each send.
fn templates(
    producer: (i64, i16),
    transactional: bool,
    records: &[NewRecord],
    partitions: u32,
) -> Result<Vec<BytesMut>> {
    if transactional {
        return templates_for(producer, records, partitions);
    }
    let (producer_id, epoch) = producer;
    let writer = Writer {
        producer_id,
        epoch,
        base_sequence: 0,
    };
    let batch = minibroker_records::encode(writer, records, 0)?;
    Ok(vec![BytesMut::from(&batch[..]); partitions as usize])
}

/// [`templates`] of a transactional producer.
fn templates_for(
    (producer_id, epoch): (i64, i16),
    records: &[NewRecord],
    partitions: u32,
) -> Result<Vec<BytesMut>> {
    let writer = Writer {
        producer_id,
        epoch,
        base_sequence: 0,
    };
    let batch = minibroker_records::encode_transactional(writer, records, 0)?;
    Ok(vec![BytesMut::from(&batch[..]); partitions as usize])
}

/// One produce answer: 1 when it was a success.
async fn receive_produced(conn: &mut KafkaConnection, version: i16) -> Result<u64> {
    let (_, answer): (i32, ProduceResponse) = conn
        .receive(ApiKey::Produce, version)
        .await?
        .context("the broker closed the connection")?;
    let code = answer
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .map_or(-1, |p| p.error_code);
    if code != 0 {
        bail!(
            "a produce was refused with {}",
            minibroker_kafka_client::error_name(code)
        );
    }
    Ok(1)
}

async fn add_partitions(
    conn: &mut KafkaConnection,
    id: &str,
    (producer_id, epoch): (i64, i16),
    topic: &str,
    partitions: u32,
) -> Result<()> {
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(text(id)))
        .with_v3_and_below_producer_id(ProducerId(producer_id))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(text(topic)))
                .with_partitions((0..partitions as i32).collect()),
        ]);
    let answer: AddPartitionsToTxnResponse =
        conn.call(ApiKey::AddPartitionsToTxn, 3, &request).await?;
    let refused = answer
        .results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| &t.results_by_partition)
        .find(|r| r.partition_error_code != 0);
    if let Some(refused) = refused {
        bail!(
            "AddPartitionsToTxn answered {}",
            minibroker_kafka_client::error_name(refused.partition_error_code)
        );
    }
    Ok(())
}

/// Ends the transaction (EndTxn v5 with `part_2`, else v3); returns the producer id and epoch
/// the next transaction uses.
async fn end_with(
    conn: &mut KafkaConnection,
    id: &str,
    (producer_id, epoch): (i64, i16),
    commit: bool,
    part_2: bool,
) -> Result<(i64, i16)> {
    let request = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(text(id)))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let version = if part_2 { 5 } else { 3 };
    let answer: EndTxnResponse = conn.call(ApiKey::EndTxn, version, &request).await?;
    if answer.error_code != 0 {
        bail!(
            "EndTxn answered {}",
            minibroker_kafka_client::error_name(answer.error_code)
        );
    }
    if part_2 {
        Ok((answer.producer_id.0, answer.producer_epoch))
    } else {
        Ok((producer_id, epoch))
    }
}

/// Fills one partition with transactions of ten batches each, one in ten aborted, then reads it
/// whole `read_uncommitted` and `read_committed` in turn; returns each pair's two read times.
async fn fetch_phase(
    broker: &Brokers,
    kafka: &str,
    settings: &Settings,
) -> Result<Vec<(Duration, Duration)>> {
    const TOPIC: &str = "bench-read";
    const TRANSACTIONS: usize = 400;
    const READS: usize = 50;
    broker.create_topic(TOPIC, 1).await?;
    let id = "bench-read";
    let mut conn = connect_producer(kafka, Some(id)).await?;
    let (producer_id, epoch) = init(&mut conn, Some(id)).await?;
    let records =
        vec![NewRecord::value(vec![b'x'; settings.record_size]); settings.records_per_batch];
    let mut sequence = 0i32;
    for transaction in 0..TRANSACTIONS {
        add_partitions(&mut conn, id, (producer_id, epoch), TOPIC, 1).await?;
        for _ in 0..10 {
            let writer = Writer {
                producer_id,
                epoch,
                base_sequence: sequence,
            };
            sequence += settings.records_per_batch as i32;
            let batch = minibroker_records::encode_transactional(writer, &records, 0)?;
            let _: ProduceResponse = conn
                .call(
                    ApiKey::Produce,
                    PRODUCE_VERSION,
                    &produce_request(Some(id), TOPIC, 0, batch),
                )
                .await?;
        }
        end_with(
            &mut conn,
            id,
            (producer_id, epoch),
            transaction % 10 != 9,
            false,
        )
        .await?;
    }
    let mut pairs = Vec::with_capacity(READS);
    for _ in 0..READS {
        let mut times = [Duration::ZERO; 2];
        for (slot, isolation) in [(0, 0i8), (1, 1i8)] {
            let started = Instant::now();
            read_whole(&mut conn, TOPIC, isolation).await?;
            times[slot] = started.elapsed();
        }
        pairs.push((times[0], times[1]));
    }
    Ok(pairs)
}

/// Reads partition 0 of `topic` from its start to its end with `isolation_level`.
async fn read_whole(conn: &mut KafkaConnection, topic: &str, isolation_level: i8) -> Result<()> {
    let mut offset = 0i64;
    loop {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(isolation_level)
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(text(topic)))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(0)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]);
        let answer: FetchResponse = conn.call(ApiKey::Fetch, FETCH_VERSION, &request).await?;
        let data = answer
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .context("no partition in the Fetch answer")?;
        let end = if isolation_level == 1 {
            data.last_stable_offset
        } else {
            data.high_watermark
        };
        let batches =
            minibroker_kafka_client::whole_batches(data.records.clone().unwrap_or_default());
        let Some(last) = batches.last() else {
            return Ok(());
        };
        offset = minibroker_records::end_offset(last);
        if offset >= end {
            return Ok(());
        }
    }
}
