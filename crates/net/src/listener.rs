//! The accept loop and graceful shutdown.
//!
//! Every connection is accepted at once. One that finds all `max_connections` slots taken (the
//! slots are the node's, shared by all its listeners) gets a
//! best-effort TOO_MANY_CONNECTIONS error frame and is closed right away, and is counted, so a
//! client fails fast instead of waiting silently in the kernel's backlog until its connect times
//! out. One from an address that holds its `max_connections_per_ip` already is closed at once. On shutdown the listener is dropped first (new connections are refused), every connection
//! finishes the requests it has read, and the whole drain is bounded by a deadline after which
//! the stragglers are aborted. A connection task that panics is logged, never dropped silently.
//!
//! On a TLS listener the handshake runs in the connection's task (a slow client holds only its
//! own slot), bounded by `authentication_timeout_ms`; a client that fails it — plaintext to a
//! TLS port, an untrusted certificate — is closed, and the front end is made only afterwards, as
//! it may need the client certificate's name.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::connection::Connection;
use crate::front_end::{FrontEnd, Peer};
use crate::slots::{Limits, Slots};

/// Serves `listener` (in TLS sessions when `tls` is given) with the front end `new_front_end`
/// makes for each connection, holding one of `slots` each, under `limits`, until `shutdown`
/// resolves, then drains: the machinery every protocol shares.
pub async fn serve<F: FrontEnd, N>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    slots: Arc<Slots>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
    new_front_end: N,
) where
    N: Fn(&Peer) -> F + Send + Sync + 'static,
{
    let new_front_end = Arc::new(new_front_end);
    let stop_connections = CancellationToken::new();
    let mut connections = JoinSet::new();
    let mut refusals = RefusalLog::default();
    tokio::pin!(shutdown);
    loop {
        while let Some(done) = connections.try_join_next() {
            log_panic(done);
        }
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener) => accepted,
        };
        let Some(per_ip) = slots.per_ip.take(peer.ip()) else {
            // One address holds its max_connections_per_ip: closed, as Kafka does.
            slots.refused.fetch_add(1, Ordering::Relaxed);
            refusals.note(
                peer,
                slots.per_ip.limit().unwrap_or(0),
                "max_connections_per_ip",
            );
            continue;
        };
        let Ok(permit) = Arc::clone(&slots.slots).try_acquire_owned() else {
            slots.refused.fetch_add(1, Ordering::Relaxed);
            refusals.note(peer, limits.max_connections, "max_connections");
            refuse::<F>(&stream, limits.max_connections);
            continue;
        };
        slots.accepted.fetch_add(1, Ordering::Relaxed);
        let accepted = Accepted {
            slots: Arc::clone(&slots),
            shutdown: stop_connections.clone(),
            limits,
        };
        let span = tracing::info_span!("connection", %peer);
        let new_front_end = Arc::clone(&new_front_end);
        let tls = tls.clone();
        connections.spawn(
            async move {
                tracing::debug!("accepted");
                // Counted closed even if the task panics or is aborted.
                let _closed = CloseCount(Arc::clone(&accepted.slots));
                accepted.serve(stream, peer, tls, &*new_front_end).await;
                drop((permit, per_ip));
            }
            .instrument(span),
        );
    }

    drop(listener);
    while let Some(done) = connections.try_join_next() {
        log_panic(done);
    }
    tracing::info!(
        connections = connections.len(),
        "shutting down: no new connections, draining"
    );
    stop_connections.cancel();
    let drained = tokio::time::timeout(limits.drain_timeout, async {
        while let Some(done) = connections.join_next().await {
            log_panic(done);
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            remaining = connections.len(),
            "drain deadline passed; aborting remaining connections"
        );
        connections.shutdown().await;
    }
    tracing::info!("stopped");
}

/// One accepted connection, before its TLS handshake (if any) and its front end.
struct Accepted {
    slots: Arc<Slots>,
    shutdown: CancellationToken,
    limits: Limits,
}

impl Accepted {
    /// Completes the TLS handshake when `tls` asks for one, makes the front end, and serves the
    /// connection to its end.
    async fn serve<F: FrontEnd>(
        self,
        stream: TcpStream,
        addr: std::net::SocketAddr,
        tls: Option<TlsAcceptor>,
        new_front_end: &(dyn Fn(&Peer) -> F + Send + Sync),
    ) {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not disable Nagle's algorithm");
        }
        let started = Instant::now();
        let Some(tls) = tls else {
            let peer = Peer::plain(addr);
            let (read_half, write_half) = stream.into_split();
            let connection = self.connection(new_front_end(&peer), started);
            return connection.run(read_half, write_half).await;
        };
        // rustls reads the socket at most 4 KiB at a time; a buffer under it lets one read(2)
        // bring in up to 64 KiB.
        let buffered = tokio::io::BufReader::with_capacity(crate::tls::READ_BUFFER, stream);
        let session =
            match tokio::time::timeout(self.limits.authentication_timeout, tls.accept(buffered))
                .await
            {
                Ok(Ok(session)) => session,
                Ok(Err(error)) => {
                    tracing::info!(%error, "TLS handshake failed; closing the connection");
                    return;
                }
                Err(_) => {
                    tracing::info!("TLS handshake not finished in time; closing the connection");
                    return;
                }
            };
        let certificate_name = session
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(crate::tls::certificate_name);
        let peer = Peer {
            addr,
            tls: true,
            certificate_name,
        };
        let (read_half, write_half) = tokio::io::split(session);
        let connection = self.connection(new_front_end(&peer), started);
        connection.run(read_half, write_half).await;
    }

    /// The connection loop for `front_end`, with what is left of the authentication time.
    fn connection<F: FrontEnd>(&self, front_end: F, started: Instant) -> Connection<F> {
        Connection {
            front_end,
            shutdown: self.shutdown.clone(),
            max_frame_bytes: self.limits.max_frame_bytes,
            max_in_flight: self.limits.max_in_flight,
            idle_timeout: self.limits.idle_timeout,
            write_timeout: self.limits.write_timeout,
            authentication_timeout: self
                .limits
                .authentication_timeout
                .saturating_sub(started.elapsed()),
        }
    }
}

/// Counts a connection closed when its task ends, however it ends.
struct CloseCount(Arc<Slots>);

impl Drop for CloseCount {
    fn drop(&mut self) {
        self.0.closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Logs a connection task that panicked (a bug: the network path must never panic).
fn log_panic(done: Result<(), JoinError>) {
    if let Err(error) = done
        && error.is_panic()
    {
        tracing::error!(%error, "a connection task panicked; its connection was closed");
    }
}

/// Tells an over-limit connection why it is closed (if its protocol can), without waiting on
/// it: the frame goes out only if the socket takes it at once (a fresh socket always has room).
fn refuse<F: FrontEnd>(stream: &TcpStream, max_connections: usize) {
    let mut frame = bytes::BytesMut::new();
    F::refusal(max_connections, &mut frame);
    if !frame.is_empty() {
        let _ = stream.try_write(&frame);
    }
}

/// Refused connections are logged at most once a second, with how many were refused since.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    fn note(&mut self, peer: std::net::SocketAddr, limit: usize, which: &'static str) {
        self.unlogged += 1;
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < Duration::from_secs(1))
        {
            return;
        }
        tracing::warn!(
            %peer,
            refused = self.unlogged,
            limit,
            which,
            "connection limit reached: refusing connections"
        );
        self.last = Some(now);
        self.unlogged = 0;
    }
}

/// `peer` as everything downstream must see it: an IPv4 client of a dual-stack (`[::]`)
/// listener arrives as `::ffff:a.b.c.d`, and is `a.b.c.d` to host ACLs, the per-address
/// connection limit and the logs alike, as Kafka sees it.
fn canonical_peer(peer: std::net::SocketAddr) -> std::net::SocketAddr {
    std::net::SocketAddr::new(peer.ip().to_canonical(), peer.port())
}

/// Accepts one connection, backing off on errors (such as running out of file descriptors)
/// instead of spinning. The peer's address is in its canonical form ([`canonical_peer`]).
async fn accept(listener: &TcpListener) -> (TcpStream, std::net::SocketAddr) {
    let mut backoff = Duration::from_millis(10);
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => return (stream, canonical_peer(peer)),
            Err(error) => {
                tracing::warn!(%error, backoff_ms = backoff.as_millis() as u64, "accept failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}
