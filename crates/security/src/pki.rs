//! Certificates for a broker's TLS listener: a certificate authority of its own, a server
//! certificate naming the hosts clients dial, and client certificates whose common name is their
//! principal — what `minibroker certificates` writes, and what the tests make (with expired and
//! misnamed variants) to prove the refusals.
//!
//! The certificates are ECDSA P-256 made with `rcgen`. Validity is counted in whole years: from
//! the first of January of this year to the first of January after `years` more full years, so a
//! certificate is good for at least `years` years from the day it is made; the tests' "expired"
//! certificates ended in 2001.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::time::{SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// A certificate could not be made.
#[derive(Debug, Error)]
#[error("cannot make the certificate: {0}")]
pub struct PkiError(#[from] rcgen::Error);

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate.
    pub certificate_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A listener's certificate: its names are what clients check (DNS names and IP addresses).
    Server,
    /// A client's certificate: its common name is the principal.
    Client,
}

/// How long a certificate is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// At least this many years from today: from the first of January of this year to the first
    /// of January after that many more full years.
    Years(u16),
    /// Over long ago (2000 to 2001): a certificate every client refuses.
    Expired,
}

/// A certificate authority that signs the broker's and its clients' certificates.
pub struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
    key_pem: String,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

impl Authority {
    /// A new authority named `common_name`, valid for `validity`.
    ///
    /// # Errors
    /// [`PkiError`] when the key or the certificate cannot be made.
    pub fn new(common_name: &str, validity: Validity) -> Result<Self, PkiError> {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        set_validity(&mut params, validity);
        let key = KeyPair::generate()?;
        let key_pem = key.serialize_pem();
        Ok(Self {
            issuer: CertifiedIssuer::self_signed(params, key)?,
            key_pem,
        })
    }

    /// The authority's certificate: what clients trust (`ssl.ca.location`, `ssl_cafile`).
    #[must_use]
    pub fn certificate_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The authority's private key: keep it away from the broker, it signs new certificates.
    #[must_use]
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A certificate for `role`, named `common_name` and (for a server) valid for `names`: DNS
    /// names or IP addresses, each written as clients dial it.
    ///
    /// # Errors
    /// [`PkiError`] for a name a certificate cannot hold, or when signing fails.
    pub fn issue(
        &self,
        role: Role,
        common_name: &str,
        names: &[String],
        validity: Validity,
    ) -> Result<Issued, PkiError> {
        let mut params = CertificateParams::new(names.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![match role {
            Role::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Role::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        set_validity(&mut params, validity);
        let key = KeyPair::generate()?;
        let certificate = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

fn set_validity(params: &mut CertificateParams, validity: Validity) {
    let (from, until) = match validity {
        Validity::Years(years) => {
            let year = this_year();
            (year, year.saturating_add(i32::from(years.max(1)) + 1))
        }
        Validity::Expired => (2000, 2001),
    };
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(until, 1, 1);
}

/// The current year (UTC), near enough: a year's average length from the epoch, which is off
/// only in the hours around New Year.
fn this_year() -> i32 {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    1970 + i32::try_from(seconds / 31_556_952).unwrap_or(0)
}
