//! Server limits: connection cap, idle timeout, and isolation of a misbehaving client.

use anyhow::Result;
use minibroker_protocol::{Request, Response};
use minibroker_server::Config;
use minibroker_tests::{RawConnection, TestBroker};
use std::time::Duration;

#[tokio::test]
async fn connections_beyond_the_limit_wait_for_a_free_slot() -> Result<()> {
    let config = Config {
        max_connections: 1,
        ..Config::default()
    };
    let broker = TestBroker::with_config(config).await?;
    let mut first = RawConnection::connect(broker.addr).await?;
    assert!(matches!(
        first.call(1, &Request::Metadata).await?,
        Response::Metadata(_)
    ));
    // The second connection is accepted by the kernel but not served while the first is open.
    let mut second = RawConnection::connect(broker.addr).await?;
    second.send(2, &Request::Metadata).await?;
    let waited = tokio::time::timeout(Duration::from_millis(300), second.receive()).await;
    assert!(waited.is_err(), "served beyond max_connections");
    drop(first);
    let (id, response) = second.receive().await?;
    assert_eq!(id, 2);
    assert!(matches!(response, Response::Metadata(_)));
    Ok(())
}

#[tokio::test]
async fn idle_connections_are_closed() -> Result<()> {
    let config = Config {
        idle_timeout_ms: 100,
        ..Config::default()
    };
    let broker = TestBroker::with_config(config).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    assert!(matches!(
        conn.call(1, &Request::Metadata).await?,
        Response::Metadata(_)
    ));
    let closed = conn.expect_closed().await?;
    assert!(closed.is_empty());
    Ok(())
}
