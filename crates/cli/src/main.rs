//! `minibroker`: one binary for the broker and its tools.
//!
//! Each subcommand lives in its own module; this file only parses arguments, sets up logging and
//! reports errors (with their causes) on stderr with a non-zero exit.

// The flags' doc comments are their --help text, where `<ms>` and the like are meant literally,
// not as HTML.
#![allow(rustdoc::invalid_html_tags)]

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod acks;
mod acl;
mod admin;
mod bench;
mod certificates;
mod check_clients;
mod check_data;
mod check_processor;
mod check_readers;
mod check_report;
mod connect;
mod consume;
mod demo;
mod demo_transactions;
mod exactly_once_check;
mod faults;
mod groups;
mod health;
mod late_produce_scenario;
mod pipeline;
mod produce;
mod progress;
mod proxy;
mod send;
mod serve;
mod target;
mod topic;
mod transactions;
mod user;
mod verify;

/// An exactly-once message broker: the broker, not the producer, removes duplicates.
#[derive(Debug, Parser)]
#[command(name = "minibroker", version, about)]
struct Cli {
    /// How logs are written to stderr: text for people, json (one object per line) for log
    /// shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(flatten)]
    security: connect::Security,
    #[command(subcommand)]
    command: Command,
}

/// The log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Flags of `completions`.
#[derive(Debug, clap::Args)]
struct Completions {
    /// bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the broker.
    Serve(serve::Args),
    /// Send one raw produce request with exactly the given fields and print its outcome.
    Send(send::Args),
    /// Produce stdin, one record per line, with an idempotent producer.
    Produce(produce::Args),
    /// Print every record of a partition from an offset to the end.
    Consume(consume::Args),
    /// Get a new producer id, or bump the epoch of an issued one.
    InitProducer(admin::InitArgs),
    /// Show the broker's producer state for one partition: per producer, last_sequence (the
    /// last sequence stored), last_offset (the offset of the first record of its last batch)
    /// and cached_batches (its recent batches kept to answer retries as DUPLICATE, up to 5).
    DescribeProducers(admin::DescribeArgs),
    /// Show the broker's producer state for every partition of a topic: per producer,
    /// last_sequence (the last sequence stored), last_offset (the offset of the first record of
    /// its last batch) and cached_batches (its recent batches kept to answer retries as
    /// DUPLICATE, up to 5).
    Producers(admin::ProducersArgs),
    /// Create, list, describe or delete topics.
    Topic(topic::Args),
    /// A TCP proxy that injects faults: lost requests and acks, delays, resets, stale retries.
    Proxy(proxy::Args),
    /// Read a topic back and check that exactly-once held.
    Verify(verify::Args),
    /// Check that a Kafka-compatible broker keeps exactly-once under a faulty network: a fresh
    /// topic, a Kafka-aware fault proxy, idempotent producers and the verifier, in one command.
    /// Fault rates default to 2% lost requests and acks, 1% delays, 0.5% resets and 1% held,
    /// aimed at Produce.
    Check(exactly_once_check::Args),
    /// List consumer groups, or describe one: members, assignments, committed offsets, lag.
    Groups(groups::Args),
    /// Add, list or delete users of the users file (SCRAM credentials, no passwords).
    User(user::Args),
    /// Add, list or remove ACLs of the ACLs file, or check what they allow (kafka-acls' words).
    Acl(acl::Args),
    /// Make a certificate authority, a server certificate and client certificates for TLS.
    Certificates(certificates::Args),
    /// List transactions, describe one, show a topic's producers and their open transactions,
    /// or abort an open transaction (Kafka protocol).
    Transactions(transactions::Args),
    /// GET a broker's /health or /ready; exit 0 only on 200 (a container healthcheck).
    Health(health::Args),
    /// Read every file of a stopped broker's data directory, checksums included; exit non-zero
    /// on damage.
    CheckData(check_data::Args),
    /// Print a shell completion script.
    Completions(Completions),
    /// Watch exactly-once survive a faulty network: broker, flaky proxy, producers, verifier.
    /// Fault rates default to 2% lost requests and acks, 1% delays, 0.5% resets and 1% held
    /// (none held with --transactions).
    Demo(demo::Args),
    /// Measure produce throughput and latency (against a do-nothing baseline in the same run), or
    /// memory.
    Bench(bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Serve(_) | Command::Proxy(_) => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped reading (`| head`) is not an error of ours.
        Err(error) if closed_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", chain(&error));
            ExitCode::FAILURE
        }
    }
}

/// Whether `error` is stdout's reader having gone away.
fn closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes, each said once: a cause whose text its error already holds (as
/// `cannot connect to ADDR: Connection refused` holds `Connection refused`) is not repeated.
fn chain(error: &anyhow::Error) -> String {
    let mut said = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if said.contains(&text) {
            continue;
        }
        if !said.is_empty() {
            said.push_str(": ");
        }
        said.push_str(&text);
    }
    said
}

fn run(cli: Cli) -> Result<()> {
    connect::set(cli.security.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Send(args) => send::run(args).await,
            Command::Produce(args) => produce::run(args).await,
            Command::Consume(args) => consume::run(args).await,
            Command::InitProducer(args) => admin::init_producer(args).await,
            Command::DescribeProducers(args) => admin::describe_producers(args).await,
            Command::Producers(args) => admin::producers(args).await,
            Command::Topic(args) => topic::run(args).await,
            Command::Proxy(args) => proxy::run(args).await,
            Command::Verify(args) => verify::run(args).await,
            Command::Check(args) => exactly_once_check::run(args).await,
            Command::Groups(args) => groups::run(args).await,
            Command::Transactions(args) => transactions::run(args).await,
            Command::User(args) => user::run(args),
            Command::Certificates(args) => certificates::run(&args),
            Command::Acl(args) => acl::run(args),
            Command::Health(args) => health::run(args).await,
            Command::CheckData(args) => check_data::run(&args),
            Command::Completions(args) => {
                use clap::CommandFactory;
                clap_complete::generate(
                    args.shell,
                    &mut Cli::command(),
                    "minibroker",
                    &mut std::io::stdout(),
                );
                Ok(())
            }
            Command::Demo(args) => demo::run(args).await,
            Command::Bench(args) => bench::run(args).await,
        }
    })
}
