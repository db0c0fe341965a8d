//! Kafka transactions with the real clients (`tests/kafka/transactions.py`) against a real
//! `minibroker serve`: confluent-kafka, kafka-python and aiokafka commit and abort across
//! partitions, read_committed and read_uncommitted consumers see what they should, an open
//! transaction holds back the last stable offset until it ends; a newer instance fences a zombie;
//! a transaction left open past its timeout is aborted; and a consume-transform-produce pipeline
//! writes its output exactly once, with its input offsets committed at the end, through a SIGKILL
//! of the processor mid-transaction and a SIGKILL of the broker with transactions open,
//! committed and aborted; the broker SIGKILLed while it writes an end's markers (PrepareCommit,
//! PrepareAbort) finishes that end after the restart; an operator lists, describes and aborts a
//! transaction; `demo --transactions` and `bench --transactional` run.

mod support;

use std::process::{Command, Stdio};
use support::{
    ServeProcess, durable_command, fill_source, free_addr, kafka_script, serve_command,
    start_script, summary_of,
};

fn script(args: &[&str]) -> serde_json::Value {
    let output = kafka_script("transactions.py", args).output().unwrap();
    summary_of(&output, &format!("transactions.py {args:?}"))
}

/// Reads `topic` read_committed, again until `settled` holds of its last stable offsets (for up
/// to ten seconds); returns its values, sorted, and those offsets.
fn read_committed_once(
    kafka: &str,
    topic: &str,
    partitions: u32,
    settled: impl Fn(&[i64]) -> bool,
) -> (Vec<String>, Vec<i64>) {
    let mut tries = 0;
    loop {
        let read = script(&[
            "read",
            kafka,
            topic,
            &partitions.to_string(),
            "read_committed",
        ]);
        let stable: Vec<i64> = read["stable_offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_i64().unwrap())
            .collect();
        tries += 1;
        if settled(&stable) || tries == 40 {
            let mut values: Vec<String> = read["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect();
            values.sort();
            return (values, stable);
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

fn memory_broker() -> ServeProcess {
    ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"))
}

#[test]
fn confluent_kafka_commits_and_aborts_across_partitions() {
    let broker = memory_broker();
    let summary = script(&[
        "basics",
        "confluent",
        &broker.kafka_addr,
        "basics-confluent",
    ]);
    // 12 committed, 6 aborted, 3 open: read_committed stops at the open transaction's start.
    assert_eq!(summary["read_committed"], 12, "{summary}");
    assert_eq!(summary["read_uncommitted"], 21, "{summary}");
    assert_eq!(summary["after_commit"]["read_committed"], 15, "{summary}");
    // Each partition: 4 committed records + marker, 2 aborted + marker, then the open one's
    // first record at offset 8, which holds the LSO until its COMMIT (offset 9) lands.
    assert_eq!(summary["stable_offsets"], serde_json::json!([8, 8, 8]));
    assert_eq!(
        summary["after_commit"]["stable_offsets"],
        serde_json::json!([10, 10, 10])
    );
    // The verifier agrees: the producer's sequences are whole, and read_committed shows exactly
    // the committed batches.
    let verified = broker.run_kafka(&[
        "verify",
        "--topic",
        "basics-confluent",
        "--isolation",
        "read-committed",
    ]);
    assert!(verified.contains("PASS"), "{verified}");
    assert!(
        verified.contains("read_committed sees exactly the committed batches"),
        "{verified}"
    );
    assert!(verified.contains("aborted"), "{verified}");
}

#[test]
fn kafka_python_commits_and_aborts_across_partitions() {
    let broker = memory_broker();
    let summary = script(&["basics", "kafka-python", &broker.kafka_addr, "basics-kp"]);
    assert_eq!(summary["read_committed"], 12, "{summary}");
    assert_eq!(summary["after_commit"]["read_committed"], 15, "{summary}");
}

#[test]
fn aiokafka_commits_and_aborts_across_partitions() {
    let broker = memory_broker();
    let summary = script(&["basics", "aiokafka", &broker.kafka_addr, "basics-aio"]);
    assert_eq!(summary["read_committed"], 12, "{summary}");
    assert_eq!(
        summary["after_commit"]["aiokafka_read_committed"], 15,
        "{summary}"
    );
}

#[test]
fn a_newer_instance_fences_the_zombie_and_aborts_its_transaction() {
    let broker = memory_broker();
    let summary = script(&["zombie", &broker.kafka_addr, "zombie"]);
    assert_eq!(summary["fenced"], "_FENCED", "{summary}");
}

#[test]
fn a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let broker = memory_broker();
    let summary = script(&["timeout", &broker.kafka_addr, "timeout"]);
    assert_eq!(summary["refused"], "_FENCED", "{summary}");
    assert!(
        broker
            .logged()
            .contains("aborting a transaction past its timeout")
    );
}

/// Starts `transactions.py ARGS` and waits for the first line it prints (it says so once it is
/// where the test wants it, and waits to be killed); returns the process and that line.
fn started_script(args: &[&str]) -> (std::process::Child, String) {
    let started = start_script("transactions.py", args);
    (started.child, started.first_line)
}

/// Starts the processor, which kills nothing itself: it stops in the middle of a transaction
/// after `die_after` records and says so; returns the waiting process.
fn processor_stuck_mid_transaction(
    kafka: &str,
    (source, sink): (&str, &str),
    die_after: usize,
) -> std::process::Child {
    let die_after = die_after.to_string();
    let (processor, line) =
        started_script(&["process", kafka, source, sink, "processor", &die_after]);
    assert!(line.contains("mid_transaction"), "{line}");
    processor
}

#[test]
fn consume_transform_produce_is_exactly_once_through_a_killed_processor() {
    let broker = memory_broker();
    let kafka = &broker.kafka_addr;
    fill_source(kafka, "ctp-in", 100);
    let mut processor = processor_stuck_mid_transaction(kafka, ("ctp-in", "ctp-out"), 25);
    processor.kill().unwrap(); // SIGKILL, mid-transaction
    processor.wait().unwrap();
    // The restarted processor, with the same transactional id, fences the dead one's open
    // transaction and goes on from the committed offsets.
    let rest = script(&["process", kafka, "ctp-in", "ctp-out", "processor"]);
    assert!(rest["produced"].as_u64().unwrap() < 100, "{rest}");
    let output = script(&["check-output", kafka, "ctp-in", "ctp-out", "100"]);
    assert_eq!(output["duplicates"], 0, "{output}");
    assert_eq!(output["read"], 100, "{output}");
}

#[test]
fn a_broker_killed_mid_transaction_keeps_every_outcome_and_no_lso_sticks() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = (free_addr(), free_addr());
    let broker = ServeProcess::spawn(&mut durable_command(&addrs, dir.path()));
    let kafka = broker.kafka_addr.clone();
    fill_source(&kafka, "kill-in", 100);
    script(&[
        "produce-open",
        &kafka,
        "outcomes",
        "committed",
        "6",
        "commit",
    ]);
    script(&["produce-open", &kafka, "outcomes", "aborted", "6", "abort"]);
    // Left open by a producer that stays alive, with a short timeout: after the restart the
    // broker must still abort it, or the LSO would stick.
    let (mut open, _) = started_script(&[
        "produce-open",
        &kafka,
        "outcomes",
        "open",
        "6",
        "open",
        "3000",
    ]);
    // And a pipeline in the middle of a transaction.
    let mut processor = processor_stuck_mid_transaction(&kafka, ("kill-in", "kill-out"), 35);

    broker.kill(); // SIGKILL
    let broker = ServeProcess::spawn(&mut durable_command(&addrs, dir.path()));
    processor.kill().unwrap();
    processor.wait().unwrap();
    open.kill().unwrap();
    open.wait().unwrap();

    // The open transaction times out and is aborted by the restarted broker.
    let (values, stable) =
        read_committed_once(&kafka, "outcomes", 3, |ends| ends.iter().sum::<i64>() >= 27);
    let committed: Vec<String> = (0..6).map(|i| format!("committed-{i}")).collect();
    assert_eq!(values, committed);
    // Each partition: 2 + 2 + 2 records and 3 markers: nothing holds the LSO back.
    assert_eq!(stable, vec![9, 9, 9]);
    let verified = broker.run_kafka(&[
        "verify",
        "--topic",
        "outcomes",
        "--isolation",
        "read-committed",
    ]);
    assert!(verified.contains("PASS"), "{verified}");
    assert!(verified.contains("0 open"), "{verified}");

    // The pipeline resumes and its output is exactly once.
    script(&[
        "process",
        &broker.kafka_addr,
        "kill-in",
        "kill-out",
        "processor",
    ]);
    let output = script(&[
        "check-output",
        &broker.kafka_addr,
        "kill-in",
        "kill-out",
        "100",
    ]);
    assert_eq!(output["duplicates"], 0, "{output}");
}

#[test]
fn demo_transactions_reports_exactly_once_through_both_crashes() {
    let output = Command::new(support::BIN)
        .args([
            "demo",
            "--transactions",
            "--partitions",
            "3",
            "--records",
            "600",
            "--per-transaction",
            "20",
            "--drop-request",
            "0.05",
            "--drop-response",
            "0.05",
            "--seed",
            "3",
        ])
        .output()
        .expect("demo");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}: {report}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        report.contains("processor killed mid-transaction"),
        "{report}"
    );
    assert!(
        report.contains("broker SIGKILLed mid-transaction"),
        "{report}"
    );
    assert!(report.contains("verdict: EXACTLY-ONCE HELD"), "{report}");
    assert!(report.contains("open 0"), "{report}");
}

#[test]
fn an_operator_lists_describes_and_aborts_an_open_transaction() {
    let broker = memory_broker();
    let kafka = broker.kafka_addr.clone();
    let (mut open, _) = started_script(&["produce-open", &kafka, "ops", "forgotten", "3", "open"]);

    let listed = broker.run_kafka(&["transactions", "list", "--state", "Ongoing"]);
    assert!(
        listed.contains("forgotten") && listed.contains("Ongoing"),
        "{listed}"
    );
    let described = broker.run_kafka(&["transactions", "describe", "forgotten", "--json"]);
    let described: serde_json::Value = serde_json::from_str(&described).unwrap();
    assert_eq!(described["state"], "Ongoing", "{described}");
    assert_eq!(
        described["partitions"],
        serde_json::json!(["ops/0", "ops/1", "ops/2"])
    );
    // Each partition's open transaction began at offset 0: that is what holds its LSO back.
    let producers = broker.run_kafka(&["transactions", "producers", "--topic", "ops", "--json"]);
    let producers: serde_json::Value = serde_json::from_str(&producers).unwrap();
    let open_from: Vec<_> = producers["producers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["open_transaction_from"].clone())
        .collect();
    assert_eq!(open_from, vec![serde_json::json!(0); 3], "{producers}");

    let aborted = broker.run_kafka(&["transactions", "abort", "forgotten"]);
    assert!(
        aborted.contains("aborted the open transaction of forgotten"),
        "{aborted}"
    );
    let read = script(&["read", &kafka, "ops", "3", "read_committed"]);
    assert_eq!(read["values"], serde_json::json!([]), "{read}");
    assert_eq!(
        read["stable_offsets"],
        serde_json::json!([2, 2, 2]),
        "{read}"
    );
    let after = broker.run_kafka(&["transactions", "describe", "forgotten"]);
    assert!(after.contains("Empty"), "{after}");
    open.kill().unwrap();
    open.wait().unwrap();
}

#[test]
fn bench_transactional_compares_transactions_with_idempotence_in_one_run() {
    let output = Command::new(support::BIN)
        .args([
            "bench",
            "--transactional",
            "--duration",
            "0.3",
            "--connections",
            "2",
            "--pairs",
            "2",
            "--json",
        ])
        .output()
        .expect("bench");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["transactional_records_per_sec"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let ratio = report["transactional_over_idempotent"].as_f64().unwrap();
    assert!(ratio > 0.0);
    let spread = &report["transactional_over_idempotent_spread"];
    assert_eq!(spread["median"].as_f64(), Some(ratio));
    assert!(spread["min"].as_f64() <= spread["max"].as_f64());
    let read_ratio = report["read_committed_over_read_uncommitted"]
        .as_f64()
        .unwrap();
    assert!(read_ratio > 0.0);
    let read_spread = &report["read_committed_over_read_uncommitted_spread"];
    assert_eq!(read_spread["median"].as_f64(), Some(read_ratio));
    assert!(read_spread["min"].as_f64() <= read_spread["max"].as_f64());
    assert!(report["steal_percent"].as_f64().is_some());
}

/// How many partitions the wide transactions write: enough markers (each synced under the
/// `always` policy) that a kill lands while they are written.
const WIDE: u32 = 200;

#[test]
fn a_broker_killed_while_ending_a_transaction_finishes_that_end_after_the_restart() {
    for end in ["commit", "abort"] {
        let dir = tempfile::tempdir().unwrap();
        let addrs = (free_addr(), free_addr());
        let mut landed = false;
        for attempt in 0..5 {
            // The markers' line is debug: asked for, for this broker's transaction service.
            let broker = ServeProcess::spawn(
                durable_command(&addrs, dir.path())
                    .env("RUST_LOG", "info,minibroker_transactions=debug"),
            );
            let topic = format!("wide-{end}-{attempt}");
            let id = format!("{topic}-txn");
            let mut producer = kafka_script(
                "transactions.py",
                &[
                    "produce-wide",
                    &broker.kafka_addr,
                    &topic,
                    &id,
                    &WIDE.to_string(),
                    end,
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
            // SIGKILL as soon as the broker says the end is decided and its markers are going
            // out: PrepareCommit or PrepareAbort is durable then, and Complete* is not yet.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while !broker.logged().contains("writing a transaction's markers") {
                assert!(std::time::Instant::now() < deadline, "the end never began");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            broker.kill();
            producer.kill().unwrap();
            producer.wait().unwrap();

            let broker = ServeProcess::spawn(&mut durable_command(&addrs, dir.path()));
            let decided = broker
                .logged()
                .contains("a transaction decided before the restart is to be finished");
            let expected: Vec<String> = if end == "commit" {
                let mut all: Vec<String> = (0..WIDE).map(|p| format!("{id}-{p}")).collect();
                all.sort();
                all
            } else {
                Vec::new()
            };
            // The clock finishes the decided end within a tick or two. No LSO stuck: on every
            // partition the record and at least one marker are below it.
            let (values, stable) = read_committed_once(&broker.kafka_addr, &topic, WIDE, |ends| {
                ends.iter().all(|&end| end >= 2)
            });
            assert_eq!(values, expected, "{end}, attempt {attempt}");
            assert!(stable.iter().all(|&end| end >= 2), "{stable:?}");
            drop(broker);
            if decided {
                eprintln!("the kill landed in the {end}'s markers on attempt {attempt}");
                landed = true;
                break;
            }
        }
        assert!(
            landed,
            "no kill landed while the {end}'s markers were written"
        );
    }
}
