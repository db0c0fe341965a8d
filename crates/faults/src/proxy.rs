//! The proxy: an accept loop and, per client connection, two forwarding tasks — requests to the
//! broker and responses back — each deciding per frame whether to inject a fault.
//!
//! Requests reach the broker through a writer task fed by a channel, so a held request can be
//! released later by a timer while newer requests keep flowing. The upstream connection stays open
//! until every held request has been released, even after the client has given up: that is what
//! turns a held request into a *stale* retry arriving after newer batches.

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use crate::{Fault, FaultConfig, SplitMix64};

/// What the proxy did, counted across all connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Connections accepted.
    pub connections: u64,
    /// Requests passed to the broker (held ones included once released).
    pub requests_forwarded: u64,
    /// Responses passed to clients.
    pub responses_forwarded: u64,
    /// Requests lost on purpose.
    pub requests_dropped: u64,
    /// Responses (acks) lost on purpose.
    pub responses_dropped: u64,
    /// Frames delayed.
    pub delayed: u64,
    /// Connection pairs reset.
    pub resets: u64,
    /// Requests held back and released later.
    pub held: u64,
}

impl fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "connections={} requests_forwarded={} responses_forwarded={} requests_dropped={} \
             responses_dropped={} delayed={} resets={} held={}",
            self.connections,
            self.requests_forwarded,
            self.responses_forwarded,
            self.requests_dropped,
            self.responses_dropped,
            self.delayed,
            self.resets,
            self.held
        )
    }
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    requests_seen: AtomicU64,
    responses_seen: AtomicU64,
    requests_forwarded: AtomicU64,
    responses_forwarded: AtomicU64,
    requests_dropped: AtomicU64,
    responses_dropped: AtomicU64,
    delayed: AtomicU64,
    resets: AtomicU64,
    held: AtomicU64,
}

fn bump(counter: &AtomicU64) -> u64 {
    counter.fetch_add(1, Ordering::Relaxed) + 1
}

/// A running proxy's shared state: its settings and counters.
#[derive(Debug, Clone)]
pub struct Proxy {
    config: Arc<FaultConfig>,
    counters: Arc<Counters>,
}

impl Proxy {
    /// A proxy injecting the faults of `config`.
    #[must_use]
    pub fn new(config: FaultConfig) -> Self {
        Self {
            config: Arc::new(config),
            counters: Arc::default(),
        }
    }

    /// What the proxy has done so far.
    #[must_use]
    pub fn counts(&self) -> FaultCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultCounts {
            connections: get(&c.connections),
            requests_forwarded: get(&c.requests_forwarded),
            responses_forwarded: get(&c.responses_forwarded),
            requests_dropped: get(&c.requests_dropped),
            responses_dropped: get(&c.responses_dropped),
            delayed: get(&c.delayed),
            resets: get(&c.resets),
            held: get(&c.held),
        }
    }

    /// Accepts clients on `listener` and relays each to a new connection to `upstream`, until
    /// `shutdown` resolves; then closes every connection and returns the counts.
    pub async fn run(
        &self,
        listener: TcpListener,
        upstream: String,
        shutdown: impl Future<Output = ()>,
    ) -> FaultCounts {
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            while connections.try_join_next().is_some() {}
            let accepted = tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => accepted,
            };
            let client = match accepted {
                Ok((client, _)) => client,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let number = bump(&self.counters.connections);
            let relay = Relay {
                proxy: self.clone(),
                number,
            };
            let upstream = upstream.clone();
            connections.spawn(async move { relay.run(client, &upstream).await });
        }
        connections.shutdown().await;
        self.counts()
    }
}

/// One client connection and its upstream twin.
struct Relay {
    proxy: Proxy,
    /// Connection number, from 1; mixed into the seed so each connection has its own faults.
    number: u64,
}

type Frames = FramedRead<OwnedReadHalf, LengthDelimitedCodec>;
type Sink = FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>;

impl Relay {
    async fn run(self, client: TcpStream, upstream_addr: &str) {
        let upstream = match TcpStream::connect(upstream_addr).await {
            Ok(upstream) => upstream,
            Err(error) => {
                tracing::warn!(%error, upstream = upstream_addr, "cannot reach the broker");
                return;
            }
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let codec = || {
            LengthDelimitedCodec::builder()
                .max_frame_length(self.proxy.config.max_frame_bytes)
                .new_codec()
        };
        let (client_read, client_write) = client.into_split();
        let (upstream_read, upstream_write) = upstream.into_split();
        let reset = Arc::new(Notify::new());
        let (to_broker, queue) = mpsc::unbounded_channel::<Bytes>();
        let writer = tokio::spawn(write_upstream(
            queue,
            FramedWrite::new(upstream_write, codec()),
            Arc::clone(&self.proxy.counters),
        ));
        let requests = self.forward_requests(FramedRead::new(client_read, codec()), to_broker);
        let responses = self.forward_responses(
            FramedRead::new(upstream_read, codec()),
            FramedWrite::new(client_write, codec()),
            Arc::clone(&reset),
        );
        tokio::pin!(requests, responses);
        let mut requests_done = false;
        loop {
            tokio::select! {
                reset_now = &mut requests, if !requests_done => {
                    requests_done = true;
                    if reset_now {
                        reset.notify_one();
                        writer.abort();
                    }
                }
                () = &mut responses => break,
            }
        }
        // The broker side is done (it closed after answering) or the pair was reset. Held
        // requests still waiting were released into a writer that is gone; that is the fault.
        writer.abort();
    }

    /// Reads client requests and passes them on, dropping, delaying or holding some. Returns
    /// `true` if the pair must be reset.
    async fn forward_requests(
        &self,
        mut frames: Frames,
        to_broker: mpsc::UnboundedSender<Bytes>,
    ) -> bool {
        let config = &self.proxy.config;
        let counters = &self.proxy.counters;
        let mut rng =
            SplitMix64::new(config.seed ^ self.number.wrapping_mul(0xA24B_AED4_963E_E407));
        while let Some(Ok(frame)) = frames.next().await {
            let n = bump(&counters.requests_seen);
            let id = correlation_id(&frame);
            if fires(&config.drop_request, n, &mut rng) {
                bump(&counters.requests_dropped);
                tracing::info!(request = n, correlation_id = id, "fault: request dropped");
                continue;
            }
            if fires(&config.hold_request, n, &mut rng) {
                bump(&counters.held);
                tracing::info!(
                    request = n,
                    correlation_id = id,
                    hold_ms = config.hold.as_millis() as u64,
                    "fault: request held"
                );
                let (to_broker, hold) = (to_broker.clone(), config.hold);
                tokio::spawn(async move {
                    tokio::time::sleep(hold).await;
                    tracing::info!(
                        request = n,
                        correlation_id = id,
                        "fault: held request released"
                    );
                    let _ = to_broker.send(frame.freeze());
                });
                continue;
            }
            if fires(&config.delay_request, n, &mut rng) {
                bump(&counters.delayed);
                tracing::info!(request = n, correlation_id = id, "fault: request delayed");
                tokio::time::sleep(config.delay).await;
            }
            if to_broker.send(frame.freeze()).is_err() {
                return false;
            }
            if fires(&config.reset, n, &mut rng) {
                bump(&counters.resets);
                tracing::info!(
                    request = n,
                    correlation_id = id,
                    "fault: connection reset after forwarding"
                );
                // Give the writer a moment to pass the request on before the pair is torn down.
                tokio::time::sleep(Duration::from_millis(5)).await;
                return true;
            }
        }
        false
    }

    /// Reads broker responses and passes them to the client, dropping or delaying some. On a
    /// reset it closes the client connection with a TCP reset (no orderly shutdown).
    async fn forward_responses(&self, mut frames: Frames, mut to_client: Sink, reset: Arc<Notify>) {
        let config = &self.proxy.config;
        let counters = &self.proxy.counters;
        let mut rng =
            SplitMix64::new(!config.seed ^ self.number.wrapping_mul(0x9FB2_1C65_1E98_DF25));
        loop {
            let frame = tokio::select! {
                frame = frames.next() => frame,
                () = reset.notified() => return reset_client(&to_client),
            };
            let Some(Ok(frame)) = frame else { return };
            let n = bump(&counters.responses_seen);
            let id = correlation_id(&frame);
            if fires(&config.drop_response, n, &mut rng) {
                bump(&counters.responses_dropped);
                tracing::info!(
                    response = n,
                    correlation_id = id,
                    "fault: response dropped (lost ack)"
                );
                continue;
            }
            if fires(&config.delay_response, n, &mut rng) {
                bump(&counters.delayed);
                tracing::info!(response = n, correlation_id = id, "fault: response delayed");
                // A reset during the delay wins: the delayed ack is lost with the connection.
                tokio::select! {
                    () = tokio::time::sleep(config.delay) => {}
                    () = reset.notified() => return reset_client(&to_client),
                }
            }
            if to_client.send(frame.freeze()).await.is_err() {
                return;
            }
            bump(&counters.responses_forwarded);
        }
    }
}

/// Makes the coming close of the client connection a TCP reset (no orderly shutdown), as a
/// broken network path would.
fn reset_client(to_client: &Sink) {
    let _ = to_client.get_ref().as_ref().set_zero_linger();
}

fn fires(fault: &Fault, frame: u64, rng: &mut SplitMix64) -> bool {
    fault.is_active() && fault.fires(frame, rng)
}

/// The correlation id of a frame body, for logs (0 if the header is not there).
fn correlation_id(frame: &BytesMut) -> u32 {
    minibroker_protocol::codec::split_header(frame).map_or(0, |(id, _)| id)
}

/// Writes queued requests to the broker in order; ends when every sender (the request task and
/// any held-request timers) is gone, then closes the write side so the broker answers and closes.
async fn write_upstream(
    mut queue: mpsc::UnboundedReceiver<Bytes>,
    mut sink: Sink,
    counters: Arc<Counters>,
) {
    while let Some(frame) = queue.recv().await {
        if sink.send(frame).await.is_err() {
            return;
        }
        bump(&counters.requests_forwarded);
    }
    let _ = SinkExt::<Bytes>::close(&mut sink).await;
}
