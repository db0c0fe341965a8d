//! SASL logins with the real clients (`tests/kafka/security.py`, kcat) against a real `serve`
//! with `kafka_security_protocol = "SASL_PLAINTEXT"`: confluent-kafka, kafka-python and aiokafka
//! log in with SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN and produce and consume; kcat (Debian's,
//! whose librdkafka repeats its SCRAM nonce) does too; a wrong password and an unknown user are
//! refused by each client, and a client that does not log in is not served.

mod support;

use std::path::Path;

use support::{ServeProcess, kafka_script, kcat, serve_command, summary_of};

const PASSWORD: &str = "correct horse";

/// A broker asking for SASL logins, offering all three mechanisms, with user alice.
fn secured(dir: &Path) -> ServeProcess {
    secured_with(dir, "")
}

/// As [`secured`], with `extra` config lines.
fn secured_with(dir: &Path, extra: &str) -> ServeProcess {
    let users = dir.join("users");
    support::add_user(&users, "alice", PASSWORD);
    let config = dir.join("secured.toml");
    std::fs::write(
        &config,
        format!(
            "kafka_security_protocol = \"SASL_PLAINTEXT\"\nsasl_enabled_mechanisms = [\"SCRAM-SHA-256\", \"SCRAM-SHA-512\", \"PLAIN\"]\nusers_file = {:?}\nauth_failure_delay_ms = 50\n{extra}",
            users.display().to_string()
        ),
    )
    .unwrap();
    let mut command = serve_command("127.0.0.1:0", "127.0.0.1:0");
    command.arg("--config").arg(&config);
    ServeProcess::spawn(&mut command)
}

fn security(args: &[&str]) -> serde_json::Value {
    let output = kafka_script("security.py", args).output().unwrap();
    summary_of(&output, &format!("security.py {args:?}"))
}

#[test]
fn each_python_client_logs_in_with_each_mechanism_and_produces_and_consumes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = secured(dir.path());
    for client in ["confluent", "kafka-python", "aiokafka"] {
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] {
            let topic = format!("t-{client}-{mechanism}");
            let summary = security(&[
                "login",
                client,
                &broker.kafka_addr,
                &topic,
                mechanism,
                "alice",
                PASSWORD,
            ]);
            assert_eq!(summary["read"], 20, "{summary}");
        }
    }
    let logged = broker.logged();
    assert!(logged.contains("authenticated"), "{logged}");
}

#[test]
fn a_wrong_password_and_an_unknown_user_are_refused_by_each_client() {
    let dir = tempfile::tempdir().unwrap();
    let broker = secured(dir.path());
    for (client, refusals) in [
        (
            "confluent",
            [
                ("SCRAM-SHA-256", "alice", "wrong"),
                ("SCRAM-SHA-512", "mallory", PASSWORD),
            ],
        ),
        (
            "kafka-python",
            [
                ("SCRAM-SHA-512", "alice", "wrong"),
                ("PLAIN", "mallory", PASSWORD),
            ],
        ),
        (
            "aiokafka",
            [
                ("PLAIN", "alice", "wrong"),
                ("SCRAM-SHA-256", "mallory", PASSWORD),
            ],
        ),
    ] {
        for (mechanism, user, password) in refusals {
            let summary = security(&[
                "refused",
                client,
                &broker.kafka_addr,
                mechanism,
                user,
                password,
            ]);
            assert!(!summary["error"].is_null(), "{summary}");
        }
    }
    let logged = broker.logged();
    assert!(logged.contains("a SCRAM login failed"), "{logged}");
    assert!(logged.contains("a PLAIN login failed"), "{logged}");
    assert!(!logged.contains("authenticated"), "{logged}");
}

#[test]
fn kcat_logs_in_with_scram_and_plain_and_a_client_that_does_not_is_not_served() {
    // kcat's librdkafka comes from scripts/kafka-clients, as for the other kcat tests.
    support::kafka_python();
    let dir = tempfile::tempdir().unwrap();
    let broker = secured(dir.path());
    let login = |mechanism: &str, password: &str| {
        vec![
            "-X".to_owned(),
            "security.protocol=SASL_PLAINTEXT".to_owned(),
            "-X".to_owned(),
            format!("sasl.mechanisms={mechanism}"),
            "-X".to_owned(),
            "sasl.username=alice".to_owned(),
            "-X".to_owned(),
            format!("sasl.password={password}"),
        ]
    };
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] {
        let mut args = vec!["-b", &broker.kafka_addr, "-P", "-t", "kc"];
        let secured = login(mechanism, PASSWORD);
        args.extend(secured.iter().map(String::as_str));
        let produced = kcat(&args, &format!("hello {mechanism}\n"));
        assert!(
            produced.status.success(),
            "{mechanism}: {}",
            String::from_utf8_lossy(&produced.stderr)
        );
    }
    let mut args = vec![
        "-b",
        &broker.kafka_addr,
        "-C",
        "-t",
        "kc",
        "-o",
        "beginning",
        "-e",
    ];
    let secured = login("SCRAM-SHA-256", PASSWORD);
    args.extend(secured.iter().map(String::as_str));
    let consumed = kcat(&args, "");
    let read = String::from_utf8_lossy(&consumed.stdout);
    assert_eq!(read.lines().count(), 3, "{read}");
    // Without a login, or with a wrong password: nothing.
    let wrong = login("SCRAM-SHA-256", "wrong");
    let mut args = vec!["-b", &broker.kafka_addr, "-L", "-m", "3"];
    args.extend(wrong.iter().map(String::as_str));
    assert!(!kcat(&args, "").status.success());
    let plaintext = kcat(&["-b", &broker.kafka_addr, "-L", "-m", "3"], "");
    assert!(!plaintext.status.success());
    assert!(broker.logged().contains("a request before authentication"));
}

#[test]
fn clients_outlive_a_session_lifetime_without_losing_a_record() {
    // Twenty records a quarter second apart span three 1.5 s sessions: confluent-kafka and
    // kafka-python re-authenticate (KIP-368); aiokafka cannot, so its connection is closed at
    // the end of a session and it reconnects. Every client reads back all it wrote.
    let dir = tempfile::tempdir().unwrap();
    let broker = secured_with(dir.path(), "sasl_session_lifetime_ms = 1500\n");
    for client in ["confluent", "kafka-python", "aiokafka"] {
        let output = kafka_script(
            "security.py",
            &[
                "--pace",
                "0.25",
                "login",
                client,
                &broker.kafka_addr,
                &format!("lifetime-{client}"),
                "SCRAM-SHA-256",
                "alice",
                PASSWORD,
            ],
        )
        .output()
        .unwrap();
        let summary = summary_of(&output, client);
        assert_eq!(summary["read"], 20, "{summary}");
    }
    let logged = broker.logged();
    assert!(logged.contains("re-authenticated"), "{logged}");
    assert!(
        logged.contains("the session's lifetime is over"),
        "{logged}"
    );
}

#[test]
fn confluent_kafkas_admin_client_manages_acls_and_scram_users() {
    // The super user creates, describes and deletes an ACL and adds dave (his salted password
    // sent, never the password); bob may not. Dave then logs in with kcat.
    support::kafka_python();
    let dir = tempfile::tempdir().unwrap();
    support::add_user(&dir.path().join("users"), "admin", PASSWORD);
    support::add_user(&dir.path().join("users"), "bob", PASSWORD);
    let acls = dir.path().join("acls");
    std::fs::write(&acls, "").unwrap();
    let extra = format!(
        "acls_file = {:?}\nsuper_users = [\"User:admin\"]\n",
        acls.display().to_string()
    );
    let broker = secured_with(dir.path(), &extra);
    let summary = security(&[
        "admin",
        &broker.kafka_addr,
        "SCRAM-SHA-512",
        "admin",
        PASSWORD,
    ]);
    assert_eq!(summary["deleted"], 1, "{summary}");
    assert_eq!(summary["bob_refused"], 31, "{summary}");
    let users = std::fs::read(dir.path().join("users")).unwrap();
    let users = String::from_utf8_lossy(&users);
    assert!(users.contains("dave SCRAM-SHA-256 salt="), "{users}");
    assert!(!users.contains("dave-pw"));
    let listed = kcat(
        &[
            "-b",
            &broker.kafka_addr,
            "-L",
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanisms=SCRAM-SHA-256",
            "-X",
            "sasl.username=dave",
            "-X",
            "sasl.password=dave-pw",
        ],
        "",
    );
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
}
