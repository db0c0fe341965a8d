//! Which proxy listener stands for which upstream Kafka broker: the bootstrap listener for the
//! bootstrap broker, and one more, opened on first mention in an answer, for every other broker
//! the cluster names. The running proxy serves each new listener as it does the first.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A listener opened for an upstream broker, to be served by the running proxy.
pub(crate) type NewListener = (TcpListener, String);

/// Which listener stands for which upstream broker (Kafka only).
#[derive(Debug)]
pub(crate) struct Routes {
    /// Upstream `host:port` → the (host, port) clients are told instead.
    by_upstream: std::sync::Mutex<HashMap<String, (String, i32)>>,
    /// Where new listeners bind and the host they are advertised as; set when the proxy runs.
    bind: std::sync::Mutex<Option<(IpAddr, String)>>,
    pub(crate) opened: mpsc::UnboundedSender<NewListener>,
    pub(crate) to_serve: std::sync::Mutex<Option<mpsc::UnboundedReceiver<NewListener>>>,
}

impl Default for Routes {
    fn default() -> Self {
        let (opened, to_serve) = mpsc::unbounded_channel();
        Self {
            by_upstream: std::sync::Mutex::default(),
            bind: std::sync::Mutex::default(),
            opened,
            to_serve: std::sync::Mutex::new(Some(to_serve)),
        }
    }
}

pub(crate) fn locked<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Routes {
    /// The proxy listens on `local` for `upstream`: more listeners bind beside it.
    pub(crate) fn start(&self, local: SocketAddr, upstream: &str, advertise: Option<&str>) {
        let host = advertise.map_or_else(
            || {
                if local.ip().is_unspecified() {
                    "127.0.0.1".to_owned()
                } else {
                    local.ip().to_string()
                }
            },
            str::to_owned,
        );
        *locked(&self.bind) = Some((local.ip(), host.clone()));
        locked(&self.by_upstream).insert(upstream.to_owned(), (host, i32::from(local.port())));
    }

    /// The address clients are told for `upstream`, opening a listener for it if none exists.
    pub(crate) async fn route(&self, upstream: &str) -> std::io::Result<(String, i32)> {
        if let Some(route) = locked(&self.by_upstream).get(upstream) {
            return Ok(route.clone());
        }
        let bind = locked(&self.bind).clone();
        let Some((ip, host)) = bind else {
            return Err(std::io::Error::other("the proxy is not running"));
        };
        let listener = TcpListener::bind((ip, 0)).await?;
        let port = i32::from(listener.local_addr()?.port());
        let mut routes = locked(&self.by_upstream);
        if let Some(route) = routes.get(upstream) {
            return Ok(route.clone()); // another connection opened one meanwhile
        }
        routes.insert(upstream.to_owned(), (host.clone(), port));
        drop(routes);
        tracing::info!(upstream, listen = %format!("{host}:{port}"), "proxy listener opened for a broker");
        self.opened
            .send((listener, upstream.to_owned()))
            .map_err(|_| std::io::Error::other("the proxy has stopped"))?;
        Ok((host, port))
    }
}
