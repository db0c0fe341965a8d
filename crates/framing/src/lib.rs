//! The framing every protocol minibroker speaks shares: a 4-byte big-endian length, then the
//! body. Decoded by `tokio_util`'s `LengthDelimitedCodec`, which checks the length against the
//! maximum before any buffer grows for the frame; this crate only names the oversize case. The
//! connection loop reads every connection's requests with it (`minibroker_net`), the native codec its
//! clients' answers (`minibroker_protocol`), the Kafka client its answers and the fault proxy
//! both directions.
//!
//! A frame is written in place: [`FrameStart::begin`] leaves room for the length, the caller
//! encodes the body straight into the buffer, and [`FrameStart::end`] writes the length (or
//! takes the frame back out when it is too large), so no body is encoded aside and copied. Every
//! answer and request minibroker writes is framed this way, or by [`Frames`] as an encoder.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec, LengthDelimitedCodecError};

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_LEN: usize = 4;

/// The longest body a length prefix can say: the bound of a frame whose size is bounded
/// elsewhere (a Kafka answer by its answer room, a SASL token by its mechanism).
pub const MAX_LENGTH: usize = u32::MAX as usize;

/// Why the frame stream of a connection broke.
#[derive(Debug, Error)]
pub enum FramingError {
    /// A frame longer than `max_frame_bytes`.
    #[error("frame of {size} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// What its length prefix said.
        size: usize,
        /// `max_frame_bytes`.
        max: usize,
    },
    /// The connection failed, or closed in the middle of a frame.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A decoder of length-prefixed frames of at most `max_frame_bytes` (after the prefix).
#[derive(Debug)]
pub struct Frames {
    lengths: LengthDelimitedCodec,
    max_frame_bytes: usize,
}

impl Frames {
    /// Frames of at most `max_frame_bytes`.
    #[must_use]
    pub fn new(max_frame_bytes: usize) -> Self {
        Self {
            lengths: LengthDelimitedCodec::builder()
                .length_field_length(LENGTH_PREFIX_LEN)
                .max_frame_length(max_frame_bytes)
                .new_codec(),
            max_frame_bytes,
        }
    }

    fn name(&self, src: &BytesMut, error: std::io::Error) -> FramingError {
        let too_large = error
            .get_ref()
            .is_some_and(|inner| inner.is::<LengthDelimitedCodecError>());
        match src.get(..LENGTH_PREFIX_LEN) {
            Some(&[a, b, c, d]) if too_large => FramingError::TooLarge {
                size: u32::from_be_bytes([a, b, c, d]) as usize,
                max: self.max_frame_bytes,
            },
            _ => FramingError::Io(error),
        }
    }
}

impl Decoder for Frames {
    type Item = BytesMut;
    type Error = FramingError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FramingError> {
        self.lengths
            .decode(src)
            .map_err(|error| self.name(src, error))
    }

    /// As [`Self::decode`]; bytes left that are not a whole frame are an
    /// [`std::io::ErrorKind::UnexpectedEof`]: the connection closed in the middle of a frame.
    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FramingError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(FramingError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the connection closed {} bytes into a frame", src.len()),
            ))),
        }
    }
}

impl Encoder<Bytes> for Frames {
    type Error = FramingError;

    fn encode(&mut self, body: Bytes, dst: &mut BytesMut) -> Result<(), FramingError> {
        let frame = FrameStart::begin(dst);
        dst.extend_from_slice(&body);
        frame.end(dst, self.max_frame_bytes)
    }
}

/// Where a frame being written begins in its buffer: the length is written once the body is.
#[derive(Debug)]
#[must_use = "a frame begun is ended or abandoned"]
pub struct FrameStart(usize);

impl FrameStart {
    /// Leaves room for a frame's length at the end of `out`.
    pub fn begin(out: &mut BytesMut) -> Self {
        let at = out.len();
        out.put_u32(0);
        Self(at)
    }

    /// Writes the length of the body written into `out` since [`Self::begin`].
    ///
    /// # Errors
    /// [`FramingError::TooLarge`] when the body is longer than `max_frame_bytes` (or than a
    /// length can say); the frame is taken out of `out` then.
    pub fn end(self, out: &mut BytesMut, max_frame_bytes: usize) -> Result<(), FramingError> {
        let size = out.len() - self.0 - LENGTH_PREFIX_LEN;
        match u32::try_from(size) {
            Ok(length) if size <= max_frame_bytes => {
                out[self.0..self.0 + LENGTH_PREFIX_LEN].copy_from_slice(&length.to_be_bytes());
                Ok(())
            }
            _ => {
                self.abandon(out);
                Err(FramingError::TooLarge {
                    size,
                    max: max_frame_bytes,
                })
            }
        }
    }

    /// Takes the frame back out of `out` (its body did not encode).
    pub fn abandon(self, out: &mut BytesMut) {
        out.truncate(self.0);
    }
}

/// Appends `body` to `out` as one frame.
///
/// # Errors
/// [`FramingError::TooLarge`] when `body` is longer than `max_frame_bytes`; nothing is written.
pub fn put_frame(
    out: &mut BytesMut,
    body: &[u8],
    max_frame_bytes: usize,
) -> Result<(), FramingError> {
    let frame = FrameStart::begin(out);
    out.extend_from_slice(body);
    frame.end(out, max_frame_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_past_the_maximum_is_named_with_its_size() {
        let mut frames = Frames::new(16);
        let mut src = BytesMut::from(&[0, 0, 0, 3, b'a', b'b', b'c', 0, 0, 1, 0][..]);
        assert_eq!(&frames.decode(&mut src).unwrap().unwrap()[..], b"abc");
        match frames.decode(&mut src) {
            Err(FramingError::TooLarge { size: 256, max: 16 }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_stream_that_ends_mid_frame_is_an_io_error() {
        let mut frames = Frames::new(16);
        let mut src = BytesMut::from(&[0, 0, 0, 5, b'a'][..]);
        assert!(frames.decode(&mut src).unwrap().is_none());
        assert!(matches!(
            frames.decode_eof(&mut src),
            Err(FramingError::Io(_))
        ));
    }

    #[test]
    fn a_frame_is_written_in_place_and_taken_back_when_too_large() {
        let mut out = BytesMut::from(&b"before"[..]);
        put_frame(&mut out, b"abc", 3).unwrap();
        assert_eq!(&out[..], b"before\0\0\0\x03abc");
        assert!(matches!(
            put_frame(&mut out, b"abcd", 3),
            Err(FramingError::TooLarge { size: 4, max: 3 })
        ));
        assert_eq!(&out[..], b"before\0\0\0\x03abc");
        let frame = FrameStart::begin(&mut out);
        out.extend_from_slice(b"half");
        frame.abandon(&mut out);
        assert_eq!(&out[..], b"before\0\0\0\x03abc");
    }

    #[test]
    fn what_the_encoder_writes_the_decoder_reads() {
        let mut frames = Frames::new(8);
        let mut wire = BytesMut::new();
        frames
            .encode(Bytes::from_static(b"one"), &mut wire)
            .unwrap();
        frames.encode(Bytes::new(), &mut wire).unwrap();
        assert!(
            frames
                .encode(Bytes::from_static(b"nine byte"), &mut wire)
                .is_err()
        );
        assert_eq!(&frames.decode(&mut wire).unwrap().unwrap()[..], b"one");
        assert!(frames.decode(&mut wire).unwrap().unwrap().is_empty());
        assert!(frames.decode(&mut wire).unwrap().is_none());
    }
}
