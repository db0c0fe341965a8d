//! The users file: credentials round trip in Kafka's format, every bad line is an error naming
//! the file and the line, the file is replaced whole and readable by its owner only.

use minibroker_security::{ScramCredential, ScramMechanism, Users, UsersFileError};
use std::path::Path;

fn credential(mechanism: ScramMechanism, password: &[u8]) -> ScramCredential {
    ScramCredential::generate(mechanism, password, 4096).unwrap()
}

#[test]
fn users_round_trip_through_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users");
    assert_eq!(
        Users::load(&path).unwrap(),
        Users::default(),
        "no file: no users"
    );
    let mut users = Users::default();
    users.set(
        "alice",
        ScramMechanism::Sha256,
        credential(ScramMechanism::Sha256, b"a"),
    );
    users.set(
        "alice",
        ScramMechanism::Sha512,
        credential(ScramMechanism::Sha512, b"a"),
    );
    users.set(
        "bob",
        ScramMechanism::Sha512,
        credential(ScramMechanism::Sha512, b"b"),
    );
    users.save(&path).unwrap();
    let loaded = Users::load(&path).unwrap();
    assert_eq!(loaded, users);
    assert!(loaded.verify_plain("bob", b"b"));
    assert!(!loaded.verify_plain("bob", b"a"));
    assert!(!loaded.verify_plain("carol", b"c"));
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        !bytes.windows(3).any(|w| w == b"\"a\""),
        "no password in the file"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let mut fewer = loaded.clone();
    assert_eq!(fewer.remove("alice", Some(ScramMechanism::Sha512)), 1);
    assert_eq!(fewer.remove("alice", None), 1);
    assert_eq!(fewer.remove("alice", None), 0);
    let listed: Vec<_> = fewer.list().collect();
    assert_eq!(listed, vec![("bob", ScramMechanism::Sha512, 4096)]);
}

#[test]
fn every_bad_line_names_the_file_and_the_line() {
    let good = format!(
        "alice SCRAM-SHA-256 {}",
        credential(ScramMechanism::Sha256, b"a").to_kafka_string()
    );
    let path = Path::new("/etc/minibroker/users");
    for (bad, reason) in [
        (
            "alice SCRAM-SHA-256".to_owned(),
            "expected NAME MECHANISM CREDENTIAL",
        ),
        (
            good.replace("SCRAM-SHA-256", "SCRAM-MD5"),
            "unknown mechanism",
        ),
        (
            good.replace("SCRAM-SHA-256", "SCRAM-SHA-512"),
            "another mechanism's length",
        ),
        (good.replace("salt=", "pepper="), "an unknown field"),
        (
            format!("{good}\n{good}"),
            "a second SCRAM-SHA-256 credential",
        ),
        (
            format!("{good} extra"),
            "expected NAME MECHANISM CREDENTIAL",
        ),
    ] {
        let text = format!("# users\n\n{bad}\n");
        let error = Users::parse(&text, path).unwrap_err();
        let UsersFileError::Line { line, .. } = &error else {
            panic!("{error}");
        };
        assert!(*line >= 3, "{error}");
        let shown = error.to_string();
        assert!(shown.starts_with("/etc/minibroker/users, line "), "{shown}");
        assert!(shown.contains(reason), "{shown} lacks {reason}");
    }
}
