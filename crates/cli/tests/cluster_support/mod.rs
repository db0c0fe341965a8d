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

/// One request to the broker at `addr` on a connection of its own.
#[allow(dead_code)] // not every cluster test speaks the protocol itself
pub fn call<R: kafka_protocol::protocol::Encodable, T: kafka_protocol::protocol::Decodable>(
    addr: &str,
    key: kafka_protocol::messages::ApiKey,
    version: i16,
    request: &R,
) -> T {
    block_on(async {
        let mut connection = minibroker_kafka_client::KafkaConnection::connect(addr)
            .await
            .unwrap();
        connection.call(key, version, request).await.unwrap()
    })
}

/// The node id FindCoordinator names, through `addr`, for `key` of `key_type` (0 a group, 1 a
/// transactional id).
#[allow(dead_code)]
pub fn coordinator(addr: &str, key: &str, key_type: i8) -> i32 {
    block_on(async {
        let mut connection = minibroker_kafka_client::KafkaConnection::connect(addr)
            .await
            .unwrap();
        let found = connection.find_coordinator(key, key_type).await.unwrap();
        found.expect("FindCoordinator answered an error").node_id
    })
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
#[allow(dead_code)]
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Runs `future` on a runtime of its own.
#[allow(dead_code)]
pub fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}
