//! `minibroker serve`: bind, announce the address, serve until SIGINT or SIGTERM.

use anyhow::{Context, Result};
use minibroker_server::Config;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Flags of `serve`; each overrides the matching key of the config file.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// TOML configuration file (see config/minibroker.toml); built-in defaults otherwise.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Partition count of auto-created topics.
    #[arg(long)]
    partitions: Option<u32>,
}

pub async fn run(args: Args) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(partitions) = args.partitions {
        config.default_partitions = partitions;
        config.max_partitions_per_topic = config.max_partitions_per_topic.max(partitions);
    }
    config.validate()?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    // Scripts wait for this line to learn the port.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {addr}")?;
    stdout.flush()?;
    drop(stdout);
    minibroker_server::run(listener, config, shutdown_signal()).await?;
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM (what `docker stop` and service managers send).
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the broker");
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
    tracing::info!("shutdown signal received");
}
