//! `minibroker serve`: bind both listeners (native, then Kafka), announce their addresses, serve
//! one broker core on both until SIGINT or SIGTERM.

use anyhow::{Context, Result};
use minibroker_host::Config;
use minibroker_host::Host;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Flags of `serve`; each overrides the matching key of the config file.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// TOML configuration file (see config/minibroker.toml); built-in defaults otherwise.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address of the native protocol's listener; port 0 picks a free port.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Address of the Kafka protocol's listener; port 0 picks a free port.
    #[arg(long)]
    kafka_listen: Option<SocketAddr>,
    /// HOST:PORT that Kafka Metadata hands to clients (default: the bound Kafka address).
    #[arg(long)]
    kafka_advertise: Option<String>,
    /// Partition count of auto-created topics.
    #[arg(long)]
    partitions: Option<u32>,
    /// Keep partitions in segment files in DIR (created if missing), with producer-state
    /// snapshots: a restarted broker keeps every acknowledged batch and keeps deduplicating.
    /// In memory when absent.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Serve /metrics (Prometheus), /health and /ready over HTTP on this address; port 0 picks a
    /// free port.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// With --data-dir, when a produce is acknowledged: always (after an fsync covering it),
    /// interval:<ms> (after the write; fsync every <ms>), os (after the write).
    #[arg(long, value_name = "POLICY")]
    flush: Option<minibroker_broker::FlushPolicy>,
    /// Run as one broker of the cluster whose state is in this PostgreSQL database
    /// (postgresql://USER@HOST:PORT/DB): any broker takes any produce, the database judges and
    /// stores it. Serves the Kafka listener only.
    #[arg(long, value_name = "URL")]
    cluster: Option<String>,
    /// This broker's node id: in a cluster, unique among its live brokers.
    #[arg(long)]
    node_id: Option<i32>,
}

pub async fn run(args: Args) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(listen) = args.listen {
        config.net.listen = listen;
    }
    if let Some(listen) = args.kafka_listen {
        config.net.kafka_listen = listen;
    }
    if let Some(advertise) = args.kafka_advertise {
        config.net.kafka_advertise = Some(advertise);
    }
    if let Some(partitions) = args.partitions {
        config = config.with_default_partitions(partitions);
    }
    if let Some(dir) = args.data_dir {
        config.broker.data_dir = Some(dir);
    }
    if let Some(flush) = args.flush {
        if config.broker.data_dir.is_none() {
            anyhow::bail!(
                "--flush {flush} applies to a broker on disk: give --data-dir (or data_dir in the config); a broker in memory has nothing to flush"
            );
        }
        config.broker.flush = flush;
    }
    if let Some(listen) = args.metrics_listen {
        config.net.metrics_listen = Some(listen);
    }
    if let Some(url) = args.cluster {
        config.net.cluster = Some(url);
    }
    if let Some(node_id) = args.node_id {
        config.net.node_id = node_id;
    }
    if config.net.cluster.is_some() && config.broker.data_dir.is_some() {
        anyhow::bail!(
            "a broker of a cluster keeps its data in the cluster's database: leave out --data-dir (data_dir)"
        );
    }
    config.validate()?;
    // Every connection and segment file is a descriptor: the soft limit a shell hands out is
    // often far below what the kernel allows.
    let open_files = minibroker_broker::descriptors::raise_limit();
    tracing::debug!(?open_files, "open-file limit");
    let needed =
        config.broker.max_connections as u64 + minibroker_broker::descriptors::RESERVED_DESCRIPTORS;
    if let Some(limit) = open_files.filter(|limit| *limit < needed) {
        tracing::warn!(
            limit,
            max_connections = config.broker.max_connections,
            "the open-file limit is below max_connections plus what the broker keeps aside: connections may fail with EMFILE before max_connections (raise it: ulimit -n)"
        );
    }
    let signal = shutdown_signal()?;
    // Every address is bound first, so a busy one stops the start before anything else (no
    // recovery, no clock started); connections wait in the backlog until served.
    // A broker of a cluster serves no native listener (its produce is a single broker's).
    let native_listener = match config.net.cluster {
        Some(_) => None,
        None => Some(bind(config.net.listen).await?),
    };
    let kafka_listener = bind(config.net.kafka_listen).await?;
    let metrics_listener = match config.net.metrics_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let metrics_security = metrics_security(&config.net)?;
    // Recovery happens here, before anything is served: once the addresses are announced, the
    // broker serves everything it stored.
    let started = std::time::Instant::now();
    let host = Host::start(&config)?;
    if let Some(dir) = &config.broker.data_dir {
        tracing::info!(
            data_dir = %dir.display(),
            flush = %config.broker.flush,
            recovery_ms = started.elapsed().as_millis() as u64,
            "opened the data directory"
        );
    }
    let metrics = match metrics_listener {
        Some(listener) => {
            let bound = listener.local_addr()?;
            host.serve_side("metrics", move |node, stopped| {
                let limits = minibroker_metrics::MetricsLimits::default();
                minibroker_metrics::serve_secured(listener, node, limits, metrics_security, stopped)
            });
            Some(bound)
        }
        None => None,
    };
    let native = match &config.net.cluster {
        Some(url) => {
            let bound = kafka_listener.local_addr()?;
            let (kafka_host, kafka_port) = config.net.kafka_advertised(bound);
            let settings = minibroker_host::ClusterSettings {
                url: url.clone(),
                member: minibroker_cluster::Member {
                    node_id: config.net.node_id,
                    kafka_host,
                    kafka_port,
                },
                flush: std::time::Duration::from_millis(config.net.cluster_flush_ms),
                lease: std::time::Duration::from_millis(config.net.cluster_lease_ms),
                default_partitions: config.broker.default_partitions,
                cache_bytes: config.net.cluster_cache_bytes,
            };
            host.join_cluster(settings).await?;
            tracing::info!(node_id = config.net.node_id, "joined the cluster");
            None
        }
        None => native_listener
            .map(|listener| minibroker_native::serve(&host, listener))
            .transpose()?,
    };
    let kafka = minibroker_kafka::serve(&host, kafka_listener)?;
    // Scripts wait for these lines to learn the ports; the native one comes first.
    let mut stdout = std::io::stdout().lock();
    if let Some(native) = native {
        writeln!(stdout, "listening on {native}")?;
    }
    writeln!(stdout, "kafka listening on {kafka}")?;
    if let Some(bound) = metrics {
        writeln!(stdout, "metrics listening on {bound}")?;
    }
    stdout.flush()?;
    drop(stdout);
    host.set_ready();

    let received = signal.await;
    tracing::info!(signal = received, "stopping: draining connections");
    // The metrics endpoint stops at once; both listeners drain, then the broker is closed.
    Ok(host.stop().await?)
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Registers for SIGINT (Ctrl-C) and SIGTERM (what `docker stop` and service managers send) now,
/// so a signal that arrives before the returned future is first polled is not missed, and returns
/// a future that resolves on either, to the signal's name (each caller logs it as its own).
///
/// # Errors
/// If the signal handlers cannot be installed.
pub fn shutdown_signal() -> Result<impl std::future::Future<Output = &'static str>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
        let mut terminate =
            signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => "SIGINT",
                _ = terminate.recv() => "SIGTERM",
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        })
    }
}

/// The metrics listener's TLS and bearer token, from `net`.
fn metrics_security(
    net: &minibroker_host::NetConfig,
) -> Result<minibroker_metrics::MetricsSecurity> {
    let tls = minibroker_host::tls::metrics_config(net)?;
    let bearer_token = match &net.metrics_bearer_token_file {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("metrics_bearer_token_file {}", path.display()))?;
            let token = text.lines().next().unwrap_or_default().trim();
            if token.is_empty() {
                anyhow::bail!(
                    "metrics_bearer_token_file {}: its first line is empty",
                    path.display()
                );
            }
            Some(std::sync::Arc::from(token))
        }
    };
    Ok(minibroker_metrics::MetricsSecurity { tls, bearer_token })
}
