//! One client connection: read frames, answer each in order, flush in batches.
//!
//! The broker core is synchronous and fast, so a connection answers each request as soon as it is
//! read; pipelining comes from reading every frame already buffered before flushing the answers
//! together (one write for many responses). At most `max_in_flight` answers wait unflushed, and
//! a peer that stops reading is held back by the socket: nothing grows without bound.

use futures::{FutureExt, SinkExt, StreamExt};
use minibroker_protocol::{
    BadFrame, ErrorCode, ErrorResponse, FrameCodec, ProtocolError, Response, codec,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;

use crate::topics::TopicCache;
use crate::{Broker, RequestError};

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
}

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
        let mut topics = TopicCache::default();
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
                        flush(writer).await?;
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
                    writer.send((0, &response)).await?;
                    return Err(error);
                }
            };
            served_since_armed = true;
            let (correlation_id, response) = self.answer(&frame, &mut topics);
            match writer.feed((correlation_id, &response)).await {
                Err(ProtocolError::FrameTooLarge { size, max }) => {
                    let error = RequestError::Internal(format!(
                        "the response of {size} bytes exceeds the maximum frame of {max} bytes"
                    ));
                    writer
                        .feed((correlation_id, &Response::Error(error.to_response())))
                        .await?;
                }
                other => other?,
            }
            unflushed += 1;
            if unflushed >= self.max_in_flight {
                flush(writer).await?;
                unflushed = 0;
            }
        }
    }

    /// Decodes and serves one frame; a frame that does not decode gets an error answer.
    fn answer(&self, frame: &[u8], topics: &mut TopicCache) -> (u32, Response) {
        match codec::decode_request(frame) {
            Ok((correlation_id, request)) => {
                tracing::trace!(correlation_id, kind = request.kind(), "request");
                (correlation_id, self.broker.handle(request, topics))
            }
            Err(BadFrame {
                correlation_id,
                error,
            }) => {
                tracing::debug!(%error, "undecodable request");
                let error = match error {
                    ProtocolError::UnsupportedVersion { .. } => {
                        RequestError::UnsupportedVersion(error.to_string())
                    }
                    other => RequestError::Malformed(other.to_string()),
                };
                (
                    correlation_id.unwrap_or(0),
                    Response::Error(error.to_response()),
                )
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
