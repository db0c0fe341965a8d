//! [`Producer`]: the idempotent producer.
//!
//! The producer owns the sequence numbers. Each record sent to a partition takes the next
//! sequence, as in Kafka, so a batch of `n` records spans `n` sequences from its base sequence.
//! A batch is encoded once, as a Kafka v2 record batch, and resent as the very same bytes, so the
//! broker can recognise a retry as a DUPLICATE instead of storing it twice. On a timeout or a
//! dropped connection the producer reconnects and resends every unacknowledged batch of its
//! window, in order.
//!
//! FENCED_EPOCH stops the producer: a newer instance owns its id. OUT_OF_ORDER stops it too,
//! unless the refused batch was sent while an earlier one was still unanswered — then it may
//! simply have overtaken that one (a delayed or lost request) and is resent after it.

use bytes::Bytes;
use minibroker_protocol::serde_bytes;
use minibroker_protocol::{Outcome, ProduceRequest, Request, Response};
use minibroker_records::{NewRecord, Writer};
use minibroker_state::SequenceRange;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Client, ClientConfig, ClientError, ConnectionEnd, PendingResponse, ProducerError};

/// The most batches a producer keeps in flight per partition, as in Kafka: the broker caches the
/// last five batches per producer, so any retry within the window is answered with its offset.
pub const MAX_IN_FLIGHT: usize = 5;

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Connection settings, including the per-request timeout that triggers a resend.
    pub client: ClientConfig,
    /// Batches in flight per partition, 1 to `MAX_IN_FLIGHT` (5, as in Kafka).
    pub max_in_flight: usize,
    /// Resends of a batch that overtook an earlier one (an OUT_OF_ORDER answer while the earlier
    /// one was unanswered) before the OUT_OF_ORDER is reported.
    pub max_retries: u32,
    /// How long the producer keeps reconnecting and resending without any batch being
    /// acknowledged before it gives up (Kafka's `delivery.timeout.ms`): long enough to ride
    /// through a broker restart.
    pub delivery_timeout: Duration,
    /// Pause before reconnecting, doubled on each failed round up to one second.
    pub retry_backoff: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            client: ClientConfig::default(),
            max_in_flight: MAX_IN_FLIGHT,
            max_retries: 20,
            delivery_timeout: Duration::from_secs(120),
            retry_backoff: Duration::from_millis(20),
        }
    }
}

/// The broker's acknowledgement of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The base sequence the batch was sent with (its first record's).
    pub sequence: i32,
    /// How many records (and so sequences) the batch holds.
    pub records: u32,
    /// Where the batch is stored, when the broker said.
    pub base_offset: Option<i64>,
    /// Whether the acknowledgement was a DUPLICATE (a resend of a batch already stored).
    pub duplicate: bool,
}

/// Counters of what the producer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Batches acknowledged.
    pub batches: u64,
    /// Records in acknowledged batches.
    pub records: u64,
    /// Batch sends beyond the first (resends).
    pub retries: u64,
    /// Acknowledgements that were DUPLICATE.
    pub duplicates: u64,
    /// New connections made after a failure.
    pub reconnects: u64,
    /// OUT_OF_ORDER answers to batches that had overtaken an earlier one, then resent.
    pub out_of_order_resent: u64,
}

/// One call's batches and how far they got.
struct Window<'a> {
    topic: &'a str,
    partition: u32,
    /// Each batch's sequences and its encoded bytes, sent as they are every time.
    batches: Vec<(SequenceRange, Bytes)>,
    acks: Vec<Ack>,
    /// Sent and not yet answered, oldest first.
    in_flight: VecDeque<InFlight>,
    next_to_send: usize,
    /// Resend rounds since the last progress.
    failed_rounds: u32,
    /// When the first of those rounds began.
    failing_since: Option<Instant>,
    /// How often each batch was sent.
    sends: Vec<u32>,
}

impl Window<'_> {
    /// Forgets what is in flight and sends again from batch `index`: answers still due on the
    /// old connection are no longer awaited.
    fn resend_from(&mut self, index: usize) {
        self.in_flight.clear();
        self.next_to_send = index;
    }
}

/// One batch of the current window.
struct InFlight {
    index: usize,
    /// Sent while an earlier batch of the window was unanswered, so it may have overtaken it.
    behind_unanswered: bool,
    answer: PendingResponse,
}

/// An idempotent producer over one connection.
pub struct Producer {
    addr: String,
    config: ProducerConfig,
    client: Option<Client>,
    producer_id: i64,
    epoch: i16,
    /// Per topic, then partition: looked up by `&str`, so an acknowledgement allocates nothing.
    next_sequence: HashMap<String, HashMap<u32, i32>>,
    stats: ProducerStats,
    stopped: Option<Arc<ProducerError>>,
}

impl Producer {
    /// Connects and obtains a new producer id at epoch 0.
    ///
    /// # Errors
    /// Connection failures and broker errors.
    pub async fn connect(addr: &str, config: ProducerConfig) -> Result<Self, ProducerError> {
        Self::init(addr, config, None).await
    }

    /// Connects as a new instance of an existing producer id: the broker bumps its epoch, which
    /// fences every older instance.
    ///
    /// # Errors
    /// Connection failures and broker errors (e.g. an id the broker never issued).
    pub async fn resume(
        addr: &str,
        producer_id: i64,
        config: ProducerConfig,
    ) -> Result<Self, ProducerError> {
        Self::init(addr, config, Some(producer_id)).await
    }

    async fn init(
        addr: &str,
        config: ProducerConfig,
        producer_id: Option<i64>,
    ) -> Result<Self, ProducerError> {
        // A lost init answer is retried like a lost batch: a second new id, or a second epoch
        // bump, only ever fences this very instance's unused identity.
        let mut attempts = 0u32;
        let started = Instant::now();
        let (client, identity) = loop {
            let attempt = async {
                let client = Client::connect(addr, config.client.clone()).await?;
                let identity = client.init_producer(producer_id).await?;
                Ok::<_, ClientError>((client, identity))
            };
            match attempt.await {
                Ok(done) => break done,
                // Nothing listens there for a few seconds: a wrong address, not a fault to ride
                // out (a proxy or broker still starting gets the grace).
                Err(error) if refused(&error) && started.elapsed() >= REFUSED_GRACE => {
                    return Err(error.into());
                }
                Err(error)
                    if error.is_retriable() && started.elapsed() < config.delivery_timeout =>
                {
                    attempts += 1;
                    if attempts == 1 && refused(&error) {
                        tracing::warn!(%error, addr, "nothing listens there yet; retrying for a few seconds");
                    } else if attempts == 1 {
                        tracing::warn!(%error, addr, "init-producer failed; retrying");
                    } else {
                        tracing::debug!(%error, attempts, "retrying init-producer");
                    }
                    tokio::time::sleep(backoff(&config, attempts)).await;
                }
                Err(error) => return Err(error.into()),
            }
        };
        Ok(Self {
            addr: addr.to_owned(),
            config,
            client: Some(client),
            producer_id: identity.producer_id,
            epoch: identity.epoch,
            next_sequence: HashMap::new(),
            stats: ProducerStats::default(),
            stopped: None,
        })
    }

    /// The producer id.
    #[must_use]
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// This instance's epoch.
    #[must_use]
    pub fn epoch(&self) -> i16 {
        self.epoch
    }

    /// What the producer has done so far.
    #[must_use]
    pub fn stats(&self) -> ProducerStats {
        self.stats
    }

    /// The base sequence the next batch to `topic`/`partition` will get.
    #[must_use]
    pub fn next_sequence(&self, topic: &str, partition: u32) -> i32 {
        self.next_sequence
            .get(topic)
            .and_then(|partitions| partitions.get(&partition))
            .copied()
            .unwrap_or(0)
    }

    /// Sends one batch and waits until it is acknowledged.
    ///
    /// # Errors
    /// See [`Self::send_batches`].
    pub async fn send(
        &mut self,
        topic: &str,
        partition: u32,
        records: Vec<NewRecord>,
    ) -> Result<Ack, ProducerError> {
        let mut acks = self.send_batches(topic, partition, vec![records]).await?;
        acks.pop().ok_or(ProducerError::Unacknowledged)
    }

    /// Sends batches to one partition in order, up to `max_in_flight` at a time, and returns one
    /// acknowledgement per batch. Resends after timeouts and lost connections resend each batch's
    /// very bytes, sequences included, so nothing is stored twice.
    ///
    /// # Errors
    /// [`ProducerError::Fenced`] and [`ProducerError::OutOfOrder`] stop the producer;
    /// [`ProducerError::RetriesExhausted`] when the broker stays unreachable; broker error
    /// responses (bad topic, storage full) as [`ProducerError::Client`]. Batches acknowledged
    /// before an error stay acknowledged and their sequences used.
    pub async fn send_batches(
        &mut self,
        topic: &str,
        partition: u32,
        batches: Vec<Vec<NewRecord>>,
    ) -> Result<Vec<Ack>, ProducerError> {
        if let Some(reason) = &self.stopped {
            return Err(ProducerError::Stopped(Arc::clone(reason)));
        }
        let result = self.run_window(topic, partition, &batches).await;
        // Fenced and out of order stop the producer; later calls are told why.
        let stop = match &result {
            Err(ProducerError::Fenced { producer_id, epoch }) => Some(ProducerError::Fenced {
                producer_id: *producer_id,
                epoch: *epoch,
            }),
            Err(ProducerError::OutOfOrder {
                topic,
                partition,
                sequence,
            }) => Some(ProducerError::OutOfOrder {
                topic: topic.clone(),
                partition: *partition,
                sequence: *sequence,
            }),
            _ => None,
        };
        if let Some(stop) = stop {
            self.stopped = Some(Arc::new(stop));
        }
        result
    }

    /// Numbers and encodes `batches`, each once: batch `i` starts where batch `i - 1` ended.
    fn encode(
        &self,
        first_sequence: i32,
        batches: &[Vec<NewRecord>],
    ) -> Result<Vec<(SequenceRange, Bytes)>, ProducerError> {
        let now = minibroker_records::now_millis();
        let mut next = first_sequence;
        batches
            .iter()
            .map(|records| {
                let count = u32::try_from(records.len()).unwrap_or(u32::MAX);
                let sequences =
                    SequenceRange::spanning(next, count).map_err(ProducerError::Sequence)?;
                let writer = Writer {
                    producer_id: self.producer_id,
                    epoch: self.epoch,
                    base_sequence: next,
                };
                let batch =
                    minibroker_records::encode(writer, records, now).map_err(ClientError::from)?;
                next = sequences.following();
                Ok((sequences, batch))
            })
            .collect()
    }

    async fn run_window(
        &mut self,
        topic: &str,
        partition: u32,
        batches: &[Vec<NewRecord>],
    ) -> Result<Vec<Ack>, ProducerError> {
        let first_sequence = self.next_sequence(topic, partition);
        let mut window = Window {
            topic,
            partition,
            batches: self.encode(first_sequence, batches)?,
            acks: Vec::with_capacity(batches.len()),
            in_flight: VecDeque::new(),
            next_to_send: 0,
            failed_rounds: 0,
            failing_since: None,
            sends: vec![0; batches.len()],
        };
        while window.acks.len() < window.batches.len() {
            self.fill(&mut window).await?;
            let Some(in_flight) = window.in_flight.pop_front() else {
                break;
            };
            let answer = in_flight.answer.await;
            self.handle_answer(
                &mut window,
                in_flight.index,
                in_flight.behind_unanswered,
                answer,
            )
            .await?;
        }
        Ok(window.acks)
    }

    /// Sends batches until `max_in_flight` are unanswered or none is left to send.
    async fn fill(&mut self, window: &mut Window<'_>) -> Result<(), ProducerError> {
        let size = self.config.max_in_flight.clamp(1, MAX_IN_FLIGHT);
        while window.in_flight.len() < size && window.next_to_send < window.batches.len() {
            let index = window.next_to_send;
            let sent = self
                .send_one(window.topic, window.partition, &window.batches[index].1)
                .await;
            match sent {
                Ok(answer) => {
                    window.sends[index] += 1;
                    if window.sends[index] > 1 {
                        self.stats.retries += 1;
                    }
                    let behind_unanswered = !window.in_flight.is_empty();
                    window.in_flight.push_back(InFlight {
                        index,
                        behind_unanswered,
                        answer,
                    });
                    window.next_to_send += 1;
                }
                Err(error) if error.is_retriable() => {
                    self.recover(error, window).await?;
                    window.resend_from(window.acks.len());
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }

    /// Acts on the answer to batch `index`: records an acknowledgement, resends from it, or
    /// stops with the reason.
    async fn handle_answer(
        &mut self,
        window: &mut Window<'_>,
        index: usize,
        behind_unanswered: bool,
        answer: Result<Response, ClientError>,
    ) -> Result<(), ProducerError> {
        let sequences = window.batches[index].0;
        let error = match answer {
            Ok(Response::Produce(response)) => match response.outcome {
                Outcome::Accepted | Outcome::Duplicate => {
                    let duplicate = response.outcome == Outcome::Duplicate;
                    let records = sequences.count();
                    self.stats.batches += 1;
                    self.stats.records += u64::from(records);
                    self.stats.duplicates += u64::from(duplicate);
                    window.acks.push(Ack {
                        sequence: sequences.first(),
                        records,
                        base_offset: response.base_offset,
                        duplicate,
                    });
                    let following = sequences.following();
                    match self.next_sequence.get_mut(window.topic) {
                        Some(partitions) => {
                            partitions.insert(window.partition, following);
                        }
                        None => {
                            let partitions = HashMap::from([(window.partition, following)]);
                            self.next_sequence
                                .insert(window.topic.to_owned(), partitions);
                        }
                    }
                    window.failed_rounds = 0;
                    window.failing_since = None;
                    return Ok(());
                }
                Outcome::FencedEpoch => {
                    return Err(ProducerError::Fenced {
                        producer_id: self.producer_id,
                        epoch: self.epoch,
                    });
                }
                Outcome::OutOfOrder if behind_unanswered => {
                    // It overtook an earlier batch that has since been acknowledged: resend it
                    // and everything after it, in order.
                    self.stats.out_of_order_resent += 1;
                    window.failed_rounds += 1;
                    if window.failed_rounds > self.config.max_retries {
                        return Err(out_of_order(window.topic, window.partition, sequences));
                    }
                    window.resend_from(index);
                    return Ok(());
                }
                Outcome::OutOfOrder => {
                    return Err(out_of_order(window.topic, window.partition, sequences));
                }
            },
            Ok(Response::Error(error)) => ClientError::Broker(error),
            Ok(other) => ClientError::UnexpectedResponse {
                expected: "produce",
                got: format!("{other:?}"),
            },
            Err(error) => error,
        };
        if !error.is_retriable() {
            return Err(error.into());
        }
        // The batch may or may not be stored; resending its very bytes is safe either way.
        self.recover(error, window).await?;
        window.resend_from(index);
        Ok(())
    }

    /// Sends one produce request on the current connection, connecting first if needed.
    async fn send_one(
        &mut self,
        topic: &str,
        partition: u32,
        batch: &[u8],
    ) -> Result<PendingResponse, ClientError> {
        if self.client.is_none() {
            self.client = Some(Client::connect(&self.addr, self.config.client.clone()).await?);
            self.stats.reconnects += 1;
        }
        let request = Request::Produce(ProduceRequest {
            topic,
            partition,
            batch: serde_bytes::Bytes::new(batch),
        });
        match &self.client {
            Some(client) => client.send(&request).await,
            None => Err(ClientError::ConnectionClosed(Arc::new(
                ConnectionEnd::NotConnected,
            ))),
        }
    }

    /// Drops the connection (answers on it can no longer be trusted to arrive) and waits before
    /// the next round; gives up once `delivery_timeout` has passed without progress.
    async fn recover(
        &mut self,
        error: ClientError,
        window: &mut Window<'_>,
    ) -> Result<(), ProducerError> {
        window.failed_rounds += 1;
        let since = *window.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.config.delivery_timeout {
            return Err(ProducerError::RetriesExhausted {
                attempts: window.failed_rounds,
                last: error,
            });
        }
        tracing::debug!(%error, rounds = window.failed_rounds, "resending unacknowledged batches");
        self.client = None;
        tokio::time::sleep(backoff(&self.config, window.failed_rounds)).await;
        Ok(())
    }
}

/// The pause before retry round `round` (from 1): `retry_backoff` doubled each round, at most one
/// second, so a broker that is restarting or still starting gets time to come up.
fn backoff(config: &ProducerConfig, round: u32) -> Duration {
    config
        .retry_backoff
        .saturating_mul(1 << round.saturating_sub(1).min(6))
        .min(Duration::from_secs(1))
}

fn out_of_order(topic: &str, partition: u32, sequences: SequenceRange) -> ProducerError {
    ProducerError::OutOfOrder {
        topic: topic.to_owned(),
        partition,
        sequence: sequences.first(),
    }
}

/// How long a producer's first connection is retried while nothing listens at its address.
const REFUSED_GRACE: Duration = Duration::from_secs(5);

/// Whether `error` is a connection refused: no process listens at the address.
fn refused(error: &ClientError) -> bool {
    matches!(error, ClientError::Connect { source, .. }
        if source.kind() == std::io::ErrorKind::ConnectionRefused)
}
