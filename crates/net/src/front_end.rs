//! The seam between the shared connection machinery and a wire protocol.
//!
//! Every protocol minibroker speaks frames its messages the same way — a 4-byte big-endian length,
//! then the body — so one connection loop (limits, pipelining, idle and write timeouts, drain)
//! serves them all. A [`FrontEnd`] is what differs: it turns one request frame into the answer
//! frame(s), calling the broker core in between. This crate knows nothing of the broker: a front
//! end brings it.

use bytes::{Bytes, BytesMut};
use std::future::Future;
use std::net::SocketAddr;

use minibroker_framing::FramingError;

/// Who is at the other end of a connection, as the listener knows before the front end is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The peer's address.
    pub addr: SocketAddr,
    /// Whether the connection is a TLS session.
    pub tls: bool,
    /// The common name of the peer's verified TLS client certificate, if it sent one.
    pub certificate_name: Option<String>,
}

impl Peer {
    /// A peer at `addr` over plain TCP.
    #[must_use]
    pub fn plain(addr: SocketAddr) -> Self {
        Self {
            addr,
            tls: false,
            certificate_name: None,
        }
    }
}

/// Why what the answers acknowledge could not be stored ([`FrontEnd::store_answered`]): the
/// front end's own error, for the connection's log.
pub type NotStored = Box<dyn std::error::Error + Send + Sync>;

/// Whether the connection goes on after a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Read the next frame.
    Continue,
    /// Close the connection once what was appended is written (a request the protocol says to
    /// answer by closing, as Kafka does for an unsupported one).
    Close,
}

/// One connection's translator between a wire protocol and the broker core.
pub trait FrontEnd: Send + Sync + 'static {
    /// Serves one request frame (its body, without the length prefix), appending whole answer
    /// frames, length prefix included, to `out` (none for a request that gets no answer). It may
    /// wait (a fetch waiting for data); the connection's next request waits behind it, so answers
    /// stay in request order.
    fn answer(&mut self, frame: Bytes, out: &mut BytesMut) -> impl Future<Output = Next> + Send;

    /// Stores what the answers appended to `out` so far acknowledge: a produce to a durable
    /// partition may leave its batch in memory, or unsynced under the `always` policy, and the
    /// producer-state snapshot of a segment roll unwritten, until this returns (it commits the
    /// connection's `minibroker_broker::Unacknowledged`). A front end may also have left an
    /// answer out of `out` until what it says is known (a broker of a cluster's produce, whose
    /// offsets the cluster's commit gives): it puts it in its place here. The connection calls
    /// it before it writes answers to the peer and before it waits for more requests.
    ///
    /// # Errors
    /// A storage error: the answers must not be sent, and the connection closes without them.
    fn store_answered(
        &mut self,
        out: &mut BytesMut,
    ) -> impl Future<Output = Result<(), NotStored>> + Send {
        let _ = out;
        async { Ok(()) }
    }

    /// Whether the peer has authenticated, or needs not: a connection still unauthenticated
    /// `authentication_timeout_ms` after its accept is closed.
    fn authenticated(&self) -> bool {
        true
    }

    /// The frame stream broke (an oversize or truncated frame) and the connection will close:
    /// append any last words to `out`.
    fn framing_error(&mut self, error: &FramingError, out: &mut BytesMut);

    /// A connection over the `max_connections` limit is about to be closed unserved: append what
    /// to tell it, if the protocol has a way (Kafka's has none).
    fn refusal(max_connections: usize, out: &mut BytesMut)
    where
        Self: Sized,
    {
        let _ = (max_connections, out);
    }
}
