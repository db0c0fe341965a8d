//! `minibroker health URL`: GET a broker's `/health` or `/ready` and exit 0 only on 200 — the
//! healthcheck a container image without a shell or curl can run.

use anyhow::{Context, Result, bail};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::time::Duration;

/// Flags of `health`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The URL to GET, e.g. http://127.0.0.1:9100/ready.
    url: String,
    /// Give up after this many milliseconds.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
}

pub async fn run(args: Args) -> Result<()> {
    let uri: hyper::Uri = args.url.parse().context("parsing the URL")?;
    let host = uri.host().context("the URL has no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let check = async {
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .with_context(|| format!("connecting to {host}:{port}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let request = hyper::Request::get(uri.path())
            .header(hyper::header::HOST, format!("{host}:{port}"))
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        anyhow::Ok(response.status())
    };
    let status = tokio::time::timeout(Duration::from_millis(args.timeout_ms), check)
        .await
        .context("timed out")??;
    if !status.is_success() {
        bail!("{} answered {status}", args.url);
    }
    println!("{status}");
    Ok(())
}
