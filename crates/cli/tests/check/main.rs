//! `minibroker check --kafka`: a correct verdict against a broker that keeps exactly-once, and a
//! failure against a test double that loses or duplicates acknowledged records — a checker that
//! cannot fail proves nothing.

#[path = "../support/mod.rs"]
mod support;

mod double;

use double::Misbehaviour;
use std::process::{Command, Output};
use support::{BIN, ServeProcess, serve_command};

/// No random faults: what the double does is the only thing wrong.
const NO_FAULTS: [&str; 12] = [
    "--drop-request",
    "0",
    "--drop-response",
    "0",
    "--delay-request",
    "0",
    "--delay-response",
    "0",
    "--reset",
    "0",
    "--hold",
    "0",
];

fn check(bootstrap: &str, extra: &[&str]) -> Output {
    Command::new(BIN)
        .args([
            "check",
            "--kafka",
            bootstrap,
            "--producers",
            "2",
            "--records",
            "200",
            "--partitions",
            "2",
        ])
        .args(extra)
        .output()
        .expect("run check")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn check_passes_a_broker_that_keeps_exactly_once_under_faults() {
    let server = ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"));
    let output = check(
        &server.kafka_addr,
        &[
            "--drop-response",
            "0.1",
            "--drop-request",
            "0.05",
            "--hold",
            "0.05",
        ],
    );
    let said = text(&output);
    assert!(output.status.success(), "{said}");
    assert!(
        said.contains("verdict: EXACTLY-ONCE HELD - all 400 acknowledged records"),
        "{said}"
    );
    let lost_acks: u64 = said
        .lines()
        .find_map(|l| l.trim().strip_prefix("acks lost"))
        .and_then(|n| n.trim().parse().ok())
        .expect("acks lost in the report");
    assert!(lost_acks > 0, "the faults must have fired: {said}");
}

/// `check` against the double in front of a real broker, misbehaving as told on every 9th
/// Produce; returns what check said and how many Produce requests the double broke.
fn check_through_double(misbehaviour: Misbehaviour) -> (Output, u64) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind the double");
    let double_addr = listener.local_addr().expect("its address").to_string();
    // The broker hands out the double's address, so clients stay on it.
    let server = ServeProcess::spawn(
        serve_command("127.0.0.1:0", "127.0.0.1:0").args(["--kafka-advertise", &double_addr]),
    );
    let broken = runtime
        .block_on(async { double::start(listener, server.kafka_addr.clone(), misbehaviour, 9) });
    let output = check(&double_addr, &NO_FAULTS);
    (output, broken.load(std::sync::atomic::Ordering::Relaxed))
}

#[test]
fn the_double_is_faithful_when_told_to_be() {
    let (output, broken) = check_through_double(Misbehaviour::None);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(broken, 0);
}

#[test]
fn check_fails_a_broker_that_acknowledges_without_storing() {
    let (output, broken) = check_through_double(Misbehaviour::AckWithoutStoring);
    let said = text(&output);
    assert!(broken > 0, "the double broke nothing: {said}");
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("verdict: FAILED"), "{said}");
    assert!(
        said.contains("of an acknowledged batch") && said.contains("is not stored"),
        "{said}"
    );
}

#[test]
fn check_fails_a_broker_that_stores_a_record_twice() {
    let (output, broken) = check_through_double(Misbehaviour::StoreTwice);
    let said = text(&output);
    assert!(broken > 0, "the double broke nothing: {said}");
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("verdict: FAILED"), "{said}");
    assert!(said.contains("stored twice"), "{said}");
}
