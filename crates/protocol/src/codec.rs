//! Framing and the body encoding.
//!
//! `length: u32 BE | version: u8 | correlation id: u32 BE | postcard body`. The length counts
//! everything after itself and is checked against the maximum before any buffer grows for the
//! frame (that check is `LengthDelimitedCodec`'s). This module is the only place that names the
//! body encoding, so it can change here alone.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use minibroker_framing::{FrameStart, Frames};
use serde::Serialize;
use tokio_util::codec::{Decoder, Encoder};

use crate::{BadFrame, ProtocolError, Request, Response};

/// The protocol version this build speaks (2: records travel as Kafka v2 record batches).
pub const VERSION: u8 = 2;

/// Bytes of version and correlation id before the body.
pub const HEADER_LEN: usize = 5;

/// Bytes of the length prefix.
pub use minibroker_framing::LENGTH_PREFIX_LEN;

/// Default cap on a frame's length (after the prefix): 8 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 8 << 20;

/// Encodes a frame body (header and message, without the length prefix).
///
/// # Errors
/// [`ProtocolError::Malformed`] if the message cannot be serialised (not expected for these
/// types).
pub fn encode_body<T: Serialize + ?Sized>(
    correlation_id: u32,
    message: &T,
) -> Result<Bytes, ProtocolError> {
    let mut body = BytesMut::with_capacity(64);
    write_body(correlation_id, message, &mut body)?;
    Ok(body.freeze())
}

fn write_body<T: Serialize + ?Sized>(
    correlation_id: u32,
    message: &T,
    dst: &mut BytesMut,
) -> Result<(), ProtocolError> {
    dst.put_u8(VERSION);
    dst.put_u32(correlation_id);
    postcard::to_io(message, dst.writer())?;
    Ok(())
}

/// Reads the header of a frame body: the correlation id and the message bytes after it.
///
/// # Errors
/// A [`BadFrame`] for a body shorter than the header (no correlation id) or an unsupported
/// version (with the correlation id).
pub fn split_header(mut body: &[u8]) -> Result<(u32, &[u8]), BadFrame> {
    if body.len() < HEADER_LEN {
        return Err(BadFrame {
            correlation_id: None,
            error: ProtocolError::TruncatedHeader(body.len()),
        });
    }
    let version = body.get_u8();
    let correlation_id = body.get_u32();
    if version != VERSION {
        return Err(BadFrame {
            correlation_id: Some(correlation_id),
            error: ProtocolError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            },
        });
    }
    Ok((correlation_id, body))
}

/// Decodes a request body, borrowing topic names and records from it.
///
/// # Errors
/// A [`BadFrame`] saying what was wrong and, when the header was intact, the correlation id.
pub fn decode_request(body: &[u8]) -> Result<(u32, Request<'_>), BadFrame> {
    let (correlation_id, message) = split_header(body)?;
    decode_exact(message)
        .map(|request| (correlation_id, request))
        .map_err(|error| BadFrame {
            correlation_id: Some(correlation_id),
            error,
        })
}

/// Decodes a response body.
///
/// # Errors
/// A [`BadFrame`] saying what was wrong.
pub fn decode_response(body: &[u8]) -> Result<(u32, Response), BadFrame> {
    let (correlation_id, message) = split_header(body)?;
    decode_exact(message)
        .map(|response| (correlation_id, response))
        .map_err(|error| BadFrame {
            correlation_id: Some(correlation_id),
            error,
        })
}

/// Decodes a whole message: bytes left over after it make the frame malformed.
fn decode_exact<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ProtocolError> {
    let (message, rest) = postcard::take_from_bytes(bytes)?;
    if rest.is_empty() {
        Ok(message)
    } else {
        Err(ProtocolError::Malformed(
            postcard::Error::DeserializeBadEncoding,
        ))
    }
}

/// Splits a byte stream into frame bodies and writes messages as frames, for
/// `tokio_util::codec::{FramedRead, FramedWrite, Framed}`.
///
/// Decoding yields each frame's body (header and message); decode it with [`decode_request`] or
/// [`decode_response`]. Encoding takes `(correlation id, &message)` and writes the length prefix,
/// header and message straight into the output buffer.
#[derive(Debug)]
pub struct FrameCodec {
    frames: Frames,
    max_frame_bytes: usize,
}

impl FrameCodec {
    /// A codec refusing frames longer than `max_frame_bytes` in either direction.
    #[must_use]
    pub fn new(max_frame_bytes: usize) -> Self {
        Self {
            frames: Frames::new(max_frame_bytes),
            max_frame_bytes,
        }
    }

    /// The largest frame accepted or written.
    #[must_use]
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }
}

impl Default for FrameCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = ProtocolError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, ProtocolError> {
        self.frames.decode(src).map_err(ProtocolError::from)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, ProtocolError> {
        self.frames.decode_eof(src).map_err(ProtocolError::from)
    }
}

impl<T: Serialize + ?Sized> Encoder<(u32, &T)> for FrameCodec {
    type Error = ProtocolError;

    fn encode(
        &mut self,
        (correlation_id, message): (u32, &T),
        dst: &mut BytesMut,
    ) -> Result<(), ProtocolError> {
        let frame = FrameStart::begin(dst);
        if let Err(error) = write_body(correlation_id, message, dst) {
            frame.abandon(dst);
            return Err(error);
        }
        Ok(frame.end(dst, self.max_frame_bytes)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ErrorCode, ErrorResponse, FetchRequest, ProduceRequest};

    /// A produce request; the codec does not look inside the batch, so any bytes do here.
    fn produce(batch: &[u8]) -> Request<'_> {
        Request::Produce(ProduceRequest {
            topic: "t",
            partition: 1,
            batch: serde_bytes::Bytes::new(batch),
        })
    }

    fn frame<T: Serialize + ?Sized>(codec: &mut FrameCodec, id: u32, message: &T) -> BytesMut {
        let mut out = BytesMut::new();
        codec.encode((id, message), &mut out).unwrap();
        out
    }

    #[test]
    fn request_round_trips_through_the_codec() {
        let mut codec = FrameCodec::default();
        let request = produce(b"a batch");
        let mut stream = frame(&mut codec, 9, &request);
        let body = codec.decode(&mut stream).unwrap().unwrap();
        assert_eq!(decode_request(&body).unwrap(), (9, request));
        assert!(stream.is_empty());
    }

    #[test]
    fn header_split_across_reads_waits_for_more() {
        let mut codec = FrameCodec::default();
        let whole = frame(&mut codec, 1, &Request::Metadata);
        let mut partial = BytesMut::new();
        for (i, byte) in whole.iter().enumerate() {
            partial.put_u8(*byte);
            let decoded = codec.decode(&mut partial).unwrap();
            if i + 1 < whole.len() {
                assert!(decoded.is_none(), "decoded early at byte {i}");
            } else {
                assert_eq!(
                    decode_request(&decoded.unwrap()).unwrap(),
                    (1, Request::Metadata)
                );
            }
        }
    }

    #[test]
    fn oversize_frame_is_refused_before_reading_its_body() {
        let mut codec = FrameCodec::new(16);
        let mut src = BytesMut::from(&[0u8, 0, 0, 17][..]);
        match codec.decode(&mut src) {
            Err(ProtocolError::FrameTooLarge { size: 17, max: 16 }) => {}
            other => panic!("expected FrameTooLarge, got {other:?}"),
        }
    }

    #[test]
    fn oversize_frame_is_refused_when_encoding() {
        let mut codec = FrameCodec::new(8);
        let mut out = BytesMut::new();
        let result = codec.encode((1, &produce(b"0123456789")), &mut out);
        assert!(matches!(result, Err(ProtocolError::FrameTooLarge { .. })));
        assert!(out.is_empty(), "nothing of a refused frame is written");
    }

    #[test]
    fn eof_mid_frame_is_an_error_and_on_a_boundary_is_clean() {
        let mut codec = FrameCodec::default();
        let whole = frame(&mut codec, 1, &Request::Metadata);
        let mut cut = BytesMut::from(&whole[..whole.len() - 1]);
        assert!(codec.decode_eof(&mut cut).is_err());
        let mut empty = BytesMut::new();
        assert!(codec.decode_eof(&mut empty).unwrap().is_none());
    }

    #[test]
    fn garbage_body_keeps_its_correlation_id() {
        let body = [VERSION, 0, 0, 0, 42, 0xff, 0xff, 0xff];
        let bad = decode_request(&body).unwrap_err();
        assert_eq!(bad.correlation_id, Some(42));
        assert!(matches!(bad.error, ProtocolError::Malformed(_)));
    }

    #[test]
    fn unknown_request_kind_is_malformed() {
        let body = [VERSION, 0, 0, 0, 5, 200];
        assert!(matches!(
            decode_request(&body).unwrap_err().error,
            ProtocolError::Malformed(_)
        ));
    }

    #[test]
    fn trailing_bytes_are_malformed() {
        let mut body = encode_body(3, &Request::Metadata).unwrap().to_vec();
        body.push(0);
        assert!(decode_request(&body).is_err());
    }

    #[test]
    fn short_header_and_wrong_version_are_reported() {
        let short = decode_request(&[VERSION, 0]).unwrap_err();
        assert!(short.correlation_id.is_none());
        let wrong = decode_request(&[9, 0, 0, 0, 1, 4]).unwrap_err();
        assert_eq!(wrong.correlation_id, Some(1));
        assert!(matches!(
            wrong.error,
            ProtocolError::UnsupportedVersion { found: 9, .. }
        ));
    }

    #[test]
    fn responses_round_trip() {
        let response =
            Response::Error(ErrorResponse::new(ErrorCode::UnknownTopic, "no such topic"));
        let body = encode_body(5, &response).unwrap();
        assert_eq!(decode_response(&body).unwrap(), (5, response));
        let fetch = Request::Fetch(FetchRequest {
            topic: "x",
            partition: 0,
            offset: 3,
            max_bytes: 10,
        });
        let body = encode_body(6, &fetch).unwrap();
        assert_eq!(decode_request(&body).unwrap(), (6, fetch));
    }
}
