//! `minibroker check --kafka`: a correct verdict against a broker that keeps exactly-once, and a
//! failure against a test double that loses or duplicates acknowledged records — a checker that
//! cannot fail proves nothing.

#[path = "../support/mod.rs"]
mod support;

mod double;

use double::Misbehaviour;
use std::process::{Command, Output};
use support::{BIN, CHECK_FAULTS, ServeProcess, durable_command, serve_command};

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
    check_with(bootstrap, &[], extra)
}

/// `check` with `mode` flags (such as --transactional) and `extra` ones.
fn check_with(bootstrap: &str, mode: &[&str], extra: &[&str]) -> Output {
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
        .args(mode)
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
    let output = check(&server.kafka_addr, &CHECK_FAULTS);
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

/// A durable broker (its data directory written through at every batch), both workloads, with
/// duplicated requests on top of the lost ones: every anomaly the checker knows is looked for
/// and none is found.
#[test]
fn check_passes_a_durable_broker_in_both_workloads() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServeProcess::spawn(&mut durable_command(
        &("127.0.0.1:0".to_owned(), "127.0.0.1:0".to_owned()),
        dir.path(),
    ));
    for mode in [&[][..], &["--transactional"][..]] {
        let output = check_with(&server.kafka_addr, mode, &["--duplicate", "0.05"]);
        let said = text(&output);
        assert!(output.status.success(), "{mode:?}: {said}");
        assert!(said.contains("verdict: EXACTLY-ONCE HELD"), "{said}");
        assert!(said.contains("requests duplicated"), "{said}");
        assert!(said.contains("read every partition to its end"), "{said}");
    }
}

/// The workload written by real clients (the project's Python harness), idempotent and
/// transactional, under the check's faults: minibroker holds for each.
#[test]
fn check_drives_real_kafka_clients() {
    let server = ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"));
    let python = support::kafka_python();
    for client in ["confluent-kafka", "kafka-python", "aiokafka"] {
        for mode in [&[][..], &["--transactional"][..]] {
            let output = check_with(
                &server.kafka_addr,
                mode,
                &["--client", client, "--python", &python],
            );
            let said = text(&output);
            assert!(output.status.success(), "{client} {mode:?}: {said}");
            assert!(
                said.contains(&format!(
                    "client               {client}: its retries are its own"
                )),
                "{said}"
            );
            assert!(
                said.contains("verdict: EXACTLY-ONCE HELD - all 400 acknowledged records"),
                "{said}"
            );
        }
    }
}

/// `check` against the double in front of a real broker, misbehaving as told on every 9th
/// Produce; returns what check said and how many requests the double broke.
fn check_through_double(misbehaviour: Misbehaviour) -> (Output, u64) {
    check_through_double_with(misbehaviour, &[])
}

fn check_through_double_with(misbehaviour: Misbehaviour, mode: &[&str]) -> (Output, u64) {
    let double = Double::start(misbehaviour);
    let output = check_with(&double.addr, mode, &NO_FAULTS);
    (output, double.broken())
}

/// The double in front of a real broker, misbehaving on every 9th request it breaks.
struct Double {
    /// Where clients connect.
    addr: String,
    broken: std::sync::Arc<std::sync::atomic::AtomicU64>,
    _server: ServeProcess,
    _runtime: tokio::runtime::Runtime,
}

impl Double {
    fn start(misbehaviour: Misbehaviour) -> Self {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind the double");
        let addr = listener.local_addr().expect("its address").to_string();
        // The broker hands out the double's address, so clients stay on it.
        let server = ServeProcess::spawn(
            serve_command("127.0.0.1:0", "127.0.0.1:0").args(["--kafka-advertise", &addr]),
        );
        let broken = runtime.block_on(async {
            double::start(listener, server.kafka_addr.clone(), misbehaviour, 9)
        });
        Self {
            addr,
            broken,
            _server: server,
            _runtime: runtime,
        }
    }

    /// The requests it has broken so far.
    fn broken(&self) -> u64 {
        self.broken.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// `check` failed on what the double broke, saying each of `said`.
fn assert_caught(output: &Output, broken: u64, said: &[&str]) {
    let text = text(output);
    assert!(broken > 0, "the double broke nothing: {text}");
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("verdict: FAILED"), "{text}");
    for words in said {
        assert!(text.contains(words), "no {words:?} in: {text}");
    }
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
    assert_caught(
        &output,
        broken,
        &["of an acknowledged batch", "is not stored"],
    );
}

#[test]
fn check_fails_a_broker_that_stores_a_record_twice() {
    let (output, broken) = check_through_double(Misbehaviour::StoreTwice);
    assert_caught(&output, broken, &["stored twice"]);
}

#[test]
fn during_runs_the_users_command_midway_and_the_report_says_when() {
    let server = ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"));
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let command = format!("touch {}", marker.display());
    let output = check_with(
        &server.kafka_addr,
        &["--during", &command, "--during-at", "0.25"],
        &[],
    );
    let said = text(&output);
    assert!(output.status.success(), "{said}");
    assert!(marker.exists(), "the command did not run: {said}");
    assert!(
        said.contains(&format!("during: `{command}` ran at ")),
        "{said}"
    );
    assert!(said.contains("and ended with exit status: 0"), "{said}");
    // 2 producers x 200 records: due once a quarter of them, 100, were sent.
    let sent: usize = said
        .split(&format!("during: `{command}` ran at "))
        .nth(1)
        .and_then(|rest| rest.split(", ").nth(1))
        .and_then(|sent| sent.split(' ').next())
        .and_then(|sent| sent.parse().ok())
        .expect("the records sent when it ran");
    assert!((100..400).contains(&sent), "{said}");
    // A share no run reaches is refused before anything runs.
    let refused = check_with(
        &server.kafka_addr,
        &["--during", "true", "--during-at", "2"],
        &[],
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("--during-at is a share"),
        "{}",
        text(&refused)
    );
}

#[test]
fn check_passes_transactional_producers_whose_aborts_stay_hidden() {
    let server = ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"));
    let output = check_with(
        &server.kafka_addr,
        &["--transactional"],
        &["--drop-response", "0.1", "--drop-request", "0.05"],
    );
    let said = text(&output);
    assert!(output.status.success(), "{said}");
    assert!(
        said.contains("verdict: EXACTLY-ONCE HELD - all 400 acknowledged records"),
        "{said}"
    );
    // 2 producers x 200 records in batches of 5: 40 batches each, 10 per transaction, every
    // fourth transaction aborted and written again.
    assert!(
        said.contains("transactions                8   committed; 2 aborted"),
        "{said}"
    );
    assert!(
        said.contains("records processed         403"),
        "every record, the scenario's three too, processed once: {said}"
    );
    // And the scenario of a Produce held past its transaction's abort: one batch committed,
    // one aborted; minibroker refuses the late batch, and the producer moves to a new epoch.
    assert!(
        said.contains("batches shown; 81 committed, 21 aborted, 0 open"),
        "{said}"
    );
    assert!(
        said.contains("next batch           OUT_OF_ORDER_SEQUENCE_NUMBER (45)"),
        "{said}"
    );
    assert!(said.contains("moved to epoch"), "{said}");
}

#[test]
fn check_rides_out_lost_answers_to_every_api() {
    // The first answers lost are ApiVersions, InitProducerId, FindCoordinator and Metadata
    // ones: the producers ask again instead of giving up.
    let server = ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"));
    let output = check_with(
        &server.kafka_addr,
        &["--transactional", "--api", "all"],
        &[
            "--drop-response-at",
            "1,2,3,5,8,13,21",
            "--timeout-ms",
            "500",
        ],
    );
    let said = text(&output);
    assert!(output.status.success(), "{said}");
    assert!(
        said.contains("verdict: EXACTLY-ONCE HELD - all 400 acknowledged records"),
        "{said}"
    );
}

#[test]
fn check_starts_a_producer_again_when_a_late_copy_of_its_init_fences_it() {
    // The first InitProducerId is held past the producer's timeout: its retry is answered, the
    // producer starts, and then the held copy arrives and fences it, as a new instance would.
    // The broker is right to fence; the check starts the producer again and carries on.
    let server = ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"));
    let output = Command::new(BIN)
        .args(["check", "--kafka", &server.kafka_addr, "--transactional"])
        .args(["--producers", "2", "--records", "2000", "--batch-size", "1"])
        .args([
            "--api",
            "init_producer_id",
            "--hold-at",
            "1",
            "--hold-ms",
            "500",
        ])
        .args(["--timeout-ms", "200"])
        .args([
            "--drop-request",
            "0",
            "--drop-response",
            "0",
            "--delay-request",
            "0",
        ])
        .args(["--delay-response", "0", "--reset", "0", "--hold", "0"])
        .output()
        .expect("run check");
    let said = text(&output);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("stale retries held          1"), "{said}");
    assert!(said.contains("restarted                   1"), "{said}");
    assert!(
        said.contains("verdict: EXACTLY-ONCE HELD - all 4000 acknowledged records"),
        "{said}"
    );
}

#[test]
fn check_fails_a_broker_that_commits_what_was_aborted() {
    let (output, broken) =
        check_through_double_with(Misbehaviour::CommitAborted, &["--transactional"]);
    assert_caught(&output, broken, &["stored twice"]);
}

/// KAFKA-17754's shape, on a broker that lets a late batch of an aborted transaction into the
/// next one: the held batch's records, which their producer aborted, are read as committed, and
/// the next transaction's own batch, answered as its duplicate, is lost.
#[test]
fn check_fails_a_broker_that_takes_a_late_batch_into_the_next_transaction() {
    let (output, broken) =
        check_through_double_with(Misbehaviour::AddOnFirstBatch, &["--transactional"]);
    assert_caught(
        &output,
        broken,
        &[
            "[aborted-read] partition 1: record",
            "aborted the transaction it sent it in",
            "[lost-write] partition 1: record",
            "producer             kept its epoch",
        ],
    );
}

/// A broker whose Fetch answers to consumers leave out a batch now and then: each consumer in
/// the group jumps past records it should have seen; in transactions, past part of a committed
/// transaction whose other records it was shown.
#[test]
fn check_fails_a_broker_whose_consumers_skip_records() {
    let (output, broken) = check_through_double(Misbehaviour::SkipForConsumers);
    assert_caught(
        &output,
        broken,
        &["[poll-skip] partition", "skipping offset"],
    );
    let (output, broken) =
        check_through_double_with(Misbehaviour::SkipForConsumers, &["--transactional"]);
    assert_caught(
        &output,
        broken,
        &[
            "[torn-transaction] partition",
            "of a committed transaction it was shown other records of",
        ],
    );
}

/// A broker that commits a transaction's output without the offsets it carried: the processors
/// that take over the partitions read from older offsets and write the same records again.
#[test]
fn check_fails_a_broker_that_commits_output_without_its_offsets() {
    let (output, broken) =
        check_through_double_with(Misbehaviour::ForgetTransactionOffsets, &["--transactional"]);
    assert_caught(
        &output,
        broken,
        &["[duplicate] the processed topic holds record"],
    );
}

/// A broker that names no aborted transaction to read_committed readers: its consumers are
/// shown aborted records, and so is the verifier's own read_committed read.
#[test]
fn check_fails_a_broker_that_shows_aborted_records_to_read_committed_consumers() {
    let (output, broken) =
        check_through_double_with(Misbehaviour::HideAborted, &["--transactional"]);
    assert_caught(
        &output,
        broken,
        &[
            "[aborted-read] partition",
            "read_committed consumer committed-",
            "of a transaction that aborted",
        ],
    );
}

/// A violation found is printed with the command that replays the run; run again, it finds the
/// same anomalies with the same witnesses, in the JSON too.
#[test]
fn the_replay_command_finds_the_same_witnesses() {
    let double = Double::start(Misbehaviour::AddOnFirstBatch);
    let first = check_with(&double.addr, &["--transactional"], &NO_FAULTS);
    let said = text(&first);
    assert!(!first.status.success(), "{said}");
    // The witnesses, without what differs from run to run by design: the producer ids the
    // broker issues and the names made from the topic's.
    let witnesses = |said: &str| -> Vec<String> {
        said.lines()
            .filter(|line| line.trim_start().starts_with("- ["))
            .map(|line| {
                let mut words: Vec<String> = line.split(' ').map(str::to_owned).collect();
                for at in 1..words.len() {
                    if words[at - 1] == "producer" {
                        words[at] = "<id>".to_owned();
                    }
                    if let Some((_, suffix)) = words[at].split_once("minibroker-check-") {
                        let role = suffix.trim_start_matches(|c: char| c.is_ascii_digit());
                        words[at] = format!("<topic>{role}");
                    }
                }
                words.join(" ")
            })
            .collect()
    };
    let found = witnesses(&said);
    assert!(!found.is_empty(), "{said}");
    let replay = said
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("replay: "))
        .expect("a replay command");
    assert!(replay.contains("--seed 42"), "{replay}");
    let again = Command::new("sh").args(["-c", replay]).output().unwrap();
    assert!(!again.status.success());
    assert_eq!(witnesses(&text(&again)), found);
    // The JSON carries the same anomalies and the same command.
    let json = Command::new("sh")
        .args(["-c", &format!("{replay} --json")])
        .output()
        .unwrap();
    let document: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("one JSON document");
    assert_eq!(document["verdict"], "violated");
    let anomalies: Vec<&str> = document["anomalies"]
        .as_array()
        .expect("anomalies")
        .iter()
        .map(|a| a["anomaly"].as_str().expect("named"))
        .collect();
    assert!(anomalies.contains(&"aborted-read"), "{anomalies:?}");
    assert!(anomalies.contains(&"lost-write"), "{anomalies:?}");
    assert_eq!(
        document["anomalies"][0]["says"],
        found[0].split("] ").nth(1).expect("a witness")
    );
    assert!(
        document["replay"]
            .as_str()
            .is_some_and(|r| r.contains("--seed 42"))
    );
}

#[test]
fn the_kafka_proxy_keeps_a_real_kafka_client_on_it() {
    // The broker advertises a name other than the one the proxy is given, so the proxy must
    // open a listener of its own for it and hand that out instead.
    let port = support::free_addr()
        .rsplit_once(':')
        .map(|(_, port)| port.to_owned())
        .expect("a port");
    let server = ServeProcess::spawn(
        serve_command("127.0.0.1:0", &format!("127.0.0.1:{port}"))
            .args(["--kafka-advertise", &format!("localhost:{port}")]),
    );
    let (mut proxy, proxy_addr, output) = support::start_proxy(
        "127.0.0.1:0",
        &server.kafka_addr,
        &["--kafka", "--api", "produce", "--drop-response-at", "1"],
    );
    let listed = support::kcat(&["-b", &proxy_addr, "-L", "-m", "5"], "");
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let broker_line = listed
        .lines()
        .find(|l| l.trim_start().starts_with("broker "))
        .unwrap_or_else(|| panic!("no broker listed: {listed}"));
    assert!(
        !broker_line.contains(&port),
        "the upstream address leaked: {broker_line}"
    );
    assert!(!broker_line.contains(&proxy_addr), "{broker_line}");
    assert!(broker_line.contains("127.0.0.1:"), "{broker_line}");
    // An idempotent librdkafka producer through it: the first Produce answer is lost, the
    // client resends, the broker keeps one copy.
    let produced = support::kcat(
        &[
            "-b",
            &proxy_addr,
            "-P",
            "-t",
            "through-proxy",
            "-X",
            "enable.idempotence=true",
            "-X",
            "socket.timeout.ms=1000",
            "-X",
            "request.timeout.ms=500",
            "-X",
            "message.timeout.ms=20000",
        ],
        "one\ntwo\nthree\n",
    );
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let consumed = server.run(&["consume", "--topic", "through-proxy", "--partition", "0"]);
    assert_eq!(consumed.lines().count(), 3, "{consumed}");
    // Stop the proxy and read its summary: the lost answer and the resend went through it.
    let _ = Command::new("kill")
        .args(["-INT", &proxy.id().to_string()])
        .status();
    proxy.wait().expect("the proxy stops");
    let summary: String = std::io::BufRead::lines(output)
        .map_while(Result::ok)
        .find(|l| l.starts_with("proxy faults:"))
        .expect("the proxy's summary");
    assert!(summary.contains("responses_dropped=1"), "{summary}");
}
