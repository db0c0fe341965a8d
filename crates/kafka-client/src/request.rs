//! One Kafka request frame: the 4-byte length, the request header, then the body, each encoded
//! by `kafka-protocol`. [`crate::KafkaConnection`] sends its requests framed by it; the benchmark
//! and the fuzzers frame theirs with it too, so framing is written once.

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};
use minibroker_framing::{FrameStart, MAX_LENGTH};

/// A request that cannot be framed: the header or the body does not encode at its version, or
/// the frame is longer than its length field can say.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the Kafka request: {0}")]
pub struct EncodeError(#[source] Box<dyn std::error::Error + Send + Sync>);

/// Appends the frame of `request`, sent as `api` at `version` with `correlation_id` (and
/// `client_id`, if any), to `out`. On an error `out` is left as it was.
///
/// # Errors
/// [`EncodeError`] if the header or the body does not encode at `version`, or the frame is
/// longer than its length field can say.
pub fn encode_request<R: Encodable>(
    out: &mut BytesMut,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: Option<&'static str>,
    request: &R,
) -> Result<(), EncodeError> {
    let frame = FrameStart::begin(out);
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(client_id.map(StrBytes::from_static_str));
    let encoded = header
        .encode(out, api.request_header_version(version))
        .and_then(|()| request.encode(out, version));
    if let Err(error) = encoded {
        frame.abandon(out);
        return Err(EncodeError(error.into()));
    }
    frame
        .end(out, MAX_LENGTH)
        .map_err(|error| EncodeError(Box::new(error)))
}
