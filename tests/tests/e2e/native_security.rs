//! Security on the native listener (`listen_security_protocol = "SASL_SSL"`): TLS with the
//! broker's certificate, the same SASL logins and users as the Kafka listener, and the same
//! ACLs — nothing before a login, a wrong password refused, each refusal NOT_AUTHORIZED with
//! nothing stored, topics hidden, and another user's producer id refused.

use anyhow::Result;
use minibroker_client::{
    Client, ClientConfig, ClientError, ClientTls, ConnectionEnd, Credentials, LoginMechanism,
};
use minibroker_host::{Config, SecurityProtocol};
use minibroker_protocol::{ErrorCode, Outcome};
use minibroker_security::pki::{Authority, Role, Validity};
use minibroker_security::{ScramCredential, ScramMechanism, Users};
use minibroker_tests::{TestBroker, batch};
use std::path::Path;

const ACLS: &str = "User:alice ALLOW ALL TOPIC LITERAL * *\n\
     User:alice ALLOW IDEMPOTENT_WRITE CLUSTER LITERAL kafka-cluster *\n\
     User:mallory ALLOW WRITE TOPIC LITERAL shared *\n\
     User:bob ALLOW READ TOPIC LITERAL shared *\n";

/// A broker whose native listener asks for TLS and a login, with users alice, bob and mallory
/// (password `pw`) and the ACLs above; and the CA its clients trust (PEM).
fn secured(dir: &Path) -> Result<(Config, String)> {
    let authority = Authority::new("test CA", Validity::Years(1))?;
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    let server = authority.issue(Role::Server, "localhost", &names, Validity::Years(1))?;
    std::fs::write(dir.join("server.pem"), &server.certificate_pem)?;
    std::fs::write(dir.join("server.key"), &server.key_pem)?;
    let mut users = Users::default();
    for name in ["alice", "bob", "mallory"] {
        for mechanism in ScramMechanism::ALL {
            users.set(
                name,
                mechanism,
                ScramCredential::generate(mechanism, b"pw", 4096)?,
            );
        }
    }
    users.save(&dir.join("users"))?;
    std::fs::write(dir.join("acls"), ACLS)?;
    let mut config = Config::default();
    config.net.listen_security_protocol = SecurityProtocol::SaslSsl;
    config.net.sasl_enabled_mechanisms = vec![
        "SCRAM-SHA-256".into(),
        "SCRAM-SHA-512".into(),
        "PLAIN".into(),
    ];
    config.net.tls_cert = Some(dir.join("server.pem"));
    config.net.tls_key = Some(dir.join("server.key"));
    config.net.users_file = Some(dir.join("users"));
    config.net.acls_file = Some(dir.join("acls"));
    config.net.auth_failure_delay_ms = 1;
    Ok((config, authority.certificate_pem()))
}

fn client_config(ca: &str, login: Option<(&str, &str, LoginMechanism)>) -> Result<ClientConfig> {
    Ok(ClientConfig {
        tls: Some(ClientTls {
            config: minibroker_host::tls::client_config_from_pem(ca)?,
            server_name: "localhost".try_into()?,
        }),
        login: login.map(|(user, password, mechanism)| Credentials {
            mechanism,
            user: user.into(),
            password: password.as_bytes().to_vec(),
        }),
        ..ClientConfig::default()
    })
}

fn code(error: &ClientError) -> Option<ErrorCode> {
    match error {
        ClientError::Broker(response) => Some(response.code),
        _ => None,
    }
}

const SCRAM: LoginMechanism = LoginMechanism::Scram(ScramMechanism::Sha512);

#[tokio::test]
async fn the_native_listener_asks_for_tls_a_login_and_what_the_acls_allow() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (config, ca) = secured(dir.path())?;
    let broker = TestBroker::start(config).await?;
    let addr = broker.address();

    // Each mechanism logs in; alice writes with an id issued to her.
    for mechanism in [
        LoginMechanism::Scram(ScramMechanism::Sha256),
        SCRAM,
        LoginMechanism::Plain,
    ] {
        let alice =
            Client::connect(&addr, client_config(&ca, Some(("alice", "pw", mechanism)))?).await?;
        alice.metadata().await?;
    }
    let alice = Client::connect(&addr, client_config(&ca, Some(("alice", "pw", SCRAM)))?).await?;
    let issued = alice.init_producer(None).await?;
    let produced = alice
        .produce("shared", 0, &batch(issued.producer_id, 0, 0, &[b"alice's"]))
        .await?;
    assert_eq!(produced.outcome, Outcome::Accepted);

    // Without a login: refused, and the connection closes.
    let anonymous = Client::connect(&addr, client_config(&ca, None)?).await?;
    let error = anonymous.metadata().await.unwrap_err();
    assert_eq!(
        code(&error),
        Some(ErrorCode::AuthenticationRequired),
        "{error}"
    );
    // A wrong password: refused at the login.
    let wrong = Client::connect(&addr, client_config(&ca, Some(("alice", "guess", SCRAM)))?).await;
    assert_eq!(
        code(&wrong.unwrap_err()),
        Some(ErrorCode::AuthenticationFailed)
    );
    // Plaintext to the TLS port: told so.
    let plain = Client::connect(&addr, ClientConfig::default()).await?;
    match plain.metadata().await.unwrap_err() {
        ClientError::ConnectionClosed(end) => {
            assert!(matches!(*end, ConnectionEnd::TlsSpoken), "{end}");
        }
        other => panic!("{other}"),
    }

    // Bob may read `shared` only: his write, his producer id and other topics are refused.
    let bob = Client::connect(&addr, client_config(&ca, Some(("bob", "pw", SCRAM)))?).await?;
    let topics: Vec<String> = bob
        .metadata()
        .await?
        .topics
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(topics, ["shared"]);
    let denied = bob
        .produce("shared", 0, &batch(-1, -1, -1, &[b"bob's"]))
        .await
        .unwrap_err();
    assert_eq!(code(&denied), Some(ErrorCode::NotAuthorized), "{denied}");
    assert!(
        denied
            .to_string()
            .contains("User:bob may not WRITE TOPIC shared"),
        "{denied}"
    );
    assert_eq!(
        code(&bob.init_producer(None).await.unwrap_err()),
        Some(ErrorCode::NotAuthorized)
    );
    let read = bob.fetch("shared", 0, 0, 1 << 20).await?;
    assert_eq!(read.batches.len(), 1);
    // Reading a topic is not reading or changing its settings.
    let retention = minibroker_protocol::TopicSetting {
        name: "retention.ms",
        value: "1",
    };
    let change = [minibroker_protocol::TopicConfigChange::Set(retention)];
    for refused in [
        bob.describe_topic_configs("shared").await.map(|_| ()),
        bob.alter_topic_configs("shared", &change).await,
        bob.create_topic_with("bobs", 1, &[retention]).await,
    ] {
        assert_eq!(code(&refused.unwrap_err()), Some(ErrorCode::NotAuthorized));
    }
    assert_eq!(
        alice.describe_topic_configs("shared").await?.configs[0].value,
        "-1"
    );

    // Mallory may write `shared`, but not as alice's producer, nor fence it.
    let mallory =
        Client::connect(&addr, client_config(&ca, Some(("mallory", "pw", SCRAM)))?).await?;
    for (epoch, sequence) in [(0, 1), (3, 0)] {
        let forged = batch(issued.producer_id, epoch, sequence, &[b"forged"]);
        let refused = mallory.produce("shared", 0, &forged).await.unwrap_err();
        assert_eq!(code(&refused), Some(ErrorCode::NotAuthorized), "{refused}");
    }
    let own = mallory.init_producer(Some(issued.producer_id)).await?;
    assert_ne!(
        own.producer_id, issued.producer_id,
        "a bump of another's id is a new id"
    );
    // Alice goes on unfenced; only her two batches and none of the others' are stored.
    let next = alice
        .produce(
            "shared",
            0,
            &batch(issued.producer_id, 0, 1, &[b"alice's again"]),
        )
        .await?;
    assert_eq!(next.outcome, Outcome::Accepted);
    assert_eq!(broker.broker.offsets("shared", 0)?, (0, 2));
    Ok(())
}
