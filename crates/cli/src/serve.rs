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
    let shutdown = shutdown_signal()?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    // Scripts wait for this line to learn the port.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {addr}")?;
    stdout.flush()?;
    drop(stdout);
    minibroker_server::run(listener, config, shutdown).await?;
    Ok(())
}

/// Registers for SIGINT (Ctrl-C) and SIGTERM (what `docker stop` and service managers send) now,
/// so a signal that arrives before the returned future is first polled is not missed, and returns
/// a future that resolves on either.
///
/// # Errors
/// If the signal handlers cannot be installed.
pub fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
        let mut terminate =
            signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => tracing::info!("SIGINT received"),
                _ = terminate.recv() => tracing::info!("SIGTERM received"),
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("Ctrl-C received");
        })
    }
}
