//! `minibroker proxy`: a flaky network between producers and the broker — minibroker's native
//! protocol, or with `--kafka` any Kafka-compatible broker or cluster.

use anyhow::{Context, Result};
use minibroker_faults::FaultConfig;
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
    #[command(flatten)]
    kafka: KafkaProxyArgs,
}

/// Flags that make the proxy speak Kafka.
#[derive(Debug, Clone, clap::Args)]
pub struct KafkaProxyArgs {
    /// Relay Kafka traffic: broker addresses in Metadata, FindCoordinator and DescribeCluster
    /// answers are rewritten to listeners of the proxy (one per upstream broker), so clients
    /// cannot go around it; --upstream is the bootstrap broker.
    #[arg(long)]
    kafka: bool,
    /// With --kafka, aim the faults at these APIs only (e.g. produce,fetch); frames of other
    /// APIs pass untouched and the -at schedules count only these.
    #[arg(
        long,
        value_name = "API,...",
        value_delimiter = ',',
        requires = "kafka"
    )]
    api: Vec<String>,
    /// With --kafka, the host written into rewritten addresses (default: the listening address).
    #[arg(long, value_name = "HOST", requires = "kafka")]
    advertise_host: Option<String>,
}

impl KafkaProxyArgs {
    /// Kafka-aware, faults aimed at `api` (names; empty for every API).
    pub fn new(api: Vec<String>) -> Self {
        Self {
            kafka: true,
            api,
            advertise_host: None,
        }
    }

    /// `faults`, speaking Kafka if asked to.
    pub fn config(&self, faults: FaultConfig) -> Result<FaultConfig> {
        if !self.kafka {
            return Ok(faults);
        }
        let apis = self
            .api
            .iter()
            .map(|name| Ok(minibroker_faults::kafka::api_key(name.trim())?))
            .collect::<Result<_>>()?;
        Ok(FaultConfig {
            kafka: Some(minibroker_faults::KafkaAware {
                apis,
                advertise_host: self.advertise_host.clone(),
            }),
            max_frame_bytes: minibroker_faults::kafka::MAX_FRAME_BYTES,
            ..faults
        })
    }
}

pub async fn run(args: Args) -> Result<()> {
    let config = args.kafka.config(args.faults.config(DefaultRates::NONE)?)?;
    let signal = crate::serve::shutdown_signal()?;
    let shutdown = async move {
        let received = signal.await;
        tracing::info!(signal = received, "proxy stopping");
    };
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
