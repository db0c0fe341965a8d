//! The cluster benchmark's baseline store: every produce frame inserted into PostgreSQL in
//! windows gathered exactly as a broker's committer gathers them (`minibroker_cluster::gather`,
//! the same `cluster_flush_ms` and byte bound), one transaction per window, and answered once it
//! commits, but with no rule: no partition row locked, no producer row read or written. What is
//! left is the engine's own cost of storing the same bytes at the same cadence. A baseline for
//! several brokers has one of these for each, as each broker has its committer.

use anyhow::{Context, Result};
use bytes::Bytes;
use minibroker_cluster::WindowSettings;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Where one insert's answer goes: `Err` with why the window was not stored.
type Answer = oneshot::Sender<Result<(), String>>;

/// The handle to the inserting task; cloned by every baseline connection.
#[derive(Clone)]
pub struct RawInserts {
    sender: mpsc::Sender<(Bytes, Answer, Instant)>,
}

impl RawInserts {
    /// A fresh table (`minibroker_bench.raw_batches_N`, keyed like the cluster's batches) in the
    /// database at `url`, and the task inserting into it: one committer's worth.
    ///
    /// # Errors
    /// The database cannot be reached or refuses the table.
    pub async fn start(url: &str, settings: WindowSettings, n: usize) -> Result<Self> {
        let client = minibroker_cluster::connect(url)
            .await
            .context("connecting to the cluster's database")?;
        client
            .batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS minibroker_bench;
             DROP TABLE IF EXISTS minibroker_bench.raw_batches_{n};
             CREATE TABLE minibroker_bench.raw_batches_{n} (
                 last_offset bigint PRIMARY KEY,
                 base_offset bigint NOT NULL,
                 bytes bytea NOT NULL
             )"
            ))
            .await
            .context("creating the baseline's table")?;
        let (sender, receiver) = mpsc::channel(4096);
        tokio::spawn(insert(client, settings, receiver, n));
        Ok(Self { sender })
    }

    /// Queues `frame` for the next window; the receiver answers once it is committed.
    pub async fn insert(&self, frame: Bytes) -> oneshot::Receiver<Result<(), String>> {
        let (answer, answered) = oneshot::channel();
        let _stopped = self.sender.send((frame, answer, Instant::now())).await;
        answered
    }
}

async fn insert(
    client: tokio_postgres::Client,
    settings: WindowSettings,
    mut receiver: mpsc::Receiver<(Bytes, Answer, Instant)>,
    n: usize,
) {
    // Prepared once, planned once (as the committer's statements are), and each window's
    // BEGIN, INSERT and COMMIT sent together, as a broker's committer sends its statements:
    // the engine's limit, not a client's round trips.
    if let Err(error) = client
        .batch_execute("SET plan_cache_mode = force_generic_plan")
        .await
    {
        tracing::error!(%error, "the baseline's connection could not be set up");
        return;
    }
    let statement = match client
        .prepare(&format!(
            "INSERT INTO minibroker_bench.raw_batches_{n} (last_offset, base_offset, bytes)
             SELECT o, o, b FROM unnest($1::bigint[], $2::bytea[]) AS t(o, b)"
        ))
        .await
    {
        Ok(statement) => statement,
        Err(error) => {
            tracing::error!(%error, "the baseline's insert could not be prepared");
            return;
        }
    };
    let mut next_offset = 0i64;
    while let Some(first) = receiver.recv().await {
        let opened = first.2;
        let window = minibroker_cluster::gather(first, &mut receiver, &settings, opened, |item| {
            item.0.len()
        })
        .await;
        let (frames, answers): (Vec<Bytes>, Vec<Answer>) = window
            .into_iter()
            .map(|(frame, answer, _)| (frame, answer))
            .unzip();
        let base_offsets: Vec<i64> = (0..frames.len() as i64).map(|i| next_offset + i).collect();
        next_offset += frames.len() as i64;
        let bodies: Vec<&[u8]> = frames.iter().map(|frame| &frame[..]).collect();
        let parameters: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&base_offsets, &bodies];
        let (begun, inserted, committed) = futures::join!(
            client.batch_execute("BEGIN"),
            client.execute_raw(&statement, parameters),
            client.batch_execute("COMMIT"),
        );
        let stored = begun
            .and(inserted.map(|_| ()))
            .and(committed)
            .map_err(|error| error.to_string());
        if stored.is_err() {
            let _undone = client.batch_execute("ROLLBACK").await;
        }
        for answer in answers {
            let _gone = answer.send(stored.clone());
        }
    }
}
