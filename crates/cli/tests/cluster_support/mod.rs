//! What the cluster tests share: a database and the brokers' config for one test's cluster,
//! and the records a script's summary lists.

use serde_json::Value;
use std::process::Command;

use crate::postgres::Postgres;
use crate::support::{BIN, ServeProcess, free_addr};

/// A short lease, so a killed broker leaves the members (and its node id is free again) soon.
pub const LEASE_MS: u64 = 2_000;

/// A database for one test's cluster, and the brokers' config file (the short lease).
pub struct Cluster {
    pub postgres: Postgres,
    config: tempfile::TempPath,
}

impl Cluster {
    pub fn start() -> Self {
        Self::start_with("")
    }

    /// As [`Self::start`], the brokers' config file ending with `extra`.
    #[allow(dead_code)]
    pub fn start_with(extra: &str) -> Self {
        let config = tempfile::NamedTempFile::new().unwrap().into_temp_path();
        std::fs::write(&config, format!("cluster_lease_ms = {LEASE_MS}\n{extra}")).unwrap();
        Self {
            postgres: Postgres::start(),
            config,
        }
    }

    /// Broker `node_id`, on the Kafka address `kafka` (restarts reuse it).
    pub fn broker(&self, node_id: i32, kafka: &str) -> ServeProcess {
        let mut command = Command::new(BIN);
        command
            .args([
                "serve",
                "--cluster",
                &self.postgres.url,
                "--kafka-listen",
                kafka,
            ])
            .args(["--node-id", &node_id.to_string()])
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info");
        ServeProcess::spawn(&mut command)
    }

    /// Brokers 1 to `count`, each on a free address.
    #[allow(dead_code)]
    pub fn brokers(&self, count: i32) -> Vec<ServeProcess> {
        (1..=count)
            .map(|node_id| self.broker(node_id, &free_addr()))
            .collect()
    }
}

/// (partition, offset, value) triples of a script's summary.
#[allow(dead_code)] // not every cluster test reads a summary's records
pub fn triples(summary: &Value, key: &str) -> Vec<(u64, u64, String)> {
    summary[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t[0].as_u64().unwrap(),
                t[1].as_u64().unwrap(),
                t[2].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}
