//! The baseline server: reads each frame and answers a fixed acknowledgement without decoding
//! or storing anything. It uses the same I/O pattern as the broker (answers to every frame already
//! read are written with one flush), so broker/baseline isolates the cost of the broker's work.
//! It speaks either wire: the acknowledgement is a real produce answer of that protocol, and only
//! its correlation id, copied from the request, changes. Standing in for a durable broker it
//! also writes every produce frame to disk (`durable_baseline`) before answering it, and for a
//! cluster inserts it into PostgreSQL (`raw_inserts`).

use bytes::{Bytes, BytesMut};
use futures::{FutureExt, StreamExt};
use minibroker_net::framing::{FrameStart, Frames, MAX_LENGTH};
use std::future::Future;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::FramedRead;

use super::durable_baseline::{ConnectionWriter, Store};
use super::raw_inserts::RawInserts;
use super::wire::Wire;

/// What the baseline does with a produce frame before it answers it.
#[derive(Clone)]
pub enum Keep {
    /// Nothing: the answer at once.
    Nothing,
    /// Written to a file (and synced as the flush policy says).
    Files(Arc<Store>),
    /// Inserted into PostgreSQL in committer-like windows.
    Postgres(RawInserts),
}

/// One connection's keeping of its frames.
enum Keeping {
    Files(ConnectionWriter),
    Postgres(
        RawInserts,
        Vec<tokio::sync::oneshot::Receiver<Result<(), String>>>,
    ),
}

impl Keeping {
    fn of(keep: &Keep) -> Option<Self> {
        match keep {
            Keep::Nothing => None,
            Keep::Files(store) => Some(Self::Files(store.writer())),
            Keep::Postgres(inserts) => Some(Self::Postgres(inserts.clone(), Vec::new())),
        }
    }

    async fn keep(&mut self, frame: &[u8]) -> Result<(), String> {
        match self {
            Self::Files(writer) => writer.write(frame).map_err(|error| error.to_string()),
            Self::Postgres(inserts, pending) => {
                pending.push(inserts.insert(Bytes::copy_from_slice(frame)).await);
                Ok(())
            }
        }
    }

    /// Returns once everything kept so far is stored.
    async fn kept(&mut self) -> Result<(), String> {
        match self {
            Self::Files(writer) => writer.durable().await.map_err(|error| error.to_string()),
            Self::Postgres(_, pending) => {
                for stored in pending.drain(..) {
                    stored.await.map_err(|_| "the inserting task stopped")??;
                }
                Ok(())
            }
        }
    }
}

/// A produce answer, and where the correlation id sits in requests and in the answer; for
/// Kafka also the answer to the InitProducerId a producer starts with, and its API key.
#[derive(Clone)]
struct Ack {
    body: Bytes,
    correlation_in_request: usize,
    correlation_in_answer: usize,
    identity: Option<(i16, Bytes)>,
}

/// Serves the baseline for `wire` on `listener` until `shutdown` resolves, keeping produce
/// frames as `keep` says.
pub async fn serve(
    listener: TcpListener,
    wire: Wire,
    keep: Keep,
    shutdown: impl Future<Output = ()>,
) {
    let (body, correlation_in_request, correlation_in_answer) = wire.fixed_ack();
    let ack = Ack {
        body,
        correlation_in_request,
        correlation_in_answer,
        identity: wire.fixed_identity_ack(),
    };
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    connections.spawn(answer(stream, ack.clone(), keep.clone()));
                }
            }
        }
    }
    connections.shutdown().await;
}

async fn answer(stream: TcpStream, ack: Ack, keep: Keep) {
    let _ = stream.set_nodelay(true);
    let (read_half, mut write_half) = stream.into_split();
    let mut frames = FramedRead::new(
        read_half,
        Frames::new(minibroker_protocol::DEFAULT_MAX_FRAME_BYTES),
    );
    let (request_at, answer_at) = (ack.correlation_in_request, ack.correlation_in_answer);
    let mut out = BytesMut::with_capacity(16 * 1024);
    let mut keeping = None;
    while let Some(Ok(mut frame)) = frames.next().await {
        loop {
            let api_key = frame
                .get(..2)
                .map(|key| i16::from_be_bytes([key[0], key[1]]));
            let body = match &ack.identity {
                Some((identity_key, identity)) if api_key == Some(*identity_key) => identity,
                _ => {
                    if keeping.is_none() {
                        keeping = Keeping::of(&keep);
                    }
                    if let Some(keeping) = &mut keeping
                        && keeping.keep(&frame).await.is_err()
                    {
                        return;
                    }
                    &ack.body
                }
            };
            let answer = FrameStart::begin(&mut out);
            out.extend_from_slice(&body[..answer_at]);
            // Copy the correlation id without decoding the request.
            out.extend_from_slice(frame.get(request_at..request_at + 4).unwrap_or(&[0; 4]));
            out.extend_from_slice(&body[answer_at + 4..]);
            let _fits = answer.end(&mut out, MAX_LENGTH);
            match frames.next().now_or_never() {
                Some(Some(Ok(next))) => frame = next,
                _ => break,
            }
        }
        if let Some(keeping) = &mut keeping
            && keeping.kept().await.is_err()
        {
            return;
        }
        if write_half.write_all(&out).await.is_err() {
            return;
        }
        out.clear();
    }
}
