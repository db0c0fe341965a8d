//! Requests of one transaction that the network delays until their client has moved on to the
//! next (KAFKA-17754), with real clients (`tests/kafka/delayed.py`) behind `minibroker proxy
//! --kafka` holding one frame; only the clients' timeouts are shortened. Judged by what
//! `read_committed` and `read_uncommitted` consumers read: no aborted read, no lost write, no
//! torn transaction, and the next transaction commits.
//!
//! The project's own producer uses KIP-890 part 2 (a new epoch at every end): behind a proxy
//! holding its Produce and EndTxn requests past their retries, `check --transactional` holds.
//!
//! Before the defences, each failed as found: kafka-python's held Produce (N-a) showed up
//! committed in N+1 and N+1's second record was lost; librdkafka's and aiokafka's held
//! EndTxn(abort) aborted N+1's first half (only N1-b was read_committed), and their
//! EndTxn(commit) committed N+1's first half while N+1 was still open.

mod support;

use support::{BIN, ServeProcess, free_addr, kafka_script, serve_command, start_proxy, summary_of};

/// Runs `delayed.py` against a broker behind a proxy holding the first frame of `api` (or the
/// first `count`) for `hold_ms`; `args` follow the command, with `BOOTSTRAP` for the proxy.
fn through_a_proxy_holding(
    api: &str,
    count: u32,
    hold_ms: u32,
    args: &[&str],
) -> serde_json::Value {
    let broker = ServeProcess::spawn(&mut serve_command(&free_addr(), &free_addr()));
    let hold_at: Vec<String> = (1..=count).map(|n| n.to_string()).collect();
    let (mut proxy, proxy_addr, _) = start_proxy(
        "127.0.0.1:0",
        &broker.kafka_addr,
        &[
            "--kafka",
            "--api",
            api,
            "--hold-at",
            &hold_at.join(","),
            "--hold-ms",
            &hold_ms.to_string(),
        ],
    );
    let hold = hold_ms.to_string();
    let args: Vec<&str> = args
        .iter()
        .map(|arg| match *arg {
            "BOOTSTRAP" => proxy_addr.as_str(),
            "HOLD_MS" => hold.as_str(),
            other => other,
        })
        .collect();
    let output = kafka_script("delayed.py", &args)
        .output()
        .expect("run delayed.py");
    let _ = proxy.kill();
    let _ = proxy.wait();
    summary_of(&output, &args.join(" "))
}

/// `client`'s transaction N with its only Produce held, both attempts, past its delivery
/// timeout.
fn held_produce(client: &str) -> serde_json::Value {
    let topic = format!("late-produce-{client}");
    let args = ["produce", client, "BOOTSTRAP", &topic, &topic, "HOLD_MS"];
    through_a_proxy_holding("produce", 2, 6700, &args)
}

/// `client`'s transaction N with its EndTxn (`end`: commit or abort) held past its retry.
fn held_end(client: &str, end: &str) -> serde_json::Value {
    let topic = format!("late-{end}-{client}");
    let args = ["end", client, "BOOTSTRAP", &topic, &topic, end, "HOLD_MS"];
    through_a_proxy_holding("end_txn", 1, 4000, &args)
}

/// A held abort must not end the next transaction.
fn held_abort_never_ends_the_next_transaction(client: &str) {
    let summary = held_end(client, "abort");
    assert_eq!(
        summary["read_committed"],
        serde_json::json!(["N1-a", "N1-b"]),
        "{summary}"
    );
}

/// A held commit must not commit the next transaction's first half while it is open.
fn held_commit_never_commits_the_next_transaction_early(client: &str) {
    let summary = held_end(client, "commit");
    assert_eq!(
        summary["read_committed_mid"],
        serde_json::json!(["N-a"]),
        "{summary}"
    );
    assert_eq!(
        summary["read_committed"],
        serde_json::json!(["N-a", "N1-a", "N1-b"]),
        "{summary}"
    );
}

#[test]
fn kafka_pythons_held_produce_never_lands_in_the_next_transaction() {
    let summary = held_produce("kafka-python");
    assert_eq!(
        summary["read_committed"],
        serde_json::json!(["N1-a", "N1-b"]),
        "{summary}"
    );
    assert!(
        !summary["read_uncommitted"].to_string().contains("N-a"),
        "the held batch was never stored: {summary}"
    );
}

#[test]
fn librdkafkas_held_produce_never_lands_in_the_next_transaction() {
    // librdkafka moves to a new epoch itself after a batch that timed out in a transaction.
    let summary = held_produce("confluent");
    assert_eq!(
        summary["read_committed"],
        serde_json::json!(["N1-a", "N1-b"]),
        "{summary}"
    );
}

#[test]
fn librdkafkas_held_abort_never_ends_the_next_transaction() {
    held_abort_never_ends_the_next_transaction("confluent");
}

#[test]
fn librdkafkas_held_commit_never_commits_the_next_transaction_early() {
    held_commit_never_commits_the_next_transaction_early("confluent");
}

#[test]
fn aiokafkas_held_abort_never_ends_the_next_transaction() {
    held_abort_never_ends_the_next_transaction("aiokafka");
}

#[test]
fn aiokafkas_held_commit_never_commits_the_next_transaction_early() {
    held_commit_never_commits_the_next_transaction_early("aiokafka");
}

#[test]
fn with_part_2_the_projects_producer_is_unharmed_by_held_produces_and_ends() {
    let broker = ServeProcess::spawn(&mut serve_command(&free_addr(), &free_addr()));
    // Every Produce and EndTxn held with a chance of 1 in 20, for longer than the producer
    // waits before it sends the same request again on a new connection.
    let output = std::process::Command::new(BIN)
        .args([
            "check",
            "--kafka",
            &broker.kafka_addr,
            "--transactional",
            "--producers",
            "2",
            "--records",
            "3000",
            "--batch-size",
            "10",
            "--api",
            "produce,end_txn",
            "--hold",
            "0.05",
            "--hold-ms",
            "1500",
            "--seed",
            "5",
        ])
        .output()
        .expect("run check");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{report}");
    assert!(report.contains("EXACTLY-ONCE HELD"), "{report}");
    let held: u64 = number_after(&report, "stale retries held");
    assert!(held > 10, "the proxy held requests: {report}");
    assert_eq!(number_after(&report, "KIP-890 part 2"), 2, "{report}");
}

/// The number after `label` on its line of `report`.
fn number_after(report: &str, label: &str) -> u64 {
    report
        .lines()
        .find_map(|line| line.trim().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in {report}"))
}
