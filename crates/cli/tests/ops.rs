//! Operating the broker: `/metrics` counts each outcome exactly once and parses with a real
//! Prometheus parser (the `prometheus_client` Python package's), `/ready` turns ready only once
//! the listeners are bound, the admin commands work against a live broker with `--json` that
//! parses, JSON logs, and shell completions.

mod support;

use minibroker_host::Host;
use minibroker_host::{Config, NetConfig};
use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use support::{BIN, ServeProcess, kafka_script, serve_command, summary_of};

/// The samples of a scrape, parsed by the Python parser: name and sorted labels → value.
fn scrape(metrics_addr: &str) -> HashMap<String, f64> {
    let url = format!("http://{metrics_addr}/metrics");
    let output = kafka_script("metrics.py", &[&url]).output().unwrap();
    let summary = summary_of(&output, "metrics.py");
    assert!(
        summary["content_type"]
            .as_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{summary}"
    );
    summary["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sample| {
            let mut labels: Vec<String> = sample[1]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
                .collect();
            labels.sort();
            (
                format!("{}{{{}}}", sample[0].as_str().unwrap(), labels.join(",")),
                sample[2].as_f64().unwrap(),
            )
        })
        .collect()
}

fn outcome(samples: &HashMap<String, f64>, outcome: &str) -> f64 {
    let key = format!("minibroker_produce_outcomes_total{{outcome={outcome},topic=m}}");
    samples.get(&key).copied().unwrap_or(0.0)
}

#[test]
fn each_outcome_moves_its_counter_by_exactly_one() {
    let server = ServeProcess::spawn(
        serve_command("127.0.0.1:0", "127.0.0.1:0").args(["--metrics-listen", "127.0.0.1:0"]),
    );
    let metrics = server.metrics_addr.clone().unwrap();
    let send = |epoch: i16, sequence: i32| server.send(("m", 0), (9, epoch, sequence), &[]);
    let steps = [
        ((0, 0), "accepted"),
        ((0, 0), "duplicate"),
        ((0, 5), "out_of_order"),
        ((1, 0), "accepted"),
        ((0, 1), "fenced_epoch"),
    ];
    let outcomes = ["accepted", "duplicate", "out_of_order", "fenced_epoch"];
    let mut before = scrape(&metrics);
    for ((epoch, sequence), expected) in steps {
        send(epoch, sequence);
        let after = scrape(&metrics);
        for name in outcomes {
            let moved = outcome(&after, name) - outcome(&before, name);
            let wanted = if name == expected { 1.0 } else { 0.0 };
            assert_eq!(moved, wanted, "{name} after a request answered {expected}");
        }
        before = after;
    }
    // The rest is there too: records in, offsets, state entries, request latencies.
    assert_eq!(before["minibroker_records_in_total{topic=m}"], 2.0);
    assert_eq!(
        before["minibroker_log_end_offset{partition=0,topic=m}"],
        2.0
    );
    assert_eq!(before["minibroker_producer_state_entries{}"], 1.0);
    assert!(
        before["minibroker_request_duration_seconds_count{kind=produce,protocol=native}"] >= 5.0
    );
    assert!(before.contains_key("minibroker_connections_accepted_total{}"));
}

#[test]
fn ready_only_once_the_listeners_are_bound() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = Config {
        net: NetConfig {
            metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
            ..NetConfig::default()
        },
        ..Config::default()
    };
    let host = {
        let _entered = runtime.enter();
        Host::start(&config).unwrap()
    };
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(minibroker_metrics::serve(
        listener,
        Arc::clone(host.node()),
        std::future::pending(),
    ));
    let health = |path: &str| {
        Command::new(BIN)
            .args(["health", &format!("http://{addr}{path}")])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(health("/health"), "the process answers from the start");
    assert!(
        !health("/ready"),
        "not ready before the listeners are bound"
    );
    host.set_ready();
    assert!(health("/ready"), "ready once they are");
    // `serve` marks itself ready once it has bound both listeners.
    let server = ServeProcess::spawn(
        serve_command("127.0.0.1:0", "127.0.0.1:0").args(["--metrics-listen", "127.0.0.1:0"]),
    );
    let metrics = server.metrics_addr.clone().unwrap();
    let ready = Command::new(BIN)
        .args(["health", &format!("http://{metrics}/ready")])
        .output()
        .unwrap();
    assert!(ready.status.success());
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

#[test]
fn admin_commands_against_a_live_broker_with_json_that_parses() {
    let server = ServeProcess::spawn(&mut serve_command("127.0.0.1:0", "127.0.0.1:0"));
    let created = json_lines(&server.run(&[
        "topic",
        "create",
        "--topic",
        "orders",
        "--partitions",
        "3",
        "--json",
    ]));
    assert_eq!(created[0]["created"], "orders");
    for partition in [0, 2] {
        server.send(("orders", partition), (4, 0, 0), &[]);
    }
    let listed = json_lines(&server.run(&["topic", "list", "--json"]));
    assert_eq!(listed[0]["topics"][0]["topic"], "orders");
    assert_eq!(listed[0]["topics"][0]["partitions"], 3);
    let described = json_lines(&server.run(&["topic", "describe", "--topic", "orders", "--json"]));
    let partitions = described[0]["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 3);
    assert_eq!(partitions[0]["log_end_offset"], 1);
    assert_eq!(partitions[1]["log_end_offset"], 0);
    assert_eq!(partitions[2]["producers"], 1);
    let producers = json_lines(&server.run(&["producers", "--topic", "orders", "--json"]));
    let seen: Vec<_> = producers
        .iter()
        .map(|p| (p["partition"].clone(), p["producer_id"].clone()))
        .collect();
    assert_eq!(seen, vec![(0.into(), 4.into()), (2.into(), 4.into())]);
    let text = server.run(&["topic", "describe", "--topic", "orders"]);
    assert!(text.contains("PRODUCERS"), "{text}");
    let deleted = json_lines(&server.run(&["topic", "delete", "--topic", "orders", "--json"]));
    assert_eq!(deleted[0]["deleted"], "orders");
    let after = json_lines(&server.run(&["topic", "list", "--json"]));
    assert_eq!(after[0]["topics"].as_array().unwrap().len(), 0);
}

#[test]
fn json_logs_and_shell_completions() {
    let server = ServeProcess::spawn(
        serve_command("127.0.0.1:0", "127.0.0.1:0").args(["--log-format", "json"]),
    );
    server.send(("logged", 0), (1, 0, 0), &[]);
    let logged = server.logged();
    let lines: Vec<_> = logged.lines().collect();
    assert!(!lines.is_empty());
    for line in lines {
        let entry: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            entry["level"].is_string() && entry["fields"].is_object(),
            "{entry}"
        );
    }
    for shell in ["bash", "zsh", "fish"] {
        let output = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(output.status.success());
        let script = String::from_utf8(output.stdout).unwrap();
        assert!(
            script.contains("minibroker") && script.contains("groups"),
            "{shell}"
        );
    }
}

#[test]
fn transactions_are_counted_and_an_open_one_shows_as_lso_lag() {
    let server = ServeProcess::spawn(
        serve_command("127.0.0.1:0", "127.0.0.1:0").args(["--metrics-listen", "127.0.0.1:0"]),
    );
    let metrics = server.metrics_addr.clone().unwrap();
    let kafka = &server.kafka_addr;
    let run = |txn: &str, end: &str| {
        let output = kafka_script(
            "transactions.py",
            &["produce-open", kafka, "tm", txn, "3", end],
        )
        .output()
        .unwrap();
        summary_of(&output, "transactions.py produce-open");
    };
    run("committing", "commit");
    run("aborting", "abort");
    let mut open = kafka_script(
        "transactions.py",
        &["produce-open", kafka, "tm", "open", "3", "open"],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(open.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let samples = scrape(&metrics);
    let value = |key: &str| samples.get(key).copied().unwrap_or(-1.0);
    assert_eq!(
        value("minibroker_transactions_committed_total{}"),
        1.0,
        "{samples:?}"
    );
    assert_eq!(
        value("minibroker_transactions_aborted_total{}"),
        1.0,
        "{samples:?}"
    );
    assert_eq!(value("minibroker_transactions_open{}"), 1.0, "{samples:?}");
    // Each of the three partitions: 1 committed record + marker, 1 aborted + marker, then the
    // open transaction's record, which the LSO stops before.
    for partition in 0..3 {
        let lag = format!("minibroker_lso_lag{{partition={partition},topic=tm}}");
        assert_eq!(value(&lag), 1.0, "{samples:?}");
    }
    open.kill().unwrap();
    open.wait().unwrap();
}

#[test]
fn the_metrics_listener_serves_https_and_asks_for_its_bearer_token() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let made = Command::new(BIN)
        .args(["certificates", "--out"])
        .arg(&pki)
        .output()
        .unwrap();
    assert!(made.status.success());
    std::fs::write(dir.path().join("token"), "s3cret-token\n").unwrap();
    let config = dir.path().join("metrics.toml");
    std::fs::write(
        &config,
        format!(
            "metrics_tls = true\ntls_cert = {:?}\ntls_key = {:?}\nmetrics_bearer_token_file = {:?}\n",
            pki.join("server.pem").display().to_string(),
            pki.join("server.key").display().to_string(),
            dir.path().join("token").display().to_string(),
        ),
    )
    .unwrap();
    let server = ServeProcess::spawn(
        serve_command("127.0.0.1:0", "127.0.0.1:0")
            .args(["--metrics-listen", "127.0.0.1:0", "--config"])
            .arg(&config),
    );
    let addr = server.metrics_addr.clone().unwrap();
    let ca = pki.join("ca.pem").display().to_string();
    let metrics = format!("https://{addr}/metrics");
    let status = |args: &[&str]| {
        let output = kafka_script("metrics.py", args).output().unwrap();
        summary_of(&output, &format!("metrics.py {args:?}"))["status"].clone()
    };
    // Without the token, or with a wrong one: 401. Health checks need none.
    assert_eq!(
        status(&["--ca", &ca, "--expect-status", "401", &metrics]),
        401
    );
    let wrong = [
        "--ca",
        &ca,
        "--token",
        "guess",
        "--expect-status",
        "401",
        &metrics,
    ];
    assert_eq!(status(&wrong), 401);
    let ready = format!("https://{addr}/ready");
    assert_eq!(
        status(&["--ca", &ca, "--expect-status", "200", &ready]),
        200
    );
    // With it, over TLS: a scrape that parses.
    let output = kafka_script(
        "metrics.py",
        &["--ca", &ca, "--token", "s3cret-token", &metrics],
    )
    .output()
    .unwrap();
    let summary = summary_of(&output, "metrics.py over https");
    assert!(
        summary["samples"].as_array().is_some_and(|s| !s.is_empty()),
        "{summary}"
    );
    // `minibroker health` speaks TLS to an https:// URL, trusting --tls-ca, and says what is
    // missing without it.
    let health = |extra: &[&str]| {
        Command::new(BIN)
            .args(["health", &ready])
            .args(extra)
            .output()
            .unwrap()
    };
    let checked = health(&["--tls-ca", &ca]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let refused = health(&[]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("give --tls-ca"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // Plain HTTP to the HTTPS port gets no answer.
    let plain = kafka_script("metrics.py", &[&format!("http://{addr}/health")])
        .output()
        .unwrap();
    assert!(!plain.status.success());
}

#[test]
fn topic_settings_are_set_altered_and_described_by_the_cli_and_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let serve = || {
        ServeProcess::spawn(
            serve_command("127.0.0.1:0", "127.0.0.1:0")
                .arg("--data-dir")
                .arg(dir.path()),
        )
    };
    let server = serve();
    server.run(&[
        "topic",
        "create",
        "--topic",
        "tuned",
        "--config",
        "retention.ms=60000",
        "--config",
        "segment.bytes=1048576",
    ]);
    server.run(&[
        "topic",
        "alter",
        "--topic",
        "tuned",
        "--config",
        "max.message.bytes=100000",
        "--delete-config",
        "retention.ms",
    ]);
    // One value refused refuses the whole change (8192 alone would do), naming the setting.
    let refused = Command::new(BIN)
        .args([
            "topic",
            "alter",
            "--topic",
            "tuned",
            "--config",
            "segment.bytes=8192",
        ])
        .args(["--config", "segment.bytes=soon", "--broker", &server.addr])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let reason = String::from_utf8_lossy(&refused.stderr);
    assert!(reason.contains("segment.bytes"), "{reason}");
    let settings = |server: &ServeProcess| {
        let described =
            json_lines(&server.run(&["topic", "describe", "--topic", "tuned", "--json"]));
        described[0]["configs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let name = c["name"].as_str().unwrap().to_owned();
                let value = format!(
                    "{}={}",
                    c["value"].as_str().unwrap(),
                    c["source"].as_str().unwrap()
                );
                (name, value)
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let expected = [
        ("retention.ms", "-1=default"),
        ("segment.bytes", "1048576=topic"),
        ("max.message.bytes", "100000=topic"),
    ];
    let check = |found: &std::collections::BTreeMap<String, String>| {
        for (name, want) in expected {
            assert_eq!(found[name], want, "{name} in {found:?}");
        }
    };
    check(&settings(&server));
    let text = server.run(&["topic", "describe", "--topic", "tuned"]);
    assert!(
        text.contains("max.message.bytes") && text.contains("SOURCE"),
        "{text}"
    );
    // SIGKILL: every change was on disk before it was answered.
    server.kill();
    check(&settings(&serve()));
}
