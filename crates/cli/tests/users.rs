//! `minibroker user`: credentials made from a password on stdin, in Kafka's format (each a line
//! of the file's checksummed record), checked by an independent implementation (Python's hashlib
//! computing SCRAM's StoredKey and ServerKey from the password, the salt and the iterations the
//! file holds); list and delete.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use support::{BIN, kafka_python};

fn user(args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = Command::new(BIN)
        .arg("user")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

const CHECK: &str = r##"
import base64, hashlib, hmac, sys
path, password = sys.argv[1], sys.argv[2].encode()
# The file: a u32 length, then the record: magic "\0MBU", version 1, the lines, a CRC-32C.
data = open(path, "rb").read()
length = int.from_bytes(data[:4], "big")
assert length == len(data) - 4 and data[4:9] == b"\0MBU\x01", data[:9]
for line in data[9:-4].decode().splitlines():
    if line.startswith("#") or not line.strip():
        continue
    name, mechanism, credential = line.split()
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    fields = dict(field.split("=", 1) for field in credential.split(","))
    salt = base64.b64decode(fields["salt"])
    salted = hashlib.pbkdf2_hmac(digest, password, salt, int(fields["iterations"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored = hashlib.new(digest, client_key).digest()
    server = hmac.new(salted, b"Server Key", digest).digest()
    assert base64.b64decode(fields["stored_key"]) == stored, (name, mechanism)
    assert base64.b64decode(fields["server_key"]) == server, (name, mechanism)
    print(name, mechanism, "ok")
"##;

#[test]
fn users_are_added_from_stdin_in_kafkas_format_listed_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users");
    let file_arg = file.to_str().unwrap();
    let added = user(
        &["add", "alice", "--users-file", file_arg, "--password-stdin"],
        Some("s3cret\n"),
    );
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let added = user(
        &[
            "add",
            "bob",
            "--users-file",
            file_arg,
            "--mechanism",
            "scram-sha-512",
            "--iterations",
            "4096",
            "--password-stdin",
        ],
        Some("s3cret"),
    );
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let bytes = std::fs::read(&file).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(!text.contains("s3cret"), "{text}");

    let checked = Command::new(kafka_python())
        .args(["-c", CHECK, file_arg, "s3cret"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert_eq!(report.lines().count(), 3, "{report}");

    let listed = user(&["list", "--users-file", file_arg, "--json"], None);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["users"].as_array().unwrap().len(), 3, "{listed}");
    assert_eq!(listed["users"][2]["iterations"], 4096, "{listed}");

    let deleted = user(
        &[
            "delete",
            "alice",
            "--users-file",
            file_arg,
            "--mechanism",
            "SCRAM-SHA-512",
        ],
        None,
    );
    assert!(deleted.status.success());
    let listed = user(&["list", "--users-file", file_arg], None);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("alice") && listed.contains("SCRAM-SHA-256"),
        "{listed}"
    );
    assert!(
        !listed.contains("alice                            SCRAM-SHA-512"),
        "{listed}"
    );
}

#[test]
fn refusals_say_what_is_wrong_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users");
    let file_arg = file.to_str().unwrap();
    for (args, stdin, says) in [
        (
            vec!["add", "alice", "--users-file", file_arg],
            None,
            "--password-stdin",
        ),
        (
            vec!["add", "alice", "--users-file", file_arg, "--password-stdin"],
            Some(""),
            "the password is empty",
        ),
        (
            vec![
                "add",
                "al ice",
                "--users-file",
                file_arg,
                "--password-stdin",
            ],
            Some("pw"),
            "invalid user name",
        ),
        (
            vec![
                "add",
                "alice",
                "--users-file",
                file_arg,
                "--mechanism",
                "SCRAM-MD5",
                "--password-stdin",
            ],
            Some("pw"),
            "unknown mechanism",
        ),
        (
            vec![
                "add",
                "alice",
                "--users-file",
                file_arg,
                "--iterations",
                "100",
                "--password-stdin",
            ],
            Some("pw"),
            "4096 to 16384",
        ),
        (
            vec!["delete", "nobody", "--users-file", file_arg],
            None,
            "no such user",
        ),
    ] {
        let output = user(&args, stdin);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!file.exists(), "{args:?} wrote the file");
    }
}
