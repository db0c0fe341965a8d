//! minibroker's native front end: the native protocol (`minibroker_protocol`) served by the broker
//! core on the shared connection machinery of `minibroker_net`.
//!
//! # Layout
//! - [`NativeFrontEnd`] — one connection: decode, call the core, encode; every refusal mapped to
//!   its wire code once.
//! - [`serve`] — a native listener on a [`Host`]; [`EmbeddedBroker`] — a host with a native
//!   listener on a free loopback port, for the tests, `demo` and `bench`.

mod embedded;
mod front_end;

pub use embedded::EmbeddedBroker;
pub use front_end::NativeFrontEnd;

use minibroker_host::{Host, HostError};
use std::net::SocketAddr;
use tokio::net::TcpListener;

/// Serves the native protocol for `host` on `listener` until the host stops, in TLS sessions and
/// asking for a login when `listen_security_protocol` says so; returns the address it listens
/// on.
///
/// # Errors
/// [`HostError::Bind`] when the listener's address cannot be read; [`HostError::Start`] when
/// the certificate or key cannot be read.
pub fn serve(host: &Host, listener: TcpListener) -> Result<SocketAddr, HostError> {
    let max_frame_bytes = host.config().broker.max_frame_bytes;
    let net = &host.config().net;
    let login = net.listen_security_protocol.uses_sasl();
    let tls = minibroker_host::tls::listener_config(net, net.listen_security_protocol)
        .map_err(|error| minibroker_broker::ServerError::Config(error.to_string()))?;
    host.serve_with(listener, tls, move |node, peer| {
        NativeFrontEnd::new(node, max_frame_bytes, peer, login)
    })
}
