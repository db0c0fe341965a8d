//! `bench --tls`: what TLS costs on the Kafka path. One embedded broker serves Kafka twice, on a
//! plain listener and on a TLS one; the broker runs on one core and the load generator on the
//! other (each a one-worker runtime pinned there), so the generator's own encryption does not
//! count as the broker's cost (a certificate made for the run, TLS 1.3 with rustls and
//! ring); the same workload runs on each, alternating three times each in one run after one
//! unmeasured round each, and the ratio of the medians (MB/s and requests/s, TLS over plain) is the headline. Producer ids are
//! asked for on the plain listener; every measured produce goes over TLS.

use anyhow::Result;
use minibroker_native::EmbeddedBroker;
use minibroker_net::Host;
use minibroker_security::pki::{Authority, Role, Validity};
use serde_json::json;
use std::net::SocketAddr;

use super::load::{ClientTls, LoadResult, Workload};
use super::wire::Wire;
use super::{embedded_config, measure};

/// Measured rounds per listener.
const ROUNDS: usize = 3;

pub async fn run(workload: Workload, json_out: bool) -> Result<()> {
    // The broker and the load generator each get a core of their own (when there are two), so
    // what TLS costs the broker is not mixed with what it costs the generator.
    tokio::task::spawn_blocking(move || measure_pinned(workload, json_out)).await?
}

/// The runtime of one side, one worker, pinned to `cpu` when the machine has it.
fn runtime_on(cpu: usize) -> Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .on_thread_start(move || {
            if cores > cpu {
                let mut set = rustix::thread::CpuSet::new();
                set.set(cpu);
                if let Err(error) = rustix::thread::sched_setaffinity(None, &set) {
                    tracing::debug!(%error, cpu, "could not pin a bench thread");
                }
            }
        })
        .build()?)
}

fn measure_pinned(workload: Workload, json_out: bool) -> Result<()> {
    let authority = Authority::new("bench CA", Validity::Years(1))?;
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    let server = authority.issue(Role::Server, "localhost", &names, Validity::Years(1))?;
    let server_tls =
        minibroker_net::tls::server_config_from_pem(&server.certificate_pem, &server.key_pem)?;
    let client_tls = minibroker_net::tls::client_config_from_pem(&authority.certificate_pem())?;
    // As the other peak phases: the newest 16 MiB per partition kept, their memory reused, so
    // a later phase does not pay for page faults an earlier one did not.
    let mut config = embedded_config(workload.partitions, Some(16 << 30));
    config.broker.retention_bytes = Some(16 << 20);
    let broker_side = runtime_on(1)?;
    let (broker, plain, secured) = broker_side.block_on(async {
        let broker = EmbeddedBroker::start(config).await?;
        // Both listeners serve the one broker, so both phases write into the same state.
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let plain = minibroker_kafka::serve_tls(&broker.host, Host::bind(loopback).await?, None)?;
        let secured = minibroker_kafka::serve_tls(
            &broker.host,
            Host::bind(loopback).await?,
            Some(server_tls),
        )?;
        anyhow::Ok((broker, plain, secured))
    })?;
    let tls = ClientTls {
        connector: tokio_rustls::TlsConnector::from(client_tls),
        server_name: minibroker_net::rustls::pki_types::ServerName::try_from("localhost")?,
        identity_addr: plain.to_string(),
    };
    let generator = runtime_on(0)?;
    let (without, with) = generator.block_on(async {
        let mut without = Vec::new();
        let mut with = Vec::new();
        // One unmeasured round of each first: memory faulted in, retention recycling it.
        for round in 0..2 * ROUNDS + 2 {
            let over_tls = round % 2 == 1;
            let phase = Workload {
                wire: Wire::Kafka,
                tls: over_tls.then(|| tls.clone()),
                ..workload.clone()
            };
            let (name, addr) = if over_tls {
                ("kafka over TLS", secured)
            } else {
                ("kafka plain", plain)
            };
            let result = measure(name, &addr.to_string(), &phase, json_out).await?;
            if round < 2 {
                continue;
            }
            if over_tls {
                with.push(result);
            } else {
                without.push(result);
            }
        }
        anyhow::Ok((without, with))
    })?;
    broker_side.block_on(broker.stop())?;
    report(&without, &with, json_out);
    Ok(())
}

fn median(results: &[LoadResult], of: impl Fn(&LoadResult) -> f64) -> f64 {
    let mut values: Vec<f64> = results.iter().map(of).collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn report(without: &[LoadResult], with: &[LoadResult], json_out: bool) {
    let mb = |results: &[LoadResult]| median(results, LoadResult::mb_per_sec);
    let requests = |results: &[LoadResult]| median(results, LoadResult::requests_per_sec);
    let mb_ratio = mb(with) / mb(without);
    let requests_ratio = requests(with) / requests(without);
    let errors: u64 = without.iter().chain(with).map(|r| r.errors).sum();
    if json_out {
        let each = |results: &[LoadResult]| -> Vec<f64> {
            results.iter().map(LoadResult::mb_per_sec).collect()
        };
        println!(
            "{}",
            json!({
                "mb_per_sec_plain": each(without),
                "mb_per_sec_tls": each(with),
                "tls_over_plain_mb_per_sec": mb_ratio,
                "tls_over_plain_requests_per_sec": requests_ratio,
                "errors": errors,
            })
        );
        return;
    }
    let show = |results: &[LoadResult]| {
        results
            .iter()
            .map(|r| format!("{:.1}", r.mb_per_sec()))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!("MB/s plain: {}", show(without));
    println!("MB/s TLS:   {}", show(with));
    println!(
        "TLS/plain (medians): MB/s {mb_ratio:.3}, requests/s {requests_ratio:.3}; errors {errors}"
    );
}
