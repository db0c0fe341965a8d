//! The metrics listener's own limits: half-sent requests hold no more than its few connections,
//! each for no longer than its header timeout, and a scrape gets through once they are gone.

use minibroker_host::Config;
use minibroker_host::Host;
use minibroker_metrics::MetricsLimits;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HALF_SENT: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: broker\r\nX-Slow: ";

/// Reads until the server closes the connection; `None` if it does not within `wait`.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
    let mut answer = Vec::new();
    tokio::time::timeout(wait, stream.read_to_end(&mut answer))
        .await
        .ok()
        .map(|_| answer)
}

#[tokio::test]
async fn half_sent_requests_cannot_hold_the_listener_or_the_descriptors() {
    // Enough descriptors for both ends of every connection here.
    minibroker_broker::descriptors::raise_limit();
    let host = Host::start(&Config::default()).expect("a broker");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("an address");
    let limits = MetricsLimits {
        max_connections: 8,
        header_timeout: Duration::from_millis(300),
        connection_lifetime: Duration::from_secs(60),
    };
    tokio::spawn(minibroker_metrics::serve_with(
        listener,
        Arc::clone(host.node()),
        limits,
        std::future::pending(),
    ));
    // 1,100 half-sent requests took every descriptor of a broker under a limit of 1,024.
    let mut slow = Vec::new();
    for _ in 0..1_100 {
        let mut stream = TcpStream::connect(addr).await.expect("connects");
        // A connection closed at once may refuse the write: that is the point.
        let _ = stream.write_all(HALF_SENT).await;
        slow.push(stream);
    }
    // Every one is closed by the listener: at once past its cap, after the header timeout for
    // the few it took, and none is ever answered.
    for stream in &mut slow {
        let answer = closed_within(stream, Duration::from_secs(5))
            .await
            .expect("a half-sent request holds its connection");
        assert!(
            !answer.starts_with(b"HTTP/1.1 200"),
            "a half-sent request was answered"
        );
    }
    // And a scrape is served.
    let mut scrape = TcpStream::connect(addr).await.expect("connects");
    scrape
        .write_all(b"GET /health HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n")
        .await
        .expect("writes");
    let answer = closed_within(&mut scrape, Duration::from_secs(5))
        .await
        .expect("an answer");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}
