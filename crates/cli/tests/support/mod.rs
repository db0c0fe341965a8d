//! What the process-level tests share: a `minibroker serve` child process on known addresses,
//! killed when dropped, and the Kafka-client scripts (the virtualenv scripts/kafka-clients set
//! up).

#![allow(dead_code)] // each test binary uses its own part of this

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_minibroker");

/// A `minibroker serve` process, killed when dropped.
pub struct ServeProcess {
    child: Child,
    /// The native listener (empty for a broker of a cluster, which has none).
    pub addr: String,
    /// The Kafka listener.
    pub kafka_addr: String,
    /// The metrics listener, when `--metrics-listen` was given.
    pub metrics_addr: Option<String>,
    /// What it logged (stderr, at info), for assertions on what it did.
    log: PathBuf,
}

/// `minibroker serve` on `listen` and `kafka_listen`, logging at info.
pub fn serve_command(listen: &str, kafka_listen: &str) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--listen", listen, "--kafka-listen", kafka_listen])
        .env("RUST_LOG", "info");
    command
}

impl ServeProcess {
    /// Spawns `command` (a `serve` command line) and waits until both listeners are bound.
    pub fn spawn(command: &mut Command) -> Self {
        let with_metrics = command.get_args().any(|arg| arg == "--metrics-listen");
        let log = std::env::temp_dir().join(format!("minibroker-serve-{}.log", unique()));
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start minibroker serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = |prefix: &str| {
            let mut text = String::new();
            stdout.read_line(&mut text).expect("read a line");
            text.trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("expected {prefix:?}, got {text:?}"))
                .to_owned()
        };
        let cluster = command.get_args().any(|arg| arg == "--cluster");
        let addr = if cluster {
            String::new()
        } else {
            line("listening on ")
        };
        let kafka_addr = line("kafka listening on ");
        let metrics_addr = with_metrics.then(|| line("metrics listening on "));
        // Keep reading (and dropping) its output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in stdout.lines() {});
        Self {
            child,
            addr,
            kafka_addr,
            metrics_addr,
            log,
        }
    }

    /// SIGKILL: no drain, no sync, no snapshot.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, and wait for the clean exit.
    pub fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        assert!(self.child.wait().expect("exit").success());
    }

    /// Everything it logged so far.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs `minibroker ARGS --broker ADDR`; returns its stdout, failing on a failure.
    pub fn run(&self, args: &[&str]) -> String {
        self.run_with(args, &["--broker", &self.addr])
    }

    /// Runs `minibroker ARGS --kafka KAFKA_ADDR`; returns its stdout, failing on a failure.
    pub fn run_kafka(&self, args: &[&str]) -> String {
        self.run_with(args, &["--kafka", &self.kafka_addr])
    }

    fn run_with(&self, args: &[&str], target: &[&str]) -> String {
        let mut full: Vec<&str> = args.to_vec();
        full.extend_from_slice(target);
        let output = Command::new(BIN).args(&full).output().expect("run");
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }
}

impl ServeProcess {
    /// `send` one raw produce request to `topic`/`partition` as `producer_id` at `epoch` and
    /// `sequence`, with `extra` flags; returns its output.
    pub fn send(
        &self,
        (topic, partition): (&str, u32),
        (producer_id, epoch, sequence): (i64, i16, i32),
        extra: &[&str],
    ) -> String {
        let (partition, producer_id, epoch, sequence) = (
            partition.to_string(),
            producer_id.to_string(),
            epoch.to_string(),
            sequence.to_string(),
        );
        let mut args = vec![
            "send",
            "--topic",
            topic,
            "--partition",
            &partition,
            "--producer-id",
            &producer_id,
            "--epoch",
            &epoch,
            "--sequence",
            &sequence,
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A fault proxy (`minibroker proxy`) on `listen` in front of `upstream`, with `faults` flags,
/// once it listens: the process, the address it listens on, and its output (its fault summary
/// comes there once it is stopped).
pub fn start_proxy(
    listen: &str,
    upstream: &str,
    faults: &[&str],
) -> (Child, String, BufReader<std::process::ChildStdout>) {
    let mut proxy = Command::new(BIN)
        .args(["proxy", "--listen", listen, "--upstream", upstream])
        .args(faults)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start proxy");
    let mut output = BufReader::new(proxy.stdout.take().expect("stdout"));
    let mut first = String::new();
    output.read_line(&mut first).expect("the proxy's address");
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .expect("the proxy's address")
        .to_owned();
    (proxy, addr, output)
}

/// The faults `check --kafka` is run under by the tests that expect it to hold: lost answers
/// and requests, and requests held back to arrive after their retries.
pub const CHECK_FAULTS: [&str; 6] = [
    "--drop-response",
    "0.1",
    "--drop-request",
    "0.05",
    "--hold",
    "0.05",
];

/// A name no other test of this run uses.
pub fn unique() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A loopback address nobody listens on right now.
pub fn free_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// The virtualenv python with the Kafka clients: `MINIBROKER_KAFKA_PYTHON` when set (as
/// `./scripts/test` sets it), otherwise what `scripts/kafka-clients` installs (once per test
/// binary; it reuses an installation already there), so a plain `cargo test` runs these too.
pub fn kafka_python() -> String {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            if let Ok(python) = std::env::var("MINIBROKER_KAFKA_PYTHON") {
                return python;
            }
            let script = format!("{}/../../scripts/kafka-clients", env!("CARGO_MANIFEST_DIR"));
            let output = Command::new(&script)
                .stderr(Stdio::inherit())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
            assert!(
                output.status.success(),
                "{script} could not install the Kafka clients"
            );
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        })
        .clone()
}

/// A `tests/kafka/SCRIPT` command with `args`.
pub fn kafka_script(script: &str, args: &[&str]) -> Command {
    let path = format!("{}/../../tests/kafka/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new(kafka_python());
    command.arg(path).args(args);
    command
}

/// The JSON summary a Kafka-client script printed last, asserting that it succeeded.
pub fn summary_of(output: &std::process::Output, what: &str) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a summary line")).expect("json");
    assert_eq!(summary["ok"], true, "{summary}");
    summary
}

/// Runs `program` with `args` and `stdin` written to it; its whole output.
pub fn run_with_stdin<S: AsRef<std::ffi::OsStr>>(
    program: &str,
    args: &[S],
    stdin: &str,
) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("{program} (installed by scripts/kafka-clients): {error}"));
    // A child that exits before reading its input is the test's to judge, not a panic here.
    let _ = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes());
    child.wait_with_output().expect("output")
}

/// kcat with `args` and `stdin`.
pub fn kcat(args: &[&str], stdin: &str) -> std::process::Output {
    run_with_stdin("kcat", args, stdin)
}

/// `minibroker user add NAME` into `users`, with `password` on stdin.
pub fn add_user(users: &std::path::Path, name: &str, password: &str) {
    let users = users.display().to_string();
    let args = [
        "user",
        "add",
        name,
        "--users-file",
        &users,
        "--password-stdin",
    ];
    let output = run_with_stdin(BIN, &args, password);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A durable broker on fixed addresses (restarts reuse them), with the `always` flush policy.
pub fn durable_command(addrs: &(String, String), dir: &std::path::Path) -> Command {
    let mut command = serve_command(&addrs.0, &addrs.1);
    command
        .arg("--data-dir")
        .arg(dir)
        .args(["--flush", "always"]);
    command
}

/// Writes `count` values `SOURCE-i` over the source topic's 3 partitions, in one transaction of
/// transactional id SOURCE.
pub fn fill_source(kafka: &str, source: &str, count: usize) {
    let args = [
        "produce-open",
        kafka,
        source,
        source,
        &count.to_string(),
        "commit",
    ];
    let output = kafka_script("transactions.py", &args).output().unwrap();
    let summary = summary_of(&output, &format!("transactions.py {args:?}"));
    assert_eq!(summary["written"], count);
}

/// A Kafka-client script running in the background, once it printed its first line.
pub struct StartedScript {
    /// The script's process.
    pub child: Child,
    /// The first line it printed.
    pub first_line: String,
    stdout: BufReader<std::process::ChildStdout>,
}

impl StartedScript {
    /// Waits for the script to finish; the summary it printed last, asserting that it
    /// succeeded.
    pub fn summary(mut self) -> serde_json::Value {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).unwrap();
        let status = self.child.wait().unwrap();
        let last = rest.lines().last().unwrap_or_default();
        assert!(status.success(), "{status}: {}{rest}", self.first_line);
        let summary: serde_json::Value = serde_json::from_str(last).expect("json");
        assert_eq!(summary["ok"], true, "{summary}");
        summary
    }
}

/// Starts the Kafka-client script `script` with `args` and waits for the first line it prints.
pub fn start_script(script: &str, args: &[&str]) -> StartedScript {
    let mut child = kafka_script(script, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first_line = String::new();
    stdout.read_line(&mut first_line).unwrap();
    StartedScript {
        child,
        first_line,
        stdout,
    }
}
