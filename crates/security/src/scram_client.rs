//! The client side of SCRAM-SHA-256/512 (RFC 5802), for minibroker's own clients — the native
//! protocol's login, `bench`'s logins — so they speak the same exchange as Kafka clients do
//! against the same users file. The server side, and Kafka's quirks, are in [`crate::scram`].

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use subtle::ConstantTimeEq;

use crate::scram::{
    MAX_ITERATIONS, MIN_ITERATIONS, ScramError, ScramMechanism, hash_of, hmac_of, salted_password,
};

/// One client's SCRAM exchange: [`Self::start`] gives client-first, [`Self::finish`] turns
/// server-first into client-final, [`Self::check_server`] checks server-final.
#[derive(Debug)]
pub struct ScramClient {
    mechanism: ScramMechanism,
    password: Vec<u8>,
    first_bare: String,
    nonce: String,
    /// The server-final the server must send, once client-final is made.
    expected_server_final: Option<Vec<u8>>,
}

impl ScramClient {
    /// An exchange for `user` with `password`, the client's `nonce` (printable, no comma);
    /// returns it and client-first.
    #[must_use]
    pub fn start(
        mechanism: ScramMechanism,
        user: &str,
        password: &[u8],
        nonce: &str,
    ) -> (Self, Vec<u8>) {
        let name = user.replace('=', "=3D").replace(',', "=2C");
        let first_bare = format!("n={name},r={nonce}");
        let client_first = format!("n,,{first_bare}").into_bytes();
        (
            Self {
                mechanism,
                password: password.to_vec(),
                first_bare,
                nonce: nonce.to_owned(),
                expected_server_final: None,
            },
            client_first,
        )
    }

    /// client-final for `server_first` (one PBKDF2: milliseconds).
    ///
    /// # Errors
    /// [`ScramError::BadMessage`] for a server-first that is malformed, does not extend the
    /// client's nonce, or asks for an iteration count outside 4096-16384.
    pub fn finish(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        let bad = ScramError::BadMessage;
        let server_first = std::str::from_utf8(server_first).map_err(|_| bad("not UTF-8"))?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", value)) => nonce = Some(value),
                Some(("s", value)) => salt = BASE64.decode(value).ok(),
                Some(("i", value)) => iterations = value.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(bad("server-first lacks its nonce, salt or iterations"));
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(bad("the server's nonce does not extend the client's"));
        }
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Iterations(iterations));
        }
        let mechanism = self.mechanism;
        let salted = salted_password(mechanism, &self.password, &salt, iterations);
        let client_key = hmac_of(mechanism, &salted, b"Client Key");
        let stored_key = hash_of(mechanism, &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.first_bare);
        let signature = hmac_of(mechanism, &stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(key, sig)| key ^ sig)
            .collect();
        let server_key = hmac_of(mechanism, &salted, b"Server Key");
        let server_signature = hmac_of(mechanism, &server_key, auth_message.as_bytes());
        self.expected_server_final =
            Some(format!("v={}", BASE64.encode(server_signature)).into_bytes());
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks server-final: the server, too, knew the password's keys.
    ///
    /// # Errors
    /// [`ScramError::Failed`] when it does not match (or comes before client-final).
    pub fn check_server(&self, server_final: &[u8]) -> Result<(), ScramError> {
        match &self.expected_server_final {
            Some(expected) if bool::from(expected.ct_eq(server_final)) => Ok(()),
            _ => Err(ScramError::Failed),
        }
    }
}
