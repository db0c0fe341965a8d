//! A judged window's writes: its batches, its changed producers' rows and its partitions' new
//! ends, sent together on the window's connection, ahead of its COMMIT.

use futures::future::MaybeDone;
use minibroker_state::{BatchMetadata, ProducerEntry};
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
    producer_rows: Vec<ProducerRow>,
}

impl<'a> WindowWrites<'a> {
    pub(super) fn new(judged: &'a Judged) -> Self {
        let taken = &judged.writes.taken;
        let producer_rows = judged
            .changed
            .iter()
            .filter_map(|(key, version)| {
                let (entry, _) = judged.entries.get(key)?;
                Some(ProducerRow::new(*key, entry, *version))
            })
            .collect();
        Self {
            judged,
            taken: (
                taken.keys().map(|key| key.0).collect(),
                taken.keys().map(|key| key.1).collect(),
                taken.values().copied().collect(),
            ),
            producer_rows,
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
        let mut sent: Vec<Sent<'_>> = Vec::with_capacity(self.producer_rows.len() + 2);
        let batches: [&(dyn ToSql + Sync); 6] = [
            &writes.topic_ids,
            &writes.partitions,
            &writes.relatives,
            &writes.offsets,
            &bytes,
            &writes.max_timestamps,
        ];
        sent.push(MaybeDone::Future(Box::pin(
            client.execute_raw(&statements.insert_batches, batches),
        )));
        // Each row reads its partition's end before the window: they go before it moves.
        for row in &self.producer_rows {
            sent.push(MaybeDone::Future(Box::pin(
                client.execute_raw(&statements.write_producer, row.parameters()),
            )));
        }
        let taken: [&(dyn ToSql + Sync); 3] = [&self.taken.0, &self.taken.1, &self.taken.2];
        sent.push(MaybeDone::Future(Box::pin(
            client.execute_raw(&statements.advance_partitions, taken),
        )));
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

/// A producer's entry as its row's columns.
#[derive(Debug)]
struct ProducerRow {
    key: ProducerKey,
    epoch: i16,
    last_timestamp: i64,
    in_transaction: bool,
    first_sequences: Vec<i32>,
    last_sequences: Vec<i32>,
    base_offsets: Vec<Option<i64>>,
    version: i64,
}

impl ProducerRow {
    fn new(key: ProducerKey, entry: &ProducerEntry, version: i64) -> Self {
        let batches: Vec<BatchMetadata> = entry.batches().collect();
        Self {
            key,
            epoch: entry.epoch(),
            last_timestamp: entry.last_timestamp(),
            in_transaction: entry.in_transaction(),
            first_sequences: batches.iter().map(|batch| batch.first_sequence).collect(),
            last_sequences: batches.iter().map(|batch| batch.last_sequence).collect(),
            base_offsets: batches.iter().map(|batch| batch.base_offset).collect(),
            version,
        }
    }

    fn parameters(&self) -> [&(dyn ToSql + Sync); 11] {
        [
            &self.key.0,
            &self.key.1,
            &self.key.2,
            &self.epoch,
            &self.last_timestamp,
            &self.in_transaction,
            &self.first_sequences,
            &self.last_sequences,
            &self.base_offsets,
            &PROVISIONAL,
            &self.version,
        ]
    }
}
