//! A judged window's check and writes: its batches, its changed producers' rows and its
//! partitions' new ends, sent in one statement ahead of its COMMIT.

use minibroker_state::ProducerEntry;
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

use super::judge::{Judged, PROVISIONAL};
use super::statements::Statements;
use super::{PartitionKey, ProducerKey};

/// The window's check and writes as the statement's columns.
pub(super) struct WindowWrites<'a> {
    judged: &'a Judged,
    /// The partitions that must be there.
    partitions: (Vec<i64>, Vec<i32>),
    /// The producers' rows judged against, with their versions.
    expected: (Vec<i64>, Vec<i32>, Vec<i64>, Vec<i64>),
    taken: (Vec<i64>, Vec<i32>, Vec<i64>),
    producers: ProducerRows,
}

impl<'a> WindowWrites<'a> {
    /// `judged`'s writes, checked against `partitions` being there and against every
    /// producer's row it was judged by being the version it was.
    pub(super) fn new(
        judged: &'a Judged,
        partitions: impl IntoIterator<Item = PartitionKey>,
    ) -> Self {
        let mut expected = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (key, (_, version)) in &judged.entries {
            if let Some(version) = version {
                expected.0.push(key.0);
                expected.1.push(key.1);
                expected.2.push(key.2);
                expected.3.push(*version);
            }
        }
        let mut producers = ProducerRows::default();
        for (key, version) in &judged.changed {
            if let Some((entry, _)) = judged.entries.get(key) {
                producers.push(*key, entry, *version);
            }
        }
        let taken = &judged.writes.taken;
        Self {
            judged,
            partitions: partitions.into_iter().unzip(),
            expected,
            taken: (
                taken.keys().map(|key| key.0).collect(),
                taken.keys().map(|key| key.1).collect(),
                taken.values().copied().collect(),
            ),
            producers,
        }
    }

    /// Sends the statement on `client` (on the first poll, so what is sent after that poll
    /// follows it) and waits for its answer.
    pub(super) async fn execute(
        &self,
        client: &Client,
        statements: &Statements,
    ) -> Result<(), tokio_postgres::Error> {
        let writes = &self.judged.writes;
        let bytes: Vec<&[u8]> = writes.batches.iter().map(|batch| &batch[..]).collect();
        let producers = &self.producers;
        let parameters: [&(dyn ToSql + Sync); 27] = [
            &self.partitions.0,
            &self.partitions.1,
            &self.expected.0,
            &self.expected.1,
            &self.expected.2,
            &self.expected.3,
            &writes.topic_ids,
            &writes.partitions,
            &writes.relatives,
            &writes.offsets,
            &bytes,
            &writes.max_timestamps,
            &producers.topic_ids,
            &producers.partitions,
            &producers.producer_ids,
            &producers.epochs,
            &producers.last_timestamps,
            &producers.in_transactions,
            &producers.versions,
            &producers.batch_rows,
            &producers.first_sequences,
            &producers.last_sequences,
            &producers.base_offsets,
            &PROVISIONAL,
            &self.taken.0,
            &self.taken.1,
            &self.taken.2,
        ];
        client
            .execute_raw(&statements.write_window, parameters)
            .await
            .map(drop)
    }
}

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
}
