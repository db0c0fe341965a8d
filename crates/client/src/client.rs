//! [`Client`]: one connection with pipelined requests.
//!
//! A background task owns the socket. Callers encode their request, hand it to the task and wait
//! on a one-shot channel; the task writes frames as they come (flushing when its queue is empty)
//! and routes each response to its caller by correlation id. When the connection drops, every
//! waiting caller gets [`ClientError::ConnectionClosed`]. Callers that gave up (timed out or
//! dropped their [`PendingResponse`]) are swept from the table of waiters as it grows, so a
//! broker that never answers cannot make it grow without bound.

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use minibroker_protocol::{
    AlterTopicConfigsRequest, CreateTopicRequest, CreateTopicWithRequest, DEFAULT_MAX_FRAME_BYTES,
    DescribeProducersRequest, DescribeProducersResponse, DescribeTopicResponse, FetchRequest,
    FetchResponse, FrameCodec, InitProducerRequest, InitProducerResponse, MetadataResponse,
    ProduceRequest, ProduceResponse, ProducerState, Request, Response, TopicConfigChange,
    TopicConfigsResponse, TopicRequest, TopicSetting, codec, serde_bytes,
};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{Encoder, FramedRead};

use crate::{ClientError, ConnectionEnd};

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// How long to wait for the TCP connection.
    pub connect_timeout: Duration,
    /// How long to wait for each answer.
    pub request_timeout: Duration,
    /// Largest frame sent or accepted.
    pub max_frame_bytes: usize,
    /// Requests queued for the connection task before `send` waits.
    pub queue_depth: usize,
    /// Speak TLS to the broker.
    pub tls: Option<crate::ClientTls>,
    /// Log in first.
    pub login: Option<crate::Credentials>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            queue_depth: 256,
            tls: None,
            login: None,
        }
    }
}

type Reply = oneshot::Sender<Result<Response, ClientError>>;

/// The two directions of a connection: a TCP socket's halves, or a TLS session's.
type ReadHalf = Box<dyn tokio::io::AsyncRead + Unpin + Send>;
type WriteHalf = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// A request on its way to the connection task.
struct Outgoing {
    correlation_id: u32,
    frame: Bytes,
    reply: Reply,
}

/// One connection to a broker.
#[derive(Debug)]
pub struct Client {
    outgoing: mpsc::Sender<Outgoing>,
    next_correlation_id: AtomicU32,
    request_timeout: Duration,
    max_frame_bytes: usize,
    peer: String,
}

/// An answer still on its way; resolves to the response or fails after the request timeout.
pub struct PendingResponse {
    reply: oneshot::Receiver<Result<Response, ClientError>>,
    timeout: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl Future for PendingResponse {
    type Output = Result<Response, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(result) = Pin::new(&mut self.reply).poll(cx) {
            return Poll::Ready(result.unwrap_or_else(|_| {
                Err(ClientError::ConnectionClosed(Arc::new(
                    ConnectionEnd::TaskEnded,
                )))
            }));
        }
        match self.timeout.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(ClientError::Timeout(self.limit))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Client {
    /// Connects to `addr` (in a TLS session, and logged in, when `config` says so).
    ///
    /// # Errors
    /// [`ClientError::Connect`] if the connection (or its TLS handshake) cannot be made within
    /// the connect timeout; a refused login (see [`Self::login`]).
    pub async fn connect(addr: &str, config: ClientConfig) -> Result<Self, ClientError> {
        let connect_error = |source| ClientError::Connect {
            addr: addr.to_owned(),
            source,
        };
        let stream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                connect_error(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ))
            })?
            .map_err(connect_error)?;
        stream.set_nodelay(true).map_err(connect_error)?;
        let (read_half, write_half): (ReadHalf, WriteHalf) = match &config.tls {
            None => {
                let (read_half, write_half) = stream.into_split();
                (Box::new(read_half), Box::new(write_half))
            }
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.config));
                let handshake = connector.connect(tls.server_name.clone(), stream);
                let session = tokio::time::timeout(config.connect_timeout, handshake)
                    .await
                    .map_err(|_| {
                        connect_error(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the TLS handshake timed out",
                        ))
                    })?
                    .map_err(connect_error)?;
                let (read_half, write_half) = tokio::io::split(session);
                (Box::new(read_half), Box::new(write_half))
            }
        };
        let (tx, rx) = mpsc::channel(config.queue_depth.max(1));
        tokio::spawn(connection_task(
            read_half,
            write_half,
            rx,
            config.max_frame_bytes,
        ));
        let client = Self {
            outgoing: tx,
            next_correlation_id: AtomicU32::new(1),
            request_timeout: config.request_timeout,
            max_frame_bytes: config.max_frame_bytes,
            peer: addr.to_owned(),
        };
        if let Some(credentials) = &config.login {
            client.login(credentials).await?;
        }
        Ok(client)
    }

    /// The address this client connected to.
    #[must_use]
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Sends a request without waiting for its answer, so several can be in flight; answers come
    /// back through the returned [`PendingResponse`].
    ///
    /// # Errors
    /// [`ClientError::Protocol`] if the request exceeds the maximum frame size;
    /// [`ClientError::ConnectionClosed`] if the connection is gone.
    pub async fn send(&self, request: &Request<'_>) -> Result<PendingResponse, ClientError> {
        // Correlation id 0 is what the broker uses for connection-level errors; never use it.
        let correlation_id = loop {
            let id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                break id;
            }
        };
        let mut frame = BytesMut::new();
        FrameCodec::new(self.max_frame_bytes).encode((correlation_id, request), &mut frame)?;
        let (reply, answer) = oneshot::channel();
        self.outgoing
            .send(Outgoing {
                correlation_id,
                frame: frame.freeze(),
                reply,
            })
            .await
            .map_err(|_| ClientError::ConnectionClosed(Arc::new(ConnectionEnd::TaskEnded)))?;
        Ok(PendingResponse {
            reply: answer,
            timeout: Box::pin(tokio::time::sleep(self.request_timeout)),
            limit: self.request_timeout,
        })
    }

    /// Sends a request and waits for its answer.
    ///
    /// # Errors
    /// As [`Self::send`], plus [`ClientError::Timeout`] and [`ClientError::ConnectionClosed`].
    pub async fn request(&self, request: &Request<'_>) -> Result<Response, ClientError> {
        self.send(request).await?.await
    }

    /// Produces one Kafka v2 record batch exactly as given (no retries, no sequence
    /// bookkeeping): the producer id, epoch and sequence are the batch's own.
    ///
    /// # Errors
    /// Transport failures and broker error responses.
    pub async fn produce(
        &self,
        topic: &str,
        partition: u32,
        batch: &[u8],
    ) -> Result<ProduceResponse, ClientError> {
        let request = Request::Produce(ProduceRequest {
            topic,
            partition,
            batch: serde_bytes::Bytes::new(batch),
        });
        match self.request(&request).await? {
            Response::Produce(response) => Ok(response),
            other => Err(unexpected("produce", other)),
        }
    }

    /// Reads the whole stored batches holding `offset` and after, up to about `max_bytes`. See
    /// [`crate::PartitionReader`] for records.
    ///
    /// # Errors
    /// Transport failures and broker error responses.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: i64,
        max_bytes: u32,
    ) -> Result<FetchResponse, ClientError> {
        let request = Request::Fetch(FetchRequest {
            topic,
            partition,
            offset,
            max_bytes,
        });
        match self.request(&request).await? {
            Response::Fetch(response) => Ok(response),
            other => Err(unexpected("fetch", other)),
        }
    }

    /// Gets a new producer id (`None`) or bumps the epoch of an issued one.
    ///
    /// # Errors
    /// Transport failures and broker error responses.
    pub async fn init_producer(
        &self,
        producer_id: Option<i64>,
    ) -> Result<InitProducerResponse, ClientError> {
        let request = Request::InitProducer(InitProducerRequest { producer_id });
        match self.request(&request).await? {
            Response::InitProducer(response) => Ok(response),
            other => Err(unexpected("init-producer", other)),
        }
    }

    /// One page of the producer state of one partition: up to `limit` producers (0 for the
    /// broker's cap) with ids above `after_producer_id`, and where the next page starts.
    ///
    /// # Errors
    /// Transport failures and broker error responses.
    pub async fn describe_producers_page(
        &self,
        topic: &str,
        partition: u32,
        after_producer_id: Option<i64>,
        limit: u32,
    ) -> Result<DescribeProducersResponse, ClientError> {
        let request = Request::DescribeProducers(DescribeProducersRequest {
            topic,
            partition,
            after_producer_id,
            limit,
        });
        match self.request(&request).await? {
            Response::DescribeProducers(response) => Ok(response),
            other => Err(unexpected("describe-producers", other)),
        }
    }

    /// The producer state of one partition, every page of it, in producer id order.
    ///
    /// # Errors
    /// Transport failures and broker error responses.
    pub async fn describe_producers(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Vec<ProducerState>, ClientError> {
        let mut producers = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .describe_producers_page(topic, partition, after, 0)
                .await?;
            producers.extend(page.producers);
            match page.next_after {
                // Ids only grow from page to page, so this ends.
                Some(next) if after.is_none_or(|previous| next > previous) => after = Some(next),
                _ => return Ok(producers),
            }
        }
    }

    /// Every topic and its partition count.
    ///
    /// # Errors
    /// Transport failures and broker error responses.
    pub async fn metadata(&self) -> Result<MetadataResponse, ClientError> {
        match self.request(&Request::Metadata).await? {
            Response::Metadata(response) => Ok(response),
            other => Err(unexpected("metadata", other)),
        }
    }

    /// Creates `topic` with `partitions` partitions.
    ///
    /// # Errors
    /// Connection failures and broker errors (the topic exists, a bad count or name).
    pub async fn create_topic(&self, topic: &str, partitions: u32) -> Result<(), ClientError> {
        let request = Request::CreateTopic(CreateTopicRequest { topic, partitions });
        match self.request(&request).await? {
            Response::Done => Ok(()),
            other => Err(unexpected("create-topic", other)),
        }
    }

    /// Creates `topic` with `partitions` partitions and settings of its own (Kafka's names and
    /// values: `retention.ms`, `segment.bytes`, ...); every setting is checked first.
    ///
    /// # Errors
    /// As [`Self::create_topic`]; a setting refused (`INVALID_INPUT`, naming it).
    pub async fn create_topic_with(
        &self,
        topic: &str,
        partitions: u32,
        settings: &[TopicSetting<'_>],
    ) -> Result<(), ClientError> {
        let request = Request::CreateTopicWith(CreateTopicWithRequest {
            topic,
            partitions,
            settings: settings.to_vec(),
        });
        match self.request(&request).await? {
            Response::Done => Ok(()),
            other => Err(unexpected("create-topic", other)),
        }
    }

    /// `topic`'s settings, each with where its value comes from.
    ///
    /// # Errors
    /// Connection failures and broker errors (an unknown topic).
    pub async fn describe_topic_configs(
        &self,
        topic: &str,
    ) -> Result<TopicConfigsResponse, ClientError> {
        match self
            .request(&Request::DescribeTopicConfigs(TopicRequest { topic }))
            .await?
        {
            Response::TopicConfigs(response) => Ok(response),
            other => Err(unexpected("describe-topic-configs", other)),
        }
    }

    /// Applies `changes` to `topic`'s own settings, in order, all or none; the broker saves and
    /// applies them before it answers.
    ///
    /// # Errors
    /// Connection failures and broker errors (an unknown topic, a setting refused).
    pub async fn alter_topic_configs(
        &self,
        topic: &str,
        changes: &[TopicConfigChange<'_>],
    ) -> Result<(), ClientError> {
        let request = Request::AlterTopicConfigs(AlterTopicConfigsRequest {
            topic,
            changes: changes.to_vec(),
        });
        match self.request(&request).await? {
            Response::Done => Ok(()),
            other => Err(unexpected("alter-topic-configs", other)),
        }
    }

    /// Deletes `topic` and everything it stores.
    ///
    /// # Errors
    /// Connection failures and broker errors (an unknown topic).
    pub async fn delete_topic(&self, topic: &str) -> Result<(), ClientError> {
        match self
            .request(&Request::DeleteTopic(TopicRequest { topic }))
            .await?
        {
            Response::Done => Ok(()),
            other => Err(unexpected("delete-topic", other)),
        }
    }

    /// `topic`'s partitions: offsets, stored bytes, producers.
    ///
    /// # Errors
    /// Connection failures and broker errors (an unknown topic).
    pub async fn describe_topic(&self, topic: &str) -> Result<DescribeTopicResponse, ClientError> {
        match self
            .request(&Request::DescribeTopic(TopicRequest { topic }))
            .await?
        {
            Response::DescribeTopic(response) => Ok(response),
            other => Err(unexpected("describe-topic", other)),
        }
    }
}

/// An error response becomes [`ClientError::Broker`]; any other wrong kind is unexpected.
fn unexpected(expected: &'static str, response: Response) -> ClientError {
    match response {
        Response::Error(error) => ClientError::Broker(error),
        other => ClientError::UnexpectedResponse {
            expected,
            got: format!("{other:?}").chars().take(120).collect(),
        },
    }
}

/// Owns the socket: writes queued frames, routes answers, fails everyone on disconnect.
async fn connection_task(
    read_half: ReadHalf,
    write_half: WriteHalf,
    mut outgoing: mpsc::Receiver<Outgoing>,
    max_frame_bytes: usize,
) {
    let mut reader = FramedRead::new(read_half, FrameCodec::new(max_frame_bytes));
    let mut writer = BufWriter::new(write_half);
    let mut waiting = Waiters::default();
    let reason = loop {
        tokio::select! {
            next = outgoing.recv() => {
                let Some(first) = next else { break ConnectionEnd::Dropped };
                if let Err(error) = write_queued(&mut writer, &mut outgoing, &mut waiting, first).await {
                    break ConnectionEnd::Write(error);
                }
            }
            frame = reader.next() => match frame {
                Some(Ok(body)) => match codec::decode_response(&body) {
                    Ok((0, Response::Error(error))) => break ConnectionEnd::Refused(error),
                    Ok((correlation_id, response)) => {
                        // An answer nobody waits for any more (its caller timed out) is dropped.
                        if let Some(reply) = waiting.replies.remove(&correlation_id) {
                            let _ = reply.send(Ok(response));
                        }
                    }
                    Err(error) => break ConnectionEnd::Undecodable(error),
                },
                // A TLS alert or handshake record read as a frame length (0x15 or 0x16, then
                // the version 0x0303): the client spoke plaintext to a TLS listener.
                Some(Err(minibroker_protocol::ProtocolError::FrameTooLarge { size, .. }))
                    if matches!(size >> 8, 0x15_0303 | 0x16_0303) =>
                {
                    break ConnectionEnd::TlsSpoken;
                }
                Some(Err(error)) => break ConnectionEnd::Read(error),
                None => break ConnectionEnd::Closed,
            },
        }
    };
    tracing::debug!(%reason, "client connection ended");
    outgoing.close();
    while let Ok(request) = outgoing.try_recv() {
        waiting.insert(request.correlation_id, request.reply);
    }
    let reason = Arc::new(reason);
    for (_, reply) in waiting.replies {
        let _ = reply.send(Err(ClientError::ConnectionClosed(Arc::clone(&reason))));
    }
}

/// Writes `first` and every request already queued behind it, then flushes once.
async fn write_queued(
    writer: &mut BufWriter<WriteHalf>,
    outgoing: &mut mpsc::Receiver<Outgoing>,
    waiting: &mut Waiters,
    first: Outgoing,
) -> std::io::Result<()> {
    let mut next = Some(first);
    while let Some(request) = next {
        waiting.insert(request.correlation_id, request.reply);
        writer.write_all(&request.frame).await?;
        next = outgoing.try_recv().ok();
    }
    writer.flush().await
}

/// Callers waiting for answers, by correlation id.
#[derive(Default)]
struct Waiters {
    replies: HashMap<u32, Reply>,
    /// Sweep callers that gave up once the table reaches this size.
    sweep_at: usize,
}

impl Waiters {
    /// The table is swept when it doubles since the last sweep (and holds at least this many).
    const MIN_SWEEP: usize = 64;

    fn insert(&mut self, correlation_id: u32, reply: Reply) {
        self.replies.insert(correlation_id, reply);
        if self.replies.len() >= self.sweep_at.max(Self::MIN_SWEEP) {
            self.replies.retain(|_, reply| !reply.is_closed());
            self.sweep_at = self.replies.len() * 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_that_gave_up_are_swept_as_the_table_grows() {
        let mut waiters = Waiters::default();
        let mut kept = Vec::new();
        for id in 0..10_000u32 {
            let (reply, answer) = oneshot::channel();
            waiters.insert(id, reply);
            if id % 100 == 0 {
                kept.push(answer); // still waiting
            } // else: the caller gave up and dropped its receiver
        }
        assert!(waiters.replies.len() < 300, "{}", waiters.replies.len());
        for id in (0..10_000u32).step_by(100) {
            assert!(waiters.replies.contains_key(&id), "a live caller was swept");
        }
        drop(kept);
    }
}
