//! Kafka's admin APIs with the admin clients people use (confluent-kafka's `AdminClient`,
//! kafka-python's `KafkaAdminClient`) against a real `minibroker serve`
//! (`tests/kafka/admin.py`).

mod support;

use support::{ServeProcess, kafka_script, serve_command, summary_of};

/// Runs `admin.py` with `args`; returns its summary, failing unless every expectation held.
fn admin(args: &[&str]) -> serde_json::Value {
    let output = kafka_script("admin.py", args)
        .output()
        .expect("run the admin script");
    summary_of(&output, &format!("admin.py {args:?}"))
}

/// `minibroker serve` on ephemeral ports, storing in `data`.
fn serve_in(data: &std::path::Path) -> ServeProcess {
    ServeProcess::spawn(
        serve_command("127.0.0.1:0", "127.0.0.1:0")
            .arg("--data-dir")
            .arg(data),
    )
}

#[test]
fn both_admin_clients_describe_the_cluster() {
    let server = ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"));
    let summary = admin(&["describe-cluster", &server.kafka_addr, "minibroker"]);
    assert_eq!(summary["kafka_python"]["controller"], 1, "{summary}");
}

#[test]
fn a_groups_offsets_are_deleted_unless_a_member_consumes_the_topic() {
    let server = ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"));
    let summary = admin(&["delete-offsets", &server.kafka_addr, "forgotten"]);
    assert_eq!(summary["left"]["0"], -1001, "{summary}");
}

#[test]
fn both_admin_clients_grow_a_topic_and_a_sigkill_keeps_its_partitions() {
    let dir = tempfile::tempdir().expect("a data directory");
    let serve = || serve_in(dir.path());
    let server = serve();
    let summary = admin(&["create-partitions", &server.kafka_addr, "grown"]);
    assert_eq!(summary["partitions"], 5, "{summary}");
    // SIGKILL: the new count was on disk before CreatePartitions was answered.
    server.kill();
    let restarted = serve();
    let summary = admin(&["read-partitions", &restarted.kafka_addr, "grown"]);
    assert_eq!(summary["values"]["4"], "new 4", "{summary}");
}

#[test]
fn the_log_directory_and_each_partitions_size_are_described() {
    let dir = tempfile::tempdir().expect("a data directory");
    let data = dir.path().to_str().expect("a UTF-8 path").to_owned();
    let server = ServeProcess::spawn(
        serve_command("127.0.0.1:0", "127.0.0.1:0").args(["--data-dir", &data]),
    );
    let summary = admin(&["describe-log-dirs", &server.kafka_addr, "sized"]);
    assert_eq!(summary["log_dirs"][0], data.as_str(), "{summary}");
}

#[test]
fn both_admin_clients_describe_topic_and_broker_configs_with_their_sources() {
    let dir = tempfile::tempdir().expect("a directory");
    let config = dir.path().join("broker.toml");
    std::fs::write(
        &config,
        "retention_ms = 3600000\n\n[[topics]]\nname = \"own\"\npartitions = 1\nretention_ms = 50000\n",
    )
    .expect("write the configuration");
    let server = ServeProcess::spawn(
        serve_command("127.0.0.1:0", "127.0.0.1:0")
            .arg("--config")
            .arg(&config),
    );
    let summary = admin(&["describe-configs", &server.kafka_addr, "own", "other"]);
    assert_eq!(
        summary["confluent"]["own"]["retention.ms"][1], "DYNAMIC_TOPIC_CONFIG",
        "{summary}"
    );
}

#[test]
fn both_admin_clients_alter_topic_configs_and_a_sigkill_keeps_them() {
    let dir = tempfile::tempdir().expect("a data directory");
    let serve = || serve_in(dir.path());
    let server = serve();
    let summary = admin(&["alter-configs", &server.kafka_addr, "altered"]);
    assert_eq!(summary["steps"]["bad"], "INVALID_CONFIG", "{summary}");
    // SIGKILL: each change was on disk before it was answered.
    server.kill();
    let restarted = serve();
    let summary = admin(&["read-configs", &restarted.kafka_addr, "altered"]);
    assert_eq!(
        summary["settings"]["segment.bytes"][0], "65536",
        "{summary}"
    );
}

#[test]
fn both_admin_clients_delete_records_and_a_sigkill_keeps_the_new_start() {
    let dir = tempfile::tempdir().expect("a data directory");
    let serve = || serve_in(dir.path());
    let server = serve();
    let summary = admin(&["delete-records", &server.kafka_addr, "trimmed"]);
    assert_eq!(summary["found"]["1"][0], 7, "{summary}");
    // SIGKILL: each new start was on disk before DeleteRecords was answered.
    server.kill();
    let restarted = serve();
    let summary = admin(&["read-after-delete", &restarted.kafka_addr, "trimmed"]);
    assert_eq!(summary["found"]["0"][1], 4, "{summary}");
}
