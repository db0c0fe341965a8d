//! `bench --cluster URL`: idempotent Kafka produce through one broker of a cluster, and through
//! three (the connections take them in turn), all in this process on one PostgreSQL database,
//! each against the same batches inserted into that database at the same transaction cadence
//! with no rule (`raw_inserts`, one inserting connection per broker, as each broker has its
//! committer): the engine's own limit. Peak records/s, then latency at half
//! of each side's peak, in alternating pairs.

use anyhow::Result;
use minibroker_cluster::{Member, WindowSettings};
use minibroker_host::{ClusterSettings, Host};
use std::time::Duration;

use super::baseline::Keep;
use super::load::{LoadResult, Workload};
use super::pairs::{Alternation, Pinned, Side};
use super::raw_inserts::RawInserts;
use super::{Measured, embedded_config, json_report, start_baseline, text_report};

/// Brokers of the larger cluster measured.
pub(super) const BROKERS: i32 = 3;

/// What `bench --cluster` measures with.
pub struct Settings {
    /// The database.
    pub url: String,
    /// The load (Kafka's wire).
    pub workload: Workload,
    /// Each broker's copy keeps this much per partition (see `--retention-mib`).
    pub retention_bytes: Option<u64>,
    /// `cluster_flush_ms`, for the brokers and the baseline alike.
    pub flush: Duration,
    /// Pairs per comparison.
    pub pairs: usize,
    /// Unmeasured load before each side's first peak phase.
    pub warm_up: Duration,
    /// One JSON object instead of tables.
    pub json: bool,
}

/// Brokers 1 to `count` of the cluster on `url`, each on the server's core with `config`,
/// gathering batches over `flush`: each with its Kafka address.
pub(super) fn start_brokers(
    sides: &Pinned,
    url: &str,
    config: &minibroker_host::Config,
    flush: Duration,
    count: i32,
) -> Result<Vec<(Host, String)>> {
    let mut brokers = Vec::new();
    for node_id in 1..=count {
        let (config, url) = (config.clone(), url.to_owned());
        brokers.push(sides.on_server(async move {
            let host = Host::start(&config)?;
            let addr = minibroker_kafka::serve_on_loopback(&host).await?;
            let member = Member {
                node_id,
                kafka_host: addr.ip().to_string(),
                kafka_port: addr.port(),
            };
            host.join_cluster(ClusterSettings {
                url,
                member,
                flush,
                lease: Duration::from_secs(9),
                default_partitions: config.broker.default_partitions,
                cache_bytes: config.net.cluster_cache_bytes,
            })
            .await?;
            anyhow::Ok((host, addr.to_string()))
        })??);
    }
    Ok(brokers)
}

pub fn run(settings: &Settings) -> Result<()> {
    let sides = Pinned::new()?;
    let window = WindowSettings {
        flush: settings.flush,
        ..WindowSettings::default()
    };
    let mut config = embedded_config(settings.workload.partitions, Some(16 << 30));
    config.broker.retention_bytes = settings.retention_bytes;
    let brokers = start_brokers(&sides, &settings.url, &config, window.flush, BROKERS)?;
    // The same transaction cadence: a baseline for n brokers inserts through n committers'
    // worth of windows, each gathering the connections that go to it.
    let mut baselines = Vec::new();
    for n in 0..usize::try_from(BROKERS)? {
        let url = settings.url.clone();
        baselines.push(sides.on_server(async move {
            let inserts = RawInserts::start(&url, window, n).await?;
            start_baseline(super::wire::Wire::Kafka, Keep::Postgres(inserts)).await
        })??);
    }
    let baseline_addrs: Vec<&str> = baselines.iter().map(|(addr, _)| addr.as_str()).collect();
    let addrs: Vec<&str> = brokers.iter().map(|(_, addr)| addr.as_str()).collect();
    let side = |name, addr: String| Side {
        name,
        addr,
        workload: settings.workload.clone(),
    };
    let through_one = side("1 broker", addrs[0].to_owned());
    let through_three = side("3 brokers", addrs.join(","));
    let base_of_one = side("baseline", baseline_addrs[0].to_owned());
    let base_of_three = side("baseline", baseline_addrs.join(","));
    let mut alternation = Alternation::new(settings.pairs, settings.warm_up, settings.json);
    let measured = sides.generator.block_on(async {
        let mut measured = Vec::new();
        for (brokers, base) in [
            (&through_one, &base_of_one),
            (&through_three, &base_of_three),
        ] {
            let peak = alternation.compare(brokers, base).await?;
            let rate = peak.first(LoadResult::requests_per_sec).median / 2.0;
            let half = alternation
                .compare(
                    &brokers.paced("brokers@half", rate),
                    &base.paced("baseline@half", rate),
                )
                .await?;
            measured.push((brokers.name, Measured::Baseline { peak, half }));
        }
        anyhow::Ok(measured)
    });
    for (_, stop_baseline) in baselines {
        let _ = stop_baseline.send(());
    }
    for (host, _) in brokers {
        sides.on_server(host.stop())??;
    }
    let measured = measured?;
    if settings.json {
        let reports: serde_json::Map<_, _> = measured
            .iter()
            .map(|(name, measured)| {
                let key = name.replace(' ', "_");
                (key, json_report(&settings.workload, measured, None))
            })
            .collect();
        println!("{}", serde_json::Value::Object(reports));
    } else {
        for (name, measured) in &measured {
            println!("\nthrough {name}, against the same batches inserted with no rule:");
            text_report(measured, None);
        }
    }
    Ok(())
}
