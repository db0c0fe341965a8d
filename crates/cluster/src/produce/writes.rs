//! A judged window's writes: its batches, its changed producers' rows and its partitions' new
//! ends, sent together on the window's connection, ahead of its COMMIT.

use futures::future::MaybeDone;
use minibroker_state::ProducerEntry;
use std::future::Future;
use std::pin::Pin;
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

use super::ProducerKey;
use super::judge::{Judged, PROVISIONAL};
use super::statements::Statements;

/// The window's writes as the statements' columns.
pub(super) struct WindowWrites<'a> {
    judged: &'a Judged,
    taken: (Vec<i64>, Vec<i32>, Vec<i64>),
    producers: ProducerRows,
}

impl<'a> WindowWrites<'a> {
    pub(super) fn new(judged: &'a Judged) -> Self {
        let taken = &judged.writes.taken;
        let mut producers = ProducerRows::default();
        for (key, version) in &judged.changed {
            if let Some((entry, _)) = judged.entries.get(key) {
                producers.push(*key, entry, *version);
            }
        }
        Self {
            judged,
            taken: (
                taken.keys().map(|key| key.0).collect(),
                taken.keys().map(|key| key.1).collect(),
                taken.values().copied().collect(),
            ),
            producers,
        }
    }

    /// Sends every write on `client` in order and waits for their answers: the first error,
    /// if any. Everything is sent on the first poll, so what is sent after that poll follows.
    pub(super) async fn execute(
        &self,
        client: &Client,
        statements: &Statements,
    ) -> Result<(), tokio_postgres::Error> {
        let writes = &self.judged.writes;
        if writes.batches.is_empty() {
            return Ok(());
        }
        let bytes: Vec<&[u8]> = writes.batches.iter().map(|batch| &batch[..]).collect();
        let batches: [&(dyn ToSql + Sync); 6] = [
            &writes.topic_ids,
            &writes.partitions,
            &writes.relatives,
            &writes.offsets,
            &bytes,
            &writes.max_timestamps,
        ];
        let taken: [&(dyn ToSql + Sync); 3] = [&self.taken.0, &self.taken.1, &self.taken.2];
        // The producers' rows read their partitions' ends before the window: they go before
        // the ends move.
        let mut sent: [Sent<'_>; 3] = [
            MaybeDone::Future(Box::pin(
                client.execute_raw(&statements.insert_batches, batches),
            )),
            MaybeDone::Future(Box::pin(
                client.execute_raw(&statements.write_producers, self.producers.parameters()),
            )),
            MaybeDone::Future(Box::pin(
                client.execute_raw(&statements.advance_partitions, taken),
            )),
        ];
        for write in &mut sent {
            // The first poll sends it; one already answered keeps its answer.
            let _sent = futures::poll!(write);
        }
        futures::future::join_all(sent.iter_mut()).await;
        for write in &mut sent {
            if let Some(Err(error)) = Pin::new(write).take_output() {
                return Err(error);
            }
        }
        Ok(())
    }
}

/// A write sent, its answer still to come.
type Sent<'a> =
    MaybeDone<Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a>>>;

/// The changed producers' rows as columns, and their batches as columns too, each naming its
/// row by its place among them (from 1).
#[derive(Debug, Default)]
struct ProducerRows {
    topic_ids: Vec<i64>,
    partitions: Vec<i32>,
    producer_ids: Vec<i64>,
    epochs: Vec<i16>,
    last_timestamps: Vec<i64>,
    in_transactions: Vec<bool>,
    versions: Vec<i64>,
    batch_rows: Vec<i64>,
    first_sequences: Vec<i32>,
    last_sequences: Vec<i32>,
    base_offsets: Vec<Option<i64>>,
}

impl ProducerRows {
    fn push(&mut self, key: ProducerKey, entry: &ProducerEntry, version: i64) {
        self.topic_ids.push(key.0);
        self.partitions.push(key.1);
        self.producer_ids.push(key.2);
        self.epochs.push(entry.epoch());
        self.last_timestamps.push(entry.last_timestamp());
        self.in_transactions.push(entry.in_transaction());
        self.versions.push(version);
        let row = i64::try_from(self.versions.len()).unwrap_or(i64::MAX);
        for batch in entry.batches() {
            self.batch_rows.push(row);
            self.first_sequences.push(batch.first_sequence);
            self.last_sequences.push(batch.last_sequence);
            self.base_offsets.push(batch.base_offset);
        }
    }

    fn parameters(&self) -> [&(dyn ToSql + Sync); 12] {
        [
            &self.topic_ids,
            &self.partitions,
            &self.producer_ids,
            &self.epochs,
            &self.last_timestamps,
            &self.in_transactions,
            &self.versions,
            &self.batch_rows,
            &self.first_sequences,
            &self.last_sequences,
            &self.base_offsets,
            &PROVISIONAL,
        ]
    }
}
