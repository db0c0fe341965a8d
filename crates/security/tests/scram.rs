//! SCRAM against RFC 7677's worked example, against an independent client written here from
//! RFC 5802 (for SHA-512, which has no RFC example), and with Kafka's quirks: librdkafka's
//! repeated nonce, escaped names, unknown users failing like wrong passwords, and every
//! malformed message refused.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use minibroker_security::{ScramCredential, ScramError, ScramExchange, ScramMechanism};
use ring::{digest, hmac, pbkdf2};
use std::num::NonZeroU32;

const SECRET: &[u8] = b"the server's secret";

/// RFC 7677, section 3: user "user", password "pencil".
#[test]
fn rfc_7677_example_round_trips_exactly() {
    let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
    let credential =
        ScramCredential::derive(ScramMechanism::Sha256, b"pencil", &salt, 4096).unwrap();
    let (exchange, server_first) = ScramExchange::start(
        ScramMechanism::Sha256,
        b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
        |user| (user == "user").then(|| credential.clone()),
        SECRET,
        "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(server_first).unwrap(),
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    );
    let done = exchange
        .finish(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
        .unwrap();
    assert_eq!(done.user, "user");
    assert_eq!(
        String::from_utf8(done.server_final).unwrap(),
        "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    );
}

/// A client computed straight from RFC 5802, apart from the server's code.
struct Client {
    mechanism: ScramMechanism,
    password: &'static [u8],
    first_bare: String,
}

impl Client {
    fn algorithms(
        &self,
    ) -> (
        hmac::Algorithm,
        pbkdf2::Algorithm,
        &'static digest::Algorithm,
    ) {
        match self.mechanism {
            ScramMechanism::Sha256 => (
                hmac::HMAC_SHA256,
                pbkdf2::PBKDF2_HMAC_SHA256,
                &digest::SHA256,
            ),
            ScramMechanism::Sha512 => (
                hmac::HMAC_SHA512,
                pbkdf2::PBKDF2_HMAC_SHA512,
                &digest::SHA512,
            ),
        }
    }

    /// client-final for `server_first`, with the nonce written as `nonce_prefix` + the nonce.
    fn last(&self, server_first: &[u8], nonce_prefix: &str) -> (Vec<u8>, Vec<u8>) {
        let server_first = std::str::from_utf8(server_first).unwrap();
        let mut nonce = "";
        let mut salt = Vec::new();
        let mut iterations = 0;
        for attribute in server_first.split(',') {
            match attribute.split_at(2) {
                ("r=", value) => nonce = value,
                ("s=", value) => salt = BASE64.decode(value).unwrap(),
                ("i=", value) => iterations = value.parse().unwrap(),
                _ => {}
            }
        }
        let (hmac_alg, pbkdf2_alg, digest_alg) = self.algorithms();
        let mut salted = vec![0; digest_alg.output_len()];
        pbkdf2::derive(
            pbkdf2_alg,
            NonZeroU32::new(iterations).unwrap(),
            &salt,
            self.password,
            &mut salted,
        );
        let key = hmac::Key::new(hmac_alg, &salted);
        let client_key = hmac::sign(&key, b"Client Key");
        let stored_key = digest::digest(digest_alg, client_key.as_ref());
        let without_proof = format!("c=biws,r={nonce_prefix}{nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.first_bare);
        let signature = hmac::sign(
            &hmac::Key::new(hmac_alg, stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(signature.as_ref())
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac::sign(&key, b"Server Key");
        let expected_final = hmac::sign(
            &hmac::Key::new(hmac_alg, server_key.as_ref()),
            auth_message.as_bytes(),
        );
        (
            format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes(),
            format!("v={}", BASE64.encode(expected_final)).into_bytes(),
        )
    }
}

/// A server exchange for "alice, the =admin", whose stored password is `stored_password`,
/// started with the client-first bare part `bare`.
fn exchange(
    mechanism: ScramMechanism,
    stored_password: &[u8],
    bare: &str,
) -> Result<(ScramExchange, Vec<u8>), ScramError> {
    let credential = ScramCredential::generate(mechanism, stored_password, 4096).unwrap();
    ScramExchange::start(
        mechanism,
        format!("n,,{bare}").as_bytes(),
        |user| (user == "alice, the =admin").then(|| credential.clone()),
        SECRET,
        &minibroker_security::server_nonce().unwrap(),
    )
}

#[test]
fn both_mechanisms_authenticate_an_independent_client_and_prove_the_server() {
    for mechanism in ScramMechanism::ALL {
        let bare = "n=alice=2C the =3Dadmin,r=fyko+d2lbbFgONRv9qkxdawL";
        let client = Client {
            mechanism,
            password: b"open sesame",
            first_bare: bare.into(),
        };
        let (server, first) = exchange(mechanism, b"open sesame", bare).unwrap();
        let (last, expected_final) = client.last(&first, "");
        let done = server.finish(&last).unwrap();
        assert_eq!(done.user, "alice, the =admin", "{mechanism:?}");
        assert_eq!(done.server_final, expected_final, "{mechanism:?}");
    }
}

#[test]
fn a_repeated_client_nonce_in_front_is_accepted_as_kafka_does() {
    // librdkafka before 2.6.1 sends r=<cnonce><cnonce><snonce>.
    let bare = "n=alice=2C the =3Dadmin,r=abc";
    let client = Client {
        mechanism: ScramMechanism::Sha256,
        password: b"pw",
        first_bare: bare.into(),
    };
    let (server, first) = exchange(ScramMechanism::Sha256, b"pw", bare).unwrap();
    let (last, _) = client.last(&first, "abc");
    assert!(server.finish(&last).is_ok());
}

#[test]
fn a_wrong_password_and_an_unknown_user_fail_alike_at_the_proof() {
    let bare = "n=alice=2C the =3Dadmin,r=nonce";
    let wrong = Client {
        mechanism: ScramMechanism::Sha512,
        password: b"guess",
        first_bare: bare.into(),
    };
    let (server, first) = exchange(ScramMechanism::Sha512, b"right", bare).unwrap();
    assert_eq!(
        server.finish(&wrong.last(&first, "").0).unwrap_err(),
        ScramError::Failed
    );

    // An unknown user gets a server-first too, with a salt stable across attempts.
    let unknown = |nonce: &str| {
        ScramExchange::start(
            ScramMechanism::Sha512,
            b"n,,n=mallory,r=x",
            |_| None,
            SECRET,
            nonce,
        )
        .unwrap()
    };
    let (server, first) = unknown("one");
    let (_, again) = unknown("two");
    let salt = |first: &[u8]| {
        String::from_utf8(first.to_vec())
            .unwrap()
            .split(',')
            .nth(1)
            .unwrap()
            .to_owned()
    };
    assert_eq!(salt(&first), salt(&again));
    let client = Client {
        mechanism: ScramMechanism::Sha512,
        password: b"anything",
        first_bare: "n=mallory,r=x".into(),
    };
    assert_eq!(
        server.finish(&client.last(&first, "").0).unwrap_err(),
        ScramError::Failed
    );
}

#[test]
fn a_nonce_or_binding_that_does_not_match_fails() {
    let bare = "n=alice=2C the =3Dadmin,r=n1";
    let client = Client {
        mechanism: ScramMechanism::Sha256,
        password: b"pw",
        first_bare: bare.into(),
    };
    let (server, first) = exchange(ScramMechanism::Sha256, b"pw", bare).unwrap();
    let (last, _) = client.last(&first, "");
    let forged = String::from_utf8(last)
        .unwrap()
        .replacen("c=biws", "c=eSws", 1);
    assert_eq!(
        server.finish(forged.as_bytes()).unwrap_err(),
        ScramError::Failed
    );
    let (server, _) = exchange(ScramMechanism::Sha256, b"pw", bare).unwrap();
    // The nonce of another exchange.
    let (other, _) = client.last(&first, "");
    assert_eq!(server.finish(&other).unwrap_err(), ScramError::Failed);
}

#[test]
fn malformed_and_unsupported_first_messages_are_refused() {
    let start = |message: &[u8]| {
        ScramExchange::start(ScramMechanism::Sha256, message, |_| None, SECRET, "s").map(|_| ())
    };
    for bad in [
        &b""[..],
        b"n",
        b"n,,",
        b"x,,n=a,r=b",
        b"n,,r=b",
        b"n,,n=a",
        b"n,,n=a,r=",
        b"n,,n=a=41,r=b",
        b"\xff,,n=a,r=b",
    ] {
        assert!(
            matches!(start(bad), Err(ScramError::BadMessage(_))),
            "{bad:?}"
        );
    }
    assert!(matches!(
        start(b"p=tls-unique,,n=a,r=b"),
        Err(ScramError::Unsupported(_))
    ));
    assert!(matches!(
        start(b"n,,n=a,r=b,tokenauth=true"),
        Err(ScramError::Unsupported(_))
    ));
    // An authzid naming someone else.
    assert_eq!(start(b"n,a=root,n=a,r=b"), Err(ScramError::Failed));
}

#[test]
fn credentials_read_back_in_kafkas_format_and_refuse_what_kafka_refuses() {
    let credential = ScramCredential::generate(ScramMechanism::Sha512, b"pw", 8192).unwrap();
    let text = credential.to_kafka_string();
    assert!(
        text.starts_with("salt=") && text.ends_with(",iterations=8192"),
        "{text}"
    );
    assert_eq!(
        ScramCredential::parse(ScramMechanism::Sha512, &text).unwrap(),
        credential
    );
    // A SHA-512 credential is not a SHA-256 one.
    assert!(ScramCredential::parse(ScramMechanism::Sha256, &text).is_err());
    assert!(credential.verify_password(ScramMechanism::Sha512, b"pw"));
    assert!(!credential.verify_password(ScramMechanism::Sha512, b"pW"));
    assert_eq!(
        ScramCredential::derive(ScramMechanism::Sha256, b"pw", b"salt", 4095).unwrap_err(),
        ScramError::Iterations(4095)
    );
    for bad in [
        "",
        "salt=AA==",
        "salt=AA==,stored_key=AA==,server_key=AA==,iterations=x",
        "salt=!,stored_key=AA==,server_key=AA==,iterations=4096",
        "salt=AA==,salt=AA==,stored_key=AA==,server_key=AA==,iterations=4096",
        "pepper=AA==,stored_key=AA==,server_key=AA==,iterations=4096",
    ] {
        assert!(
            ScramCredential::parse(ScramMechanism::Sha256, bad).is_err(),
            "{bad}"
        );
    }
    let few = text.replace("iterations=8192", "iterations=100");
    assert_eq!(
        ScramCredential::parse(ScramMechanism::Sha512, &few).unwrap_err(),
        ScramError::Iterations(100)
    );
}

#[test]
fn plain_messages_name_the_user_and_refuse_another_authzid() {
    use minibroker_security::parse_plain;
    assert_eq!(
        parse_plain(b"\0alice\0pw").unwrap(),
        ("alice".into(), b"pw".to_vec())
    );
    assert_eq!(parse_plain(b"alice\0alice\0pw").unwrap().0, "alice");
    assert_eq!(
        parse_plain(b"root\0alice\0pw").unwrap_err(),
        ScramError::Failed
    );
    assert!(parse_plain(b"\0alice").is_err());
    assert!(parse_plain(b"\0\0pw").is_err());
}

#[test]
fn the_library_client_logs_in_against_the_server_and_checks_it() {
    for mechanism in ScramMechanism::ALL {
        let credential = ScramCredential::generate(mechanism, b"pencil", 4096).unwrap();
        let (mut client, first) =
            minibroker_security::ScramClient::start(mechanism, "a,b=c", b"pencil", "clientnonce");
        let (exchange, server_first) = ScramExchange::start(
            mechanism,
            &first,
            |user| (user == "a,b=c").then(|| credential.clone()),
            SECRET,
            "servernonce",
        )
        .unwrap();
        let client_final = client.finish(&server_first).unwrap();
        let done = exchange.finish(&client_final).unwrap();
        assert_eq!(done.user, "a,b=c");
        client.check_server(&done.server_final).unwrap();
        assert!(client.check_server(b"v=AAAA").is_err());
        // A wrong password fails at the server's proof check.
        let (mut wrong, first) =
            minibroker_security::ScramClient::start(mechanism, "a,b=c", b"guess", "n2");
        let (exchange, server_first) = ScramExchange::start(
            mechanism,
            &first,
            |_| Some(credential.clone()),
            SECRET,
            "s2",
        )
        .unwrap();
        assert!(
            exchange
                .finish(&wrong.finish(&server_first).unwrap())
                .is_err()
        );
    }
}
