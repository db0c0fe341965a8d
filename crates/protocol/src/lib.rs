//! minibroker's native wire protocol.
//!
//! A frame is a 4-byte big-endian length followed by a body: one version byte, a 4-byte
//! big-endian correlation id, and a postcard-encoded [`Request`] or [`Response`]. The fixed-width
//! header comes first so that a body which cannot be decoded can still be answered with an error
//! carrying the right correlation id, and the connection stays usable.
//!
//! This crate does no I/O: [`FrameCodec`] plugs into `tokio_util::codec` and enforces the maximum
//! frame length *before* allocating for a frame.
//!
//! # Layout
//! - [`message`] — the request and response types (serde).
//! - [`codec`] — framing, the header, and the encode/decode functions; the only place that knows
//!   the body encoding is postcard.
//!
//! # Example
//! ```
//! use minibroker_protocol::{codec, Request, FetchRequest};
//!
//! let request = Request::Fetch(FetchRequest { topic: "orders", partition: 0, offset: 0, max_bytes: 1024 });
//! let body = codec::encode_body(7, &request)?;
//! let (correlation_id, decoded) = codec::decode_request(&body).map_err(|e| e.error)?;
//! assert_eq!((correlation_id, decoded), (7, request));
//! # Ok::<(), minibroker_protocol::ProtocolError>(())
//! ```

pub mod codec;
mod error;
pub mod message;

pub use codec::{DEFAULT_MAX_FRAME_BYTES, FrameCodec, VERSION};
pub use error::{BadFrame, ProtocolError};
pub use message::*;
/// Re-exported: produce requests carry records as `&serde_bytes::Bytes`.
pub use serde_bytes;
