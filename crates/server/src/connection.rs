//! One client connection: read frames, answer each in order, flush in batches.
//!
//! The broker core is synchronous and fast, so a connection answers each request as soon as it is
//! read; pipelining comes from reading every frame already buffered before flushing the answers
//! together (one write for many responses). At most `max_in_flight` answers wait unflushed, and
//! a peer that stops reading is held back by the socket: nothing grows without bound.
//!
//! Every write to the socket is bounded by `write_timeout`, and shutdown can cut it short: a
//! client that pipelines large fetches and never reads the answers loses its connection (and
//! frees its slot) instead of keeping it until the broker stops.

use futures::{FutureExt, SinkExt, StreamExt};
use minibroker_protocol::{ErrorCode, ErrorResponse, FrameCodec, ProtocolError, Response};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;

use crate::Broker;
use crate::native::NativeFrontEnd;
use crate::topics::TopicCache;

/// Everything one connection task needs; each field has one role.
pub(crate) struct Connection {
    /// The shared broker core that answers requests.
    pub broker: Arc<Broker>,
    /// Fires when the server stops: finish what has been read, then close.
    pub shutdown: CancellationToken,
    /// Largest frame read or written.
    pub max_frame_bytes: usize,
    /// Answers buffered before a forced flush.
    pub max_in_flight: usize,
    /// Close after this long without a request.
    pub idle_timeout: Duration,
    /// Close when one write of buffered answers to the peer does not complete within this.
    pub write_timeout: Duration,
}

/// How long a write may still take once shutdown has begun.
const FINAL_WRITE_GRACE: Duration = Duration::from_secs(1);

impl Connection {
    /// Serves the connection until the peer closes it, it idles out, a frame is unrecoverable, or
    /// the server shuts down.
    pub async fn run(self, stream: TcpStream) {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not disable Nagle's algorithm");
        }
        let (read_half, write_half) = stream.into_split();
        let mut reader = FramedRead::new(read_half, FrameCodec::new(self.max_frame_bytes));
        let mut writer = FramedWrite::new(write_half, FrameCodec::new(self.max_frame_bytes));
        match self.serve(&mut reader, &mut writer).await {
            Ok(()) => tracing::debug!("connection closed"),
            Err(error) => tracing::debug!(%error, "connection closed on error"),
        }
        // Best effort: whatever was answered reaches the peer before the socket closes.
        let _ = tokio::time::timeout(Duration::from_secs(1), close(&mut writer)).await;
    }

    async fn serve(
        &self,
        reader: &mut FramedRead<OwnedReadHalf, FrameCodec>,
        writer: &mut Writer,
    ) -> Result<(), ProtocolError> {
        let mut unflushed = 0usize;
        let mut front_end = NativeFrontEnd {
            broker: &self.broker,
            topics: TopicCache::default(),
            max_frame_bytes: self.max_frame_bytes,
        };
        // One timer for the connection's life instead of one per wait: when it fires, the
        // connection is closed only if nothing was served since it was last armed, so a silent
        // connection closes after one to two idle timeouts.
        let idle = tokio::time::sleep(self.idle_timeout);
        tokio::pin!(idle);
        let mut served_since_armed = false;
        loop {
            // Frames already buffered are answered without waiting; only when none is left are
            // the answers flushed and the socket awaited.
            let next = match reader.next().now_or_never() {
                Some(item) => item,
                None => {
                    if unflushed > 0 {
                        self.bounded(flush(writer)).await?;
                        unflushed = 0;
                    }
                    tokio::select! {
                        biased;
                        () = self.shutdown.cancelled() => return Ok(()),
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
                    let response = Response::Error(ErrorResponse::new(
                        ErrorCode::MalformedRequest,
                        format!("{error}; closing the connection"),
                    ));
                    self.bounded(writer.send((0, &response))).await?;
                    return Err(error);
                }
            };
            served_since_armed = true;
            let (correlation_id, response) = front_end.answer(&frame.freeze());
            // Feeding flushes first when the write buffer is full, so it is bounded too.
            match self.bounded(writer.feed((correlation_id, &response))).await {
                Err(ProtocolError::FrameTooLarge { size, max }) => {
                    // Answers are sized to fit a frame, so this is a bug; say so, and go on.
                    tracing::warn!(size, max, "an answer did not fit a frame");
                    let answer = Response::Error(ErrorResponse::new(
                        ErrorCode::Internal,
                        format!(
                            "internal error: the answer of {size} bytes exceeds the maximum frame of {max} bytes"
                        ),
                    ));
                    self.bounded(writer.feed((correlation_id, &answer))).await?;
                }
                other => other?,
            }
            unflushed += 1;
            if unflushed >= self.max_in_flight {
                self.bounded(flush(writer)).await?;
                unflushed = 0;
            }
        }
    }

    /// Runs a write to the peer, failing it when it does not complete within `write_timeout`, or
    /// within [`FINAL_WRITE_GRACE`] once shutdown has begun. A write that completes at once (the usual
    /// case: the socket has room) sets no timer.
    async fn bounded<T>(
        &self,
        write: impl Future<Output = Result<T, ProtocolError>>,
    ) -> Result<T, ProtocolError> {
        let mut write = std::pin::pin!(write);
        if let Some(done) = write.as_mut().now_or_never() {
            return done;
        }
        let stalled = || {
            ProtocolError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the peer is not reading its answers; closing the connection",
            ))
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

type Writer = FramedWrite<OwnedWriteHalf, FrameCodec>;

/// Writes every buffered answer to the socket. (The codec encodes any serde type, so the sink's
/// item type is named here.)
async fn flush(writer: &mut Writer) -> Result<(), ProtocolError> {
    SinkExt::<(u32, &'static Response)>::flush(writer).await
}

/// Flushes and shuts down the write half.
async fn close(writer: &mut Writer) -> Result<(), ProtocolError> {
    SinkExt::<(u32, &'static Response)>::close(writer).await
}
