//! What a login costs the broker, and so how many logins one core sustains, for each
//! mechanism: a SCRAM login (the server's two steps: HMACs and hashes, no PBKDF2 — that is the
//! client's work) and a PLAIN login (one PBKDF2 over the stored salt, on a blocking thread in
//! the broker). Then what the failed-login delay leaves a guessing client: one guess per
//! `auth_failure_delay_ms` per connection, so with the default 100 ms and
//! `max_connections_per_ip` connections, at most 10 × that many guesses a second from one
//! address, whatever the CPU.
//!
//! Run with `cargo bench -p minibroker-security`; figures are printed, never asserted.

use criterion::{Criterion, Throughput};
use minibroker_security::{ScramClient, ScramCredential, ScramExchange, ScramMechanism, Users};
use std::hint::black_box;
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"a server secret for stand-in salts";

/// A user's credential and a client's two messages, made once: a fixed server nonce makes
/// them replayable, so only the server's work is timed.
struct Prepared {
    credential: ScramCredential,
    first: Vec<u8>,
    client_final: Vec<u8>,
}

fn prepared(mechanism: ScramMechanism) -> Prepared {
    let credential = ScramCredential::generate(mechanism, b"pw", 8192).expect("credential");
    let (mut client, first) = ScramClient::start(mechanism, "alice", b"pw", "clientnonce");
    let (_, server_first) = server_login(mechanism, &credential, &first);
    let client_final = client.finish(&server_first).expect("client-final");
    Prepared {
        credential,
        first,
        client_final,
    }
}

/// The server's first step.
fn server_login(
    mechanism: ScramMechanism,
    credential: &ScramCredential,
    first: &[u8],
) -> (ScramExchange, Vec<u8>) {
    ScramExchange::start(
        mechanism,
        first,
        |_| Some(credential.clone()),
        SECRET,
        "servernonce",
    )
    .expect("server-first")
}

/// The server's two steps of one login.
fn one_login(mechanism: ScramMechanism, prepared: &Prepared) {
    let (exchange, _) = server_login(mechanism, &prepared.credential, &prepared.first);
    black_box(exchange.finish(&prepared.client_final).expect("a login"));
}

fn scram_login(c: &mut Criterion) {
    let mut group = c.benchmark_group("login");
    group.throughput(Throughput::Elements(1));
    for mechanism in ScramMechanism::ALL {
        let prepared = prepared(mechanism);
        group.bench_function(format!("{} server side", mechanism.name()), |b| {
            b.iter(|| one_login(mechanism, &prepared));
        });
        let mut users = Users::default();
        users.set("alice", mechanism, prepared.credential.clone());
        group.bench_function(
            format!("PLAIN over {} (8192 iterations)", mechanism.name()),
            |b| {
                b.iter(|| assert!(users.verify_plain(black_box("alice"), black_box(b"pw"))));
            },
        );
    }
    group.finish();
}

/// Logins per second one core sustains, measured directly (as many as fit in a second).
fn logins_per_core_second() {
    for mechanism in ScramMechanism::ALL {
        let prepared = prepared(mechanism);
        let mut logins = 0u64;
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(1) {
            one_login(mechanism, &prepared);
            logins += 1;
        }
        let scram_rate = logins as f64 / began.elapsed().as_secs_f64();
        let mut users = Users::default();
        users.set("alice", mechanism, prepared.credential);
        let mut plain = 0u64;
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(1) {
            assert!(users.verify_plain("alice", b"pw"));
            plain += 1;
        }
        let plain_rate = plain as f64 / began.elapsed().as_secs_f64();
        println!(
            "{}: one core checks {scram_rate:.0} SCRAM logins/s and {plain_rate:.0} PLAIN logins/s",
            mechanism.name()
        );
    }
    println!(
        "a guessing client: one guess per auth_failure_delay_ms (100 ms) per connection = 10 guesses/s per connection"
    );
}

fn main() {
    logins_per_core_second();
    let mut criterion = Criterion::default().configure_from_args();
    scram_login(&mut criterion);
    criterion.final_summary();
}
