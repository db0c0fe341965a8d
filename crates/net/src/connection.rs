//! One client connection: read frames, answer each in order, flush in batches — for any
//! [`FrontEnd`].
//!
//! The broker core is synchronous and fast, so a connection answers each request as soon as it is
//! read; pipelining comes from reading every frame already buffered before writing the answers
//! together (one write for many responses). Before any answers leave, the front end stores what
//! they acknowledge ([`FrontEnd::store_answered`]): a durable partition writes the batches
//! gathered meanwhile with one `write(2)` (and with the `always` policy the connection waits for
//! the fsync that covers them), so no answer ever precedes its batch's write or sync. At most
//! `max_in_flight` answers (or [`FLUSH_BYTES`]) wait unwritten, and a peer that stops reading is
//! held back by the socket: nothing grows without bound.
//!
//! Every write to the socket is bounded by `write_timeout`, and shutdown can cut it short: a
//! client that pipelines large fetches and never reads the answers loses its connection (and
//! frees its slot) instead of keeping it until the broker stops.

use bytes::BytesMut;
use futures::{FutureExt, StreamExt};
use std::future::Future;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::front_end::{FrontEnd, Next};
use minibroker_framing::Frames;

/// Answers buffered beyond this many bytes are written before the next request is read.
const FLUSH_BYTES: usize = 64 << 10;

/// How long a write may still take once shutdown has begun.
const FINAL_WRITE_GRACE: Duration = Duration::from_secs(1);

/// Everything one connection task needs; each field has one role.
pub(crate) struct Connection<F> {
    /// Translates the connection's protocol to the broker core.
    pub front_end: F,
    /// Fires when the server stops: finish what has been read, then close.
    pub shutdown: CancellationToken,
    /// Largest frame read.
    pub max_frame_bytes: usize,
    /// Answers buffered before a forced write.
    pub max_in_flight: usize,
    /// Close after this long without a request.
    pub idle_timeout: Duration,
    /// Close when one write of buffered answers to the peer does not complete within this.
    pub write_timeout: Duration,
    /// Close when the front end has not authenticated the peer within this (counted from the
    /// accept, so a TLS handshake's time is included: the listener passes what is left).
    pub authentication_timeout: Duration,
}

impl<F: FrontEnd> Connection<F> {
    /// Serves the connection until the peer closes it, it idles out, a frame is unrecoverable, the
    /// front end says to close, or the server shuts down.
    /// `read_half` and `write_half` are the two directions of one stream (a TCP socket's halves,
    /// or a TLS session's).
    pub async fn run<R, W>(mut self, read_half: R, mut write_half: W)
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send,
    {
        let mut reader = FramedRead::new(read_half, Frames::new(self.max_frame_bytes));
        let mut out = BytesMut::with_capacity(8 << 10);
        match self.serve(&mut reader, &mut write_half, &mut out).await {
            Ok(()) => tracing::debug!("connection closed"),
            Err(error) => tracing::debug!(%error, "connection closed on error"),
        }
        if self.settle(&mut out).await.is_err() {
            return;
        }
        // Best effort: whatever was answered reaches the peer before the socket closes.
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            write_half.write_all(&out).await?;
            write_half.shutdown().await
        })
        .await;
    }

    async fn serve<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
        &mut self,
        reader: &mut FramedRead<R, Frames>,
        writer: &mut W,
        out: &mut BytesMut,
    ) -> io::Result<()> {
        let mut unflushed = 0usize;
        // Until the front end has authenticated the peer, a deadline closes the connection.
        let unauthenticated = tokio::time::sleep(self.authentication_timeout);
        tokio::pin!(unauthenticated);
        let mut awaiting_authentication = !self.front_end.authenticated();
        // One timer for the connection's life instead of one per wait: when it fires, the
        // connection is closed only if nothing was served since it was last armed, so a silent
        // connection closes after one to two idle timeouts.
        let idle = tokio::time::sleep(self.idle_timeout);
        tokio::pin!(idle);
        let mut served_since_armed = false;
        loop {
            // Frames already buffered are answered without waiting; only when none is left are
            // the answers written and the socket awaited.
            let next = match reader.next().now_or_never() {
                Some(item) => item,
                None => {
                    // Even with no answer to send (Kafka's acks=0), what was produced is
                    // written before the connection waits.
                    self.send(writer, out).await?;
                    unflushed = 0;
                    awaiting_authentication =
                        awaiting_authentication && !self.front_end.authenticated();
                    tokio::select! {
                        biased;
                        () = self.shutdown.cancelled() => return Ok(()),
                        () = &mut unauthenticated, if awaiting_authentication => {
                            tracing::info!("not authenticated in time; closing the connection");
                            return Ok(());
                        }
                        () = &mut idle => {
                            if !served_since_armed {
                                tracing::debug!("idle timeout");
                                return Ok(());
                            }
                            served_since_armed = false;
                            idle.as_mut().reset(tokio::time::Instant::now() + self.idle_timeout);
                            continue;
                        }
                        item = reader.next() => item,
                    }
                }
            };
            let frame = match next {
                Some(Ok(frame)) => frame,
                // End of stream on a frame boundary: the peer is done.
                None => return Ok(()),
                Some(Err(error)) => {
                    // Framing is lost (oversize or truncated frame): say why, then close.
                    self.front_end.framing_error(&error, out);
                    self.send(writer, out).await?;
                    return Err(io::Error::other(error));
                }
            };
            served_since_armed = true;
            if self.front_end.answer(frame.freeze(), out).await == Next::Close {
                return Ok(());
            }
            unflushed += 1;
            if unflushed >= self.max_in_flight || out.len() >= FLUSH_BYTES {
                self.send(writer, out).await?;
                unflushed = 0;
            }
        }
    }

    /// Makes what the buffered answers acknowledge stored ([`FrontEnd::store_answered`]), then
    /// writes them, bounded by [`Self::bounded`].
    async fn send<W: AsyncWrite + Unpin>(
        &mut self,
        writer: &mut W,
        out: &mut BytesMut,
    ) -> io::Result<()> {
        self.settle(out).await?;
        if out.is_empty() {
            return Ok(());
        }
        self.bounded(writer.write_all(out)).await?;
        out.clear();
        Ok(())
    }

    /// [`FrontEnd::store_answered`]; when it fails, the buffered answers are dropped unsent
    /// (they acknowledge what was not stored) and the connection is to close.
    async fn settle(&mut self, out: &mut BytesMut) -> io::Result<()> {
        self.front_end.store_answered(out).await.map_err(|error| {
            tracing::warn!(%error, "answers dropped unsent: what they acknowledge was not stored");
            out.clear();
            io::Error::other(error)
        })
    }

    /// Runs a write to the peer, failing it when it does not complete within `write_timeout`, or
    /// within [`FINAL_WRITE_GRACE`] once shutdown has begun. A write that completes at once (the
    /// usual case: the socket has room) sets no timer.
    async fn bounded<T>(&self, write: impl Future<Output = io::Result<T>>) -> io::Result<T> {
        let mut write = std::pin::pin!(write);
        if let Some(done) = write.as_mut().now_or_never() {
            return done;
        }
        let stalled = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer is not reading its answers; closing the connection",
            )
        };
        tokio::select! {
            done = write.as_mut() => done,
            () = tokio::time::sleep(self.write_timeout) => Err(stalled()),
            () = self.shutdown.cancelled() => {
                tokio::time::timeout(FINAL_WRITE_GRACE, write).await.unwrap_or_else(|_| Err(stalled()))
            }
        }
    }
}
