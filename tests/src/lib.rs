//! Shared helpers for the end-to-end tests: a real broker on `127.0.0.1:0`, and a raw connection
//! for writing exact bytes and reading exact responses.

use anyhow::{Context, Result, bail};
use bytes::BytesMut;
use minibroker_protocol::{FrameCodec, Request, Response, codec};
use minibroker_server::{Broker, Config};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::codec::{Decoder, Encoder};

/// How long a test waits for any single answer before failing.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// A broker served on an ephemeral loopback port, stopped when dropped.
pub struct TestBroker {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The broker core, for inspecting what was stored.
    pub broker: Arc<Broker>,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl TestBroker {
    /// Starts a broker with the default configuration.
    ///
    /// # Errors
    /// If the port cannot be bound.
    pub async fn start() -> Result<Self> {
        Self::with_config(Config::default()).await
    }

    /// Starts a broker with `config` (its `listen` address is ignored: port 0 on loopback).
    ///
    /// # Errors
    /// If the port cannot be bound or the configuration is invalid.
    pub async fn with_config(config: Config) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let broker = Arc::new(Broker::new(&config)?);
        let (shutdown, stop) = oneshot::channel::<()>();
        let served = Arc::clone(&broker);
        let server = tokio::spawn(async move {
            let stop = async move {
                let _ = stop.await;
            };
            if let Err(error) = minibroker_server::serve(listener, served, &config, stop).await {
                panic!("server failed: {error}");
            }
        });
        Ok(Self {
            addr,
            broker,
            shutdown: Some(shutdown),
            server: Some(server),
        })
    }

    /// The address as a string, for clients.
    #[must_use]
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Signals shutdown and waits for the server to finish draining.
    ///
    /// # Errors
    /// If the server task panicked.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.context("server task")?;
        }
        Ok(())
    }

    /// Signals shutdown without waiting; returns the server task to await.
    pub fn begin_stop(&mut self) -> Option<JoinHandle<()>> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.server.take()
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// A fault-injecting proxy in front of a broker, stopped when dropped.
pub struct TestProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    /// The proxy, for its counts.
    pub proxy: minibroker_faults::Proxy,
    shutdown: Option<oneshot::Sender<()>>,
}

impl TestProxy {
    /// Starts a proxy on an ephemeral loopback port relaying to `upstream`.
    ///
    /// # Errors
    /// If the port cannot be bound.
    pub async fn start(
        upstream: SocketAddr,
        faults: minibroker_faults::FaultConfig,
    ) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let proxy = minibroker_faults::Proxy::new(faults);
        let (shutdown, stop) = oneshot::channel::<()>();
        let running = proxy.clone();
        tokio::spawn(async move {
            running
                .run(listener, upstream.to_string(), async move {
                    let _ = stop.await;
                })
                .await
        });
        Ok(Self {
            addr,
            proxy,
            shutdown: Some(shutdown),
        })
    }

    /// The address as a string, for clients.
    #[must_use]
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Waits until the proxy's counts satisfy `condition`.
    ///
    /// # Errors
    /// If they do not within [`ANSWER_TIMEOUT`].
    pub async fn wait_until(
        &self,
        condition: impl FnMut(&minibroker_faults::FaultCounts) -> bool,
    ) -> Result<minibroker_faults::FaultCounts> {
        tokio::time::timeout(ANSWER_TIMEOUT, self.proxy.wait_until(condition))
            .await
            .context("the proxy never got there")
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
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
    pub async fn send(&mut self, correlation_id: u32, request: &Request<'_>) -> Result<()> {
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
    pub async fn call(&mut self, correlation_id: u32, request: &Request<'_>) -> Result<Response> {
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

    async fn next_frame(&mut self) -> Result<Option<BytesMut>> {
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
pub fn frame(correlation_id: u32, request: &Request<'_>) -> Result<BytesMut> {
    let mut out = BytesMut::new();
    FrameCodec::default().encode((correlation_id, request), &mut out)?;
    Ok(out)
}

/// A produce request for `records` with the given fields.
#[must_use]
pub fn produce<'a>(
    topic: &'a str,
    partition: u32,
    producer_id: i64,
    epoch: i16,
    sequence: i32,
    records: &[&'a [u8]],
) -> Request<'a> {
    Request::Produce(minibroker_protocol::ProduceRequest {
        topic,
        partition,
        producer_id,
        epoch,
        sequence,
        records: records
            .iter()
            .map(|r| minibroker_protocol::serde_bytes::Bytes::new(r))
            .collect(),
    })
}
