//! `minibroker serve --data-dir` as a real process, killed with SIGKILL: producers running
//! `produce --acks` ride through several crashes of the broker on the same address, and the
//! verifier finds every acknowledged batch stored exactly once (flush `always` and `os`); a
//! batch acknowledged before a crash and resent after it is a DUPLICATE with its original
//! offset; a clean restart (SIGTERM) keeps everything; a torn tail is cut and the producer state
//! matches what is left.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{BIN, ServeProcess, free_addr, kafka_script, serve_command, summary_of};

/// A `minibroker serve --data-dir` process on a fixed native address, killed when dropped.
struct DurableServer {
    process: ServeProcess,
    data_dir: PathBuf,
}

impl DurableServer {
    /// Starts on `addr` (restarts reuse it).
    fn start(addr: &str, data_dir: &Path, flush: &str) -> Self {
        Self::spawn(&mut Self::command(addr, data_dir, flush), data_dir)
    }

    /// The `serve` command line for `addr`, `data_dir` and `flush`.
    fn command(addr: &str, data_dir: &Path, flush: &str) -> Command {
        Self::command_with_kafka(addr, "127.0.0.1:0", data_dir, flush)
    }

    /// As [`Self::command`], with the Kafka listener on `kafka`.
    fn command_with_kafka(addr: &str, kafka: &str, data_dir: &Path, flush: &str) -> Command {
        let mut command = serve_command(addr, kafka);
        command
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--flush", flush, "--partitions", "2"]);
        command
    }

    fn spawn(command: &mut Command, data_dir: &Path) -> Self {
        Self {
            process: ServeProcess::spawn(command),
            data_dir: data_dir.to_owned(),
        }
    }

    /// SIGKILL: no drain, no sync, no snapshot.
    fn kill(self) -> PathBuf {
        self.process.kill();
        self.data_dir
    }

    /// SIGTERM, and wait for the clean exit.
    fn terminate(self) -> PathBuf {
        self.process.terminate();
        self.data_dir
    }

    fn logged(&self) -> String {
        self.process.logged()
    }

    fn run(&self, args: &[&str]) -> String {
        self.process.run(args)
    }

    /// `send` one batch as producer 7, epoch 0, at `sequence`; returns (outcome, offset).
    fn send(&self, sequence: i32) -> (String, Option<i64>) {
        let line = self
            .process
            .send(("dedup", 0), (7, 0, sequence), &["--json"]);
        let answer: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        (
            answer["outcome"].as_str().unwrap().to_owned(),
            answer["offset"].as_i64(),
        )
    }
}

#[test]
fn producers_ride_through_sigkills_and_every_acknowledged_batch_is_stored_once() {
    ride_through_sigkills("always");
}

/// With `os` a produce is answered once its batch is written (not synced): a killed process
/// loses nothing it answered, so the same holds. Batches wait in memory to be written together,
/// and an answer sent before that write would be lost here.
#[test]
fn with_flush_os_every_batch_acknowledged_before_a_sigkill_is_stored_once() {
    ride_through_sigkills("os");
}

/// Batches of 10 records each producer sends: enough that the kills come while they run.
const BATCHES: usize = 10_000;

/// Three producers of [`BATCHES`] batches each; the broker is killed three times under them.
fn ride_through_sigkills(flush: &str) {
    let records = (BATCHES * 10).to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let addr = free_addr();
    let mut server = DurableServer::start(&addr, &data, flush);
    let mut producers: Vec<(Child, PathBuf)> = (0..3)
        .map(|i| {
            let acks = dir.path().join(format!("acks-{i}.jsonl"));
            let partition = (i % 2).to_string();
            let child = Command::new(BIN)
                .args(["produce", "--broker", &addr, "--topic", "crash"])
                .args([
                    "--partition",
                    &partition,
                    "--count",
                    &records,
                    "--batch-size",
                    "10",
                ])
                .args(["--timeout-ms", "1000", "--acks"])
                .arg(&acks)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start produce");
            (child, acks)
        })
        .collect();
    let mut kills_mid_run = 0;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(400));
        let running = producers.iter_mut().any(|(child, acks)| {
            std::fs::metadata(acks).is_ok_and(|m| m.len() > 0)
                && child.try_wait().expect("poll producer").is_none()
        });
        let data = server.kill();
        if running {
            kills_mid_run += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
        server = DurableServer::start(&addr, &data, flush);
    }
    let mut acked_files = Vec::new();
    let mut resent = 0;
    for (child, acks) in producers {
        let output = child.wait_with_output().unwrap();
        let summary = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "a producer failed: {summary}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        resent += summary
            .split_whitespace()
            .find_map(|field| field.strip_prefix("retries="))
            .and_then(|n| n.parse::<u64>().ok())
            .expect("a retries= field");
        acked_files.push(acks);
    }
    assert!(resent > 0, "the producers never had to resend");
    assert!(
        kills_mid_run >= 2,
        "only {kills_mid_run} kills came mid-run"
    );
    let acked: usize = acked_files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap().lines().count())
        .sum();
    assert_eq!(acked, 3 * BATCHES, "every batch acknowledged once");
    let mut args = vec!["verify", "--topic", "crash"];
    let names: Vec<String> = acked_files
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    for name in &names {
        args.extend(["--expect", name]);
    }
    let report = server.run(&args);
    assert!(report.contains("PASS"), "{report}");
    // Stored exactly what was acknowledged: 3 × `BATCHES` batches of 10 records.
    let total = 3 * BATCHES;
    assert!(
        report.contains(&format!("{total} batches, {} records", total * 10)),
        "{report}"
    );
    assert!(
        report.contains(&format!("acknowledged batches checked: {total}")),
        "{report}"
    );
    assert!(
        server.logged().contains("recovered"),
        "the restarted broker recovered its partitions"
    );
}

#[test]
fn a_librdkafka_producer_rides_through_a_sigkill_and_every_record_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (addr, kafka) = (free_addr(), free_addr());
    let start = || {
        DurableServer::spawn(
            &mut DurableServer::command_with_kafka(&addr, &kafka, &data, "always"),
            &data,
        )
    };
    let server = start();
    let mut producer = kafka_script("clients.py", &["steady", &kafka, "steady", "2", "30000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        producer.try_wait().unwrap().is_none(),
        "the producer finished before the broker was killed"
    );
    server.kill();
    std::thread::sleep(Duration::from_millis(200));
    let server = start();
    let delivered = summary_of(&producer.wait_with_output().unwrap(), "steady producer");
    assert_eq!(delivered["delivered"], 30000, "{delivered}");
    let read = kafka_script("clients.py", &["read-all", &kafka, "steady", "2", "30000"])
        .output()
        .unwrap();
    let read = summary_of(&read, "read-all");
    assert_eq!(read["repeated"], 0, "{read}");
    let report = server.run(&["verify", "--topic", "steady"]);
    assert!(
        report.contains("30000 records") && report.contains("PASS"),
        "{report}"
    );
}

#[test]
fn a_batch_acknowledged_before_a_crash_is_a_duplicate_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let addr = free_addr();
    let server = DurableServer::start(&addr, &data, "always");
    for sequence in 0..5 {
        assert_eq!(
            server.send(sequence),
            ("ACCEPTED".into(), Some(sequence.into()))
        );
    }
    let data = server.kill();
    let server = DurableServer::start(&addr, &data, "always");
    // The retry of an acknowledged batch is recognised, with its original offset.
    assert_eq!(server.send(4), ("DUPLICATE".into(), Some(4)));
    assert_eq!(server.send(2), ("DUPLICATE".into(), Some(2)));
    // A gap is still a gap, and the next sequence goes on at the next offset.
    assert_eq!(server.send(7).0, "OUT_OF_ORDER");
    assert_eq!(server.send(5), ("ACCEPTED".into(), Some(5)));
    // A clean stop snapshots state: the next start replays no batch and keeps everything.
    let data = server.terminate();
    let server = DurableServer::start(&addr, &data, "os");
    assert_eq!(server.send(5), ("DUPLICATE".into(), Some(5)));
    assert_eq!(server.send(6), ("ACCEPTED".into(), Some(6)));
    let logged = server.logged();
    assert!(logged.contains("replayed=0"), "{logged}");
    let consumed = server.run(&["consume", "--topic", "dedup", "--partition", "0"]);
    assert_eq!(consumed.lines().count(), 7, "{consumed}");
}

#[test]
fn a_torn_or_damaged_tail_is_cut_and_producer_state_matches_what_is_left() {
    for damage in ["truncate", "garbage", "flip"] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let addr = free_addr();
        let server = DurableServer::start(&addr, &data, "always");
        for sequence in 0..10 {
            server.send(sequence);
        }
        let data = server.kill();
        let segment = data.join("logs/dedup/0/00000000000000000000.log");
        let mut bytes = std::fs::read(&segment).unwrap();
        let whole = bytes.len();
        match damage {
            // Into the last batch: it is torn.
            "truncate" => bytes.truncate(whole - 7),
            "garbage" => bytes.extend_from_slice(&[0xAB; 100]),
            // A byte of the last batch's records: its CRC fails.
            _ => bytes[whole - 3] ^= 0xFF,
        }
        std::fs::write(&segment, &bytes).unwrap();
        let server = DurableServer::start(&addr, &data, "always");
        let logged = server.logged();
        assert!(
            logged.contains("cut a torn or damaged tail"),
            "{damage}: {logged}"
        );
        if damage == "garbage" {
            // All ten batches survive; only the garbage went.
            assert_eq!(server.send(9), ("DUPLICATE".into(), Some(9)), "{damage}");
            assert_eq!(server.send(10), ("ACCEPTED".into(), Some(10)), "{damage}");
        } else {
            // The last batch is gone, and the producer state says so: its resend is accepted
            // at the same offset, and the one before it is a duplicate.
            assert_eq!(server.send(8), ("DUPLICATE".into(), Some(8)), "{damage}");
            assert_eq!(server.send(9), ("ACCEPTED".into(), Some(9)), "{damage}");
        }
        drop(server);
    }
}

/// A durable server in `dir/data` with segments of 4 KiB (and `settings`), and 20 batches of
/// 1 KB in partition 0 of `topic`: several sealed segments. Returns its address too.
fn small_segments(dir: &Path, settings: &str, topic: &str) -> (String, DurableServer) {
    let data = dir.join("data");
    let config = dir.join("small-segments.toml");
    std::fs::write(&config, format!("segment_bytes = 4096\n{settings}")).unwrap();
    let addr = free_addr();
    let mut command = DurableServer::command(&addr, &data, "os");
    let server = DurableServer::spawn(command.arg("--config").arg(&config), &data);
    let value = "v".repeat(1000);
    for sequence in 0..20 {
        server
            .process
            .send((topic, 0), (1, 0, sequence), &["--value", &value]);
    }
    (addr, server)
}

#[test]
fn a_missing_segment_refuses_to_start_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, server) = small_segments(dir.path(), "", "gap");
    let data = server.kill();
    let partition = data.join("logs/gap/0");
    let mut segments: Vec<String> = std::fs::read_dir(&partition)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".log"))
        .collect();
    segments.sort();
    assert!(segments.len() >= 3, "{segments:?}");
    std::fs::remove_file(partition.join(&segments[1])).unwrap();
    let output = DurableServer::command(&addr, &data, "os").output().unwrap();
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains(&segments[1]), "{error}");
    assert!(error.contains("missing"), "{error}");
}

#[test]
fn a_second_broker_cannot_use_the_same_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _first = DurableServer::start(&free_addr(), &data, "always");
    let output = DurableServer::command(&free_addr(), &data, "always")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("another minibroker is using it"), "{error}");
}

/// Copies the directory `from` to `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "lock" {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn check_data(dir: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(["check-data", "--data-dir"])
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn check_data_finds_a_flipped_byte_in_every_kind_of_file() {
    let dir = tempfile::tempdir().unwrap();
    // The short sessions of the group client, too.
    let (_, server) = small_segments(
        dir.path(),
        "group_min_session_timeout_ms = 1000\n",
        "checked",
    );
    server.run(&["init-producer"]);
    let committed = kafka_script(
        "groups.py",
        &["commit", &server.process.kafka_addr, "kept", "g", "5"],
    )
    .output()
    .unwrap();
    summary_of(&committed, "groups.py commit");
    let transaction = kafka_script(
        "transactions.py",
        &[
            "produce-open",
            &server.process.kafka_addr,
            "txn",
            "checked-txn",
            "4",
            "commit",
        ],
    )
    .output()
    .unwrap();
    summary_of(&transaction, "transactions.py produce-open");
    // A topic with settings of its own, and partitions whose start DeleteRecords moved.
    for (command, topic) in [("alter-configs", "altered"), ("delete-records", "trimmed")] {
        let admin = kafka_script("admin.py", &[command, &server.process.kafka_addr, topic])
            .output()
            .unwrap();
        summary_of(&admin, &format!("admin.py {command}"));
    }
    let data = server.terminate();
    let clean = check_data(&data);
    let report = String::from_utf8_lossy(&clean.stdout);
    assert!(clean.status.success(), "{report}");
    assert!(report.contains(": 0 damaged"), "{report}");
    let files = files_under(&data);
    let named = |what: &str, test: &dyn Fn(&str) -> bool| {
        files
            .iter()
            .filter(|path| test(&path.to_string_lossy()))
            .max_by_key(|path| std::fs::metadata(path).unwrap().len())
            .unwrap_or_else(|| panic!("no {what} file in {files:?}"))
            .clone()
    };
    let kinds = [
        named("topic list", &|p| p.ends_with("/topics")),
        named("producer-id", &|p| p.ends_with("/producer-ids")),
        named("topic settings", &|p| p.ends_with("/topic-configs")),
        named("start offset", &|p| p.ends_with("/log-start-offset")),
        named("group offsets", &|p| p.ends_with(".offsets")),
        named("segment", &|p| {
            p.ends_with(".log") && !p.ends_with("/transactions.log")
        }),
        named("transaction log", &|p| p.ends_with("/transactions.log")),
        named("index", &|p| p.ends_with(".index")),
        named("snapshot", &|p| p.ends_with(".snapshot")),
    ];
    for original in kinds {
        let copy = dir.path().join("copy");
        let _ = std::fs::remove_dir_all(&copy);
        copy_dir(&data, &copy);
        let damaged = copy.join(original.strip_prefix(&data).unwrap());
        let mut bytes = std::fs::read(&damaged).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x10;
        std::fs::write(&damaged, bytes).unwrap();
        let output = check_data(&copy);
        let report = String::from_utf8_lossy(&output.stdout);
        if damaged.to_string_lossy().ends_with(".index") {
            // Indexes are written unsynced, as a crash may leave them: a start scans the
            // segment and writes the index again, so it is a note, not damage.
            assert!(output.status.success(), "{}: {report}", damaged.display());
            let line = format!("note {}: does not read", damaged.display());
            assert!(report.contains(&line), "{line} not in {report}");
            continue;
        }
        assert!(!output.status.success(), "{}: {report}", damaged.display());
        let line = format!("DAMAGED {}", damaged.display());
        assert!(report.contains(&line), "{line} not in {report}");
    }
}

#[test]
fn check_data_reads_the_producer_owners_and_finds_a_flipped_byte() {
    let dir = tempfile::tempdir().unwrap();
    let acls = dir.path().join("acls");
    let settings = format!(
        "acls_file = {:?}\nallow_everyone_if_no_acl_found = true\n",
        acls.display().to_string()
    );
    let data = dir.path().join("data");
    let config = dir.path().join("owners.toml");
    std::fs::write(&config, settings).unwrap();
    let addr = free_addr();
    let mut command = DurableServer::command(&addr, &data, "os");
    let server = DurableServer::spawn(command.arg("--config").arg(&config), &data);
    server.run(&["init-producer"]);
    server.run(&["init-producer"]);
    let data = server.terminate();
    let owners = data.join("producer-owners");
    let bytes = std::fs::read(&owners).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("User:ANONYMOUS"))
            .count(),
        2,
        "{text}"
    );
    let clean = check_data(&data);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    let mut bytes = std::fs::read(&owners).unwrap();
    let last_line = bytes.len() - 12;
    bytes[last_line] ^= 0x01;
    std::fs::write(&owners, bytes).unwrap();
    let output = check_data(&data);
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{report}");
    assert!(
        report.contains(&format!("DAMAGED {}", owners.display())),
        "{report}"
    );
}

#[test]
fn a_torn_change_of_the_topic_list_is_reported_by_check_data_and_left_out_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let addr = free_addr();
    let server = DurableServer::spawn(&mut DurableServer::command(&addr, &data, "os"), &data);
    server.run(&["topic", "create", "--topic", "first", "--partitions", "2"]);
    server.run(&["topic", "create", "--topic", "second", "--partitions", "3"]);
    let data = server.terminate();
    // A crash in the middle of appending a third topic: part of its record reached the disk.
    let topics = data.join("topics");
    let mut bytes = std::fs::read(&topics).unwrap();
    bytes.extend_from_slice(&[0, 0, 0, 30, 0, b'M', b'B', b't']);
    std::fs::write(&topics, bytes).unwrap();
    let output = check_data(&data);
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{report}");
    assert!(
        report.contains(&format!("DAMAGED {}", topics.display())) && report.contains("torn tail"),
        "{report}"
    );
    let server = DurableServer::spawn(&mut DurableServer::command(&addr, &data, "os"), &data);
    let listed = server.run(&["topic", "list"]);
    assert!(
        listed.contains("first") && listed.contains("second"),
        "{listed}"
    );
}
