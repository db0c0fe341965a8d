//! `bench --compare-metrics`: what metrics cost. The same workload runs on a broker without
//! metrics and on one with them (request timing on, `/metrics` rendered once a second as a
//! scraper would), alternating three times each in one run, so the ratio of the medians survives
//! a noisy machine.

use anyhow::Result;
use minibroker_native::EmbeddedBroker;
use serde_json::json;
use std::time::Duration;

use super::load::Workload;
use super::pairs::Spread;
use super::{embedded_config, measure};

pub async fn run(workload: Workload, json_out: bool) -> Result<()> {
    let mut without = Vec::new();
    let mut with = Vec::new();
    let mut next_id = 1i64;
    for round in 0..6 {
        let metrics_on = round % 2 == 1;
        let mut config = embedded_config(workload.partitions, Some(16 << 30));
        if metrics_on {
            config.net.metrics_listen = Some("127.0.0.1:0".parse()?);
        }
        let embedded = EmbeddedBroker::start(config).await?;
        let scraper = metrics_on.then(|| {
            let node = std::sync::Arc::clone(embedded.host.node());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let _ = minibroker_metrics::render(&node);
                }
            })
        });
        let phase = Workload {
            first_producer_id: next_id,
            ..workload.clone()
        };
        next_id += workload.connections as i64;
        let name = if metrics_on {
            "metrics on"
        } else {
            "metrics off"
        };
        let result = measure(name, &embedded.address(), &phase, json_out).await?;
        if let Some(scraper) = scraper {
            scraper.abort();
        }
        embedded.stop().await?;
        let rate = result.requests_per_sec();
        if metrics_on {
            with.push(rate);
        } else {
            without.push(rate);
        }
    }
    let median = |rates: &[f64]| Spread::of(rates.iter().copied()).median;
    let (off, on) = (median(&without), median(&with));
    if json_out {
        println!(
            "{}",
            json!({
                "requests_per_sec_without_metrics": without,
                "requests_per_sec_with_metrics": with,
                "with_over_without": on / off,
            })
        );
    } else {
        let show = |rates: &[f64]| {
            rates
                .iter()
                .map(|r| format!("{:.0}", r))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        println!("requests/s without metrics: {}", show(&without));
        println!("requests/s with metrics:    {}", show(&with));
        println!(
            "with/without (medians): {:.3} ({:+.1}%)",
            on / off,
            (on / off - 1.0) * 100.0
        );
    }
    Ok(())
}
