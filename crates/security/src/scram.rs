//! SCRAM (RFC 5802, RFC 7677) as Kafka speaks it: the credential a broker keeps per user and
//! mechanism, and the server side of the exchange.
//!
//! A credential is what Kafka stores (`ScramCredentialUtils`): a salt, an iteration count, and
//! two keys derived from the password — `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and
//! `ServerKey = HMAC(SaltedPassword, "Server Key")`, with `SaltedPassword = PBKDF2(password, salt,
//! iterations)`. The password itself is never kept. Its text form is Kafka's:
//! `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`.
//!
//! The exchange is two SaslAuthenticate round trips: client-first → server-first, client-final →
//! server-final. Kafka's choices are followed where they differ from the RFC: no SASLprep (a name
//! is its UTF-8 bytes, with `=2C` for `,` and `=3D` for `=`), no channel binding, at least 4096
//! iterations, and the nonce check `client_final.r` *ends with* the nonce the server sent
//! (librdkafka before 2.6.1, as in Debian's kcat, repeats its own nonce in front). One choice is
//! safer than Kafka's: an unknown user gets a server-first like any other (a salt derived from
//! the name with a secret of the server's), so it fails at client-final with the same error as a
//! wrong password, and the exchange does not tell who exists.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use std::num::NonZeroU32;
use subtle::ConstantTimeEq;
use thiserror::Error;

/// The SCRAM mechanisms Kafka has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl ScramMechanism {
    /// Both, in the order a broker enables them by default.
    pub const ALL: [Self; 2] = [Self::Sha256, Self::Sha512];

    /// Its name in Kafka's configuration and on the wire, e.g. `SCRAM-SHA-256`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Self::Sha256 => hmac::HMAC_SHA256,
            Self::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Self::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Self::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Self::Sha256 => &digest::SHA256,
            Self::Sha512 => &digest::SHA512,
        }
    }

    /// The length of its keys and proofs.
    fn key_len(self) -> usize {
        self.digest().output_len()
    }
}

/// The fewest iterations a credential may have (Kafka's `ScramMechanism` minimum).
pub const MIN_ITERATIONS: u32 = 4096;
/// The most (Kafka's maximum).
pub const MAX_ITERATIONS: u32 = 16384;
/// What a new credential gets unless told otherwise.
pub const DEFAULT_ITERATIONS: u32 = 8192;

/// Why a credential's text or an exchange's message was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScramError {
    /// A credential's text is not `salt=…,stored_key=…,server_key=…,iterations=…`.
    #[error("not a SCRAM credential: {0}")]
    BadCredential(&'static str),
    /// An iteration count outside 4096-16384.
    #[error("{0} iterations: a SCRAM credential needs {MIN_ITERATIONS} to {MAX_ITERATIONS}")]
    Iterations(u32),
    /// A client message that is not what the step expects.
    #[error("invalid SCRAM message: {0}")]
    BadMessage(&'static str),
    /// Channel binding or an extension this broker does not offer (delegation tokens).
    #[error("unsupported SCRAM option: {0}")]
    Unsupported(&'static str),
    /// The proof does not match: a wrong password, an unknown user, or a bad nonce (Kafka answers
    /// all of them with one message).
    #[error("Authentication failed: Invalid user credentials")]
    Failed,
}

/// What a broker keeps of one user's password for one mechanism.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The salt.
    pub salt: Vec<u8>,
    /// H(ClientKey).
    pub stored_key: Vec<u8>,
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: Vec<u8>,
    /// PBKDF2's iteration count.
    pub iterations: u32,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys stay out of logs.
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

pub(crate) fn salted_password(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let mut salted = vec![0; mechanism.key_len()];
    let rounds = NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(mechanism.pbkdf2(), rounds, salt, password, &mut salted);
    salted
}

pub(crate) fn hmac_of(mechanism: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(mechanism.hmac(), key);
    hmac::sign(&key, data).as_ref().to_vec()
}

pub(crate) fn hash_of(mechanism: ScramMechanism, data: &[u8]) -> Vec<u8> {
    digest::digest(mechanism.digest(), data).as_ref().to_vec()
}

impl ScramCredential {
    /// The credential of `password` with `salt` and `iterations`.
    ///
    /// # Errors
    /// [`ScramError::Iterations`] outside 4096-16384.
    pub fn derive(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, ScramError> {
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Iterations(iterations));
        }
        let salted = salted_password(mechanism, password, salt, iterations);
        Self::from_salted_password(mechanism, salt, &salted, iterations)
    }

    /// The credential of a password already salted (PBKDF2 with `salt` and `iterations`): what
    /// Kafka's AlterUserScramCredentials carries, so the password itself never travels.
    ///
    /// # Errors
    /// [`ScramError::Iterations`] outside 4096-16384; [`ScramError::BadCredential`] for a salted
    /// password of the wrong length or an empty salt.
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted: &[u8],
        iterations: u32,
    ) -> Result<Self, ScramError> {
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Iterations(iterations));
        }
        if salted.len() != mechanism.key_len() || salt.is_empty() {
            return Err(ScramError::BadCredential(
                "the salted password's length does not fit the mechanism, or the salt is empty",
            ));
        }
        let client_key = hmac_of(mechanism, salted, b"Client Key");
        Ok(Self {
            salt: salt.to_vec(),
            stored_key: hash_of(mechanism, &client_key),
            server_key: hmac_of(mechanism, salted, b"Server Key"),
            iterations,
        })
    }

    /// A new credential of `password`, with a random 32-byte salt.
    ///
    /// # Errors
    /// As [`Self::derive`]; [`ScramError::BadCredential`] if the system has no random source.
    pub fn generate(
        mechanism: ScramMechanism,
        password: &[u8],
        iterations: u32,
    ) -> Result<Self, ScramError> {
        let mut salt = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| ScramError::BadCredential("no random source for the salt"))?;
        Self::derive(mechanism, password, &salt, iterations)
    }

    /// Whether `password` is the one this credential was made from (PLAIN's check: one PBKDF2,
    /// milliseconds; run it off the async runtime).
    #[must_use]
    pub fn verify_password(&self, mechanism: ScramMechanism, password: &[u8]) -> bool {
        Self::derive(mechanism, password, &self.salt, self.iterations)
            .is_ok_and(|derived| bool::from(derived.stored_key.ct_eq(&self.stored_key)))
    }

    /// Kafka's text form: `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`.
    #[must_use]
    pub fn to_kafka_string(&self) -> String {
        format!(
            "salt={},stored_key={},server_key={},iterations={}",
            BASE64.encode(&self.salt),
            BASE64.encode(&self.stored_key),
            BASE64.encode(&self.server_key),
            self.iterations
        )
    }

    /// Reads Kafka's text form, for `mechanism` (the keys must have its length).
    ///
    /// # Errors
    /// [`ScramError::BadCredential`] for anything else; [`ScramError::Iterations`] outside
    /// 4096-16384.
    pub fn parse(mechanism: ScramMechanism, text: &str) -> Result<Self, ScramError> {
        let mut fields = [None; 4];
        for part in text.split(',') {
            let (name, value) = part
                .split_once('=')
                .ok_or(ScramError::BadCredential("a field without '='"))?;
            let slot = match name {
                "salt" => 0,
                "stored_key" => 1,
                "server_key" => 2,
                "iterations" => 3,
                _ => return Err(ScramError::BadCredential("an unknown field")),
            };
            if fields[slot].replace(value).is_some() {
                return Err(ScramError::BadCredential("a field given twice"));
            }
        }
        let [Some(salt), Some(stored), Some(server), Some(iterations)] = fields else {
            return Err(ScramError::BadCredential(
                "salt, stored_key, server_key and iterations are all needed",
            ));
        };
        let decode = |value: &str| {
            BASE64
                .decode(value)
                .map_err(|_| ScramError::BadCredential("a value that is not base64"))
        };
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| ScramError::BadCredential("iterations is not a number"))?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Iterations(iterations));
        }
        let credential = Self {
            salt: decode(salt)?,
            stored_key: decode(stored)?,
            server_key: decode(server)?,
            iterations,
        };
        let len = mechanism.key_len();
        if credential.stored_key.len() != len || credential.server_key.len() != len {
            return Err(ScramError::BadCredential(
                "keys of another mechanism's length",
            ));
        }
        if credential.salt.is_empty() {
            return Err(ScramError::BadCredential("an empty salt"));
        }
        Ok(credential)
    }
}

/// A server nonce: 32 random letters and digits (Kafka's is 130 random bits in base 36).
///
/// # Errors
/// [`ScramError::BadCredential`] if the system has no random source.
pub fn server_nonce() -> Result<String, ScramError> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ScramError::BadCredential("no random source for the nonce"))?;
    // 256 is 4 × 62 + 8: the first 248 byte values map evenly; the rest fold onto them, a bias
    // of a few percent on eight letters, far below what a nonce needs.
    Ok(bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect())
}

/// A SCRAM exchange after the client's first message, waiting for its final one.
#[derive(Debug)]
pub struct ScramExchange {
    mechanism: ScramMechanism,
    user: String,
    /// `None` for an unknown user: the exchange goes on, and fails at the proof.
    credential: Option<ScramCredential>,
    client_first_bare: String,
    server_first: String,
    /// The whole nonce the server sent (the client's, then the server's).
    nonce: String,
    /// base64 of the GS2 header, which client-final's `c=` must repeat.
    channel_binding: String,
}

/// What a finished exchange proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The user's name.
    pub user: String,
    /// The server-final message, for the client to check the server.
    pub server_final: Vec<u8>,
}

/// The salt and keys an unknown user is answered with: a salt derived from the name with the
/// server's `secret` (so asking twice gets the same), and keys no password matches.
fn stand_in(mechanism: ScramMechanism, user: &str, secret: &[u8]) -> (Vec<u8>, u32) {
    let mut salt = hmac_of(mechanism, secret, user.as_bytes());
    salt.truncate(32);
    (salt, DEFAULT_ITERATIONS)
}

/// A saslname's value: `=2C` is `,`, `=3D` is `=`, any other `=` is malformed.
fn unescape_name(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::BadMessage("a user name with a bad '=' escape")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

impl ScramExchange {
    /// Reads client-first and answers server-first, with `server_nonce` appended to the
    /// client's. `credential_of` looks the user up; `secret` makes an unknown user's stand-in.
    ///
    /// # Errors
    /// [`ScramError::BadMessage`] for a malformed message; [`ScramError::Unsupported`] for
    /// channel binding or a delegation token.
    pub fn start(
        mechanism: ScramMechanism,
        client_first: &[u8],
        credential_of: impl FnOnce(&str) -> Option<ScramCredential>,
        secret: &[u8],
        server_nonce: &str,
    ) -> Result<(Self, Vec<u8>), ScramError> {
        let text =
            std::str::from_utf8(client_first).map_err(|_| ScramError::BadMessage("not UTF-8"))?;
        // GS2 header: "n" or "y" (no channel binding), an optional authzid, then the bare part.
        let (flag, rest) = text
            .split_once(',')
            .ok_or(ScramError::BadMessage("no GS2 header"))?;
        match flag {
            "n" | "y" => {}
            flag if flag.starts_with("p=") => {
                return Err(ScramError::Unsupported("channel binding"));
            }
            _ => return Err(ScramError::BadMessage("a bad GS2 header")),
        }
        let (authzid, bare) = rest
            .split_once(',')
            .ok_or(ScramError::BadMessage("no GS2 header"))?;
        let gs2_header = &text[..flag.len() + 1 + authzid.len() + 1];
        let mut attributes = bare.split(',');
        let user = attributes
            .next()
            .and_then(|a| a.strip_prefix("n="))
            .ok_or(ScramError::BadMessage("no user name"))?;
        let user = unescape_name(user)?;
        let client_nonce = attributes
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .filter(|nonce| !nonce.is_empty())
            .ok_or(ScramError::BadMessage("no nonce"))?;
        for extension in attributes {
            if extension.starts_with("tokenauth") {
                return Err(ScramError::Unsupported("delegation tokens"));
            }
        }
        if let Some(authzid) = authzid.strip_prefix("a=")
            && unescape_name(authzid)? != user
        {
            return Err(ScramError::Failed);
        }
        let credential = credential_of(&user);
        let (salt, iterations) = match &credential {
            Some(credential) => (credential.salt.clone(), credential.iterations),
            None => stand_in(mechanism, &user, secret),
        };
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!("r={nonce},s={},i={iterations}", BASE64.encode(&salt));
        let exchange = Self {
            mechanism,
            user,
            credential,
            client_first_bare: bare.to_owned(),
            server_first: server_first.clone(),
            nonce,
            channel_binding: BASE64.encode(gs2_header),
        };
        Ok((exchange, server_first.into_bytes()))
    }

    /// Reads client-final: the proof must be the password's.
    ///
    /// # Errors
    /// [`ScramError::BadMessage`] for a malformed message; [`ScramError::Failed`] for a wrong
    /// proof, an unknown user, or a nonce or channel binding that does not match.
    pub fn finish(self, client_final: &[u8]) -> Result<Authenticated, ScramError> {
        let text =
            std::str::from_utf8(client_final).map_err(|_| ScramError::BadMessage("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::BadMessage("no proof"))?;
        let mut attributes = without_proof.split(',');
        let binding = attributes
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(ScramError::BadMessage("no channel binding attribute"))?;
        let nonce = attributes
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::BadMessage("no nonce"))?;
        let proof = BASE64
            .decode(proof)
            .map_err(|_| ScramError::BadMessage("a proof that is not base64"))?;
        // Kafka's check since 3.8.1: librdkafka before 2.6.1 repeats its nonce in front.
        if binding != self.channel_binding || !nonce.ends_with(&self.nonce) {
            return Err(ScramError::Failed);
        }
        let Some(credential) = &self.credential else {
            return Err(ScramError::Failed);
        };
        if proof.len() != self.mechanism.key_len() {
            return Err(ScramError::Failed);
        }
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = hmac_of(
            self.mechanism,
            &credential.stored_key,
            auth_message.as_bytes(),
        );
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        let stored = hash_of(self.mechanism, &client_key);
        if !bool::from(stored.ct_eq(&credential.stored_key)) {
            return Err(ScramError::Failed);
        }
        let server_signature = hmac_of(
            self.mechanism,
            &credential.server_key,
            auth_message.as_bytes(),
        );
        Ok(Authenticated {
            user: self.user,
            server_final: format!("v={}", BASE64.encode(server_signature)).into_bytes(),
        })
    }
}

/// PLAIN's one message, `authzid NUL authcid NUL password`: the user and the password. An
/// authzid other than the user is refused, as Kafka does.
///
/// # Errors
/// [`ScramError::BadMessage`] for a malformed message; [`ScramError::Failed`] for another
/// authzid.
pub fn parse_plain(message: &[u8]) -> Result<(String, Vec<u8>), ScramError> {
    let mut parts = message.splitn(3, |b| *b == 0);
    let (Some(authzid), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(ScramError::BadMessage(
            "PLAIN needs authzid, user and password",
        ));
    };
    let user = String::from_utf8(user.to_vec()).map_err(|_| ScramError::BadMessage("not UTF-8"))?;
    if user.is_empty() {
        return Err(ScramError::BadMessage("an empty user name"));
    }
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err(ScramError::Failed);
    }
    Ok((user, password.to_vec()))
}
