//! Shared helpers for the end-to-end tests: a real broker on `127.0.0.1:0`, and a raw connection
//! for writing exact bytes and reading exact responses.

use anyhow::{Context, Result, bail};
use bytes::BytesMut;
use minibroker_broker::Isolation;
use minibroker_host::Config;
use minibroker_protocol::{FrameCodec, Request, Response, codec};
use minibroker_records::{NewRecord, Writer};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::{Decoder, Encoder};

/// How long a test waits for any single answer before failing.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// A broker served on an ephemeral loopback port, stopped when dropped: the same helper the
/// `minibroker demo` and `bench` commands use.
pub type TestBroker = minibroker_native::EmbeddedBroker;

/// Starts a broker with the default configuration.
///
/// # Errors
/// If the port cannot be bound.
pub async fn start_broker() -> Result<TestBroker> {
    Ok(TestBroker::start(Config::default()).await?)
}

/// A fault-injecting proxy in front of a broker, stopped when dropped; an
/// [`minibroker_faults::EmbeddedProxy`] that can also wait for its counts.
pub struct TestProxy(minibroker_faults::EmbeddedProxy);

impl TestProxy {
    /// Starts a proxy on an ephemeral loopback port relaying to `upstream`.
    ///
    /// # Errors
    /// If the port cannot be bound.
    pub async fn start(
        upstream: SocketAddr,
        faults: minibroker_faults::FaultConfig,
    ) -> Result<Self> {
        Ok(Self(
            minibroker_faults::EmbeddedProxy::start(upstream, faults).await?,
        ))
    }

    /// Waits until the proxy's counts satisfy `condition`.
    ///
    /// # Errors
    /// If they do not within [`ANSWER_TIMEOUT`].
    pub async fn wait_until(
        &self,
        condition: impl FnMut(&minibroker_faults::FaultCounts) -> bool,
    ) -> Result<minibroker_faults::FaultCounts> {
        tokio::time::timeout(ANSWER_TIMEOUT, self.0.proxy.wait_until(condition))
            .await
            .context("the proxy never got there")
    }
}

impl std::ops::Deref for TestProxy {
    type Target = minibroker_faults::EmbeddedProxy;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// A connection that writes exact bytes and decodes each response frame.
pub struct RawConnection {
    stream: TcpStream,
    buffer: BytesMut,
    codec: FrameCodec,
}

impl RawConnection {
    /// Connects to `addr`.
    ///
    /// # Errors
    /// If the connection fails.
    pub async fn connect(addr: SocketAddr) -> Result<Self> {
        Ok(Self {
            stream: TcpStream::connect(addr).await?,
            buffer: BytesMut::new(),
            codec: FrameCodec::default(),
        })
    }

    /// Writes `bytes` as they are.
    ///
    /// # Errors
    /// If the write fails.
    pub async fn write_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Closes the write side, so the broker sees end-of-stream.
    ///
    /// # Errors
    /// If the shutdown fails.
    pub async fn finish_writing(&mut self) -> Result<()> {
        self.stream.shutdown().await?;
        Ok(())
    }

    /// Writes one well-formed request frame.
    ///
    /// # Errors
    /// If encoding or the write fails.
    pub async fn send(&mut self, correlation_id: u32, request: &impl AsRequest) -> Result<()> {
        self.write_raw(&frame(correlation_id, request)?).await
    }

    /// Reads the next response frame.
    ///
    /// # Errors
    /// If the connection closes first, the frame does not decode, or nothing arrives in time.
    pub async fn receive(&mut self) -> Result<(u32, Response)> {
        match self.next_frame().await? {
            Some(body) => Ok(codec::decode_response(&body)?),
            None => bail!("connection closed while waiting for a response"),
        }
    }

    /// Sends a request and reads one response, checking the correlation id.
    ///
    /// # Errors
    /// As [`Self::send`] and [`Self::receive`].
    pub async fn call(
        &mut self,
        correlation_id: u32,
        request: &impl AsRequest,
    ) -> Result<Response> {
        self.send(correlation_id, request).await?;
        let (id, response) = self.receive().await?;
        anyhow::ensure!(
            id == correlation_id,
            "correlation id {id}, expected {correlation_id}"
        );
        Ok(response)
    }

    /// Waits until the broker closes the connection, skipping any frames it sends first; returns
    /// them.
    ///
    /// # Errors
    /// If the connection stays open past [`ANSWER_TIMEOUT`].
    pub async fn expect_closed(&mut self) -> Result<Vec<Response>> {
        let mut responses = Vec::new();
        while let Some(body) = self.next_frame().await? {
            responses.push(codec::decode_response(&body)?.1);
        }
        Ok(responses)
    }

    /// Reads the next frame's body; `None` when the broker closed the connection.
    ///
    /// # Errors
    /// If the read fails or nothing arrives within [`ANSWER_TIMEOUT`].
    pub async fn next_frame(&mut self) -> Result<Option<BytesMut>> {
        tokio::time::timeout(ANSWER_TIMEOUT, async {
            loop {
                if let Some(body) = self.codec.decode(&mut self.buffer)? {
                    return Ok(Some(body));
                }
                let read = match self.stream.read_buf(&mut self.buffer).await {
                    Ok(read) => read,
                    // A reset after the broker closed counts as closed.
                    Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => 0,
                    Err(error) => return Err(error.into()),
                };
                if read == 0 {
                    return Ok(None);
                }
            }
        })
        .await
        .context("no answer in time")?
    }
}

/// A whole frame (length prefix included) for `request`.
///
/// # Errors
/// If the request does not encode.
pub fn frame(correlation_id: u32, request: &impl AsRequest) -> Result<BytesMut> {
    let mut out = BytesMut::new();
    FrameCodec::default().encode((correlation_id, &request.as_request()), &mut out)?;
    Ok(out)
}

/// Anything a test sends as a request: a [`Request`], or an [`OwnedProduce`].
pub trait AsRequest {
    /// The wire request.
    fn as_request(&self) -> Request<'_>;
}

impl AsRequest for Request<'_> {
    fn as_request(&self) -> Request<'_> {
        self.clone()
    }
}

impl AsRequest for OwnedProduce {
    fn as_request(&self) -> Request<'_> {
        self.request()
    }
}

/// Every batch stored in `topic`/`partition`, in log order, with its base offset: read through
/// the broker's public fetch, as a consumer would.
///
/// # Panics
/// If the partition does not exist or a stored batch does not pass its check.
#[must_use]
pub fn stored_batches(
    broker: &minibroker_broker::Broker,
    topic: &str,
    partition: u32,
) -> Vec<(i64, minibroker_records::BatchInfo)> {
    let mut stored = Vec::new();
    let mut offset = 0;
    loop {
        let fetched = broker
            .fetch(
                topic,
                partition,
                offset,
                usize::MAX,
                0,
                Isolation::ReadUncommitted,
            )
            .expect("the partition exists");
        for batch in &fetched.batches {
            let base = minibroker_records::base_offset(batch);
            let info = minibroker_records::inspect_stored(batch, base).expect("a valid batch");
            offset = base + i64::from(info.record_count);
            stored.push((base, info));
        }
        if fetched.batches.is_empty() || offset >= fetched.high_watermark {
            return stored;
        }
    }
}

/// A Kafka v2 batch of `records` (values) from the given producer, first record at `sequence`.
///
/// # Panics
/// If the batch cannot be encoded (no records).
#[must_use]
pub fn batch(producer_id: i64, epoch: i16, sequence: i32, records: &[&[u8]]) -> Vec<u8> {
    let writer = Writer {
        producer_id,
        epoch,
        base_sequence: sequence,
    };
    let records: Vec<NewRecord> = records
        .iter()
        .map(|r| NewRecord::value(bytes::Bytes::copy_from_slice(r)))
        .collect();
    minibroker_records::encode(writer, &records, 0)
        .expect("test batch")
        .to_vec()
}

/// A one-record batch of exactly `len` bytes (at least 80) from the given producer, at sequence 0.
///
/// # Panics
/// If `len` is too small for a batch.
#[must_use]
pub fn batch_of_len(producer_id: i64, epoch: i16, len: usize) -> Vec<u8> {
    let mut value = len - 70;
    loop {
        let built = batch(producer_id, epoch, 0, &[&vec![b'v'; value]]);
        match built.len().cmp(&len) {
            std::cmp::Ordering::Equal => return built,
            std::cmp::Ordering::Less => value += 1,
            std::cmp::Ordering::Greater => value -= 1,
        }
    }
}

/// Batches from `producer_id` at sequence 0 whose header and CRC are valid but whose records no
/// consumer can read: garbage records, and a "gzip" batch whose payload is plain text.
#[must_use]
pub fn poison_batches(producer_id: i64) -> Vec<(&'static str, Vec<u8>)> {
    let reseal = |mut batch: Vec<u8>| {
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        batch
    };
    let header = minibroker_records::HEADER_LEN;
    let mut garbage = batch(producer_id, 0, 0, &[b"a record of some length"]);
    garbage[header..].fill(0xee);
    let mut plain = batch(producer_id, 0, 0, &[b"a record of some length"]);
    plain[header..].fill(b't');
    plain[22] |= 1; // gzip
    vec![
        ("garbage records", reseal(garbage)),
        ("plain text as gzip", reseal(plain)),
    ]
}

/// A produce request that owns its batch; [`Self::request`] borrows it as a wire request.
#[derive(Debug, Clone)]
pub struct OwnedProduce {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// The v2 batch.
    pub batch: Vec<u8>,
}

impl OwnedProduce {
    /// The wire request.
    #[must_use]
    pub fn request(&self) -> Request<'_> {
        Request::Produce(minibroker_protocol::ProduceRequest {
            topic: &self.topic,
            partition: self.partition,
            batch: minibroker_protocol::serde_bytes::Bytes::new(&self.batch),
        })
    }
}

/// A produce request of one batch of `records` with the given producer fields.
#[must_use]
pub fn produce(
    topic: &str,
    partition: u32,
    producer_id: i64,
    epoch: i16,
    sequence: i32,
    records: &[&[u8]],
) -> OwnedProduce {
    OwnedProduce {
        topic: topic.to_owned(),
        partition,
        batch: batch(producer_id, epoch, sequence, records),
    }
}

/// A Kafka listener on an ephemeral loopback port of a [`TestBroker`]'s host, stopped with it:
/// what `minibroker bench --kafka` adds too.
#[derive(Debug, Clone, Copy)]
pub struct TestKafka {
    /// Where Kafka clients connect.
    pub addr: SocketAddr,
}

/// Starts a Kafka listener for `broker`, under its configuration.
///
/// # Errors
/// If the port cannot be bound.
pub async fn start_kafka(broker: &TestBroker) -> Result<TestKafka> {
    Ok(TestKafka {
        addr: minibroker_kafka::serve_on_loopback(&broker.host).await?,
    })
}

/// A Kafka connection for wire-level tests of the Kafka front end: the project's one Kafka
/// client, with answers due within [`ANSWER_TIMEOUT`].
pub use minibroker_kafka_client::KafkaConnection;

/// A Kafka connection to `addr` whose answers are due within [`ANSWER_TIMEOUT`].
///
/// # Errors
/// If the connection fails.
pub async fn kafka_connection(addr: SocketAddr) -> Result<KafkaConnection> {
    Ok(KafkaConnection::connect(addr)
        .await?
        .with_client_id("test")
        .with_answer_timeout(ANSWER_TIMEOUT))
}
