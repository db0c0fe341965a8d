//! The load generator: pipelined produce requests over raw connections, with latency recorded per
//! request in an HDR histogram.
//!
//! Each connection writes as one producer id to its own partitions, so every request is an
//! in-order ACCEPTED append. Each partition's request, with its Kafka v2 batch, is encoded once
//! (`wire::Prepared`); a send restamps the correlation id and the batch's base sequence (and CRC)
//! in place, so the generator spends no time encoding, on either wire.
//! Requests are encoded straight into the socket buffer and written in bursts; up to `in_flight`
//! are outstanding per connection. With a target rate the sends are
//! paced and latency is measured from the *intended* send time, so a stall is not hidden
//! (no coordinated omission).
//!
//! Why not [`minibroker_client::Client`]'s pipelining: it costs a channel send, a one-shot reply
//! and a timer per request, and a generator built on it is the bottleneck. Measured on the
//! project's 2-core machine (`bench --embedded --baseline`, 1 × 100 B, two runs each), the same
//! workload on a `Client`-based generator reached 0.98-1.41 M requests/s against the do-nothing
//! baseline and 0.76-0.81 M against the broker, where this generator reaches 3.56-3.61 M and
//! 1.61-1.72 M. Measuring the broker needs a generator well above the broker's rate.

use anyhow::{Context, Result, bail};
use bytes::{Bytes, BytesMut};
use futures::{FutureExt, StreamExt};
use hdrhistogram::Histogram;
use minibroker_broker::OutcomeCounts;
use minibroker_protocol::FrameCodec;
use minibroker_records::{NewRecord, Writer};
use minibroker_state::SequenceRange;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

use super::wire::Wire;

/// What to send.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Connections, each one producer.
    pub connections: usize,
    /// Partitions of the topic; connection `c` writes partitions `c`, `c + connections`, ...
    pub partitions: u32,
    /// Records per produce request.
    pub records_per_batch: usize,
    /// Bytes per record.
    pub record_size: usize,
    /// Outstanding requests per connection.
    pub in_flight: usize,
    /// How long to send.
    pub duration: Duration,
    /// Stop after this many requests in all (instead of the duration).
    pub count: Option<u64>,
    /// Total requests per second to aim at; unlimited when `None`.
    pub rate: Option<f64>,
    /// Topic written.
    pub topic: String,
    /// The protocol spoken.
    pub wire: Wire,
    /// First producer id used (connection `c` uses `first_producer_id + c`).
    pub first_producer_id: i64,
    /// Speak TLS to the broker (`bench --tls`).
    pub tls: Option<ClientTls>,
    /// Give record `i` of every batch the key `k{i}` (`bench --compaction`: a table updated
    /// over and over), instead of no key.
    pub keyed: bool,
}

/// How the generator speaks TLS: the connector, the name the certificate must hold, and a
/// plain listener of the same broker where producer ids are asked for (only the produce
/// traffic is measured, and it all goes over TLS).
#[derive(Clone)]
pub struct ClientTls {
    /// The client's TLS configuration.
    pub connector: tokio_rustls::TlsConnector,
    /// The broker's name, as its certificate holds it.
    pub server_name: minibroker_host::rustls::pki_types::ServerName<'static>,
    /// A plain listener of the same broker, for InitProducerId.
    pub identity_addr: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .field("identity_addr", &self.identity_addr)
            .finish_non_exhaustive()
    }
}

type ReadHalf = Box<dyn AsyncRead + Unpin + Send>;
type WriteHalf = Box<dyn AsyncWrite + Unpin + Send>;

/// A connection to `addr`, over TLS when `tls` says so, as its two halves.
async fn connect(addr: &str, tls: Option<&ClientTls>) -> Result<(ReadHalf, WriteHalf)> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    stream.set_nodelay(true)?;
    Ok(match tls {
        None => {
            let (read_half, write_half) = stream.into_split();
            (Box::new(read_half), Box::new(write_half))
        }
        Some(tls) => {
            let buffered =
                tokio::io::BufReader::with_capacity(minibroker_host::tls::READ_BUFFER, stream);
            let session = tls
                .connector
                .connect(tls.server_name.clone(), buffered)
                .await
                .with_context(|| format!("TLS handshake with {addr}"))?;
            let (read_half, write_half) = tokio::io::split(session);
            (Box::new(read_half), Box::new(write_half))
        }
    })
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Requests answered.
    pub requests: u64,
    /// Records in answered requests.
    pub records: u64,
    /// Record bytes in answered requests.
    pub record_bytes: u64,
    /// Time from the first send to the last answer.
    pub elapsed: Duration,
    /// Request latency in microseconds.
    pub latency: Histogram<u64>,
    /// Answers by outcome.
    pub outcomes: OutcomeCounts,
    /// Error responses.
    pub errors: u64,
}

impl LoadResult {
    /// Nothing measured yet.
    fn empty() -> Self {
        Self {
            requests: 0,
            records: 0,
            record_bytes: 0,
            elapsed: Duration::ZERO,
            // 1 µs to 60 s with 3 significant digits.
            latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds"),
            outcomes: OutcomeCounts::default(),
            errors: 0,
        }
    }

    /// Answered requests per second.
    pub fn requests_per_sec(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    /// Records per second.
    pub fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }
    /// Record megabytes (10^6 bytes) per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.record_bytes as f64 / 1e6 / self.elapsed.as_secs_f64()
    }
    /// Latency quantile in microseconds.
    pub fn latency_us(&self, quantile: f64) -> u64 {
        self.latency.value_at_quantile(quantile)
    }
}

/// Runs `workload` against `addr` (or several, comma-separated, which the connections take in
/// turn); `answered` counts answers as they come (for progress).
pub async fn run(addr: &str, workload: &Workload, answered: Arc<AtomicU64>) -> Result<LoadResult> {
    let record = Bytes::from(vec![b'x'; workload.record_size]);
    let started = Instant::now();
    let deadline = started + workload.duration;
    let per_connection_count = workload
        .count
        .map(|count| count.div_ceil(workload.connections as u64));
    let interval = workload
        .rate
        .map(|rate| Duration::from_secs_f64(workload.connections as f64 / rate.max(1.0)));
    let mut tasks = tokio::task::JoinSet::new();
    // Several brokers (comma-separated) take the connections in turn.
    let addrs: Vec<&str> = addr.split(',').collect();
    for connection in 0..workload.connections {
        let addr = addrs[connection % addrs.len()];
        // One connection at a time, before any load, as producers start in a client: some
        // brokers issue ids from one shared record and fence when asked concurrently.
        let identity_addr = workload.tls.as_ref().map_or(addr, |tls| &tls.identity_addr);
        let (producer_id, epoch) = workload
            .wire
            .producer_identity(
                workload.first_producer_id + connection as i64,
                identity_addr,
            )
            .await?;
        let (read_half, write_half) = connect(addr, workload.tls.as_ref()).await?;
        let responses = FramedRead::new(read_half, FrameCodec::default());
        let job = Connection {
            write_half,
            responses,
            workload: workload.clone(),
            producer_id,
            epoch,
            partitions: partitions_of(connection, workload.connections, workload.partitions),
            record: record.clone(),
            deadline,
            count: per_connection_count,
            interval,
            answered: Arc::clone(&answered),
        };
        tasks.spawn(job.run());
    }
    let mut total = LoadResult::empty();
    while let Some(done) = tasks.join_next().await {
        let part = done.context("load task")??;
        total.requests += part.requests;
        total.records += part.records;
        total.record_bytes += part.record_bytes;
        total.errors += part.errors;
        total.outcomes = total.outcomes + part.outcomes;
        total
            .latency
            .add(&part.latency)
            .context("merging histograms")?;
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

/// The partitions connection `connection` writes: its share when there are more partitions than
/// connections, otherwise one partition (shared with other connections, each its own producer).
pub(super) fn partitions_of(connection: usize, connections: usize, partitions: u32) -> Vec<u32> {
    let count = partitions.max(1) as usize;
    if count <= connections {
        vec![(connection % count) as u32]
    } else {
        (0..partitions)
            .filter(|p| *p as usize % connections == connection)
            .collect()
    }
}

struct Connection {
    write_half: WriteHalf,
    responses: FramedRead<ReadHalf, FrameCodec>,
    workload: Workload,
    producer_id: i64,
    epoch: i16,
    partitions: Vec<u32>,
    record: Bytes,
    deadline: Instant,
    count: Option<u64>,
    interval: Option<Duration>,
    answered: Arc<AtomicU64>,
}

impl Connection {
    async fn run(self) -> Result<LoadResult> {
        let mut write_half = self.write_half;
        let mut responses = self.responses;
        let mut out = BytesMut::with_capacity(64 * 1024);
        let mut sent_at: VecDeque<Instant> = VecDeque::with_capacity(self.workload.in_flight);
        let mut sequences = vec![0i32; self.partitions.len()];
        let records: Vec<NewRecord> = (0..self.workload.records_per_batch)
            .map(|i| NewRecord {
                key: self.workload.keyed.then(|| Bytes::from(format!("k{i}"))),
                ..NewRecord::value(self.record.clone())
            })
            .collect();
        let writer = Writer {
            producer_id: self.producer_id,
            epoch: self.epoch,
            base_sequence: 0,
        };
        let template = minibroker_records::encode(writer, &records, 0)?;
        let mut requests = self
            .partitions
            .iter()
            .map(|partition| {
                self.workload
                    .wire
                    .prepare(&self.workload.topic, *partition, &template)
            })
            .collect::<Result<Vec<_>>>()?;
        let per_batch = u32::try_from(self.workload.records_per_batch)?;
        let mut result = LoadResult::empty();
        let mut sent = 0u64;
        let mut next_send = Instant::now();
        let mut correlation_id = 0u32;
        loop {
            let now = Instant::now();
            let more_to_send = now < self.deadline && self.count.is_none_or(|count| sent < count);
            // Fill the window (as far as the pacing allows).
            while more_to_send
                && sent_at.len() < self.workload.in_flight
                && self.count.is_none_or(|count| sent < count)
                && self.interval.is_none_or(|_| next_send <= now)
            {
                let slot = (sent % self.partitions.len() as u64) as usize;
                correlation_id = correlation_id.wrapping_add(1);
                requests[slot].write(correlation_id, sequences[slot], &mut out);
                sequences[slot] = SequenceRange::spanning(sequences[slot], per_batch)?.following();
                sent += 1;
                match self.interval {
                    // Latency counts from when the request was due, not when it went out.
                    Some(interval) => {
                        sent_at.push_back(next_send);
                        next_send += interval;
                    }
                    None => sent_at.push_back(now),
                }
            }
            if !out.is_empty() {
                write_half.write_all(&out).await?;
                out.clear();
            }
            if sent_at.is_empty() {
                if !more_to_send {
                    break;
                }
                // Paced and nothing outstanding: wait for the next send time.
                tokio::time::sleep_until(next_send.min(self.deadline)).await;
                continue;
            }
            // Wait for an answer, or for the next paced send if the window has room.
            let frame = if self.interval.is_some()
                && more_to_send
                && sent_at.len() < self.workload.in_flight
            {
                tokio::select! {
                    frame = responses.next() => Some(frame),
                    () = tokio::time::sleep_until(next_send) => None,
                }
            } else {
                Some(responses.next().await)
            };
            let Some(mut frame) = frame else { continue };
            loop {
                let body = match frame {
                    Some(Ok(body)) => body,
                    Some(Err(error)) => return Err(error.into()),
                    None => bail!("the broker closed the connection"),
                };
                let started = sent_at.pop_front().unwrap_or_else(Instant::now);
                let micros = started.elapsed().as_micros().max(1) as u64;
                result.latency.saturating_record(micros);
                result.requests += 1;
                result.records += self.workload.records_per_batch as u64;
                result.record_bytes +=
                    (self.workload.records_per_batch * self.workload.record_size) as u64;
                match self.workload.wire.outcome(body.freeze()) {
                    Some(outcome) => result.outcomes.add(outcome),
                    None => result.errors += 1,
                }
                self.answered.fetch_add(1, Ordering::Relaxed);
                if sent_at.is_empty() {
                    break;
                }
                // Take every answer already here before writing more.
                match responses.next().now_or_never() {
                    Some(next) => frame = next,
                    None => break,
                }
            }
        }
        Ok(result)
    }
}
