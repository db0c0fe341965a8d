//! TLS on a listener (Kafka's `SSL` and `SASL_SSL`): the server's certificate chain and key from
//! PEM files, and optionally the clients' certificates, checked against a CA of their own.
//!
//! rustls with the ring provider does the work; the PEM files are read with `rustls-pki-types`'
//! own parser. A client certificate names its owner: the principal is its subject's common name
//! (what Kafka's common mapping rule `RULE:^CN=([^,]+).*$/$1/` gives), so `CN=alice` is
//! `User:alice`. Without a certificate (or with TLS but no client authentication) a connection
//! on an `SSL` listener is `User:ANONYMOUS`, as in Kafka.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

pub use minibroker_net::tls::{READ_BUFFER, certificate_name};

use crate::config::{ClientAuth, NetConfig};

/// Why the TLS settings cannot be used.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{key} {}: {reason}", path.display())]
    File {
        /// The configuration key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificate, the key or the client CA.
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built from `tls_client_ca`.
    #[error("tls_client_ca: {0}")]
    ClientCa(#[from] rustls::server::VerifierBuilderError),
}

/// The TLS server configuration `net` asks for: `None` when its Kafka listener has no TLS.
///
/// # Errors
/// [`TlsError`] naming the file or the setting that cannot be used.
pub fn server_config(net: &NetConfig) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    listener_config(net, net.kafka_security_protocol)
}

/// The TLS server configuration of a listener speaking `protocol` (the native listener's is
/// `listen_security_protocol`): `None` without TLS.
///
/// # Errors
/// As [`server_config`].
pub fn listener_config(
    net: &NetConfig,
    protocol: crate::config::SecurityProtocol,
) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    if !protocol.uses_tls() {
        return Ok(None);
    }
    configured(net, net.tls_client_auth).map(Some)
}

/// The TLS configuration of the metrics listener (`metrics_tls`): the same certificate, no
/// client certificates.
///
/// # Errors
/// As [`server_config`].
pub fn metrics_config(net: &NetConfig) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    if !net.metrics_tls {
        return Ok(None);
    }
    configured(net, ClientAuth::None).map(Some)
}

fn configured(net: &NetConfig, client_auth: ClientAuth) -> Result<Arc<ServerConfig>, TlsError> {
    let (Some(cert), Some(key)) = (&net.tls_cert, &net.tls_key) else {
        // Validation has already said so; nothing to serve with.
        return Err(TlsError::File {
            key: "tls_cert",
            path: PathBuf::new(),
            reason: "TLS needs tls_cert and tls_key".into(),
        });
    };
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    let builder = match (client_auth, &net.tls_client_ca) {
        (ClientAuth::None, _) | (_, None) => builder.with_no_client_auth(),
        (auth, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates("tls_client_ca", ca)? {
                roots.add(certificate)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build()?)
        }
    };
    let mut config =
        builder.with_single_cert(certificates("tls_cert", cert)?, private_key(key)?)?;
    // Kafka clients speak no ALPN; nothing to offer.
    config.alpn_protocols.clear();
    Ok(Arc::new(config))
}

/// A server configuration from a certificate chain and key in PEM text, with no client
/// certificates (for listeners made in-process: `bench --tls`, tests).
///
/// # Errors
/// [`TlsError`] when the PEM holds no certificate or key, or rustls refuses them.
pub fn server_config_from_pem(
    cert_pem: &str,
    key_pem: &str,
) -> Result<Arc<ServerConfig>, TlsError> {
    let pem = |reason: String| TlsError::File {
        key: "tls_cert",
        path: PathBuf::from("(in memory)"),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| pem(error.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| pem(e.to_string()))?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.ignore_client_order = true;
    Ok(Arc::new(config))
}

/// A client configuration trusting the CA certificates in `ca_pem` (minibroker's own clients:
/// `bench --tls`).
///
/// # Errors
/// [`TlsError`] when the PEM holds no certificate rustls takes.
pub fn client_config_from_pem(ca_pem: &str) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let certificate = certificate.map_err(|error| TlsError::File {
            key: "ca",
            path: PathBuf::from("(in memory)"),
            reason: error.to_string(),
        })?;
        roots.add(certificate)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// ring's provider, its cipher suites in the order the server picks them: AES-128-GCM first
/// (TLS 1.3's mandatory suite, and with AES-NI the cheapest per byte; `bench --tls` measured
/// it against AES-256-GCM, the provider's first choice), then AES-256-GCM and ChaCha20-Poly1305,
/// then TLS 1.2's. The server's order wins over the client's (`ignore_client_order`).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    let preferred = rustls::CipherSuite::TLS13_AES_128_GCM_SHA256;
    provider
        .cipher_suites
        .sort_by_key(|suite| suite.suite() != preferred);
    Arc::new(provider)
}

/// The certificates of the PEM file at `path`, in order (a chain: leaf first).
fn certificates(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let fail = |reason: String| TlsError::File {
        key,
        path: path.to_owned(),
        reason,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|error| fail(error.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| fail(error.to_string()))?;
    if certificates.is_empty() {
        return Err(fail("holds no certificate".into()));
    }
    Ok(certificates)
}

/// The private key of the PEM file at `path` (PKCS#8, SEC1 or PKCS#1).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|error| TlsError::File {
        key: "tls_key",
        path: path.to_owned(),
        reason: error.to_string(),
    })
}
