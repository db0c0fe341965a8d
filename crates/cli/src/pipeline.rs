//! A transactional consume-transform-produce processor over the Kafka protocol, as a Kafka
//! Streams or a confluent-kafka application runs one: it reads its input topic `read_committed`
//! from the offsets its group committed, writes each record transformed (upper-cased) to the same
//! partition of its output topic, and commits the new input offsets in the same transaction
//! (`AddPartitionsToTxn`, transactional `Produce`, `AddOffsetsToTxn`, `TxnOffsetCommit`,
//! `EndTxn`). So a crash anywhere — of the processor or of the broker — leaves either the
//! transaction's output *and* its offsets, or neither: the output is exactly once.
//!
//! It talks to one broker (this one is every coordinator and every leader) through whatever is at
//! its address, a fault proxy in the demo, so each request is sent until it is answered: a lost
//! request or answer is sent again on a new connection, which the broker recognises (a produce
//! retry is a DUPLICATE, an end already complete is answered as it was). A refusal no retry can
//! mend (its epoch fenced, its transaction gone) ends the instance: a new one starts, as a
//! restarted process would, fencing what is left of the old one and going on from the committed
//! offsets.

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, ApiKey, BrokerId, EndTxnRequest, EndTxnResponse, FetchRequest,
    FetchResponse, GroupId, InitProducerIdRequest, InitProducerIdResponse, OffsetFetchRequest,
    OffsetFetchResponse, ProduceRequest, ProduceResponse, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use minibroker_kafka_client::KafkaConnection;
use minibroker_records::{NewRecord, Writer};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};

/// Where the processor reads and writes, and as whom.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// The broker's Kafka listener (or a proxy in front of it).
    pub addr: String,
    /// The processor's transactional id: every instance uses the same one.
    pub transactional_id: String,
    /// The group whose committed offsets say where the input is read from.
    pub group: String,
    /// The input topic.
    pub input: String,
    /// The output topic, with as many partitions as the input.
    pub output: String,
    /// Partitions of both.
    pub partitions: u32,
    /// Input records per transaction, at most.
    pub per_transaction: usize,
    /// How long a request waits for its answer before it is sent again.
    pub answer_timeout: Duration,
}

/// What the processors did, counted across instances.
#[derive(Debug, Default)]
pub struct PipelineStats {
    /// Transactions committed.
    pub transactions: AtomicU64,
    /// Input records whose transaction committed.
    pub records: AtomicU64,
    /// Requests sent again after no answer, or after a retriable refusal.
    pub retries: AtomicU64,
    /// Instances started after the first: a takeover after a crash, or after a refusal no retry
    /// mends.
    pub restarts: AtomicU64,
}

/// A stop in the middle of a transaction, for a test or a demo to crash something there: once
/// asked, the next transaction stops after its records are written and before its offsets and
/// its end, says how many records it wrote, and waits to be let go.
#[derive(Debug)]
pub struct MidTransaction {
    wanted: AtomicBool,
    reached: mpsc::Sender<u64>,
    release: Notify,
}

impl MidTransaction {
    /// A stop, and where it reports each time it is reached.
    #[must_use]
    pub fn new() -> (Arc<Self>, mpsc::Receiver<u64>) {
        let (reached, reports) = mpsc::channel(1);
        let stop = Arc::new(Self {
            wanted: AtomicBool::new(false),
            reached,
            release: Notify::new(),
        });
        (stop, reports)
    }

    /// The next transaction stops in the middle.
    pub fn ask(&self) {
        self.wanted.store(true, Ordering::SeqCst);
    }

    /// Lets the stopped transaction go on.
    pub fn release(&self) {
        self.release.notify_one();
    }

    async fn pass(&self, written: u64) {
        if self.wanted.swap(false, Ordering::SeqCst) {
            let _ = self.reached.send(written).await;
            self.release.notified().await;
        }
    }
}

/// Why an instance ended.
enum Ended {
    /// A refusal no retry mends: a new instance takes over.
    Refused(String),
    /// Nothing could be done (the broker never came back).
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Ended {
    fn from(error: anyhow::Error) -> Self {
        Self::Failed(error)
    }
}

/// How long a request is retried before the processor gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// The processor; see the module docs.
pub struct Processor {
    config: PipelineConfig,
    stats: Arc<PipelineStats>,
    conn: Option<KafkaConnection>,
}

impl Processor {
    /// A processor that counts into `stats`.
    #[must_use]
    pub fn new(config: PipelineConfig, stats: Arc<PipelineStats>) -> Self {
        Self {
            config,
            stats,
            conn: None,
        }
    }

    /// Processes until every input partition's committed offset reaches `ends`, starting a new
    /// instance whenever one is refused; stops in the middle of a transaction when `stop` asks.
    ///
    /// # Errors
    /// The broker could not be reached for a minute.
    pub async fn run(&mut self, ends: &[i64], stop: &MidTransaction) -> Result<()> {
        loop {
            match self.instance(ends, stop).await {
                Ok(()) => return Ok(()),
                Err(Ended::Refused(why)) => {
                    tracing::info!(%why, "a processor instance was refused; starting another");
                    self.stats.restarts.fetch_add(1, Ordering::Relaxed);
                }
                Err(Ended::Failed(error)) => return Err(error),
            }
        }
    }

    async fn instance(&mut self, ends: &[i64], stop: &MidTransaction) -> Result<(), Ended> {
        let (producer_id, epoch) = self.init().await?;
        let mut positions = self.committed_positions().await?;
        // A new epoch starts each partition's sequences again.
        let mut sequences = vec![0i32; self.config.partitions as usize];
        loop {
            if positions.iter().zip(ends).all(|(at, end)| at >= end) {
                return Ok(());
            }
            let records = self.fetch(&positions).await?;
            if records.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let mut next = positions.clone();
            let mut by_partition: Vec<Vec<NewRecord>> =
                vec![Vec::new(); self.config.partitions as usize];
            for (partition, offset, value) in &records {
                next[*partition as usize] = offset + 1;
                by_partition[*partition as usize]
                    .push(NewRecord::value(value.to_ascii_uppercase()));
            }
            let touched: Vec<i32> = (0..self.config.partitions as i32)
                .filter(|p| !by_partition[*p as usize].is_empty())
                .collect();
            let txn = (producer_id, epoch);
            self.add_partitions(txn, &touched).await?;
            for &partition in &touched {
                let records = &by_partition[partition as usize];
                let writer = Writer {
                    producer_id,
                    epoch,
                    base_sequence: sequences[partition as usize],
                };
                self.produce(partition, writer, records).await?;
                sequences[partition as usize] += records.len() as i32;
            }
            stop.pass(records.len() as u64).await;
            self.add_offsets(txn).await?;
            self.commit_offsets(txn, &next).await?;
            self.end(txn).await?;
            positions = next;
            self.stats.transactions.fetch_add(1, Ordering::Relaxed);
            self.stats
                .records
                .fetch_add(records.len() as u64, Ordering::Relaxed);
        }
    }

    /// Sends `request` until it is answered, on a new connection after each failure.
    async fn call<R: Encodable, T: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &R,
    ) -> Result<T> {
        let started = Instant::now();
        loop {
            if self.conn.is_none() {
                match KafkaConnection::connect(&self.config.addr).await {
                    Ok(conn) => {
                        self.conn = Some(
                            conn.with_client_id("minibroker-pipeline")
                                .with_answer_timeout(self.config.answer_timeout),
                        );
                    }
                    Err(error) if started.elapsed() < GIVE_UP_AFTER => {
                        tracing::debug!(%error, "cannot connect; trying again");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Err(error) => return Err(error).context("the broker stayed unreachable"),
                }
            }
            let Some(conn) = self.conn.as_mut() else {
                continue;
            };
            match conn.call(api, version, request).await {
                Ok(answer) => return Ok(answer),
                Err(error) if started.elapsed() < GIVE_UP_AFTER => {
                    tracing::debug!(?api, %error, "no answer; sending again");
                    self.conn = None;
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => {
                    return Err(error).with_context(|| format!("{api:?} was never answered"));
                }
            }
        }
    }

    /// Whether a refusal `code` is one to send again after a pause; otherwise a refusal that ends
    /// the instance (`Ok(false)` for success).
    async fn retry_on(&self, code: i16, what: &str) -> Result<bool, Ended> {
        if code == 0 {
            return Ok(false);
        }
        let error = ResponseError::try_from_code(code);
        let retriable = matches!(
            error,
            Some(
                ResponseError::ConcurrentTransactions
                    | ResponseError::CoordinatorNotAvailable
                    | ResponseError::NotCoordinator
                    | ResponseError::CoordinatorLoadInProgress
                    | ResponseError::UnstableOffsetCommit
                    | ResponseError::RequestTimedOut
            )
        );
        if !retriable {
            return Err(Ended::Refused(format!("{what}: {error:?} ({code})")));
        }
        self.stats.retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(true)
    }

    fn text(value: &str) -> StrBytes {
        StrBytes::from_string(value.to_owned())
    }

    async fn init(&mut self) -> Result<(i64, i16), Ended> {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(Self::text(
                &self.config.transactional_id,
            ))))
            .with_transaction_timeout_ms(30_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        loop {
            let answer: InitProducerIdResponse =
                self.call(ApiKey::InitProducerId, 4, &request).await?;
            if !self.retry_on(answer.error_code, "InitProducerId").await? {
                return Ok((answer.producer_id.0, answer.producer_epoch));
            }
        }
    }

    /// Where the group's committed offsets say to read from (0 where none is committed); asks
    /// again while a transaction's offsets are pending.
    async fn committed_positions(&mut self) -> Result<Vec<i64>, Ended> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(Self::text(&self.config.group)))
            .with_require_stable(true)
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(Self::text(&self.config.input)))
                    .with_partition_indexes((0..self.config.partitions as i32).collect()),
            ]));
        'ask: loop {
            let answer: OffsetFetchResponse = self.call(ApiKey::OffsetFetch, 7, &request).await?;
            let mut positions = vec![0i64; self.config.partitions as usize];
            for partition in answer.topics.iter().flat_map(|t| &t.partitions) {
                if self.retry_on(partition.error_code, "OffsetFetch").await? {
                    continue 'ask;
                }
                if let Some(at) = positions.get_mut(partition.partition_index as usize) {
                    *at = partition.committed_offset.max(0);
                }
            }
            return Ok(positions);
        }
    }

    /// Up to `per_transaction` input records from `positions`, read_committed: (partition,
    /// offset, value).
    async fn fetch(&mut self, positions: &[i64]) -> Result<Vec<(u32, i64, Bytes)>, Ended> {
        let partitions = positions
            .iter()
            .enumerate()
            .map(|(index, at)| {
                FetchPartition::default()
                    .with_partition(index as i32)
                    .with_fetch_offset(*at)
                    .with_partition_max_bytes(64 << 10)
            })
            .collect();
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(1)
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(Self::text(&self.config.input)))
                    .with_partitions(partitions),
            ]);
        let answer: FetchResponse = self.call(ApiKey::Fetch, 11, &request).await?;
        let mut records = Vec::new();
        for data in answer.responses.iter().flat_map(|t| &t.partitions) {
            if self.retry_on(data.error_code, "Fetch").await? {
                return Ok(Vec::new());
            }
            let partition = data.partition_index as u32;
            let from = positions[partition as usize];
            let bytes = data.records.clone().unwrap_or_default();
            for batch in minibroker_kafka_client::whole_batches(bytes) {
                let decoded = minibroker_records::decode(&batch).map_err(anyhow::Error::from)?;
                // The input has no transactions of its own: markers carry no records to process.
                if decoded.info.control {
                    continue;
                }
                for record in decoded.records {
                    if record.offset >= from && records.len() < self.config.per_transaction {
                        records.push((partition, record.offset, record.value.unwrap_or_default()));
                    }
                }
            }
        }
        // Only a prefix per partition may be taken: a partition's records stay contiguous.
        records.sort_by_key(|(partition, offset, _)| (*partition, *offset));
        Ok(records)
    }

    async fn add_partitions(
        &mut self,
        (pid, epoch): (i64, i16),
        partitions: &[i32],
    ) -> Result<(), Ended> {
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(Self::text(
                &self.config.transactional_id,
            )))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(Self::text(&self.config.output)))
                    .with_partitions(partitions.to_vec()),
            ]);
        'send: loop {
            let answer: AddPartitionsToTxnResponse =
                self.call(ApiKey::AddPartitionsToTxn, 3, &request).await?;
            for result in answer
                .results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| &t.results_by_partition)
            {
                if self
                    .retry_on(result.partition_error_code, "AddPartitionsToTxn")
                    .await?
                {
                    continue 'send;
                }
            }
            return Ok(());
        }
    }

    async fn produce(
        &mut self,
        partition: i32,
        writer: Writer,
        records: &[NewRecord],
    ) -> Result<(), Ended> {
        let batch = minibroker_records::encode_transactional(
            writer,
            records,
            minibroker_records::now_millis(),
        )
        .map_err(anyhow::Error::from)?;
        let request = ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(Self::text(
                &self.config.transactional_id,
            ))))
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(Self::text(&self.config.output)))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(batch)),
                    ]),
            ]);
        loop {
            let answer: ProduceResponse = self.call(ApiKey::Produce, 9, &request).await?;
            let code = answer
                .responses
                .first()
                .and_then(|t| t.partition_responses.first())
                .map_or(-1, |p| p.error_code);
            // A retry of a batch stored long ago: it is stored.
            if code == ResponseError::DuplicateSequenceNumber.code() {
                return Ok(());
            }
            if !self.retry_on(code, "Produce").await? {
                return Ok(());
            }
        }
    }

    async fn add_offsets(&mut self, (pid, epoch): (i64, i16)) -> Result<(), Ended> {
        let request = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(Self::text(&self.config.transactional_id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_group_id(GroupId(Self::text(&self.config.group)));
        loop {
            let answer: AddOffsetsToTxnResponse =
                self.call(ApiKey::AddOffsetsToTxn, 3, &request).await?;
            if !self.retry_on(answer.error_code, "AddOffsetsToTxn").await? {
                return Ok(());
            }
        }
    }

    async fn commit_offsets(
        &mut self,
        (pid, epoch): (i64, i16),
        next: &[i64],
    ) -> Result<(), Ended> {
        let partitions = next
            .iter()
            .enumerate()
            .map(|(index, offset)| {
                TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(index as i32)
                    .with_committed_offset(*offset)
            })
            .collect();
        let request = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(Self::text(&self.config.transactional_id)))
            .with_group_id(GroupId(Self::text(&self.config.group)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(Self::text(&self.config.input)))
                    .with_partitions(partitions),
            ]);
        'send: loop {
            let answer: TxnOffsetCommitResponse =
                self.call(ApiKey::TxnOffsetCommit, 3, &request).await?;
            for partition in answer.topics.iter().flat_map(|t| &t.partitions) {
                if self
                    .retry_on(partition.error_code, "TxnOffsetCommit")
                    .await?
                {
                    continue 'send;
                }
            }
            return Ok(());
        }
    }

    async fn end(&mut self, (pid, epoch): (i64, i16)) -> Result<(), Ended> {
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(Self::text(&self.config.transactional_id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(true);
        loop {
            let answer: EndTxnResponse = self.call(ApiKey::EndTxn, 3, &request).await?;
            if !self.retry_on(answer.error_code, "EndTxn").await? {
                return Ok(());
            }
        }
    }
}

/// Fails unless `values` hold each of `expected` exactly once.
///
/// # Errors
/// Which values are missing or doubled.
pub fn exactly_once(values: &[Bytes], expected: &[Bytes]) -> Result<()> {
    let mut counts = std::collections::HashMap::<&Bytes, usize>::new();
    for value in values {
        *counts.entry(value).or_default() += 1;
    }
    let missing = expected.iter().filter(|v| !counts.contains_key(v)).count();
    let doubled = counts.values().filter(|&&n| n > 1).count();
    if missing > 0 || doubled > 0 || values.len() != expected.len() {
        bail!(
            "{} values for {} expected: {missing} missing, {doubled} written more than once",
            values.len(),
            expected.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(names: &[&'static str]) -> Vec<Bytes> {
        names
            .iter()
            .map(|n| Bytes::from_static(n.as_bytes()))
            .collect()
    }

    #[test]
    fn exactly_once_fails_on_a_missing_or_doubled_value() {
        let expected = values(&["a", "b", "c"]);
        assert!(exactly_once(&values(&["c", "a", "b"]), &expected).is_ok());
        let doubled = exactly_once(&values(&["a", "b", "b", "c"]), &expected).unwrap_err();
        assert!(
            doubled.to_string().contains("1 written more than once"),
            "{doubled}"
        );
        let missing = exactly_once(&values(&["a", "c"]), &expected).unwrap_err();
        assert!(missing.to_string().contains("1 missing"), "{missing}");
        // As many values as expected, but one is another's double.
        assert!(exactly_once(&values(&["a", "a", "c"]), &expected).is_err());
    }
}
