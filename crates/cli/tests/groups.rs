//! Consumer groups with real Kafka clients (`tests/kafka/groups.py`): confluent-kafka consumers
//! split a topic and take over from one that leaves or is killed, a new member resumes at the
//! committed offsets (across a broker restart too, with `--data-dir`), kafka-python and aiokafka
//! group consumers read to the end, a read-process-write pipeline through a faulty network, and
//! `minibroker groups` shows it all.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use support::{BIN, ServeProcess, free_addr, kafka_script, serve_command, start_proxy, summary_of};

/// Members may ask for short sessions here, so a killed one is noticed in seconds.
const SHORT_SESSIONS: &str = "group_min_session_timeout_ms = 1000\n";

fn config_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("groups.toml");
    std::fs::write(&path, SHORT_SESSIONS).unwrap();
    path
}

fn start(dir: &std::path::Path, extra: &[&str]) -> ServeProcess {
    let mut command = serve_command("127.0.0.1:0", "127.0.0.1:0");
    command.arg("--config").arg(config_file(dir)).args(extra);
    ServeProcess::spawn(&mut command)
}

fn groups(script_args: &[&str]) -> serde_json::Value {
    let output = kafka_script("groups.py", script_args).output().unwrap();
    summary_of(&output, &format!("groups.py {script_args:?}"))
}

#[test]
fn two_confluent_consumers_split_six_partitions_and_one_takes_over_when_the_other_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    // The assignment is the leader client's: each strategy is relayed as it is.
    for strategy in ["range", "roundrobin", "cooperative-sticky"] {
        let topic = format!("shared-{strategy}");
        let summary = groups(&["split", &server.kafka_addr, &topic, strategy]);
        assert_eq!(summary["read"], 600, "{summary}");
        assert_eq!(summary["exactly_once"], true, "{summary}");
        assert_eq!(summary["took_over"], true, "{summary}");
        // The split was disjoint and whole (checked by the script), three and three.
        let split = summary["split"].as_array().unwrap();
        assert_eq!(split[0].as_array().unwrap().len(), 3, "{summary}");
    }
}

#[test]
fn a_new_member_resumes_at_the_committed_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let summary = groups(&["resume", &server.kafka_addr, "resumed"]);
    assert_eq!(summary["before_commit"], 50, "{summary}");
    assert_eq!(summary["after_resume"], 70, "{summary}");
    assert_eq!(summary["reread"], 0, "{summary}");
    // `minibroker groups` sees the group, its committed offsets and the lag behind them: the
    // first member read 50 records of partition 0 (of 60) and committed; the second read the
    // rest but did not commit. Partitions without a commit and without an owner have no lag.
    let listed = cli_json(&["groups", "--kafka", &server.kafka_addr, "--json"]);
    assert!(
        listed["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"] == "resume" && g["state"] == "Empty"),
        "{listed}"
    );
    let described = cli_json(&[
        "groups",
        "--kafka",
        &server.kafka_addr,
        "--describe",
        "resume",
        "--json",
    ]);
    let partitions = described["partitions"].as_array().unwrap();
    let sum = |field: &str| {
        partitions
            .iter()
            .map(|p| p[field].as_i64().unwrap_or(0))
            .sum::<i64>()
    };
    assert_eq!(sum("committed"), 50, "{described}");
    assert_eq!(sum("lag"), sum("end") - 50, "{described}");
    assert!(sum("lag") > 0, "{described}");
    let text = cli_text(&[
        "groups",
        "--kafka",
        &server.kafka_addr,
        "--describe",
        "resume",
    ]);
    assert!(text.contains("LAG") && text.contains("resumed"), "{text}");
    // A group the broker does not know is an error, not an empty Dead group.
    let unknown = Command::new(BIN)
        .args([
            "groups",
            "--kafka",
            &server.kafka_addr,
            "--describe",
            "nosuch",
        ])
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("no group named \"nosuch\""), "{stderr}");
}

fn cli_text(args: &[&str]) -> String {
    let output = Command::new(BIN).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn cli_json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&cli_text(args)).unwrap()
}

#[test]
fn a_killed_member_is_removed_after_its_session_timeout_and_its_partitions_reassigned() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let mut member = kafka_script("groups.py", &["member", &server.kafka_addr, "killed", "g"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(member.stdout.take().unwrap()).lines();
    // Wait until the member owns the partitions.
    loop {
        let line = lines.next().expect("the member's output").unwrap();
        if !line.contains("\"assigned\": []") {
            break;
        }
    }
    let mut survivor = kafka_script(
        "groups.py",
        &["survivor", &server.kafka_addr, "killed", "g"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut survivor_lines = BufReader::new(survivor.stdout.take().unwrap()).lines();
    let shared = survivor_lines
        .next()
        .expect("the survivor's first line")
        .unwrap();
    assert!(shared.contains("\"shared\": true"), "{shared}");
    // SIGKILL: the member never leaves; only its session timeout (3 s) can remove it.
    member.kill().unwrap();
    member.wait().unwrap();
    let status = survivor.wait().unwrap();
    let last = survivor_lines.last().expect("a summary").unwrap();
    assert!(status.success(), "{last}");
    let summary: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(summary["took_over"], true, "{summary}");
    let seconds = summary["seconds"].as_f64().unwrap();
    assert!(
        seconds >= 2.0,
        "reassigned before the session could expire: {summary}"
    );
    assert!(
        server.logged().contains("sessions expired"),
        "the coordinator removed the member"
    );
}

#[test]
fn kafka_python_and_aiokafka_group_consumers_read_a_topic_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    for client in ["kafka-python", "aiokafka"] {
        let summary = groups(&[client, &server.kafka_addr, &format!("to-the-end-{client}")]);
        assert_eq!(summary["read"], 300, "{summary}");
        assert_eq!(
            summary["assigned"].as_array().unwrap().len(),
            6,
            "{summary}"
        );
    }
}

#[test]
fn committed_offsets_survive_a_broker_restart_with_a_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let kafka = free_addr();
    let durable = ["--data-dir", data];
    let server = {
        let mut command = serve_command("127.0.0.1:0", &kafka);
        command
            .arg("--config")
            .arg(config_file(dir.path()))
            .args(durable);
        ServeProcess::spawn(&mut command)
    };
    let committed = groups(&["commit", &server.kafka_addr, "kept", "g", "40"]);
    assert_eq!(committed["committed"], 40, "{committed}");
    server.kill();
    let mut command = serve_command("127.0.0.1:0", &kafka);
    command
        .arg("--config")
        .arg(config_file(dir.path()))
        .args(durable);
    let restarted = ServeProcess::spawn(&mut command);
    let position = groups(&["position", &restarted.kafka_addr, "kept", "g"]);
    assert_eq!(position["first_offset"], 40, "{position}");
}

#[test]
fn a_read_process_write_pipeline_through_a_faulty_network_loses_nothing_and_adds_no_retries() {
    let dir = tempfile::tempdir().unwrap();
    let proxy_addr = free_addr();
    let server = start(dir.path(), &["--kafka-advertise", &proxy_addr]);
    let (mut proxy, _, mut proxy_out) = start_proxy(
        &proxy_addr,
        &server.kafka_addr,
        &["--reset", "0.05", "--seed", "1"],
    );
    let summary = groups(&["pipeline", &proxy_addr, "source", "sink"]);
    // Every record of the source reached the sink, and the sink holds exactly what the
    // consumer handed out: no duplicate from the producer's retries across the resets.
    assert_eq!(summary["source"], 300, "{summary}");
    assert_eq!(summary["written"], summary["handed_out"], "{summary}");
    // The network did reset connections under the clients.
    let pid = proxy.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    proxy.wait().unwrap();
    let mut faults = String::new();
    std::io::Read::read_to_string(&mut proxy_out, &mut faults).unwrap();
    let resets: u64 = faults
        .split_whitespace()
        .find_map(|f| f.strip_prefix("resets="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fault summary in {faults:?}"));
    assert!(resets > 0, "{faults}");
}
