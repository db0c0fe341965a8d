//! Connection quotas and the authentication deadline: one address holds at most
//! `max_connections_per_ip`, one user at most `max_connections_per_principal` logged-in
//! connections, and a connection that has not logged in (or finished its TLS handshake) within
//! `authentication_timeout_ms` is closed — so no client can hold every slot.

use anyhow::Result;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use minibroker_host::{Config, SecurityProtocol};
use minibroker_security::pki::{Authority, Role, Validity};
use minibroker_tests::kafka_connection;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

use crate::kafka::kafka;
use crate::sasl::{authenticate_as, handshake, secured};

async fn served(conn: &mut minibroker_tests::KafkaConnection) -> bool {
    conn.call::<_, ApiVersionsResponse>(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await
        .is_ok()
}

#[tokio::test]
async fn one_address_holds_at_most_its_connections() -> Result<()> {
    let mut config = Config::default();
    config.net.max_connections_per_ip = Some(2);
    let (broker, kafka_addr, mut first) = kafka(config).await?;
    let mut second = kafka_connection(kafka_addr.addr).await?;
    assert!(served(&mut first).await && served(&mut second).await);
    let mut third = kafka_connection(kafka_addr.addr).await?;
    assert!(
        !served(&mut third).await,
        "a third connection from 127.0.0.1"
    );
    drop(first);
    // The slot comes back once the broker has seen the close.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = kafka_connection(kafka_addr.addr).await?;
        if served(&mut again).await {
            break;
        }
        assert!(Instant::now() < deadline, "the freed slot never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(broker.host.node().connection_counts().refused >= 1);
    Ok(())
}

#[tokio::test]
async fn one_user_holds_at_most_its_logged_in_connections() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut config = secured(dir.path());
    config.net.max_connections_per_principal = Some(1);
    let (_broker, kafka_addr, _conn) = kafka(config).await?;
    let mut first = kafka_connection(kafka_addr.addr).await?;
    assert_eq!(handshake(&mut first, "PLAIN").await?.error_code, 0);
    assert_eq!(
        authenticate_as(&mut first, "alice", "pw").await?.error_code,
        0
    );
    let mut second = kafka_connection(kafka_addr.addr).await?;
    assert_eq!(handshake(&mut second, "PLAIN").await?.error_code, 0);
    let refused = authenticate_as(&mut second, "alice", "pw").await?;
    assert_eq!(
        refused.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = kafka_connection(kafka_addr.addr).await?;
        assert_eq!(handshake(&mut again, "PLAIN").await?.error_code, 0);
        if authenticate_as(&mut again, "alice", "pw").await?.error_code == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the freed login slot never came back"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_connection_that_does_not_log_in_in_time_is_closed() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut config = secured(dir.path());
    config.net.authentication_timeout_ms = 300;
    let (_broker, kafka_addr, mut silent) = kafka(config).await?;
    // ApiVersions is served before a login; it does not stop the clock.
    assert!(served(&mut silent).await);
    let started = Instant::now();
    let closed = silent
        .receive::<ApiVersionsResponse>(ApiKey::ApiVersions, 3)
        .await?;
    assert!(closed.is_none());
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
    // One that logs in stays.
    let mut logged_in = kafka_connection(kafka_addr.addr).await?;
    assert_eq!(handshake(&mut logged_in, "PLAIN").await?.error_code, 0);
    assert_eq!(
        authenticate_as(&mut logged_in, "alice", "pw")
            .await?
            .error_code,
        0
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(served(&mut logged_in).await);
    Ok(())
}

#[tokio::test]
async fn a_tls_handshake_that_never_comes_is_closed_in_time() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let authority = Authority::new("test CA", Validity::Years(1))?;
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    let server = authority.issue(Role::Server, "localhost", &names, Validity::Years(1))?;
    std::fs::write(dir.path().join("server.pem"), &server.certificate_pem)?;
    std::fs::write(dir.path().join("server.key"), &server.key_pem)?;
    let mut config = Config::default();
    config.net.kafka_security_protocol = SecurityProtocol::Ssl;
    config.net.tls_cert = Some(dir.path().join("server.pem"));
    config.net.tls_key = Some(dir.path().join("server.key"));
    config.net.authentication_timeout_ms = 300;
    let (_broker, kafka_addr, _conn) = kafka(config).await?;
    let mut raw = tokio::net::TcpStream::connect(kafka_addr.addr).await?;
    let started = Instant::now();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut byte)).await??;
    assert_eq!(read, 0, "closed without a byte");
    assert!(started.elapsed() >= Duration::from_millis(250));
    // Plaintext Kafka to the TLS port gets no Kafka answer.
    let mut plaintext = kafka_connection(kafka_addr.addr).await?;
    assert!(!served(&mut plaintext).await);
    Ok(())
}
