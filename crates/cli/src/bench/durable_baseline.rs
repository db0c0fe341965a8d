//! What the do-nothing baseline stores when it stands in for a durable broker
//! (`bench --data-dir DIR --baseline`): every produce frame written as it is, with one `write(2)`
//! per frame, to one file per partition, and synced as the flush policy syncs — never (`os`),
//! every interval (`interval:<ms>`), or before the answers of each burst leave (`always`), with
//! a group commit per file so that one fsync covers every frame written while the previous one
//! ran. It decodes nothing: a connection's frames go to the partitions the load generator gives
//! that connection, in turn, as the generator sends them. When the broker rolls its segments
//! (and retention drops the old ones), the baseline truncates a file at the same size, so both
//! keep a bounded amount on disk.
//!
//! The frame is a little larger than the batch the broker stores (the request's header and
//! topic name, ~40 bytes), which counts against the baseline, not the broker.

use anyhow::{Context, Result};
use minibroker_broker::FlushPolicy;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::load::partitions_of;

/// The baseline's partition files.
pub struct Store {
    files: Vec<Arc<PartitionFile>>,
    flush: FlushPolicy,
    connections: usize,
    roll_bytes: Option<u64>,
    /// Connections that have sent a produce, in the order they did (each phase of the
    /// generator opens `connections` new ones).
    producing_connections: AtomicUsize,
}

struct PartitionFile {
    file: File,
    /// Frames written so far.
    written: AtomicU64,
    /// Bytes written since the file was last truncated.
    bytes: AtomicU64,
    /// Frames covered by the last fsync; held while one runs (the group commit).
    synced: tokio::sync::Mutex<u64>,
}

impl PartitionFile {
    /// Returns once an fsync covering the first `through` frames has finished: the first
    /// waiter syncs, and whoever waited meanwhile is covered by it or by the next.
    async fn sync_through(self: &Arc<Self>, through: u64) -> std::io::Result<()> {
        let mut synced = self.synced.lock().await;
        if *synced >= through {
            return Ok(());
        }
        let covers = self.written.load(Ordering::Acquire);
        let file = Arc::clone(self);
        tokio::task::spawn_blocking(move || file.file.sync_data())
            .await
            .map_err(std::io::Error::other)??;
        *synced = covers;
        Ok(())
    }
}

impl Store {
    /// Files `0.log` .. in `dir` for `partitions` partitions written by `connections`
    /// connections; each truncated when it reaches `roll_bytes`, if given. Starts the interval
    /// syncs of `interval:<ms>` on the current runtime.
    pub fn create(
        dir: &Path,
        partitions: u32,
        connections: usize,
        flush: FlushPolicy,
        roll_bytes: Option<u64>,
    ) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let files = (0..partitions)
            .map(|partition| {
                let path = dir.join(format!("{partition}.log"));
                let file = File::options()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
                Ok(Arc::new(PartitionFile {
                    file,
                    written: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                    synced: tokio::sync::Mutex::new(0),
                }))
            })
            .collect::<Result<_>>()?;
        let store = Arc::new(Self {
            files,
            flush,
            connections,
            roll_bytes,
            producing_connections: AtomicUsize::new(0),
        });
        if let FlushPolicy::Interval(ms) = flush {
            tokio::spawn(sync_every(
                Arc::downgrade(&store),
                Duration::from_millis(ms.max(1)),
            ));
        }
        Ok(store)
    }

    /// The writer of a connection that has just sent its first produce.
    pub fn writer(self: &Arc<Self>) -> ConnectionWriter {
        let connection = self.producing_connections.fetch_add(1, Ordering::Relaxed);
        let partitions = self.files.len() as u32;
        ConnectionWriter {
            store: Arc::clone(self),
            partitions: partitions_of(connection % self.connections, self.connections, partitions),
            next: 0,
            unsynced: Vec::new(),
        }
    }
}

/// Syncs every file with frames its last fsync did not cover, every `interval`, until the
/// store is dropped.
async fn sync_every(store: Weak<Store>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let Some(store) = store.upgrade() else { return };
        for file in &store.files {
            let written = file.written.load(Ordering::Acquire);
            if let Err(error) = file.sync_through(written).await {
                tracing::warn!(%error, "baseline interval sync failed");
            }
        }
    }
}

/// One connection's writes.
pub struct ConnectionWriter {
    store: Arc<Store>,
    partitions: Vec<u32>,
    next: usize,
    /// (partition, frames written through) not yet synced, for `always`.
    unsynced: Vec<(usize, u64)>,
}

impl ConnectionWriter {
    /// Writes `frame` to the connection's next partition, with one `write(2)`.
    pub fn write(&mut self, frame: &[u8]) -> std::io::Result<()> {
        let partition = self.partitions[self.next % self.partitions.len()] as usize;
        self.next += 1;
        let Some(file) = self.store.files.get(partition) else {
            return Err(std::io::Error::other("no such partition file"));
        };
        (&file.file).write_all(frame)?;
        let through = file.written.fetch_add(1, Ordering::AcqRel) + 1;
        let bytes =
            file.bytes.fetch_add(frame.len() as u64, Ordering::Relaxed) + frame.len() as u64;
        if self.store.roll_bytes.is_some_and(|roll| bytes >= roll) {
            file.bytes.store(0, Ordering::Relaxed);
            file.file.set_len(0)?;
        }
        if self.store.flush == FlushPolicy::Always {
            match self.unsynced.iter_mut().find(|(p, _)| *p == partition) {
                Some(entry) => entry.1 = through,
                None => self.unsynced.push((partition, through)),
            }
        }
        Ok(())
    }

    /// With `always`: returns once everything written so far is synced.
    pub async fn durable(&mut self) -> std::io::Result<()> {
        for (partition, through) in self.unsynced.drain(..) {
            self.store.files[partition].sync_through(through).await?;
        }
        Ok(())
    }
}
