//! The proxy: an accept loop and, per client connection, two forwarding tasks — requests to the
//! broker and responses back — each deciding per frame whether to inject a fault.
//!
//! Requests reach the broker through a writer task fed by a bounded channel (a client writing
//! faster than the broker reads is held back, not buffered without limit), so a held request can
//! be released later by a timer — or by [`Proxy::release_held`] — while newer requests keep
//! flowing. The upstream connection stays open until every held request has been released, even
//! after the client has given up: that is what turns a held request into a *stale* retry arriving
//! after newer batches.
//!
//! For Kafka traffic ([`crate::kafka`]) the proxy also reads each frame's API, rewrites the broker
//! addresses in answers to listeners of its own (one per upstream broker, opened on first
//! mention, all sharing the counters and the faults) and aims faults at the APIs asked for.
//!
//! Every task of a relay (the writer and each held request) is tied to the relay: when the relay
//! ends or the proxy stops, they end too. Tests synchronise on what the proxy did, not on sleeps:
//! [`Proxy::wait_until`] returns once the counts satisfy a condition, and a reset happens only
//! after the writer has confirmed that the request before it was written to the broker.

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;

use minibroker_framing::Frames as FrameCodec;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::{JoinError, JoinSet};
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::kafka::{self, Answer, InFlight};
use crate::routes::{Routes, locked};
use crate::{Fault, FaultConfig, SplitMix64};

/// What the proxy did, counted across all connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Connections accepted.
    pub connections: u64,
    /// Requests passed to the broker (held ones included once released).
    pub requests_forwarded: u64,
    /// Responses read from the broker, forwarded or not.
    pub responses_received: u64,
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
    /// Requests passed to the broker twice.
    pub duplicated: u64,
}

impl fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "connections={} requests_forwarded={} responses_received={} responses_forwarded={} \
             requests_dropped={} responses_dropped={} delayed={} resets={} held={} \
             duplicated={}",
            self.connections,
            self.requests_forwarded,
            self.responses_received,
            self.responses_forwarded,
            self.requests_dropped,
            self.responses_dropped,
            self.delayed,
            self.resets,
            self.held,
            self.duplicated
        )
    }
}

#[derive(Debug)]
struct Counters {
    /// Woken on every change of a count, for [`Proxy::wait_until`].
    changed: Notify,
    /// Bumped by [`Proxy::release_held`]; each held request waits for a change of it.
    release: watch::Sender<u64>,
    connections: AtomicU64,
    /// Requests faults may hit (every request, unless faults are aimed at some Kafka APIs).
    requests_aimed: AtomicU64,
    responses_seen: AtomicU64,
    /// Responses faults may hit.
    responses_aimed: AtomicU64,
    requests_forwarded: AtomicU64,
    responses_forwarded: AtomicU64,
    requests_dropped: AtomicU64,
    responses_dropped: AtomicU64,
    delayed: AtomicU64,
    resets: AtomicU64,
    held: AtomicU64,
    duplicated: AtomicU64,
    /// The Kafka API whose next request is held until released ([`Proxy::hold_next`]); -1 for
    /// none.
    hold_next: AtomicI32,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            changed: Notify::new(),
            release: watch::Sender::new(0),
            connections: AtomicU64::default(),
            requests_aimed: AtomicU64::default(),
            responses_seen: AtomicU64::default(),
            responses_aimed: AtomicU64::default(),
            requests_forwarded: AtomicU64::default(),
            responses_forwarded: AtomicU64::default(),
            requests_dropped: AtomicU64::default(),
            responses_dropped: AtomicU64::default(),
            delayed: AtomicU64::default(),
            resets: AtomicU64::default(),
            held: AtomicU64::default(),
            duplicated: AtomicU64::default(),
            hold_next: AtomicI32::new(NOTHING_ARMED),
        }
    }
}

impl Counters {
    /// Adds one to `counter` (one of `self`'s) and returns the new value.
    fn bump(&self, counter: &AtomicU64) -> u64 {
        let value = counter.fetch_add(1, Ordering::Relaxed) + 1;
        self.changed.notify_waiters();
        value
    }
}

/// Requests waiting for the writer: at most this many per connection before the client's
/// requests stop being read.
const QUEUE_DEPTH: usize = 256;

/// No API's next request is to be held.
const NOTHING_ARMED: i32 = -1;

/// The longest a request held by [`Proxy::hold_next`] waits for [`Proxy::release_held`].
const HELD_UNTIL_RELEASED: Duration = Duration::from_secs(600);

/// A request on its way to the broker.
struct Forward {
    frame: Bytes,
    /// Told once the frame has been written to the broker.
    written: Option<oneshot::Sender<()>>,
}

/// A running proxy's shared state: its settings, counters and (for Kafka) its listeners.
#[derive(Debug, Clone)]
pub struct Proxy {
    config: Arc<FaultConfig>,
    counters: Arc<Counters>,
    routes: Arc<Routes>,
}

impl Proxy {
    /// A proxy injecting the faults of `config`.
    #[must_use]
    pub fn new(config: FaultConfig) -> Self {
        Self {
            config: Arc::new(config),
            counters: Arc::default(),
            routes: Arc::default(),
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
            responses_received: get(&c.responses_seen),
            responses_forwarded: get(&c.responses_forwarded),
            requests_dropped: get(&c.requests_dropped),
            responses_dropped: get(&c.responses_dropped),
            delayed: get(&c.delayed),
            resets: get(&c.resets),
            held: get(&c.held),
            duplicated: get(&c.duplicated),
        }
    }

    /// Waits until the counts satisfy `condition`, and returns them. Checks at every change, so
    /// no change is missed and no time is wasted polling.
    pub async fn wait_until(&self, mut condition: impl FnMut(&FaultCounts) -> bool) -> FaultCounts {
        loop {
            let changed = self.counters.changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before reading the counts, so a change in between still wakes us.
            changed.as_mut().enable();
            let counts = self.counts();
            if condition(&counts) {
                return counts;
            }
            changed.await;
        }
    }

    /// Holds the next request of Kafka API `api` (on whichever connection it comes) until
    /// [`Self::release_held`], whatever the fault rates and aims: one frame, delayed on purpose
    /// past what its client does next. Counted as held once it is.
    pub fn hold_next(&self, api: i16) {
        self.counters
            .hold_next
            .store(i32::from(api), Ordering::Release);
    }

    /// Whether the request labelled `label` is the one [`Self::hold_next`] asked for (which is
    /// then no longer asked for).
    fn take_hold(&self, label: Label) -> bool {
        label.api.is_some_and(|api| {
            self.counters
                .hold_next
                .compare_exchange(
                    i32::from(api),
                    NOTHING_ARMED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        })
    }

    /// Releases every request held back now, without waiting for its hold to run out.
    pub fn release_held(&self) {
        self.counters
            .release
            .send_modify(|generation| *generation += 1);
    }

    /// Accepts clients on `listener` and relays each to a new connection to `upstream` (and,
    /// for Kafka, serves the listeners opened for the other brokers), until `shutdown`
    /// resolves; then closes every connection and returns the counts.
    pub async fn run(
        &self,
        listener: TcpListener,
        upstream: String,
        shutdown: impl Future<Output = ()>,
    ) -> FaultCounts {
        if let (Some(kafka), Ok(local)) = (&self.config.kafka, listener.local_addr()) {
            self.routes
                .start(local, &upstream, kafka.advertise_host.as_deref());
        }
        let stop = CancellationToken::new();
        let mut listeners = JoinSet::new();
        listeners.spawn(self.clone().accept(listener, upstream, stop.clone()));
        let mut to_serve = locked(&self.routes.to_serve).take();
        tokio::pin!(shutdown);
        loop {
            let opened = async {
                match &mut to_serve {
                    Some(to_serve) => to_serve.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut shutdown => break,
                Some((listener, upstream)) = opened => {
                    listeners.spawn(self.clone().accept(listener, upstream, stop.clone()));
                }
            }
        }
        stop.cancel();
        while let Some(done) = listeners.join_next().await {
            log_panic(done);
        }
        self.counts()
    }

    /// One listener's accept loop: each client relayed to `upstream` until `stop`.
    async fn accept(self, listener: TcpListener, upstream: String, stop: CancellationToken) {
        let mut connections = JoinSet::new();
        loop {
            while let Some(done) = connections.try_join_next() {
                log_panic(done);
            }
            let accepted = tokio::select! {
                () = stop.cancelled() => break,
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
            let number = self.counters.bump(&self.counters.connections);
            let relay = Relay {
                proxy: self.clone(),
                number,
                in_flight: InFlight::default(),
                duplicated: std::sync::Mutex::default(),
            };
            let upstream = upstream.clone();
            connections.spawn(async move { relay.run(client, &upstream).await });
        }
        connections.shutdown().await;
    }
}

/// One client connection and its upstream twin.
struct Relay {
    proxy: Proxy,
    /// Connection number, from 1; mixed into the seed so each connection has its own faults.
    number: u64,
    /// Kafka requests awaiting answers, so an answer's API is known.
    in_flight: InFlight,
    /// Requests passed on twice, by correlation id: whether their first answer has gone to the
    /// client (the second is then dropped).
    duplicated: std::sync::Mutex<HashMap<i64, bool>>,
}

/// What a frame is, for logs and for aiming: its correlation id and, for Kafka, its API.
#[derive(Debug, Clone, Copy)]
struct Label {
    correlation_id: i64,
    api: Option<i16>,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(api) = self.api {
            write!(f, "{} ", kafka::api_name(api))?;
        }
        write!(f, "correlation_id={}", self.correlation_id)
    }
}

type Frames = FramedRead<OwnedReadHalf, FrameCodec>;
type Sink = FramedWrite<OwnedWriteHalf, FrameCodec>;

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
        let codec = || FrameCodec::new(self.proxy.config.max_frame_bytes);
        let (client_read, client_write) = client.into_split();
        let (upstream_read, upstream_write) = upstream.into_split();
        let reset = Arc::new(Notify::new());
        // Every task of this relay ends when the relay does, however it ends.
        let tasks = TaskTracker::new();
        let ended = CancellationToken::new();
        let _end_tasks = ended.clone().drop_guard();
        let (to_broker, queue) = mpsc::channel::<Forward>(QUEUE_DEPTH);
        let writer_done = CancellationToken::new();
        tasks.spawn(write_upstream(
            queue,
            FramedWrite::new(upstream_write, codec()),
            Arc::clone(&self.proxy.counters),
            ended.child_token(),
            writer_done.clone(),
        ));
        let held = Held {
            tasks: &tasks,
            ended: &ended,
        };
        let requests =
            self.forward_requests(FramedRead::new(client_read, codec()), to_broker, held);
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
                        writer_done.cancel();
                    }
                }
                () = &mut responses => break,
            }
        }
        // The broker side is done (it closed after answering) or the pair was reset. Held
        // requests still waiting are dropped with the relay's tasks; that is the fault.
        ended.cancel();
        tasks.close();
        tasks.wait().await;
    }

    /// Reads client requests and passes them on, dropping, delaying or holding some. Returns
    /// `true` if the pair must be reset.
    async fn forward_requests(
        &self,
        mut frames: Frames,
        to_broker: mpsc::Sender<Forward>,
        held: Held<'_>,
    ) -> bool {
        let config = &self.proxy.config;
        let counters = &self.proxy.counters;
        let mut rng =
            SplitMix64::new(config.seed ^ self.number.wrapping_mul(0xA24B_AED4_963E_E407));
        let mut duplicates_rng =
            SplitMix64::new(config.seed ^ self.number.wrapping_mul(0xD1B5_4A32_D192_ED03));
        while let Some(Ok(frame)) = frames.next().await {
            let id = self.request_label(&frame);
            if self.proxy.take_hold(id) {
                tracing::debug!(frame = %id, "request held until released");
                held.spawn(
                    frame.freeze(),
                    to_broker.clone(),
                    HELD_UNTIL_RELEASED,
                    counters.release.subscribe(),
                    (0, id),
                );
                counters.bump(&counters.held);
                continue;
            }
            if !self.aimed(id) {
                let forward = Forward {
                    frame: frame.freeze(),
                    written: None,
                };
                if to_broker.send(forward).await.is_err() {
                    return false;
                }
                continue;
            }
            let n = counters.bump(&counters.requests_aimed);
            if fires(&config.drop_request, n, &mut rng) {
                counters.bump(&counters.requests_dropped);
                tracing::debug!(request = n, frame = %id, "fault: request dropped");
                continue;
            }
            if fires(&config.hold_request, n, &mut rng) {
                tracing::debug!(
                    request = n,
                    frame = %id,
                    hold_ms = config.hold.as_millis() as u64,
                    "fault: request held"
                );
                held.spawn(
                    frame.freeze(),
                    to_broker.clone(),
                    config.hold,
                    counters.release.subscribe(),
                    (n, id),
                );
                counters.bump(&counters.held);
                continue;
            }
            if fires(&config.delay_request, n, &mut rng) {
                counters.bump(&counters.delayed);
                tracing::debug!(request = n, frame = %id, "fault: request delayed");
                tokio::time::sleep(config.delay).await;
            }
            if fires(&config.duplicate_request, n, &mut duplicates_rng) {
                counters.bump(&counters.duplicated);
                tracing::debug!(request = n, frame = %id, "fault: request passed on twice");
                locked(&self.duplicated).insert(id.correlation_id, false);
                let copy = Forward {
                    frame: Bytes::copy_from_slice(&frame),
                    written: None,
                };
                if to_broker.send(copy).await.is_err() {
                    return false;
                }
            }
            let reset = fires(&config.reset, n, &mut rng);
            let (written, was_written) = if reset {
                let (tell, told) = oneshot::channel();
                (Some(tell), Some(told))
            } else {
                (None, None)
            };
            let forward = Forward {
                frame: frame.freeze(),
                written,
            };
            if to_broker.send(forward).await.is_err() {
                return false;
            }
            if let Some(was_written) = was_written {
                // The pair is torn down only once the request has reached the broker's socket.
                let _ = was_written.await;
                counters.bump(&counters.resets);
                tracing::debug!(
                    request = n,
                    frame = %id,
                    "fault: connection reset after forwarding"
                );
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
            counters.bump(&counters.responses_seen);
            if self.second_answer(&frame) {
                tracing::debug!("the answer to a request's second copy dropped");
                continue;
            }
            let (frame, id) = self.kafka_answer(frame).await;
            if !self.aimed(id) {
                if to_client.send(frame.freeze()).await.is_err() {
                    return;
                }
                counters.bump(&counters.responses_forwarded);
                continue;
            }
            let n = counters.bump(&counters.responses_aimed);
            if fires(&config.drop_response, n, &mut rng) {
                counters.bump(&counters.responses_dropped);
                tracing::debug!(response = n, frame = %id, "fault: response dropped (lost ack)");
                continue;
            }
            if fires(&config.delay_response, n, &mut rng) {
                counters.bump(&counters.delayed);
                tracing::debug!(response = n, frame = %id, "fault: response delayed");
                // A reset during the delay wins: the delayed ack is lost with the connection.
                tokio::select! {
                    () = tokio::time::sleep(config.delay) => {}
                    () = reset.notified() => return reset_client(&to_client),
                }
            }
            if to_client.send(frame.freeze()).await.is_err() {
                return;
            }
            counters.bump(&counters.responses_forwarded);
        }
    }
}

impl Relay {
    /// Whether `frame` answers the second copy of a request passed on twice: the client asked
    /// once, so it gets one answer.
    fn second_answer(&self, frame: &BytesMut) -> bool {
        if !self.proxy.config.duplicate_request.is_active() {
            return false;
        }
        let correlation = if self.proxy.config.kafka.is_some() {
            kafka::response_correlation(frame).map_or(0, i64::from)
        } else {
            i64::from(correlation_id(frame))
        };
        let mut duplicated = locked(&self.duplicated);
        match duplicated.get_mut(&correlation) {
            None => false,
            Some(first_answered) if !*first_answered => {
                *first_answered = true;
                false
            }
            Some(_) => {
                duplicated.remove(&correlation);
                true
            }
        }
    }

    /// What a request is: its correlation id and, for Kafka, its API (remembered, so its
    /// answer is known).
    fn request_label(&self, frame: &BytesMut) -> Label {
        if self.proxy.config.kafka.is_none() {
            return Label {
                correlation_id: i64::from(correlation_id(frame)),
                api: None,
            };
        }
        match kafka::request_header(frame) {
            Some((api, version, correlation)) => {
                self.in_flight.asked(correlation, api, version);
                Label {
                    correlation_id: i64::from(correlation),
                    api: Some(api),
                }
            }
            None => Label {
                correlation_id: 0,
                api: None,
            },
        }
    }

    /// Whether faults may hit a frame of this kind.
    fn aimed(&self, label: Label) -> bool {
        self.proxy
            .config
            .kafka
            .as_ref()
            .is_none_or(|kafka| kafka.aims_at(label.api))
    }

    /// An answer as the client must get it: for Kafka, with every broker address it names
    /// rewritten to a listener of this proxy.
    async fn kafka_answer(&self, frame: BytesMut) -> (BytesMut, Label) {
        if self.proxy.config.kafka.is_none() {
            let correlation_id = i64::from(correlation_id(&frame));
            return (
                frame,
                Label {
                    correlation_id,
                    api: None,
                },
            );
        }
        let correlation = kafka::response_correlation(&frame).unwrap_or(0);
        let asked = self.in_flight.answered(correlation);
        let label = Label {
            correlation_id: i64::from(correlation),
            api: asked.map(|(api, _)| api),
        };
        let Some(mut answer) =
            asked.and_then(|(api, version)| Answer::decode(&frame, api, version))
        else {
            return (frame, label);
        };
        let mut routes = HashMap::new();
        for upstream in answer.addresses() {
            match self.proxy.routes.route(&upstream).await {
                Ok(route) => {
                    routes.insert(upstream, route);
                }
                Err(error) => {
                    tracing::warn!(%error, upstream, "cannot open a proxy listener for a broker");
                }
            }
        }
        answer.readdress(&routes);
        match answer.encode() {
            Some(rewritten) => (rewritten, label),
            None => (frame, label),
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

/// The correlation id of a native frame body, for logs (0 if the header is not there).
fn correlation_id(frame: &BytesMut) -> u32 {
    minibroker_protocol::codec::split_header(frame).map_or(0, |(id, _)| id)
}

/// Where a relay's held requests wait: tasks tied to the relay.
#[derive(Clone, Copy)]
struct Held<'a> {
    tasks: &'a TaskTracker,
    ended: &'a CancellationToken,
}

impl Held<'_> {
    /// Holds `frame` back until `hold` passes or [`Proxy::release_held`] is called, then queues
    /// it for the broker; dropped if the relay ends first. `label` is (request number, what
    /// the frame is), for logs.
    fn spawn(
        self,
        frame: Bytes,
        to_broker: mpsc::Sender<Forward>,
        hold: Duration,
        mut release: watch::Receiver<u64>,
        (request, label): (u64, Label),
    ) {
        let ended = self.ended.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = ended.cancelled() => return,
                () = tokio::time::sleep(hold) => {}
                _ = release.changed() => {}
            }
            tracing::debug!(request, frame = %label, "fault: held request released");
            let forward = Forward {
                frame,
                written: None,
            };
            tokio::select! {
                () = ended.cancelled() => {}
                _ = to_broker.send(forward) => {}
            }
        });
    }
}

/// Writes queued requests to the broker in order; ends when every sender (the request task and
/// any held requests) is gone, then closes the write side so the broker answers and closes. Stops
/// at once when the relay ends or the pair is reset (`stop`).
async fn write_upstream(
    mut queue: mpsc::Receiver<Forward>,
    mut sink: Sink,
    counters: Arc<Counters>,
    ended: CancellationToken,
    stop: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            () = ended.cancelled() => return,
            () = stop.cancelled() => return,
            next = queue.recv() => next,
        };
        let Some(forward) = next else { break };
        let written = tokio::select! {
            () = ended.cancelled() => return,
            written = sink.send(forward.frame) => written,
        };
        if written.is_err() {
            return;
        }
        counters.bump(&counters.requests_forwarded);
        if let Some(tell) = forward.written {
            let _ = tell.send(());
        }
    }
    let _ = SinkExt::<Bytes>::close(&mut sink).await;
}

/// Logs a relay task that panicked (a bug), instead of dropping it silently.
fn log_panic(done: Result<(), JoinError>) {
    if let Err(error) = done
        && error.is_panic()
    {
        tracing::error!(%error, "a relay task panicked; its connections were closed");
    }
}
