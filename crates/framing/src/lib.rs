//! The framing every protocol minibroker speaks shares: a 4-byte big-endian length, then the
//! body. Decoded by `tokio_util`'s `LengthDelimitedCodec`, which checks the length against the
//! maximum before any buffer grows for the frame; this crate only names the oversize case. The
//! host reads every connection's requests with it (`minibroker_net`), and the native codec its
//! clients' answers (`minibroker_protocol`).

use bytes::BytesMut;
use thiserror::Error;
use tokio_util::codec::{Decoder, LengthDelimitedCodec, LengthDelimitedCodecError};

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_LEN: usize = 4;

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

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FramingError> {
        self.lengths
            .decode_eof(src)
            .map_err(|error| self.name(src, error))
    }
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
}
