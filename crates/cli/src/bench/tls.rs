//! `bench --tls`: what TLS costs on the Kafka path. One embedded broker serves Kafka twice, on a
//! plain listener and on a TLS one; the broker runs on one core and the load generator on the
//! other (each a one-worker runtime pinned there), so the generator's own encryption does not
//! count as the broker's cost (a certificate made for the run, TLS 1.3 with rustls and
//! ring); the same workload runs on each in alternating pairs after one unmeasured round each
//! (`pairs`), and the median of the pairs' ratios (MB/s and requests/s, TLS over plain) is the
//! headline. Producer ids are asked for on the plain listener; every measured produce goes
//! over TLS.

use anyhow::Result;
use minibroker_host::Host;
use minibroker_native::EmbeddedBroker;
use minibroker_security::pki::{Authority, Role, Validity};
use serde_json::json;
use std::net::SocketAddr;

use super::embedded_config;
use super::load::{ClientTls, LoadResult, Workload};
use super::pairs::{Alternation, Pairs, Pinned, Side};
use super::wire::Wire;

pub async fn run(workload: Workload, mut alternation: Alternation) -> Result<()> {
    // The broker and the load generator each get a core of their own (when there are two), so
    // what TLS costs the broker is not mixed with what it costs the generator.
    tokio::task::spawn_blocking(move || measure_pinned(&workload, &mut alternation)).await?
}

fn measure_pinned(workload: &Workload, alternation: &mut Alternation) -> Result<()> {
    let json_out = alternation.quiet;
    let authority = Authority::new("bench CA", Validity::Years(1))?;
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    let server = authority.issue(Role::Server, "localhost", &names, Validity::Years(1))?;
    let server_tls =
        minibroker_host::tls::server_config_from_pem(&server.certificate_pem, &server.key_pem)?;
    let client_tls = minibroker_host::tls::client_config_from_pem(&authority.certificate_pem())?;
    // As the other peak phases: the newest 16 MiB per partition kept, their memory reused, so
    // a later phase does not pay for page faults an earlier one did not.
    let mut config = embedded_config(workload.partitions, Some(16 << 30));
    config.broker.retention_bytes = Some(16 << 20);
    let sides = Pinned::new()?;
    let (broker, plain, secured) = sides.server.block_on(async {
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
        server_name: minibroker_host::rustls::pki_types::ServerName::try_from("localhost")?,
        identity_addr: plain.to_string(),
    };
    let plain = Side {
        name: "kafka plain",
        addr: plain.to_string(),
        workload: Workload {
            wire: Wire::Kafka,
            ..workload.clone()
        },
    };
    let secured = Side {
        name: "kafka over TLS",
        addr: secured.to_string(),
        workload: Workload {
            tls: Some(tls),
            ..plain.workload.clone()
        },
    };
    // One unmeasured round of each first: memory faulted in, retention recycling it.
    let measured = sides
        .generator
        .block_on(alternation.compare(&plain, &secured));
    sides.server.block_on(broker.stop())?;
    report(&measured?, json_out);
    Ok(())
}

fn report(pairs: &Pairs, json_out: bool) {
    let mb = pairs.second_over_first(LoadResult::mb_per_sec);
    let requests = pairs.second_over_first(LoadResult::requests_per_sec);
    let errors: u64 = pairs.phases().map(|(_, r)| r.errors).sum();
    let each = |tls: bool| -> Vec<f64> {
        pairs
            .results
            .iter()
            .map(|(plain, secured)| if tls { secured } else { plain }.mb_per_sec())
            .collect()
    };
    if json_out {
        println!(
            "{}",
            json!({
                "mb_per_sec_plain": each(false),
                "mb_per_sec_tls": each(true),
                "tls_over_plain_mb_per_sec": mb.median,
                "tls_over_plain_requests_per_sec": requests.median,
                "tls_over_plain_mb_per_sec_spread": mb.to_json(),
                "tls_over_plain_requests_per_sec_spread": requests.to_json(),
                "errors": errors,
            })
        );
        return;
    }
    let show = |rates: Vec<f64>| {
        rates
            .iter()
            .map(|rate| format!("{rate:.1}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!("MB/s plain: {}", show(each(false)));
    println!("MB/s TLS:   {}", show(each(true)));
    println!(
        "TLS/plain, median (lowest-highest) of {} pairs: MB/s {mb}, requests/s {requests}; errors {errors}",
        pairs.results.len()
    );
}
