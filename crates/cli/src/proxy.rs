//! `minibroker proxy`: a flaky network between producers and the broker.

use anyhow::{Context, Result};
use std::io::Write;

use crate::faults::{DefaultRates, FaultArgs};

/// Flags of `proxy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long)]
    listen: String,
    /// The broker to relay to (host:port).
    #[arg(long)]
    upstream: String,
    #[command(flatten)]
    faults: FaultArgs,
}

pub async fn run(args: Args) -> Result<()> {
    let config = args.faults.config(DefaultRates::NONE)?;
    let shutdown = crate::serve::shutdown_signal()?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {}", listener.local_addr()?)?;
    stdout.flush()?;
    drop(stdout);
    tracing::info!(upstream = %args.upstream, faults = %config, "proxy started");
    let proxy = minibroker_faults::Proxy::new(config);
    let counts = proxy.run(listener, args.upstream, shutdown).await;
    println!("proxy faults: {counts}");
    Ok(())
}
