//! A compacted topic (`cleanup.policy=compact`) against a real `minibroker serve`, through real
//! Kafka clients (`tests/kafka/compaction.py`): confluent-kafka's idempotent producer writes many
//! updates per key and tombstones; once the cleaner has run, confluent-kafka, kafka-python and
//! aiokafka read back the newest record of each key at its original offset and no tombstone once
//! `delete.retention.ms` has passed since the pass that first saw it; durable and in memory; and with the cleaner SIGKILLed in the middle of
//! a pass, the restarted broker has lost nothing acknowledged and compacts the topic.

mod support;

use std::path::Path;
use support::{ServeProcess, kafka_script, serve_command, summary_of};

/// Runs `compaction.py` with `args`; returns its summary, failing unless every expectation held.
fn compaction(args: &[&str]) -> serde_json::Value {
    let output = kafka_script("compaction.py", args)
        .output()
        .expect("run the compaction script");
    summary_of(&output, &format!("compaction.py {args:?}"))
}

/// `minibroker serve` with `settings` (TOML) and, when given, a data directory.
fn serve(dir: &Path, settings: &str, data: Option<&Path>) -> ServeProcess {
    let config = dir.join(format!("serve-{}.toml", support::unique()));
    std::fs::write(&config, settings).expect("a configuration file");
    let mut command = serve_command("127.0.0.1:0", "127.0.0.1:0");
    command.arg("--config").arg(&config);
    if let Some(data) = data {
        command.arg("--data-dir").arg(data);
    }
    ServeProcess::spawn(&mut command)
}

fn write_then_check(
    server: &ServeProcess,
    expected: &Path,
    (rounds, fillers): (&str, &str),
) -> serde_json::Value {
    let expected = expected.to_str().expect("a UTF-8 path");
    compaction(&[
        "write",
        &server.kafka_addr,
        "table",
        expected,
        rounds,
        fillers,
    ]);
    compaction(&["check", &server.kafka_addr, "table", expected])
}

#[test]
fn every_client_reads_the_newest_record_of_each_key_from_a_durable_compacted_topic() {
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let server = serve(dir.path(), "cleaner_interval_ms = 200\n", Some(&data));
    let summary = write_then_check(&server, &dir.path().join("expected.json"), ("20", "200"));
    assert_eq!(summary["readers"]["aiokafka"], summary["left"], "{summary}");
    let names: Vec<String> = std::fs::read_dir(data.join("logs/table/0"))
        .expect("the partition's directory")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert!(
        names.iter().any(|name| name.ends_with(".compacted")),
        "{names:?}"
    );
}

#[test]
fn every_client_reads_the_newest_record_of_each_key_from_a_compacted_topic_in_memory() {
    let dir = tempfile::tempdir().expect("a directory");
    let server = serve(dir.path(), "cleaner_interval_ms = 200\n", None);
    // Enough for several full 1 MiB chunks (only those are compacted), the tombstones among
    // them.
    write_then_check(&server, &dir.path().join("expected.json"), ("100", "8000"));
}

#[test]
fn a_cleaner_killed_mid_pass_loses_nothing_acknowledged_and_the_restart_compacts() {
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let expected = dir.path().join("expected.json");
    let expected = expected.to_str().expect("a UTF-8 path");
    // Slow enough (100 kB/s over about 400 kB read and rewritten) to be caught in the middle.
    let slow = "cleaner_interval_ms = 100\ncleaner_io_max_bytes_per_second = 100000\n";
    let server = serve(dir.path(), slow, Some(&data));
    compaction(&["write", &server.kafka_addr, "table", expected, "20", "200"]);
    let partition = data.join("logs/table/0");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let in_pass = loop {
        let writing = std::fs::read_dir(&partition)
            .expect("the partition's directory")
            .any(|entry| {
                let name = entry.expect("an entry").file_name();
                name.to_string_lossy().ends_with(".compacted.tmp")
            });
        if writing || std::time::Instant::now() > deadline {
            break writing;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(in_pass, "the cleaner never started a pass");
    server.kill();
    let restarted = serve(dir.path(), "cleaner_interval_ms = 200\n", Some(&data));
    compaction(&["check", &restarted.kafka_addr, "table", expected]);
}
