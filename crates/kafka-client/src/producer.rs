//! [`KafkaProducer`]: an idempotent producer over the Kafka protocol, so exactly-once can be
//! checked against any Kafka-compatible broker with a producer whose every retry is known.
//!
//! It asks the cluster for a producer id (InitProducerId), learns each partition's leader from
//! Metadata, and sends one batch at a time per call: a v2 batch carrying the producer id, epoch
//! and the partition's next sequence. A batch whose answer is lost (a timeout, a reset
//! connection) is sent again as the very same bytes, so a broker that removes duplicates stores
//! it once; retriable error codes (a leader moving, a topic still being created) and lost
//! answers (the leader may have died) refresh the metadata first. It keeps one request in flight, which is what makes every acknowledgement
//! attributable to one batch; a producer written for speed would pipeline.
//!
//! A lost answer costs a timeout, so the timeout adapts to the round trip (`timer`).
//!
//! [`KafkaProducer::connect_transactional`] makes it a transactional producer (`transaction`).

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, InitProducerIdRequest, InitProducerIdResponse,
    MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_records::{NewRecord, Writer};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use thiserror::Error;

use crate::{KafkaClientError, KafkaConnection, error_name};

mod timer;
mod transaction;

use timer::RetransmitTimer;
pub use transaction::GroupMember;

/// Kafka's DUPLICATE_SEQUENCE_NUMBER: the batch was stored before (a broker that does not
/// return the first copy's offset answers this).
const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;

/// The versions this producer speaks: (API, lowest, highest). Produce stops at 9, the last
/// version that names topics and carries no leader endpoints in its answer.
const VERSIONS: [(ApiKey, i16, i16); 3] = [
    (ApiKey::Metadata, 1, 9),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::Produce, 3, 9),
];

/// How long a refused first connection is retried before nothing listening there is an error.
const REFUSED_GRACE: Duration = Duration::from_secs(5);

/// Pause before a retry, so a broker that answers at once with a retriable error is not spun on.
const RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// How a [`KafkaProducer`] behaves.
#[derive(Debug, Clone, Copy)]
pub struct KafkaProducerConfig {
    /// The longest a request waits for its answer before it is given up and sent again on a new
    /// connection (the adaptive timeout never exceeds it).
    pub request_timeout: Duration,
    /// A batch not acknowledged within this long, retries included, fails.
    pub delivery_timeout: Duration,
    /// Run transactions as clients did before KIP-890 part 2 (EndTxn v3 and below, one epoch
    /// from one transaction to the next), even where the broker offers part 2.
    pub before_part_2: bool,
}

impl Default for KafkaProducerConfig {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(5),
            delivery_timeout: Duration::from_secs(60),
            before_part_2: false,
        }
    }
}

/// Why a batch was not acknowledged.
#[derive(Debug, Error)]
pub enum KafkaProduceError {
    /// A request failed for good (the bootstrap broker could not be reached, say).
    #[error(transparent)]
    Client(#[from] KafkaClientError),
    /// The broker refused with an error that retrying does not cure.
    #[error("the broker answered {} for {what}", error_name(*.code))]
    Broker {
        /// Kafka's error code.
        code: i16,
        /// What was asked.
        what: String,
    },
    /// The broker does not speak a version this producer needs.
    #[error("the broker does not support {api:?} versions {min} to {max}")]
    Unsupported {
        /// The API.
        api: ApiKey,
        /// Our lowest.
        min: i16,
        /// Our highest.
        max: i16,
    },
    /// An answer lacks what was asked for.
    #[error("Kafka protocol error: {0}")]
    Protocol(String),
    /// The records did not encode as a batch.
    #[error(transparent)]
    Records(#[from] minibroker_records::RecordsError),
    /// The transaction coordinator did not answer in time.
    #[error(
        "the transaction coordinator did not answer {api:?} within {timeout:?}; last error: {last}"
    )]
    CoordinatorTimeout {
        /// What was asked.
        api: ApiKey,
        /// The delivery timeout.
        timeout: Duration,
        /// What the last attempt ran into.
        last: String,
    },
    /// Retries ran out.
    #[error("{topic}/{partition}: no acknowledgement within {timeout:?}; last error: {last}")]
    DeliveryTimeout {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The delivery timeout.
        timeout: Duration,
        /// What the last attempt ran into.
        last: String,
    },
}

impl KafkaProduceError {
    /// Whether a newer instance of this producer (the same transactional id, initialised
    /// again) has fenced this one: only a new InitProducerId gets it writing again.
    pub fn is_fenced(&self) -> bool {
        let Self::Broker { code, .. } = self else {
            return false;
        };
        matches!(
            ResponseError::try_from_code(*code),
            Some(ResponseError::InvalidProducerEpoch | ResponseError::ProducerFenced)
        )
    }
}

/// One acknowledged batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaAck {
    /// The partition written.
    pub partition: i32,
    /// The batch's base sequence.
    pub sequence: i32,
    /// Records in it.
    pub records: u32,
    /// The offset of its first record, if the answer named one.
    pub base_offset: Option<i64>,
    /// Attempts it took (1 without a retry).
    pub attempts: u32,
}

/// What a producer has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KafkaProducerStats {
    /// Batches acknowledged.
    pub batches: u64,
    /// Records acknowledged.
    pub records: u64,
    /// Requests sent again.
    pub retries: u64,
    /// Answers DUPLICATE_SEQUENCE_NUMBER (a retry of a stored batch, recognised as such).
    pub duplicates: u64,
}

impl std::ops::AddAssign for KafkaProducerStats {
    fn add_assign(&mut self, other: Self) {
        self.batches += other.batches;
        self.records += other.records;
        self.retries += other.retries;
        self.duplicates += other.duplicates;
    }
}

/// An idempotent producer over the Kafka protocol.
#[derive(Debug)]
pub struct KafkaProducer {
    bootstrap: String,
    config: KafkaProducerConfig,
    producer_id: i64,
    epoch: i16,
    versions: HashMap<ApiKey, i16>,
    /// Broker id → host:port, from Metadata.
    brokers: HashMap<i32, String>,
    /// (topic, partition) → its leader's broker id.
    leaders: HashMap<(String, i32), i32>,
    /// Open connections by broker id.
    connections: HashMap<i32, KafkaConnection>,
    /// (topic, partition) → the next batch's base sequence.
    sequences: HashMap<(String, i32), i32>,
    stats: KafkaProducerStats,
    timer: RetransmitTimer,
    /// The transactional id's state, for a transactional producer.
    transaction: Option<transaction::Transaction>,
    /// The `transaction.version` feature the bootstrap broker finalized (2: KIP-890 part 2).
    transaction_version: i16,
}

impl KafkaProducer {
    /// Connects to `bootstrap`, agrees on versions and gets a producer id.
    ///
    /// # Errors
    /// If the broker cannot be reached, speaks no version this producer needs, or refuses a
    /// producer id.
    pub async fn connect(
        bootstrap: &str,
        config: KafkaProducerConfig,
    ) -> Result<Self, KafkaProduceError> {
        let mut producer = Self::open(bootstrap, config, &[]).await?;
        let mut conn = KafkaConnection::connect(bootstrap)
            .await?
            .with_client_id("minibroker-producer")
            .with_answer_timeout(config.request_timeout);
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(kafka_protocol::messages::ProducerId(-1))
            .with_producer_epoch(-1);
        let deadline = Instant::now() + config.delivery_timeout;
        loop {
            let sent = Instant::now();
            let asked = conn
                .call::<_, InitProducerIdResponse>(
                    ApiKey::InitProducerId,
                    producer.version(ApiKey::InitProducerId),
                    &request,
                )
                .await;
            let answer = match asked {
                Ok(answer) => answer,
                // A lost answer: ask again on a new connection, until the delivery timeout.
                Err(error) if lost(&error) && Instant::now() < deadline => {
                    tokio::time::sleep(RETRY_BACKOFF).await;
                    conn = KafkaConnection::connect(bootstrap)
                        .await?
                        .with_client_id("minibroker-producer")
                        .with_answer_timeout(config.request_timeout);
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            // The first round trip seeds the adaptive timeout.
            producer.timer.answered(sent.elapsed());
            match answer.error_code {
                0 => {
                    producer.producer_id = answer.producer_id.0;
                    producer.epoch = answer.producer_epoch;
                    return Ok(producer);
                }
                code if retriable(code) && Instant::now() < deadline => {
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
                code => {
                    return Err(KafkaProduceError::Broker {
                        code,
                        what: "a producer id".into(),
                    });
                }
            }
        }
    }

    /// A producer of no id yet, the versions agreed with `bootstrap` (ours and `more`).
    async fn open(
        bootstrap: &str,
        config: KafkaProducerConfig,
        more: &[(ApiKey, i16, i16)],
    ) -> Result<Self, KafkaProduceError> {
        let wanted: Vec<(ApiKey, i16, i16)> = VERSIONS.iter().chain(more).copied().collect();
        let deadline = Instant::now() + config.delivery_timeout;
        let (versions, transaction_version) = loop {
            let mut conn = connect_within_grace(bootstrap)
                .await?
                .with_client_id("minibroker-producer")
                .with_answer_timeout(config.request_timeout);
            let agreed = async {
                let listed = list_versions(&mut conn).await?;
                let versions = choose_versions(&listed, &wanted)?;
                let transaction_version = finalized_transaction_version(&mut conn, &listed).await?;
                Ok::<_, KafkaProduceError>((versions, transaction_version))
            }
            .await;
            match agreed {
                Ok(agreed) => break agreed,
                // A lost answer: ask again on a new connection, until the delivery timeout.
                Err(KafkaProduceError::Client(error))
                    if lost(&error) && Instant::now() < deadline =>
                {
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
                Err(error) => return Err(error),
            }
        };
        Ok(Self {
            bootstrap: bootstrap.to_owned(),
            config,
            producer_id: -1,
            epoch: -1,
            versions,
            brokers: HashMap::new(),
            leaders: HashMap::new(),
            connections: HashMap::new(),
            sequences: HashMap::new(),
            stats: KafkaProducerStats::default(),
            timer: RetransmitTimer::new(config.request_timeout),
            transaction: None,
            transaction_version,
        })
    }

    /// The producer id the cluster gave.
    #[must_use]
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// Its epoch.
    #[must_use]
    pub fn epoch(&self) -> i16 {
        self.epoch
    }

    /// The sequence the next batch to `topic`/`partition` starts at.
    #[must_use]
    pub fn next_sequence(&self, topic: &str, partition: i32) -> i32 {
        self.sequences
            .get(&(topic.to_owned(), partition))
            .copied()
            .unwrap_or(0)
    }

    /// What it has done so far.
    #[must_use]
    pub fn stats(&self) -> KafkaProducerStats {
        self.stats
    }

    fn version(&self, api: ApiKey) -> i16 {
        self.versions[&api]
    }

    /// The partitions of `topic`, in index order (and their leaders, remembered).
    ///
    /// # Errors
    /// If Metadata fails or names an error for the topic.
    pub async fn partitions(&mut self, topic: &str) -> Result<Vec<i32>, KafkaProduceError> {
        self.refresh(topic).await?;
        let mut partitions: Vec<i32> = self
            .leaders
            .keys()
            .filter(|(t, _)| t == topic)
            .map(|&(_, p)| p)
            .collect();
        partitions.sort_unstable();
        Ok(partitions)
    }

    /// Asks the bootstrap broker for `topic`'s leaders (on a new connection, so one a lost answer
    /// left unusable is never reused; the broker creates the topic if it creates topics on
    /// demand).
    async fn refresh(&mut self, topic: &str) -> Result<(), KafkaProduceError> {
        let request = crate::metadata_request(topic, true);
        let version = self.version(ApiKey::Metadata);
        let mut conn = KafkaConnection::connect(self.bootstrap.as_str())
            .await?
            .with_client_id("minibroker-producer")
            .with_answer_timeout(self.config.request_timeout);
        let answer: MetadataResponse = conn.call(ApiKey::Metadata, version, &request).await?;
        for broker in &answer.brokers {
            let addr = format!("{}:{}", broker.host, broker.port);
            if self.brokers.insert(broker.node_id.0, addr.clone()) != Some(addr) {
                // A broker that moved: its old connection goes.
                self.connections.remove(&broker.node_id.0);
            }
        }
        let found = answer
            .topics
            .first()
            .ok_or_else(|| KafkaProduceError::Protocol("no topic in the Metadata answer".into()))?;
        if found.error_code != 0 {
            return Err(KafkaProduceError::Broker {
                code: found.error_code,
                what: format!("topic {topic:?}"),
            });
        }
        for partition in &found.partitions {
            self.leaders.insert(
                (topic.to_owned(), partition.partition_index),
                partition.leader_id.0,
            );
        }
        Ok(())
    }

    /// Sends `records` as one batch to `topic`/`partition` and waits for its acknowledgement,
    /// sending the same bytes again after a lost answer or a retriable error.
    ///
    /// # Errors
    /// [`KafkaProduceError::Broker`] for an error retrying does not cure (the batch's sequences
    /// are then not used); [`KafkaProduceError::DeliveryTimeout`] when no acknowledgement came
    /// within the delivery timeout.
    pub async fn send(
        &mut self,
        topic: &str,
        partition: i32,
        records: &[NewRecord],
    ) -> Result<KafkaAck, KafkaProduceError> {
        let Prepared {
            key,
            sequence,
            count,
            batch,
        } = self.prepare(topic, partition, records).await?;
        let deadline = Instant::now() + self.config.delivery_timeout;
        let mut attempts = 0;
        loop {
            attempts += 1;
            if attempts > 1 {
                self.stats.retries += 1;
            }
            let last = match self.attempt(topic, partition, &batch).await {
                Ok((0, offset)) => {
                    return Ok(self.acknowledged(key, sequence, count, Some(offset), attempts));
                }
                Ok((DUPLICATE_SEQUENCE_NUMBER, _)) => {
                    self.stats.duplicates += 1;
                    return Ok(self.acknowledged(key, sequence, count, None, attempts));
                }
                Ok((code, _)) if retriable(code) => {
                    self.leaders.remove(&key);
                    error_name(code)
                }
                Ok((code, _)) => {
                    return Err(KafkaProduceError::Broker {
                        code,
                        what: format!("{topic}/{partition} sequence {sequence}"),
                    });
                }
                Err(error) => {
                    // The leader may be gone (killed, stopped, cut off): the next attempt asks
                    // the cluster who leads the partition now.
                    if matches!(&error, KafkaProduceError::Client(lost_on_the_way) if lost(lost_on_the_way))
                    {
                        self.leaders.remove(&key);
                    }
                    error.to_string()
                }
            };
            if Instant::now() >= deadline {
                return Err(KafkaProduceError::DeliveryTimeout {
                    topic: topic.to_owned(),
                    partition,
                    timeout: self.config.delivery_timeout,
                    last,
                });
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// Sends `records` as one batch to `topic`/`partition` once, as a client that gives up on
    /// a batch whose answer does not come: `None` when it did not (the batch's sequences are
    /// then not used, and its connection is dropped). A test of what a broker does with a
    /// request that arrives after its client moved on.
    ///
    /// # Errors
    /// The broker's refusal, or a failure before the request was sent.
    pub async fn send_once(
        &mut self,
        topic: &str,
        partition: i32,
        records: &[NewRecord],
    ) -> Result<Option<KafkaAck>, KafkaProduceError> {
        let Prepared {
            key,
            sequence,
            count,
            batch,
        } = self.prepare(topic, partition, records).await?;
        match self.attempt(topic, partition, &batch).await {
            Ok((0, offset)) => Ok(Some(self.acknowledged(
                key,
                sequence,
                count,
                Some(offset),
                1,
            ))),
            Ok((code, _)) => Err(KafkaProduceError::Broker {
                code,
                what: format!("{topic}/{partition} sequence {sequence}"),
            }),
            Err(KafkaProduceError::Client(error)) if lost(&error) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The next batch of `records` for `topic`/`partition` (its partition added to the open
    /// transaction first), at the partition's next sequence.
    async fn prepare(
        &mut self,
        topic: &str,
        partition: i32,
        records: &[NewRecord],
    ) -> Result<Prepared, KafkaProduceError> {
        self.add_to_transaction(topic, partition).await?;
        let sequence = self.next_sequence(topic, partition);
        let key = (topic.to_owned(), partition);
        let writer = Writer {
            producer_id: self.producer_id,
            epoch: self.epoch,
            base_sequence: sequence,
        };
        let now = minibroker_records::now_millis();
        let batch = if self.transaction.is_some() {
            minibroker_records::encode_transactional(writer, records, now)?
        } else {
            minibroker_records::encode(writer, records, now)?
        };
        Ok(Prepared {
            key,
            sequence,
            count: u32::try_from(records.len()).unwrap_or(u32::MAX),
            batch,
        })
    }

    fn acknowledged(
        &mut self,
        key: (String, i32),
        sequence: i32,
        records: u32,
        base_offset: Option<i64>,
        attempts: u32,
    ) -> KafkaAck {
        let partition = key.1;
        let next = sequence.wrapping_add(i32::try_from(records).unwrap_or(i32::MAX));
        self.sequences.insert(key, next);
        self.stats.batches += 1;
        self.stats.records += u64::from(records);
        KafkaAck {
            partition,
            sequence,
            records,
            base_offset,
            attempts,
        }
    }

    /// One Produce of `batch` to the partition's leader: the answer's error code and base
    /// offset, or why there was no answer (the connection is then dropped, so a late answer
    /// cannot be taken for the next request's).
    async fn attempt(
        &mut self,
        topic: &str,
        partition: i32,
        batch: &Bytes,
    ) -> Result<(i16, i64), KafkaProduceError> {
        let key = (topic.to_owned(), partition);
        if !self.leaders.contains_key(&key) {
            self.refresh(topic).await?;
        }
        let leader = *self.leaders.get(&key).ok_or_else(|| {
            KafkaProduceError::Protocol(format!("no leader named for {topic}/{partition}"))
        })?;
        let addr = self
            .brokers
            .get(&leader)
            .cloned()
            .ok_or_else(|| KafkaProduceError::Protocol(format!("broker {leader} not named")))?;
        let timeout = self.timer.timeout();
        let request = ProduceRequest::default()
            .with_transactional_id(
                self.transaction
                    .as_ref()
                    .map(transaction::Transaction::transactional_id),
            )
            .with_acks(-1)
            .with_timeout_ms(
                i32::try_from(self.config.request_timeout.as_millis()).unwrap_or(i32::MAX),
            )
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(batch.clone())),
                    ]),
            ]);
        let version = self.version(ApiKey::Produce);
        let conn = match self.connections.entry(leader) {
            std::collections::hash_map::Entry::Occupied(open) => open.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => slot.insert(
                KafkaConnection::connect(addr.as_str())
                    .await?
                    .with_client_id("minibroker-producer")
                    .with_answer_timeout(timeout),
            ),
        };
        conn.set_answer_timeout(timeout);
        let sent = Instant::now();
        let answer: Result<ProduceResponse, _> =
            conn.call(ApiKey::Produce, version, &request).await;
        let answer = match answer {
            Ok(answer) => {
                self.timer.answered(sent.elapsed());
                answer
            }
            Err(error) => {
                if matches!(error, KafkaClientError::Timeout { .. }) {
                    self.timer.timed_out();
                }
                self.connections.remove(&leader);
                return Err(error.into());
            }
        };
        let data = answer
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .ok_or_else(|| {
                KafkaProduceError::Protocol(format!(
                    "no partition in the Produce answer for {topic}/{partition}"
                ))
            })?;
        Ok((data.error_code, data.base_offset))
    }
}

/// A batch ready to send: its partition, first sequence, record count and bytes.
struct Prepared {
    key: (String, i32),
    sequence: i32,
    count: u32,
    batch: Bytes,
}

/// Connects to `addr`, retrying a refused connection for [`REFUSED_GRACE`] (a broker or proxy
/// started a moment before), then failing with the refusal: nothing listens there.
async fn connect_within_grace(addr: &str) -> Result<KafkaConnection, KafkaClientError> {
    let started = Instant::now();
    loop {
        match KafkaConnection::connect(addr).await {
            Err(KafkaClientError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::ConnectionRefused
                    && started.elapsed() < REFUSED_GRACE =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            connected => return connected,
        }
    }
}

/// Whether `error` is an answer lost on the way (no answer in time, a closed or broken
/// connection), which asking again may cure — unlike an answer that does not decode.
fn lost(error: &KafkaClientError) -> bool {
    matches!(
        error,
        KafkaClientError::Timeout { .. }
            | KafkaClientError::Closed { .. }
            | KafkaClientError::Io { .. }
    )
}

/// Whether Kafka calls `code` retriable (a leader moving, a topic not ready yet, a timeout).
fn retriable(code: i16) -> bool {
    ResponseError::try_from_code(code).is_some_and(|error| error.is_retriable())
}

/// The highest version of each API of `wanted` (API, our lowest, our highest) both sides speak,
/// asked with ApiVersions v0, which every broker answers.
///
/// # Errors
/// [`KafkaProduceError::Unsupported`] for an API the broker speaks at no version of ours.
pub async fn agree_versions(
    conn: &mut KafkaConnection,
    wanted: &[(ApiKey, i16, i16)],
) -> Result<HashMap<ApiKey, i16>, KafkaProduceError> {
    choose_versions(&list_versions(conn).await?, wanted)
}

/// The broker's ApiVersions v0 answer, which every broker gives.
async fn list_versions(
    conn: &mut KafkaConnection,
) -> Result<ApiVersionsResponse, KafkaProduceError> {
    let answer: ApiVersionsResponse = conn
        .call(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())
        .await?;
    if answer.error_code != 0 {
        return Err(KafkaProduceError::Broker {
            code: answer.error_code,
            what: "ApiVersions".into(),
        });
    }
    Ok(answer)
}

/// [`agree_versions`] on the broker's `listed` versions.
fn choose_versions(
    listed: &ApiVersionsResponse,
    wanted: &[(ApiKey, i16, i16)],
) -> Result<HashMap<ApiKey, i16>, KafkaProduceError> {
    let mut versions = HashMap::new();
    for &(api, min, max) in wanted {
        let theirs = listed.api_keys.iter().find(|k| k.api_key == api as i16);
        let chosen = theirs
            .map(|k| k.max_version.min(max))
            .filter(|&v| theirs.is_some_and(|k| v >= k.min_version) && v >= min)
            .ok_or(KafkaProduceError::Unsupported { api, min, max })?;
        versions.insert(api, chosen);
    }
    Ok(versions)
}

/// The `transaction.version` feature the broker at the other end of `conn` has finalized (0
/// when it names none, or speaks no ApiVersions that carries features; `listed` is its v0
/// answer): 2 and above is KIP-890 part 2, where every transaction end bumps the producer's
/// epoch.
///
/// # Errors
/// If the request fails.
async fn finalized_transaction_version(
    conn: &mut KafkaConnection,
    listed: &ApiVersionsResponse,
) -> Result<i16, KafkaProduceError> {
    /// The first ApiVersions version whose answer carries the finalized features.
    const WITH_FEATURES: i16 = 3;
    let speaks_features = listed
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::ApiVersions as i16 && k.max_version >= WITH_FEATURES);
    if !speaks_features {
        return Ok(0);
    }
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("minibroker"))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
    let answer: ApiVersionsResponse = conn
        .call(ApiKey::ApiVersions, WITH_FEATURES, &request)
        .await?;
    Ok(answer
        .finalized_features
        .iter()
        .find(|feature| feature.name.as_str() == "transaction.version")
        .map_or(0, |feature| feature.max_version_level))
}
