//! The `minibroker` binary against a live broker on 127.0.0.1:0: output formats, exit codes, and
//! a clean exit on SIGTERM.

mod support;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use support::{BIN, ServeProcess, kafka_script, serve_command, start_proxy, summary_of};

/// A `minibroker serve` process on free loopback ports, killed when dropped.
struct Server(ServeProcess);

impl std::ops::Deref for Server {
    type Target = ServeProcess;

    fn deref(&self) -> &ServeProcess {
        &self.0
    }
}

impl Server {
    fn start(extra: &[&str]) -> Self {
        Self(ServeProcess::spawn(
            serve_command("127.0.0.1:0", "127.0.0.1:0").args(extra),
        ))
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut full: Vec<&str> = vec![args[0], "--broker", &self.addr];
        full.extend_from_slice(&args[1..]);
        Command::new(BIN)
            .args(&full)
            .output()
            .expect("run minibroker")
    }

    fn run_ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("utf-8 output")
    }

    /// `verify --kafka` of `topic` on this broker's Kafka listener; returns the report.
    fn verify_kafka(&self, topic: &str) -> String {
        let output = Command::new(BIN)
            .args(["verify", "--kafka", &self.kafka_addr, "--topic", topic])
            .output()
            .expect("run verify");
        let report = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{report}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        report
    }

    /// Runs `produce` on this broker with `args`, feeding it `input`; returns its summary line.
    fn produce(&self, args: &[&str], input: &[u8]) -> String {
        let mut command = Command::new(BIN);
        command.args(["produce", "--broker", &self.addr]).args(args);
        let output = with_input(command, input);
        assert!(output.status.success(), "produce {args:?} failed");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn send(&self, epoch: &str, sequence: &str, json: bool) -> String {
        let json: &[&str] = if json { &["--json"] } else { &[] };
        self.send_to("seed", epoch, sequence, json)
    }

    /// `send` as producer 1 to partition 0 of `topic`, with `extra` flags.
    fn send_to(&self, topic: &str, epoch: &str, sequence: &str, extra: &[&str]) -> String {
        let mut args = vec![
            "send",
            "--topic",
            topic,
            "--partition",
            "0",
            "--producer-id",
            "1",
            "--epoch",
            epoch,
            "--sequence",
            sequence,
        ];
        args.extend_from_slice(extra);
        self.run_ok(&args).trim().to_owned()
    }
}

/// Runs `command` with `input` on its stdin and waits for it.
fn with_input(mut command: Command, input: &[u8]) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("wait for it")
}

const SEED: [(&str, &str); 6] = [
    ("0", "0"),
    ("0", "1"),
    ("0", "1"),
    ("0", "5"),
    ("1", "0"),
    ("0", "2"),
];

#[test]
fn seed_example_through_send_yields_the_six_outcomes() {
    let server = Server::start(&[]);
    let outputs: Vec<String> = SEED.iter().map(|(e, s)| server.send(e, s, false)).collect();
    assert_eq!(
        outputs,
        [
            "ACCEPTED offset=0",
            "ACCEPTED offset=1",
            "DUPLICATE offset=1",
            "OUT_OF_ORDER",
            "ACCEPTED offset=2",
            "FENCED_EPOCH"
        ]
    );
}

#[test]
fn send_json_output() {
    let server = Server::start(&[]);
    let outputs: Vec<String> = SEED.iter().map(|(e, s)| server.send(e, s, true)).collect();
    assert_eq!(
        outputs,
        [
            r#"{"offset":0,"outcome":"ACCEPTED"}"#,
            r#"{"offset":1,"outcome":"ACCEPTED"}"#,
            r#"{"offset":1,"outcome":"DUPLICATE"}"#,
            r#"{"offset":null,"outcome":"OUT_OF_ORDER"}"#,
            r#"{"offset":2,"outcome":"ACCEPTED"}"#,
            r#"{"offset":null,"outcome":"FENCED_EPOCH"}"#
        ]
    );
}

#[test]
fn bad_input_exits_non_zero_with_a_message() {
    let server = Server::start(&["--partitions", "2"]);
    for (args, expected) in [
        (
            vec![
                "send",
                "--topic",
                "t",
                "--partition",
                "5",
                "--producer-id",
                "1",
                "--epoch",
                "0",
                "--sequence",
                "0",
            ],
            "PARTITION_OUT_OF_RANGE",
        ),
        (
            vec![
                "send",
                "--topic",
                "t",
                "--partition",
                "0",
                "--producer-id",
                "-3",
                "--epoch",
                "0",
                "--sequence",
                "0",
            ],
            "INVALID_INPUT",
        ),
        (
            vec!["consume", "--topic", "missing", "--partition", "0"],
            "UNKNOWN_TOPIC",
        ),
        (
            vec!["init-producer", "--producer-id", "77"],
            "UNKNOWN_PRODUCER_ID",
        ),
    ] {
        let output = server.run(&args);
        assert!(!output.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr);
        // Exactly `error: CODE: message`, on one line.
        let line = stderr.trim();
        assert!(
            line.starts_with(&format!("error: {expected}: ")) && !line.contains('\n'),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_record_sent_with_a_key_and_headers_comes_back_with_them() {
    let server = Server::start(&[]);
    let extra = [
        "--value",
        "v1",
        "--value",
        "v2",
        "--key",
        "k",
        "--header",
        "h=v",
        "--header",
        "trace=abc",
    ];
    let sent = server.send_to("keyed", "0", "0", &extra);
    assert_eq!(sent, "ACCEPTED offset=0");
    // Two records took sequences 0 and 1, so the next batch starts at 2.
    let next = server.send_to("keyed", "0", "2", &[]);
    assert_eq!(next, "ACCEPTED offset=2");
    let json = server.run_ok(&["consume", "--topic", "keyed", "--partition", "0", "--json"]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|line| serde_json::from_str(line).expect("json"))
        .collect();
    assert_eq!(lines.len(), 3);
    for (i, value) in ["v1", "v2"].into_iter().enumerate() {
        assert_eq!(lines[i]["offset"], i);
        assert_eq!(lines[i]["sequence"], i);
        assert_eq!(lines[i]["value"], value);
        assert_eq!(lines[i]["key"], "k");
        assert_eq!(lines[i]["headers"]["h"], "v");
        assert_eq!(lines[i]["headers"]["trace"], "abc");
        assert!(lines[i]["timestamp"].as_i64().expect("a timestamp") > 1_600_000_000_000);
    }
    assert!(lines[2]["key"].is_null());
    let text = server.run_ok(&["consume", "--topic", "keyed", "--partition", "0"]);
    assert!(
        text.lines()
            .next()
            .expect("a line")
            .ends_with("value=v1 key=k header.h=v header.trace=abc"),
        "{text}"
    );
}

#[test]
fn produce_splits_keys_from_values_at_the_separator() {
    let server = Server::start(&[]);
    let summary = server.produce(
        &["--topic", "kv", "--key-separator", ":", "--batch-size", "2"],
        b"user-1:login\nuser-2:a:b\nno separator\n",
    );
    assert!(
        summary.starts_with("produced records=3 batches=2"),
        "{summary}"
    );
    let json = server.run_ok(&["consume", "--topic", "kv", "--partition", "0", "--json"]);
    let records: Vec<(serde_json::Value, serde_json::Value, serde_json::Value)> = json
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("json");
            (v["key"].clone(), v["value"].clone(), v["sequence"].clone())
        })
        .collect();
    assert_eq!(
        records,
        vec![
            ("user-1".into(), "login".into(), 0.into()),
            ("user-2".into(), "a:b".into(), 1.into()),
            (serde_json::Value::Null, "no separator".into(), 2.into()),
        ]
    );
}

#[test]
fn produce_then_consume_round_trip() {
    let server = Server::start(&[]);
    let summary = server.produce(&["--topic", "lines"], b"first\nsecond\nthird\n");
    assert!(
        summary.starts_with("produced records=3 batches=3 retries=0 duplicates_acknowledged=0"),
        "{summary}"
    );

    let text = server.run_ok(&["consume", "--topic", "lines", "--partition", "0"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("offset=0 producer_id=1000 epoch=0 sequence=0 value=first"));
    assert!(lines[2].ends_with("sequence=2 value=third"));

    let json = server.run_ok(&[
        "consume",
        "--topic",
        "lines",
        "--partition",
        "0",
        "--from",
        "1",
        "--json",
    ]);
    let first: serde_json::Value =
        serde_json::from_str(json.lines().next().expect("a line")).expect("json");
    assert_eq!(first["offset"], 1);
    assert_eq!(first["producer_id"], 1000);
    assert_eq!(first["epoch"], 0);
    assert_eq!(first["sequence"], 1);
    assert_eq!(first["value"], "second");
    assert_eq!(json.lines().count(), 2);
}

#[test]
fn init_producer_and_describe_producers() {
    let server = Server::start(&[]);
    assert_eq!(
        server.run_ok(&["init-producer"]).trim(),
        "producer_id=1000 epoch=0"
    );
    assert_eq!(
        server
            .run_ok(&["init-producer", "--producer-id", "1000", "--json"])
            .trim(),
        r#"{"epoch":1,"producer_id":1000}"#
    );
    server.send("0", "0", false);
    server.send("0", "1", false);
    let described = server.run_ok(&["describe-producers", "--topic", "seed", "--partition", "0"]);
    assert_eq!(
        described.trim(),
        "producer_id=1 epoch=0 last_sequence=1 last_offset=1 cached_batches=2"
    );
    let json = server.run_ok(&[
        "describe-producers",
        "--topic",
        "seed",
        "--partition",
        "0",
        "--json",
    ]);
    assert_eq!(
        json.trim(),
        r#"{"cached_batches":2,"epoch":0,"last_offset":1,"last_sequence":1,"producer_id":1}"#
    );
}

#[test]
fn sigterm_stops_the_broker_with_exit_code_zero() {
    let server = Server::start(&[]);
    server.send("0", "0", false);
    // Sends SIGTERM and asserts a zero exit status.
    server.0.terminate();
}

#[test]
fn a_bad_config_file_is_reported() {
    let dir = std::env::temp_dir().join(format!("minibroker-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("bad.toml");
    std::fs::write(&path, "max_conections = 3\n").expect("write config");
    let output = Command::new(BIN)
        .args(["serve", "--config", path.to_str().expect("utf-8 path")])
        .output()
        .expect("run serve");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("max_conections"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn produce_through_a_lossy_proxy_then_verify_against_the_acks() {
    let server = Server::start(&[]);
    // Lose the second and fifth responses: two lost acks.
    let (mut proxy, proxy_addr, _) =
        start_proxy("127.0.0.1:0", &server.addr, &["--drop-response-at", "2,5"]);
    let dir = std::env::temp_dir().join(format!("minibroker-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let acks = dir.join("acks.jsonl");
    let output = Command::new(BIN)
        .args([
            "produce",
            "--broker",
            &proxy_addr,
            "--topic",
            "v",
            "--count",
            "20",
            "--batch-size",
            "2",
        ])
        .args([
            "--timeout-ms",
            "300",
            "--acks",
            acks.to_str().expect("path"),
        ])
        .output()
        .expect("produce");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(summary.contains("records=20 batches=10"), "{summary}");
    assert!(
        !summary.contains("duplicates_acknowledged=0"),
        "the lost acks were not resent: {summary}"
    );
    let _ = proxy.kill();
    let _ = proxy.wait();

    let verified = server.run(&[
        "verify",
        "--topic",
        "v",
        "--expect",
        acks.to_str().expect("path"),
    ]);
    let report = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{report}");
    assert!(report.contains("10 batches, 20 records"), "{report}");
    assert!(report.contains("PASS"), "{report}");

    // An acknowledgement the broker never stored must fail verification.
    let forged = dir.join("forged.jsonl");
    std::fs::write(
        &forged,
        r#"{"partition":0,"producer_id":1000,"epoch":0,"sequence":99,"offset":null,"records":1}"#,
    )
    .expect("write");
    let failed = server.run(&[
        "verify",
        "--topic",
        "v",
        "--expect",
        forged.to_str().expect("path"),
    ]);
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stdout).contains("FAIL"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn demo_reports_that_exactly_once_held() {
    let output = Command::new(BIN)
        .args([
            "demo",
            "--producers",
            "3",
            "--partitions",
            "2",
            "--records",
            "300",
            "--seed",
            "9",
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
    assert!(report.contains("verdict: EXACTLY-ONCE HELD"), "{report}");
    let stored = report
        .lines()
        .find(|line| line.trim_start().starts_with("records stored"))
        .expect("a records stored line");
    assert_eq!(stored.split_whitespace().last(), Some("900"), "{report}");
}

#[test]
fn bench_over_kafka_reports_both_paths_and_every_request_accepted() {
    let report = run_json(&[
        "bench",
        "--kafka",
        "--duration",
        "0.3",
        "--connections",
        "2",
        "--records-per-batch",
        "10",
        "--warm-up",
        "0",
        "--pairs",
        "2",
        "--json",
    ]);
    let phases = report["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases
        .iter()
        .map(|p| p["phase"].as_str().expect("name"))
        .collect();
    // The two front ends of one broker, in turns.
    assert_eq!(names, ["broker", "kafka", "broker", "kafka"]);
    let requests: u64 = phases
        .iter()
        .map(|p| p["requests"].as_u64().expect("requests"))
        .sum();
    assert!(phases.iter().all(|p| p["requests"].as_u64() > Some(0)));
    // Every Kafka answer was a success too (errors would not count as accepted).
    assert_eq!(
        report["broker_outcomes"]["accepted"].as_u64(),
        Some(requests)
    );
    let spread = &report["kafka_over_native"]["records_per_sec_spread"];
    let (low, median, high) = (
        spread["min"].as_f64().expect("lowest"),
        spread["median"].as_f64().expect("median"),
        spread["max"].as_f64().expect("highest"),
    );
    assert!(low <= median && median <= high, "{report}");
    assert_eq!(
        report["kafka_over_native"]["records_per_sec"].as_f64(),
        Some(median)
    );
}

/// A short benchmark against the baseline. Without a warm-up, every request the broker answered
/// is in a measured phase.
const SHORT_BENCH_WITH_BASELINE: &[&str] = &[
    "bench",
    "--baseline",
    "--duration",
    "0.3",
    "--connections",
    "2",
    "--warm-up",
    "0",
    "--pairs",
    "2",
    "--json",
];

#[test]
fn bench_smoke_run_reports_every_phase_as_json() {
    // A short run: checks the report's shape and that every request was an in-order append.
    // Timing is never asserted.
    let report = run_json(SHORT_BENCH_WITH_BASELINE);
    let phases: Vec<&str> = report["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| p["phase"].as_str().expect("name"))
        .collect();
    // Two pairs at peak, then two at half of the broker's peak, each pair in turns.
    assert_eq!(
        phases,
        [
            "broker",
            "baseline",
            "broker",
            "baseline",
            "broker@half",
            "baseline@half",
            "broker@half",
            "baseline@half"
        ]
    );
    assert_every_broker_answer_accepted(&report, "native");
    assert_eq!(report["broker_outcomes"]["out_of_order"].as_u64(), Some(0));
    // The machine's steal time over the run, from /proc/stat (Linux).
    let steal = report["steal_percent"].as_f64().expect("steal time");
    assert!((0.0..=100.0).contains(&steal), "{steal}");
    let ratios = &report["broker_over_baseline"];
    let spread = &ratios["requests_per_sec_spread"];
    assert!(spread["min"].as_f64() <= spread["max"].as_f64(), "{report}");
    assert_eq!(
        ratios["requests_per_sec"].as_f64(),
        spread["median"].as_f64()
    );
    assert_eq!(report["pairs"].as_u64(), Some(2));
    assert!(
        report["p99_at_half_load_spread"]["median"]
            .as_f64()
            .is_some()
    );
}

#[test]
fn bench_compaction_smoke_run_reports_both_comparisons() {
    // A small log and short phases: the shape of the report, and that the cleaner ran while the
    // compacted topic took produces (the run fails otherwise). Timing is never asserted.
    let dir = tempfile::tempdir().expect("a directory");
    let report = run_json(&[
        "bench",
        "--compaction",
        "--compaction-mib",
        "40",
        "--data-dir",
        dir.path().to_str().expect("a UTF-8 path"),
        "--duration",
        "0.5",
        "--records-per-batch",
        "100",
        "--json",
    ]);
    assert_eq!(
        report["compaction_mb_per_sec"].as_array().map(Vec::len),
        Some(3),
        "{report}"
    );
    assert!(report["compaction_over_raw"]["median"].as_f64().is_some());
    assert_eq!(
        report["p99_at_half_compacted_us"].as_array().map(Vec::len),
        Some(3)
    );
}

#[test]
fn bench_memory_cases_report_per_entry_and_per_byte_figures() {
    let report = run_json(&["bench", "--memory", "--json"]);
    assert_eq!(report["entries"].as_array().map(Vec::len), Some(2));
    assert!(report["overhead_per_stored_byte"].as_f64().is_some());
}

/// Runs the binary with `args`, expects success and one JSON object on stdout.
fn run_json(args: &[&str]) -> serde_json::Value {
    let output = Command::new(BIN)
        .args(args)
        .output()
        .expect("run minibroker");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

// Kafka compatibility, proven with real Kafka clients (installed by scripts/kafka-clients, which
// ./scripts/test runs first): librdkafka through confluent-kafka and kcat, kafka-python, aiokafka.

/// Runs `tests/kafka/clients.py` with `args`; returns its JSON summary, failing on a failure.
fn kafka_client(args: &[&str]) -> serde_json::Value {
    let output = kafka_script("clients.py", args)
        .output()
        .expect("run the Kafka client script");
    summary_of(&output, &format!("clients.py {args:?}"))
}

fn kafka_round_trip(client: &str) {
    let server = Server::start(&["--partitions", "3"]);
    let topic = format!("rt-{client}");
    let summary = kafka_client(&[client, &server.kafka_addr, &topic, "3", "2000"]);
    assert_eq!(summary["received"], 2000);
    // What the client wrote is exactly-once by the verifier too, over either protocol.
    for report in [
        server.run_ok(&["verify", "--topic", &topic]),
        server.verify_kafka(&topic),
    ] {
        assert!(
            report.contains("2000 records") && report.contains("PASS"),
            "{report}"
        );
    }
}

#[test]
fn confluent_kafka_produces_idempotently_and_reads_back_exactly_once() {
    kafka_round_trip("confluent");
}

#[test]
fn batches_of_every_codec_from_every_client_are_read_back_by_every_client() {
    // The broker decompresses and walks every compressed batch before it stores it as sent:
    // what each library writes with gzip, snappy, lz4 and zstd must pass, and each library's
    // consumer must read every other's batches back whole and in order.
    let server = Server::start(&["--partitions", "2"]);
    let summary = kafka_client(&["codecs", &server.kafka_addr, "codec", "2", "300"]);
    assert_eq!(summary["checked"], 36, "{summary}");
}

#[test]
fn kafka_python_produces_idempotently_and_reads_back_exactly_once() {
    kafka_round_trip("kafka-python");
}

#[test]
fn aiokafka_produces_idempotently_and_reads_back_exactly_once() {
    kafka_round_trip("aiokafka");
}

#[test]
fn a_kafka_admin_client_creates_and_deletes_topics() {
    let server = Server::start(&[]);
    kafka_client(&["admin", &server.kafka_addr, "administered", "4"]);
}

/// Runs kcat with `args`, feeding it `input`; returns stdout.
fn kcat(args: &[&str], input: &[u8]) -> String {
    let mut command = Command::new("kcat");
    command.args(args);
    let output = with_input(command, input);
    assert!(
        output.status.success(),
        "kcat {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn kcat_produces_idempotently_over_three_partitions_and_reads_back_exactly_once() {
    let server = Server::start(&["--partitions", "3"]);
    let lines: String = (0..3000).map(|i| format!("key-{i}:value-{i}\n")).collect();
    kcat(
        &[
            "-b",
            &server.kafka_addr,
            "-P",
            "-t",
            "many",
            "-K",
            ":",
            "-H",
            "client=kcat",
            "-X",
            "enable.idempotence=true",
            "-X",
            "partitioner=murmur2_random",
        ],
        lines.as_bytes(),
    );
    let mut seen = std::collections::HashSet::new();
    for partition in ["0", "1", "2"] {
        let read = kcat(
            &[
                "-b",
                &server.kafka_addr,
                "-C",
                "-t",
                "many",
                "-p",
                partition,
                "-o",
                "beginning",
                "-e",
                "-f",
                "%o %k %s %h\n",
            ],
            b"",
        );
        let mut expected_offset = 0;
        for line in read.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(
                fields[0],
                expected_offset.to_string(),
                "in order, no gaps: {line}"
            );
            expected_offset += 1;
            let index = fields[1].strip_prefix("key-").expect("a key");
            assert_eq!(fields[2], format!("value-{index}"));
            assert_eq!(fields[3], "client=kcat");
            assert!(seen.insert(index.to_owned()), "record {index} read twice");
        }
        assert!(expected_offset > 0, "partition {partition} got no records");
    }
    assert_eq!(seen.len(), 3000);
}

#[test]
fn kcat_and_the_native_protocol_read_each_others_records() {
    let server = Server::start(&[]);
    // kcat (librdkafka, idempotent) → minibroker consume.
    kcat(
        &[
            "-b",
            &server.kafka_addr,
            "-P",
            "-t",
            "from-kcat",
            "-K",
            ":",
            "-H",
            "source=kcat",
            "-X",
            "enable.idempotence=true",
        ],
        b"k1:first\nk2:second\n",
    );
    let json = server.run_ok(&[
        "consume",
        "--topic",
        "from-kcat",
        "--partition",
        "0",
        "--json",
    ]);
    let records: Vec<serde_json::Value> = json
        .lines()
        .map(|line| serde_json::from_str(line).expect("json"))
        .collect();
    assert_eq!(records.len(), 2, "{json}");
    assert_eq!(records[0]["key"], "k1");
    assert_eq!(records[1]["value"], "second");
    assert_eq!(records[1]["headers"]["source"], "kcat");
    assert_eq!(records[1]["sequence"], 1);
    assert!(records[0]["producer_id"].as_i64().expect("an id") >= 1000);

    // minibroker produce → kcat.
    server.produce(
        &["--topic", "from-native", "--key-separator", "="],
        b"a=one\nb=two\n",
    );
    let read = kcat(
        &[
            "-b",
            &server.kafka_addr,
            "-C",
            "-t",
            "from-native",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k %s %o\\n",
        ],
        b"",
    );
    assert_eq!(read, "a one 0\nb two 1\n");
}

#[test]
fn librdkafka_through_a_faulty_network_stores_every_delivered_record_once() {
    // The proxy's port must be known before the broker starts, to be advertised to clients.
    let proxy_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let proxy_addr = format!("127.0.0.1:{proxy_port}");
    let server = Server::start(&["--kafka-advertise", &proxy_addr]);
    let (mut proxy, _, _) = start_proxy(
        &proxy_addr,
        &server.kafka_addr,
        &["--drop-response", "0.04", "--reset", "0.01", "--seed", "11"],
    );
    let summary = kafka_client(&["lossy", &proxy_addr, "lossy", "3000"]);
    assert_eq!(summary["delivered"], 3000);
    let _ = proxy.kill();
    let _ = proxy.wait();
    // Read back from the broker directly, over the Kafka protocol: every delivered record, once.
    let report = server.verify_kafka("lossy");
    assert!(
        report.contains("3000 records") && report.contains("PASS"),
        "{report}"
    );
}

#[test]
fn bench_baselines_the_kafka_front_end_and_the_durable_broker_too() {
    let data = tempfile::tempdir().expect("a temporary directory");
    let dir = data.path().to_str().expect("a UTF-8 path");
    for extra in [
        &["--kafka"][..],
        &["--data-dir", dir, "--flush", "os"][..],
        &["--data-dir", dir, "--flush", "always"][..],
        &["--data-dir", dir, "--flush", "interval:5"][..],
    ] {
        let mut args = SHORT_BENCH_WITH_BASELINE.to_vec();
        args.extend_from_slice(extra);
        let report = run_json(&args);
        assert_every_broker_answer_accepted(&report, &format!("{extra:?}"));
        let phases = report["phases"].as_array().expect("phases");
        // The baseline answered in the same protocol: its answers parsed as successes.
        let baseline = phases
            .iter()
            .find(|p| p["phase"] == "baseline")
            .expect("a baseline phase");
        assert!(
            baseline["outcomes"]["accepted"].as_u64() > Some(0),
            "{extra:?}"
        );
        assert!(
            report["p99_at_half_load_broker_over_baseline"]
                .as_f64()
                .is_some()
        );
    }
    // The durable broker's and the durable baseline's directories are removed after the run.
    assert!(!data.path().join("bench-broker").exists());
    assert!(!data.path().join("bench-baseline").exists());
}

/// The broker's phases answered requests, and every answer was an in-order append (over Kafka
/// too: an error answer would not count as accepted).
fn assert_every_broker_answer_accepted(report: &serde_json::Value, case: &str) {
    let broker_requests: u64 = report["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter(|p| p["phase"].as_str().is_some_and(|n| n.starts_with("broker")))
        .map(|p| p["requests"].as_u64().expect("requests"))
        .sum();
    assert!(broker_requests > 0, "{case}");
    assert_eq!(
        report["broker_outcomes"]["accepted"].as_u64(),
        Some(broker_requests),
        "{case}"
    );
}

#[test]
fn bench_tls_measures_the_plain_and_the_tls_listener_alike() {
    // A short run: two pairs, every request answered without an error. Timing is never
    // asserted.
    let report = run_json(&[
        "bench",
        "--tls",
        "--duration",
        "0.2",
        "--connections",
        "2",
        "--records-per-batch",
        "10",
        "--pairs",
        "2",
        "--warm-up",
        "0.2",
        "--json",
    ]);
    for key in ["mb_per_sec_plain", "mb_per_sec_tls"] {
        let rounds = report[key].as_array().expect(key);
        assert_eq!(rounds.len(), 2, "{report}");
        assert!(rounds.iter().all(|r| r.as_f64() > Some(0.0)), "{report}");
    }
    assert_eq!(report["errors"].as_u64(), Some(0), "{report}");
    assert!(report["tls_over_plain_mb_per_sec"].as_f64().is_some());
}

#[test]
fn produce_where_nothing_listens_fails_within_seconds_saying_why_once() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let started = std::time::Instant::now();
    let output = support::run_with_stdin(
        support::BIN,
        &["produce", "--broker", &addr, "--topic", "t"],
        "a\n",
    );
    assert!(!output.status.success());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .expect("an error line");
    assert!(
        error.contains(&format!("cannot connect to {addr}")),
        "{error}"
    );
    assert_eq!(error.matches("Connection refused").count(), 1, "{error}");
}

#[test]
fn serve_refuses_a_flush_policy_without_a_data_directory() {
    let output = Command::new(BIN)
        .args([
            "serve",
            "--flush",
            "os",
            "--listen",
            "127.0.0.1:0",
            "--kafka-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("give --data-dir"), "{stderr}");
}

#[test]
fn kcat_compresses_with_every_codec_and_the_batches_are_stored_compressed() {
    let dir = tempfile::tempdir().expect("dir");
    let server = Server::start(&["--data-dir", dir.path().to_str().unwrap()]);
    for (codec, bits) in [("gzip", 1u16), ("snappy", 2), ("lz4", 3), ("zstd", 4)] {
        let topic = format!("z-{codec}");
        // Compressible, so librdkafka keeps the compressed batch.
        let lines: String = (0..500)
            .map(|i| format!("{codec} {i} {}\n", "x".repeat(200)))
            .collect();
        let target = ["-b", server.kafka_addr.as_str(), "-t", topic.as_str()];
        let produce = [
            "-P",
            "-z",
            codec,
            "-X",
            "linger.ms=50",
            "-X",
            "enable.idempotence=true",
        ];
        kcat(&[&target[..], &produce[..]].concat(), lines.as_bytes());
        let consume = ["-C", "-o", "beginning", "-e", "-f", "%s\n"];
        let read = kcat(&[&target[..], &consume[..]].concat(), b"");
        assert_eq!(read, lines, "{codec}: read back");
        let segment = dir
            .path()
            .join("logs")
            .join(&topic)
            .join("0")
            .join("00000000000000000000.log");
        let codecs = stored_codecs(&std::fs::read(&segment).expect("segment"));
        assert!(
            !codecs.is_empty() && codecs.iter().all(|&c| c == bits),
            "{codec}: the stored batches' codecs are {codecs:?}"
        );
    }
}

/// The compression codec (attributes & 7) of each v2 batch stored back to back in `bytes`:
/// base offset (8), length (4), leader epoch (4), magic (1), CRC (4), then the attributes.
fn stored_codecs(mut bytes: &[u8]) -> Vec<u16> {
    let mut codecs = Vec::new();
    while bytes.len() >= 23 {
        let len = u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        codecs.push(u16::from_be_bytes(bytes[21..23].try_into().unwrap()) & 7);
        bytes = &bytes[(12 + len).min(bytes.len())..];
    }
    codecs
}

#[test]
fn native_commands_pointed_at_the_kafka_listener_fail_at_once_and_say_so() {
    let server = Server::start(&[]);
    for args in [
        vec!["produce", "--topic", "t", "--count", "1"],
        vec!["consume", "--topic", "t", "--partition", "0"],
    ] {
        let started = std::time::Instant::now();
        let mut full = args.clone();
        full.extend(["--broker", server.kafka_addr.as_str()]);
        let output = Command::new(BIN)
            .args(&full)
            .output()
            .expect("run minibroker");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{args:?} took {:?}",
            started.elapsed()
        );
        assert!(
            stderr.contains("WRONG_LISTENER") && stderr.contains("Kafka listener"),
            "{args:?}: {stderr}"
        );
    }
}
