//! SASL on the Kafka listener, on the wire: before a login only ApiVersions, SaslHandshake and
//! SaslAuthenticate are served (anything else closes the connection and is not acted on); an
//! unknown mechanism is answered with the ones offered; SaslAuthenticate before a handshake is
//! an illegal state; a PLAIN login lets the connection through; a PLAINTEXT listener refuses a
//! handshake.

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_host::{Config, SecurityProtocol};
use minibroker_security::{ScramCredential, ScramMechanism, Users};
use minibroker_tests::{KafkaConnection, kafka_connection};

use crate::kafka::kafka;

pub(crate) fn secured(dir: &std::path::Path) -> Config {
    let mut users = Users::default();
    let mechanism = ScramMechanism::Sha256;
    users.set(
        "alice",
        mechanism,
        ScramCredential::generate(mechanism, b"pw", 4096).unwrap(),
    );
    let path = dir.join("users");
    users.save(&path).unwrap();
    let mut config = Config::default();
    config.net.kafka_security_protocol = SecurityProtocol::SaslPlaintext;
    config.net.sasl_enabled_mechanisms = vec!["SCRAM-SHA-256".into(), "PLAIN".into()];
    config.net.users_file = Some(path);
    config.net.auth_failure_delay_ms = 1;
    config
}

pub(crate) async fn handshake(
    conn: &mut KafkaConnection,
    mechanism: &'static str,
) -> Result<SaslHandshakeResponse> {
    let request =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    Ok(conn.call(ApiKey::SaslHandshake, 1, &request).await?)
}

async fn authenticate(
    conn: &mut KafkaConnection,
    token: &'static [u8],
) -> Result<SaslAuthenticateResponse> {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(token));
    Ok(conn.call(ApiKey::SaslAuthenticate, 2, &request).await?)
}

/// A PLAIN login as `user` with `password`.
pub(crate) async fn authenticate_as(
    conn: &mut KafkaConnection,
    user: &str,
    password: &str,
) -> Result<SaslAuthenticateResponse> {
    let token = format!("\0{user}\0{password}");
    let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
    Ok(conn.call(ApiKey::SaslAuthenticate, 2, &request).await?)
}

fn metadata() -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(
                Some(kafka_protocol::messages::TopicName(
                    StrBytes::from_static_str("made"),
                )),
            ),
        ]))
        .with_allow_auto_topic_creation(true)
}

#[tokio::test]
async fn nothing_but_the_sasl_exchange_is_served_before_a_login() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, kafka_addr, mut conn) = kafka(secured(dir.path())).await?;
    // An unknown mechanism: refused, with the ones offered.
    let refused = handshake(&mut conn, "GSSAPI").await?;
    assert_eq!(
        refused.error_code,
        ResponseError::UnsupportedSaslMechanism.code()
    );
    let offered: Vec<&str> = refused.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(offered, ["SCRAM-SHA-256", "PLAIN"]);
    // Metadata before the login closes the connection, and creates nothing.
    let closed = conn
        .call::<_, MetadataResponse>(ApiKey::Metadata, 9, &metadata())
        .await;
    assert!(closed.is_err());
    assert!(broker.broker.metadata().is_empty());

    // SaslAuthenticate before a handshake: an illegal state.
    let mut conn = kafka_connection(kafka_addr.addr).await?;
    let early = authenticate(&mut conn, b"\0alice\0pw").await?;
    assert_eq!(early.error_code, ResponseError::IllegalSaslState.code());

    // A wrong PLAIN password: refused, and the connection closes.
    let mut conn = kafka_connection(kafka_addr.addr).await?;
    assert_eq!(handshake(&mut conn, "PLAIN").await?.error_code, 0);
    let wrong = authenticate(&mut conn, b"\0alice\0guess").await?;
    assert_eq!(
        wrong.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );
    assert!(
        conn.call::<_, MetadataResponse>(ApiKey::Metadata, 9, &metadata())
            .await
            .is_err()
    );

    // The right one lets the connection through.
    let mut conn = kafka_connection(kafka_addr.addr).await?;
    assert_eq!(handshake(&mut conn, "PLAIN").await?.error_code, 0);
    assert_eq!(authenticate(&mut conn, b"\0alice\0pw").await?.error_code, 0);
    let answer: MetadataResponse = conn.call(ApiKey::Metadata, 9, &metadata()).await?;
    assert_eq!(answer.topics[0].error_code, 0);
    // Counted for the metrics: the refused PLAIN login (the early SaslAuthenticate is an illegal
    // state, not a login) and the one that succeeded.
    let logins = broker.host.node().logins();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        (logins.succeeded.load(Relaxed), logins.failed.load(Relaxed)),
        (1, 1)
    );
    Ok(())
}

#[tokio::test]
async fn a_plaintext_listener_refuses_a_handshake() -> Result<()> {
    let (_broker, _kafka, mut conn) = kafka(Config::default()).await?;
    let answer = handshake(&mut conn, "PLAIN").await?;
    assert_eq!(answer.error_code, ResponseError::IllegalSaslState.code());
    Ok(())
}

#[tokio::test]
async fn the_users_file_is_read_again_when_it_changes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = secured(dir.path());
    let path = config.net.users_file.clone().unwrap();
    let (_broker, kafka_addr, _conn) = kafka(config).await?;
    let login = |token: &'static [u8]| async move {
        let mut conn = kafka_connection(kafka_addr.addr).await?;
        assert_eq!(handshake(&mut conn, "PLAIN").await?.error_code, 0);
        anyhow::Ok(authenticate(&mut conn, token).await?.error_code)
    };
    let failed = ResponseError::SaslAuthenticationFailed.code();
    assert_eq!(login(b"\0bob\0pw2").await?, failed);
    // Bob is added and alice removed, with the broker running.
    let mechanism = ScramMechanism::Sha512;
    let mut users = Users::default();
    users.set(
        "bob",
        mechanism,
        ScramCredential::generate(mechanism, b"pw2", 4096).unwrap(),
    );
    users.save(&path).unwrap();
    assert_eq!(login(b"\0bob\0pw2").await?, 0);
    assert_eq!(login(b"\0alice\0pw").await?, failed);
    // A file that no longer reads keeps the users it held.
    std::fs::write(&path, "bob SCRAM-SHA-512 damaged\n")?;
    assert_eq!(login(b"\0bob\0pw2").await?, 0);
    Ok(())
}

#[tokio::test]
async fn a_session_lifetime_asks_for_a_re_authentication_as_the_same_user() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut config = secured(dir.path());
    config.net.sasl_session_lifetime_ms = 400;
    let mut users = Users::load(config.net.users_file.as_ref().unwrap())?;
    let mechanism = ScramMechanism::Sha256;
    users.set(
        "bob",
        mechanism,
        ScramCredential::generate(mechanism, b"pw", 4096).unwrap(),
    );
    users.save(config.net.users_file.as_ref().unwrap())?;
    let (_broker, kafka_addr, _conn) = kafka(config).await?;
    let mut conn = kafka_connection(kafka_addr.addr).await?;
    assert_eq!(handshake(&mut conn, "PLAIN").await?.error_code, 0);
    let logged_in = authenticate_as(&mut conn, "alice", "pw").await?;
    assert_eq!(
        (logged_in.error_code, logged_in.session_lifetime_ms),
        (0, 400)
    );
    // Logged in again, as alice, before the lifetime ends: served on.
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    assert_eq!(handshake(&mut conn, "PLAIN").await?.error_code, 0);
    assert_eq!(
        authenticate_as(&mut conn, "alice", "pw").await?.error_code,
        0
    );
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    let answer: MetadataResponse = conn.call(ApiKey::Metadata, 9, &metadata()).await?;
    assert_eq!(answer.topics[0].error_code, 0);
    // Past the lifetime without a new login: closed at the next request.
    tokio::time::sleep(std::time::Duration::from_millis(450)).await;
    let closed = conn
        .call::<_, MetadataResponse>(ApiKey::Metadata, 9, &metadata())
        .await;
    assert!(closed.is_err());
    // A re-authentication as someone else is refused.
    let mut conn = kafka_connection(kafka_addr.addr).await?;
    assert_eq!(handshake(&mut conn, "PLAIN").await?.error_code, 0);
    assert_eq!(
        authenticate_as(&mut conn, "alice", "pw").await?.error_code,
        0
    );
    assert_eq!(handshake(&mut conn, "PLAIN").await?.error_code, 0);
    let other = authenticate_as(&mut conn, "bob", "pw").await?;
    assert_eq!(
        other.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );
    Ok(())
}

#[tokio::test]
async fn without_a_lifetime_a_logged_in_connection_cannot_log_in_again() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (_broker, kafka_addr, _conn) = kafka(secured(dir.path())).await?;
    let mut conn = kafka_connection(kafka_addr.addr).await?;
    assert_eq!(handshake(&mut conn, "PLAIN").await?.error_code, 0);
    let logged_in = authenticate_as(&mut conn, "alice", "pw").await?;
    assert_eq!(logged_in.session_lifetime_ms, 0);
    let again = handshake(&mut conn, "PLAIN").await?;
    assert_eq!(again.error_code, ResponseError::IllegalSaslState.code());
    Ok(())
}

#[tokio::test]
async fn after_a_version_0_handshake_the_tokens_come_bare() -> Result<()> {
    use bytes::{Buf, BytesMut};
    use kafka_protocol::protocol::Decodable;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn read_frame(stream: &mut tokio::net::TcpStream) -> Result<BytesMut> {
        let length = stream.read_u32().await?;
        let mut body = BytesMut::zeroed(length as usize);
        stream.read_exact(&mut body).await?;
        Ok(body)
    }
    let dir = tempfile::tempdir()?;
    let (_broker, kafka_addr, _conn) = kafka(secured(dir.path())).await?;
    let mut stream = tokio::net::TcpStream::connect(kafka_addr.addr).await?;
    let mut frame = BytesMut::new();
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    minibroker_kafka_client::encode_request(
        &mut frame,
        ApiKey::SaslHandshake,
        0,
        1,
        Some("t"),
        &handshake,
    )?;
    stream.write_all(&frame).await?;
    let mut answer = read_frame(&mut stream).await?;
    assert_eq!(answer.get_i32(), 1, "correlation id");
    assert_eq!(SaslHandshakeResponse::decode(&mut answer, 0)?.error_code, 0);
    // The PLAIN message, bare: answered by a bare empty token.
    let token = b"\0alice\0pw";
    stream.write_u32(token.len() as u32).await?;
    stream.write_all(token).await?;
    assert!(read_frame(&mut stream).await?.is_empty());
    // Logged in: Kafka requests are served.
    let mut frame = BytesMut::new();
    minibroker_kafka_client::encode_request(
        &mut frame,
        ApiKey::Metadata,
        1,
        2,
        Some("t"),
        &metadata(),
    )?;
    stream.write_all(&frame).await?;
    let mut answer = read_frame(&mut stream).await?;
    assert_eq!(answer.get_i32(), 2);
    assert_eq!(MetadataResponse::decode(&mut answer, 1)?.topics.len(), 1);
    Ok(())
}
