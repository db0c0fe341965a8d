//! Why a frame could not be encoded or decoded.

use thiserror::Error;

/// A frame that could not be encoded or decoded.
#[derive(Debug, Error)]
pub enum ProtocolError {
    /// The body is shorter than the 5-byte header.
    #[error("frame body is {0} bytes, shorter than the 5-byte header")]
    TruncatedHeader(usize),
    /// The version byte is not one this build speaks.
    #[error("unsupported protocol version {found} (this broker speaks version {supported})")]
    UnsupportedVersion {
        /// The version byte received.
        found: u8,
        /// The version this build speaks.
        supported: u8,
    },
    /// The body is not a valid encoding of any message (an unknown request kind lands here too).
    #[error("malformed message body: {0}")]
    Malformed(#[from] postcard::Error),
    /// An outgoing frame would exceed the maximum frame length.
    #[error("frame of {size} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The frame's size.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// The transport failed (only surfaces through [`crate::FrameCodec`]).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<minibroker_framing::FramingError> for ProtocolError {
    fn from(error: minibroker_framing::FramingError) -> Self {
        match error {
            minibroker_framing::FramingError::TooLarge { size, max } => {
                Self::FrameTooLarge { size, max }
            }
            minibroker_framing::FramingError::Io(error) => Self::Io(error),
        }
    }
}

/// A frame whose body could not be decoded, with the correlation id when the header was intact,
/// so the peer can be told which request failed.
#[derive(Debug, Error)]
#[error("{error}")]
pub struct BadFrame {
    /// The correlation id read from the header, if the header was there.
    pub correlation_id: Option<u32>,
    /// What was wrong.
    #[source]
    pub error: ProtocolError,
}
