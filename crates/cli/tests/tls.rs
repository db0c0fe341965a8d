//! TLS and ACLs with the real clients (`tests/kafka/security.py`, kcat) against a real `serve`:
//! certificates from `minibroker certificates` (and, for the refusals, expired and misnamed ones
//! made here), users from `minibroker user add`, ACLs from `minibroker acl add`.
//!
//! Over SASL_SSL with SCRAM, confluent-kafka, kafka-python, aiokafka and kcat produce and
//! consume as an allowed user; a user the ACLs do not allow is refused with Kafka's codes (29 on
//! a produce, 31 on an idempotent InitProducerId, 30 on a group, 53 on a transactional id, 29 on
//! a hidden topic) and nothing it sent is stored; plaintext to the TLS port, an untrusted CA, an
//! expired certificate and a name the certificate does not hold are refused; over SSL a client
//! certificate is its principal.

mod support;

use minibroker_security::pki::{Authority, Role, Validity};
use std::path::Path;
use std::process::Command;
use support::{BIN, ServeProcess, kafka_script, kcat, serve_command, summary_of};

const PASSWORD: &str = "correct horse";

fn minibroker(args: &[&str]) {
    let output = Command::new(BIN).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "minibroker {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

/// Certificates, users alice (producer and consumer of `t-*`, group `secure`) and bob (Read on
/// `t-shared` only), and the ACLs, in `dir`.
fn prepare(dir: &Path) {
    minibroker(&[
        "certificates",
        "--out",
        &path(dir, "pki"),
        "--client",
        "carol",
    ]);
    let users = dir.join("users");
    support::add_user(&users, "alice", PASSWORD);
    support::add_user(&users, "bob", PASSWORD);
    let acls = path(dir, "acls");
    for args in [
        &[
            "--allow-principal",
            "User:alice",
            "--producer",
            "--idempotent",
            "--topic",
            "t-",
        ][..],
        &[
            "--allow-principal",
            "User:alice",
            "--consumer",
            "--topic",
            "t-",
            "--group",
            "secure",
        ],
        &[
            "--allow-principal",
            "User:bob",
            "--operation",
            "read",
            "--topic",
            "t-shared",
        ],
        &[
            "--allow-principal",
            "User:carol",
            "--producer",
            "--idempotent",
            "--topic",
            "t-",
        ],
        &[
            "--allow-principal",
            "User:carol",
            "--consumer",
            "--topic",
            "t-",
            "--group",
            "secure",
        ],
    ] {
        let mut all = vec!["acl", "add", "--acls-file", &acls];
        all.extend_from_slice(args);
        if args.contains(&"t-") {
            all.extend(["--resource-pattern-type", "prefixed"]);
        }
        minibroker(&all);
    }
}

/// A broker on `dir`'s users and ACLs with `protocol` and the certificate `cert`/`key` (in
/// `dir/pki` unless absolute), plus `extra` config lines.
fn broker(dir: &Path, protocol: &str, cert: &str, key: &str, extra: &str) -> ServeProcess {
    let config = dir.join(format!("{protocol}-{cert}.toml"));
    let pki = dir.join("pki");
    std::fs::write(
        &config,
        format!(
            "kafka_security_protocol = {protocol:?}\ntls_cert = {:?}\ntls_key = {:?}\nusers_file = {:?}\nacls_file = {:?}\nsasl_enabled_mechanisms = [\"SCRAM-SHA-256\", \"SCRAM-SHA-512\", \"PLAIN\"]\nauth_failure_delay_ms = 50\n{extra}",
            path(&pki, cert),
            path(&pki, key),
            path(dir, "users"),
            path(dir, "acls"),
        ),
    )
    .unwrap();
    let mut command = serve_command("127.0.0.1:0", "127.0.0.1:0");
    command.arg("--config").arg(&config);
    ServeProcess::spawn(&mut command)
}

fn security(tls: &[&str], args: &[&str]) -> serde_json::Value {
    let mut all = tls.to_vec();
    all.extend_from_slice(args);
    let output = kafka_script("security.py", &all).output().unwrap();
    summary_of(&output, &format!("security.py {all:?}"))
}

fn kcat_login(ca: &str, user: &str) -> Vec<String> {
    [
        "security.protocol=SASL_SSL",
        &format!("ssl.ca.location={ca}"),
        "sasl.mechanisms=SCRAM-SHA-512",
        &format!("sasl.username={user}"),
        &format!("sasl.password={PASSWORD}"),
    ]
    .iter()
    .flat_map(|setting| ["-X".to_owned(), (*setting).to_owned()])
    .collect()
}

#[test]
fn every_client_produces_and_consumes_over_sasl_ssl_as_an_allowed_user() {
    support::kafka_python();
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let broker = broker(dir.path(), "SASL_SSL", "server.pem", "server.key", "");
    let ca = path(&dir.path().join("pki"), "ca.pem");
    for (client, mechanism) in [
        ("confluent", "SCRAM-SHA-256"),
        ("kafka-python", "SCRAM-SHA-512"),
        ("aiokafka", "SCRAM-SHA-256"),
    ] {
        let topic = format!("t-{client}");
        let summary = security(
            &["--ca", &ca],
            &[
                "login",
                client,
                &broker.kafka_addr,
                &topic,
                mechanism,
                "alice",
                PASSWORD,
            ],
        );
        assert_eq!(summary["read"], 20, "{summary}");
    }
    let login = kcat_login(&ca, "alice");
    let mut produce = vec!["-b", &broker.kafka_addr, "-P", "-t", "t-kcat"];
    produce.extend(login.iter().map(String::as_str));
    let produced = kcat(&produce, "one\ntwo\n");
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let mut consume = vec![
        "-b",
        &broker.kafka_addr,
        "-C",
        "-t",
        "t-kcat",
        "-o",
        "beginning",
        "-e",
    ];
    consume.extend(login.iter().map(String::as_str));
    let consumed = kcat(&consume, "");
    assert_eq!(String::from_utf8_lossy(&consumed.stdout).lines().count(), 2);
    assert!(broker.logged().contains("authenticated"));
}

#[test]
fn what_the_acls_do_not_allow_is_refused_with_kafkas_codes_and_nothing_is_stored() {
    support::kafka_python();
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let broker = broker(dir.path(), "SASL_SSL", "server.pem", "server.key", "");
    let ca = path(&dir.path().join("pki"), "ca.pem");
    let login = kcat_login(&ca, "alice");
    let mut produce = vec!["-b", &broker.kafka_addr, "-P", "-t", "t-shared"];
    produce.extend(login.iter().map(String::as_str));
    assert!(kcat(&produce, "a\nb\n").status.success());
    for (kind, topic, code) in [
        ("produce", "t-shared", 29),
        ("idempotent", "t-shared", 31),
        ("group", "t-shared", 30),
        ("transaction", "t-shared", 53),
        ("hidden", "t-secret", 29),
    ] {
        let summary = security(
            &["--ca", &ca],
            &[
                "denied",
                kind,
                &broker.kafka_addr,
                topic,
                "SCRAM-SHA-512",
                "bob",
                PASSWORD,
            ],
        );
        assert_eq!(summary["code"], code, "{kind}: {summary}");
    }
    // Nothing bob sent was stored: alice, who may read every t- topic, finds no t-secret (bob
    // may not create it) and only her own two records in t-shared.
    let mut listing = vec!["-b", &broker.kafka_addr, "-L", "-J"];
    listing.extend(login.iter().map(String::as_str));
    let listed = String::from_utf8_lossy(&kcat(&listing, "").stdout).to_string();
    assert!(
        listed.contains("t-shared") && !listed.contains("t-secret"),
        "{listed}"
    );
    let mut consume = vec![
        "-b",
        &broker.kafka_addr,
        "-C",
        "-t",
        "t-shared",
        "-o",
        "beginning",
        "-e",
    ];
    consume.extend(login.iter().map(String::as_str));
    let read = String::from_utf8_lossy(&kcat(&consume, "").stdout).to_string();
    assert_eq!(read.lines().collect::<Vec<_>>(), ["a", "b"], "{read}");
    let logged = broker.logged();
    assert!(
        logged.contains("principal=User:bob operation=WRITE resource=TOPIC t-shared"),
        "{logged}"
    );
    assert!(logged.contains("denied"), "{logged}");
}

#[test]
fn plaintext_an_untrusted_ca_an_expired_certificate_and_a_wrong_name_are_refused() {
    support::kafka_python();
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let pki = dir.path().join("pki");
    // Certificates the clients must refuse: from a CA of their own, expired or for another name.
    let stranger = Authority::new("a stranger's CA", Validity::Years(1)).unwrap();
    std::fs::write(pki.join("stranger.pem"), stranger.certificate_pem()).unwrap();
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    let expired = stranger
        .issue(Role::Server, "localhost", &names, Validity::Expired)
        .unwrap();
    let misnamed = stranger
        .issue(
            Role::Server,
            "elsewhere",
            &["elsewhere.test".to_owned()],
            Validity::Years(1),
        )
        .unwrap();
    for (name, issued) in [("expired", &expired), ("misnamed", &misnamed)] {
        std::fs::write(pki.join(format!("{name}.pem")), &issued.certificate_pem).unwrap();
        std::fs::write(pki.join(format!("{name}.key")), &issued.key_pem).unwrap();
    }
    let good = broker(dir.path(), "SASL_SSL", "server.pem", "server.key", "");
    let expired_broker = broker(dir.path(), "SASL_SSL", "expired.pem", "expired.key", "");
    let misnamed_broker = broker(dir.path(), "SASL_SSL", "misnamed.pem", "misnamed.key", "");
    let ca = path(&pki, "ca.pem");
    let stranger_ca = path(&pki, "stranger.pem");
    let refused = |tls: &[&str], addr: &str| {
        let summary = security(
            tls,
            &[
                "refused",
                "confluent",
                addr,
                "SCRAM-SHA-256",
                "alice",
                PASSWORD,
            ],
        );
        assert!(!summary["error"].is_null(), "{tls:?}: {summary}");
    };
    // SASL_PLAINTEXT to the TLS port; a CA that did not sign the broker's certificate.
    refused(&[], &good.kafka_addr);
    refused(&["--ca", &stranger_ca], &good.kafka_addr);
    // Trusting the stranger's CA, its expired certificate and its certificate for another name
    // are still refused.
    refused(&["--ca", &stranger_ca], &expired_broker.kafka_addr);
    refused(&["--ca", &stranger_ca], &misnamed_broker.kafka_addr);
    // The same client with the right CA logs in: the refusals above were the certificates'.
    let summary = security(
        &["--ca", &ca],
        &[
            "login",
            "confluent",
            &good.kafka_addr,
            "t-ok",
            "SCRAM-SHA-256",
            "alice",
            PASSWORD,
        ],
    );
    assert_eq!(summary["read"], 20, "{summary}");
    assert!(good.logged().contains("TLS handshake failed"));
    assert!(!expired_broker.logged().contains("authenticated"));
    assert!(!misnamed_broker.logged().contains("authenticated"));
}

#[test]
fn over_ssl_a_client_certificate_is_its_principal() {
    support::kafka_python();
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let pki = dir.path().join("pki");
    let extra = format!(
        "tls_client_auth = \"requested\"\ntls_client_ca = {:?}\n",
        path(&pki, "ca.pem")
    );
    let broker = broker(dir.path(), "SSL", "server.pem", "server.key", &extra);
    let ca = path(&pki, "ca.pem");
    let carol = [
        "--ca",
        &ca,
        "--cert",
        &path(&pki, "client-carol.pem"),
        "--key",
        &path(&pki, "client-carol.key"),
    ];
    let summary = security(
        &carol,
        &[
            "login",
            "confluent",
            &broker.kafka_addr,
            "t-carol",
            "-",
            "carol",
            "-",
        ],
    );
    assert_eq!(summary["read"], 20, "{summary}");
    // Without a certificate the client is User:ANONYMOUS, whom no ACL lets see carol's topic.
    let anonymous = security(
        &["--ca", &ca],
        &[
            "denied",
            "hidden",
            &broker.kafka_addr,
            "t-carol",
            "-",
            "-",
            "-",
        ],
    );
    assert_eq!(anonymous["code"], 29, "{anonymous}");
    let logged = broker.logged();
    assert!(logged.contains("principal=User:ANONYMOUS"), "{logged}");
}

#[test]
fn the_native_commands_speak_tls_and_log_in_with_the_same_users_and_acls() {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let broker = broker(
        dir.path(),
        "SASL_SSL",
        "server.pem",
        "server.key",
        "listen_security_protocol = \"SASL_SSL\"\n",
    );
    let ca = path(&dir.path().join("pki"), "ca.pem");
    std::fs::write(dir.path().join("password"), format!("{PASSWORD}\n")).unwrap();
    let password = path(dir.path(), "password");
    let login = |user: &'static str| {
        vec![
            "--tls-ca".to_owned(),
            ca.clone(),
            "--tls-server-name".to_owned(),
            "localhost".to_owned(),
            "--login-user".to_owned(),
            user.to_owned(),
            "--login-password-file".to_owned(),
            password.clone(),
        ]
    };
    let run = |args: &[&str], login: &[String], stdin: &str| {
        let all: Vec<String> = args
            .iter()
            .map(|a| (*a).to_owned())
            .chain(login.iter().cloned())
            .collect();
        support::run_with_stdin(BIN, &all, stdin)
    };
    let produced = run(
        &["produce", "--broker", &broker.addr, "--topic", "t-native"],
        &login("alice"),
        "one\ntwo\n",
    );
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let consume = [
        "consume",
        "--broker",
        &broker.addr,
        "--topic",
        "t-native",
        "--partition",
        "0",
    ];
    let consumed = run(&consume, &login("alice"), "");
    assert_eq!(String::from_utf8_lossy(&consumed.stdout).lines().count(), 2);
    // Bob may read t-shared only; without a login nothing is served.
    let refused = run(&consume, &login("bob"), "");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("NOT_AUTHORIZED"));
    let anonymous = run(&consume, &["--tls-ca".to_owned(), ca.clone()], "");
    assert!(String::from_utf8_lossy(&anonymous.stderr).contains("AUTHENTICATION_REQUIRED"));
    let plaintext = run(&consume, &[], "");
    assert!(
        String::from_utf8_lossy(&plaintext.stderr).contains("speaks TLS"),
        "{}",
        String::from_utf8_lossy(&plaintext.stderr)
    );
}
