//! `minibroker health URL`: GET a broker's `/health` or `/ready` and exit 0 only on 200 — the
//! healthcheck a container image without a shell or curl can run. An `https://` URL is fetched
//! over TLS (a metrics listener with `metrics_tls_*`), trusting the CA of `--tls-ca`.

use anyhow::{Context, Result, bail};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::time::Duration;

/// Flags of `health`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The URL to GET, e.g. http://127.0.0.1:9100/ready; https:// speaks TLS, trusting the CA
    /// of --tls-ca.
    url: String,
    /// Give up after this many milliseconds.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
}

pub async fn run(args: Args) -> Result<()> {
    let uri: hyper::Uri = args.url.parse().context("parsing the URL")?;
    let host = uri.host().context("the URL has no host")?.to_owned();
    let secure = match uri.scheme_str() {
        Some("http") | None => false,
        Some("https") => true,
        Some(other) => bail!("{other}:// is not HTTP: give an http:// or https:// URL"),
    };
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let address = format!("{host}:{port}");
    let tls = if secure {
        let tls = crate::connect::client_config(&address)?
            .tls
            .with_context(|| {
                format!(
                    "{} is https: give --tls-ca FILE, the CA that signed its certificate",
                    args.url
                )
            })?;
        Some(tls)
    } else {
        None
    };
    let check = async {
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .with_context(|| format!("connecting to {address}"))?;
        let request = hyper::Request::get(uri.path())
            .header(hyper::header::HOST, address.as_str())
            .body(Empty::<Bytes>::new())?;
        let status = match tls {
            None => get(TokioIo::new(stream), request).await?,
            Some(tls) => {
                let stream = tokio_rustls::TlsConnector::from(tls.config)
                    .connect(tls.server_name, stream)
                    .await
                    .with_context(|| format!("TLS with {address}"))?;
                get(TokioIo::new(stream), request).await?
            }
        };
        anyhow::Ok(status)
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

/// Sends `request` over `io` (HTTP/1.1) and returns the answer's status.
async fn get<T>(io: T, request: hyper::Request<Empty<Bytes>>) -> Result<hyper::StatusCode>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(connection);
    Ok(sender.send_request(request).await?.status())
}
