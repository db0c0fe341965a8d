//! Server timers, on tokio's paused clock so the bounds are checked exactly and without waiting:
//! the idle timeout closes a silent connection after one to two periods, never a busy one.
//! (The connection limit and the write timeout are in `hardening`.)

use anyhow::Result;
use minibroker_host::{Config, NetConfig};
use minibroker_protocol::{Request, Response};
use minibroker_tests::{RawConnection, TestBroker};
use std::time::Duration;
use tokio::time::Instant;

const IDLE: Duration = Duration::from_secs(4);

async fn broker_with_idle_timeout() -> Result<TestBroker> {
    let config = Config {
        net: NetConfig {
            idle_timeout_ms: IDLE.as_millis() as u64,
            ..NetConfig::default()
        },
        ..Config::default()
    };
    Ok(TestBroker::start(config).await?)
}

#[tokio::test(start_paused = true)]
async fn a_silent_connection_is_closed_after_one_to_two_idle_timeouts() -> Result<()> {
    let broker = broker_with_idle_timeout().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    assert!(matches!(
        conn.call(1, &Request::Metadata).await?,
        Response::Metadata(_)
    ));
    let served = Instant::now();
    let closed = conn.expect_closed().await?;
    let silent_for = served.elapsed();
    assert!(closed.is_empty());
    assert!(
        silent_for >= IDLE && silent_for <= 2 * IDLE,
        "closed after {silent_for:?}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_connection_in_use_is_never_idle() -> Result<()> {
    let broker = broker_with_idle_timeout().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let start = Instant::now();
    // A request every three quarters of the timeout, for five timeouts.
    for id in 0..7 {
        tokio::time::sleep(IDLE * 3 / 4).await;
        assert!(matches!(
            conn.call(id, &Request::Metadata).await?,
            Response::Metadata(_)
        ));
    }
    assert!(start.elapsed() >= 5 * IDLE);
    Ok(())
}
