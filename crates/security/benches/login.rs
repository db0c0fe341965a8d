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

fn scram_login(c: &mut Criterion) {
    let mut group = c.benchmark_group("login");
    group.throughput(Throughput::Elements(1));
    for mechanism in ScramMechanism::ALL {
        let credential = ScramCredential::generate(mechanism, b"pw", 8192).expect("credential");
        // The client's messages are made once (a fixed server nonce makes them replayable
        // here): only the server's work is timed.
        let (mut client, first) = ScramClient::start(mechanism, "alice", b"pw", "clientnonce");
        let (_, server_first) = ScramExchange::start(
            mechanism,
            &first,
            |_| Some(credential.clone()),
            SECRET,
            "servernonce",
        )
        .expect("server-first");
        let client_final = client.finish(&server_first).expect("client-final");
        group.bench_function(format!("{} server side", mechanism.name()), |b| {
            b.iter(|| {
                let (exchange, _) = ScramExchange::start(
                    mechanism,
                    &first,
                    |_| Some(credential.clone()),
                    SECRET,
                    "servernonce",
                )
                .expect("server-first");
                black_box(exchange.finish(&client_final).expect("a login"))
            });
        });
        let mut users = Users::default();
        users.set("alice", mechanism, credential.clone());
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
        let credential = ScramCredential::generate(mechanism, b"pw", 8192).expect("credential");
        let (mut client, first) = ScramClient::start(mechanism, "alice", b"pw", "clientnonce");
        let start = |_: &str| Some(credential.clone());
        let (_, server_first) =
            ScramExchange::start(mechanism, &first, start, SECRET, "servernonce").expect("first");
        let client_final = client.finish(&server_first).expect("client-final");
        let mut logins = 0u64;
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(1) {
            let (exchange, _) =
                ScramExchange::start(mechanism, &first, start, SECRET, "servernonce")
                    .expect("first");
            black_box(exchange.finish(&client_final).expect("a login"));
            logins += 1;
        }
        let scram_rate = logins as f64 / began.elapsed().as_secs_f64();
        let mut users = Users::default();
        users.set("alice", mechanism, credential);
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
