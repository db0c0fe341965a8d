//! The baseline server: reads each frame and answers a fixed-size acknowledgement without decoding
//! or storing anything. It uses the same I/O pattern as the broker (answers to every frame already
//! read are written with one flush), so broker/baseline isolates the cost of the broker's work.

use bytes::{BufMut, BytesMut};
use futures::{FutureExt, StreamExt};
use minibroker_protocol::{Outcome, ProduceResponse, Response, codec};
use std::future::Future;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

/// Serves the baseline on `listener` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, shutdown: impl Future<Output = ()>) {
    // The acknowledgement every request gets; only its correlation id changes.
    let ack = codec::encode_body(
        0,
        &Response::Produce(ProduceResponse {
            outcome: Outcome::Accepted,
            base_offset: Some(0),
        }),
    )
    .expect("the fixed acknowledgement encodes");
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    connections.spawn(answer(stream, ack.clone()));
                }
            }
        }
    }
    connections.shutdown().await;
}

async fn answer(stream: TcpStream, ack: bytes::Bytes) {
    let _ = stream.set_nodelay(true);
    let (read_half, mut write_half) = stream.into_split();
    let mut frames = FramedRead::new(
        read_half,
        LengthDelimitedCodec::builder()
            .max_frame_length(minibroker_protocol::DEFAULT_MAX_FRAME_BYTES)
            .new_codec(),
    );
    let mut out = BytesMut::with_capacity(16 * 1024);
    while let Some(Ok(mut frame)) = frames.next().await {
        loop {
            out.put_u32(ack.len() as u32);
            out.put_u8(ack[0]);
            // Copy the correlation id (header bytes 1..5) without decoding the request.
            out.extend_from_slice(frame.get(1..5).unwrap_or(&[0; 4]));
            out.extend_from_slice(&ack[5..]);
            match frames.next().now_or_never() {
                Some(Some(Ok(next))) => frame = next,
                _ => break,
            }
        }
        if write_half.write_all(&out).await.is_err() {
            return;
        }
        out.clear();
    }
}
