//! TLS sessions on a listener: what the accept loop needs of them (the read buffer under a
//! session, the name a client certificate gives its owner). The certificates themselves are
//! loaded by the host from its configuration.

use rustls_pki_types::CertificateDer;

/// The read buffer under a TLS session: rustls reads at most 4 KiB per call (`READ_SIZE` in
/// its deframer), so without one every 4 KiB of a large request costs a read(2); with it, one
/// read(2) brings in up to this much.
pub const READ_BUFFER: usize = 64 << 10;

/// The name a verified client certificate gives its owner: its subject's common name.
#[must_use]
pub fn certificate_name(certificate: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?.as_str().ok()?;
    Some(name.to_owned())
}
