//! The exactly-once rule in one PostgreSQL transaction: a window of batches, from any broker
//! for any partition, is judged and stored at once.
//!
//! [`commit_window`] locks the window's partition rows in key order (two brokers' windows never
//! deadlock; one waits for the other), reads their producers' rows, runs each batch in arrival
//! order through `minibroker_state::decide_and_record`, the same function a single broker runs
//! under its shard lock, so both give the same answers. Accepted batches take offsets from
//! their partition's high watermark. The batches, the changed producer rows and the new high
//! watermarks are written, and the transaction commits. Only then is anything answered.
//!
//! The partition row's lock is what makes a window the only writer of its partitions, as the
//! shard lock is on one broker: a producer's row is read after the lock is held and written
//! before it is let go. Statements are prepared once per connection ([`Statements`]). BEGIN goes
//! to the server with the reads, and the writes with COMMIT (pipelined: the server runs them in
//! order), so a window costs two round trips. A write the server refuses aborts the
//! transaction, and the COMMIT after it then rolls back: a window is answered as stored only
//! when every write and the COMMIT succeeded.
//!
//! A COMMIT whose answer is lost is [`CommitError::Unknown`]: the window may be stored or not,
//! and is never answered as stored. A retry then meets the rule: DUPLICATE with the original
//! offset when it was stored, ACCEPTED when it was not.

use bytes::Bytes;
use futures::future::MaybeDone;
use minibroker_state::{
    BatchHeader, BatchMetadata, Outcome, ProducerEntry, Verdict, decide_and_record,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use thiserror::Error;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

/// One batch for one partition, as a broker took it (already checked as a batch).
#[derive(Debug, Clone)]
pub struct Append {
    /// The cluster's id of its topic.
    pub topic_id: i64,
    /// The partition.
    pub partition: i32,
    /// Its producer's id, epoch and sequences, for the rule; `None` for a producer that is not
    /// idempotent, whose batch is always stored.
    pub header: Option<BatchHeader>,
    /// Offsets it takes: its last offset delta + 1.
    pub offsets: u32,
    /// The batch as sent; its base offset is stamped when it is stored.
    pub bytes: Bytes,
}

/// What the window's commit answers one stored or judged batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The rule's verdict, with the offset the batch (or, for a duplicate, its original) has.
    pub verdict: Verdict,
    /// The partition's log start offset, as Kafka's answer reports it.
    pub log_start_offset: i64,
}

/// Why one batch of a window was refused before the rule saw it (the rest of the window is
/// stored all the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AppendRefused {
    /// The partition's row is gone (its topic was deleted) or never was.
    #[error("the cluster has no partition {partition} of the topic with id {topic_id}")]
    UnknownPartition {
        /// The topic's id.
        topic_id: i64,
        /// The partition.
        partition: i32,
    },
    /// The bytes are not a batch: shorter than a batch header, or taking no offset.
    #[error("not a record batch: {bytes} bytes taking {offsets} offsets")]
    NotABatch {
        /// Its length.
        bytes: usize,
        /// The offsets it said it takes.
        offsets: u32,
    },
}

/// Why a window was not stored, or may not have been.
#[derive(Debug, Error)]
pub enum CommitError {
    /// The transaction failed before its COMMIT: nothing of the window is stored.
    #[error("storing the window failed (nothing of it is stored): {0}")]
    Failed(#[source] tokio_postgres::Error),
    /// The COMMIT got no answer: the window may or may not be stored.
    #[error("the window's commit got no answer (it may or may not be stored): {0}")]
    Unknown(#[source] tokio_postgres::Error),
    /// A producer's row is not one the rule could have written: it is never guessed at.
    #[error(
        "producer {producer_id}'s row for partition {partition} of the topic with id {topic_id} \
         is not one the rule writes; refusing to judge its batches"
    )]
    Damaged {
        /// The topic's id.
        topic_id: i64,
        /// The partition.
        partition: i32,
        /// The producer.
        producer_id: i64,
    },
}

/// The window's statements, prepared once on a connection (a statement prepared for each use
/// would cost a round trip of its own).
#[derive(Debug, Clone)]
pub struct Statements {
    lock_partitions: Statement,
    read_producers: Statement,
    insert_batches: Statement,
    write_producer: Statement,
    advance_partitions: Statement,
}

impl Statements {
    /// Prepares them on `client`.
    ///
    /// # Errors
    /// PostgreSQL's error (a schema older than this broker's, for one).
    pub async fn prepare(client: &Client) -> Result<Self, tokio_postgres::Error> {
        let (lock_partitions, read_producers, insert_batches, write_producer, advance_partitions) =
            futures::try_join!(
                client.prepare(
                    "SELECT topic_id, partition, log_start_offset, high_watermark
                     FROM minibroker.partitions p
                     JOIN unnest($1::bigint[], $2::integer[]) AS k(topic_id, partition)
                         USING (topic_id, partition)
                     ORDER BY topic_id, partition
                     FOR UPDATE OF p",
                ),
                client.prepare(
                    "SELECT topic_id, partition, producer_id, epoch, last_timestamp,
                            in_transaction, first_sequences, last_sequences, base_offsets
                     FROM minibroker.producer_states
                     JOIN unnest($1::bigint[], $2::integer[], $3::bigint[])
                         AS k(topic_id, partition, producer_id)
                         USING (topic_id, partition, producer_id)",
                ),
                client.prepare(
                    "INSERT INTO minibroker.batches
                         (topic_id, partition, last_offset, base_offset, bytes, max_timestamp)
                     SELECT * FROM unnest($1::bigint[], $2::integer[], $3::bigint[],
                                          $4::bigint[], $5::bytea[], $6::bigint[])",
                ),
                client.prepare(
                    "INSERT INTO minibroker.producer_states (topic_id, partition, producer_id,
                         epoch, last_timestamp, in_transaction, first_sequences,
                         last_sequences, base_offsets)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                     ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET
                         epoch = EXCLUDED.epoch,
                         last_timestamp = EXCLUDED.last_timestamp,
                         in_transaction = EXCLUDED.in_transaction,
                         first_sequences = EXCLUDED.first_sequences,
                         last_sequences = EXCLUDED.last_sequences,
                         base_offsets = EXCLUDED.base_offsets",
                ),
                client.prepare(
                    "UPDATE minibroker.partitions p SET high_watermark = u.high_watermark
                     FROM unnest($1::bigint[], $2::integer[], $3::bigint[])
                         AS u(topic_id, partition, high_watermark)
                     WHERE p.topic_id = u.topic_id AND p.partition = u.partition",
                ),
            )?;
        Ok(Self {
            lock_partitions,
            read_producers,
            insert_batches,
            write_producer,
            advance_partitions,
        })
    }
}

/// A partition as the window holds it (its row locked).
#[derive(Debug, Clone, Copy)]
struct Held {
    log_start_offset: i64,
    high_watermark: i64,
}

type PartitionKey = (i64, i32);
type ProducerKey = (i64, i32, i64);

/// What the window stores, gathered while its batches are judged.
#[derive(Debug, Default)]
struct Writes {
    topic_ids: Vec<i64>,
    partitions: Vec<i32>,
    last_offsets: Vec<i64>,
    base_offsets: Vec<i64>,
    max_timestamps: Vec<i64>,
    batches: Vec<Vec<u8>>,
    /// Producers whose entry an accepted batch changed.
    changed_producers: BTreeSet<ProducerKey>,
}

/// Judges and stores `appends` in one transaction on `client` (see the module's docs), and
/// answers each in order.
///
/// # Errors
/// [`CommitError`]: nothing of the window is answered as stored then.
pub async fn commit_window(
    client: &mut Client,
    statements: &Statements,
    appends: &[Append],
) -> Result<Vec<Result<Appended, AppendRefused>>, CommitError> {
    commit_window_then(client, statements, appends, || ()).await
}

/// [`commit_window`], calling `locked` once the window's partitions are locked and read (or
/// that failed): a window begun on another connection after it queues behind its locks.
///
/// # Errors
/// As [`commit_window`].
pub async fn commit_window_then(
    client: &mut Client,
    statements: &Statements,
    appends: &[Append],
    locked: impl FnOnce(),
) -> Result<Vec<Result<Appended, AppendRefused>>, CommitError> {
    let committed = judge_and_commit(client, statements, appends, locked).await;
    if matches!(
        committed,
        Err(CommitError::Failed(_) | CommitError::Damaged { .. })
    ) {
        // Whatever of the window the server took is undone, and the connection is ready for
        // the next one (a ROLLBACK after a COMMIT that rolled back only warns).
        if let Err(error) = client.batch_execute("ROLLBACK").await {
            tracing::debug!(%error, "ROLLBACK after a failed window");
        }
    }
    committed
}

/// [`commit_window`]'s transaction, begun with its reads and ended with its writes, each sent
/// together. A write refused makes the COMMIT sent after it a rollback, so the window is
/// answered as stored only when every write and the COMMIT succeeded.
async fn judge_and_commit(
    client: &Client,
    statements: &Statements,
    appends: &[Append],
    locked: impl FnOnce(),
) -> Result<Vec<Result<Appended, AppendRefused>>, CommitError> {
    let read = read_window(client, statements, appends).await;
    locked();
    let (mut held, mut entries) = read?;
    let mut writes = Writes::default();
    let answers = appends
        .iter()
        .map(|append| judge(append, &mut held, &mut entries, &mut writes))
        .collect();
    let writes = WindowWrites::new(&entries, writes);
    let sent = writes.send(client, statements).await;
    // Every write is on its way: COMMIT follows them.
    let (written, committed) = futures::join!(answered(sent), client.batch_execute("COMMIT"));
    written.map_err(CommitError::Failed)?;
    committed.map_err(CommitError::Unknown)?;
    Ok(answers)
}

/// Begins the window's transaction, locks its partitions in key order and reads them and
/// their producers' entries.
async fn read_window(
    client: &Client,
    statements: &Statements,
    appends: &[Append],
) -> Result<
    (
        HashMap<PartitionKey, Held>,
        HashMap<ProducerKey, ProducerEntry>,
    ),
    CommitError,
> {
    let partitions: BTreeSet<PartitionKey> = appends
        .iter()
        .map(|append| (append.topic_id, append.partition))
        .collect();
    let producers: BTreeSet<ProducerKey> = appends
        .iter()
        .filter_map(|append| {
            let header = append.header.as_ref()?;
            Some((append.topic_id, append.partition, header.producer_id()))
        })
        .collect();
    let (topic_ids, partition_numbers): (Vec<i64>, Vec<i32>) = partitions.into_iter().unzip();
    let producer_columns = (
        producers.iter().map(|key| key.0).collect::<Vec<_>>(),
        producers.iter().map(|key| key.1).collect::<Vec<_>>(),
        producers.iter().map(|key| key.2).collect::<Vec<_>>(),
    );
    // Sent together: the server runs them in order, so the producers are read once the
    // partitions are locked, by a statement whose snapshot is taken then.
    let lock_parameters: [&(dyn ToSql + Sync); 2] = [&topic_ids, &partition_numbers];
    let producer_parameters: [&(dyn ToSql + Sync); 3] = [
        &producer_columns.0,
        &producer_columns.1,
        &producer_columns.2,
    ];
    let (_begun, locked, producer_rows) = futures::try_join!(
        client.batch_execute("BEGIN"),
        client.query(&statements.lock_partitions, &lock_parameters),
        client.query(&statements.read_producers, &producer_parameters),
    )
    .map_err(CommitError::Failed)?;
    let held = locked
        .iter()
        .map(|row| {
            let key = (row.get(0), row.get(1));
            let held = Held {
                log_start_offset: row.get(2),
                high_watermark: row.get(3),
            };
            (key, held)
        })
        .collect();
    let entries = producer_rows
        .iter()
        .map(entry_of_row)
        .collect::<Result<_, _>>()?;
    Ok((held, entries))
}

/// A producer's row as the rule's entry.
fn entry_of_row(row: &Row) -> Result<(ProducerKey, ProducerEntry), CommitError> {
    let key: ProducerKey = (row.get(0), row.get(1), row.get(2));
    let damaged = || CommitError::Damaged {
        topic_id: key.0,
        partition: key.1,
        producer_id: key.2,
    };
    let first_sequences: Vec<i32> = row.get(6);
    let last_sequences: Vec<i32> = row.get(7);
    let base_offsets: Vec<Option<i64>> = row.get(8);
    if first_sequences.len() != last_sequences.len() || first_sequences.len() != base_offsets.len()
    {
        return Err(damaged());
    }
    let batches: Vec<BatchMetadata> = first_sequences
        .into_iter()
        .zip(last_sequences)
        .zip(base_offsets)
        .map(
            |((first_sequence, last_sequence), base_offset)| BatchMetadata {
                first_sequence,
                last_sequence,
                base_offset,
            },
        )
        .collect();
    let entry = ProducerEntry::from_parts(row.get(3), row.get(4), &batches, row.get(5))
        .ok_or_else(damaged)?;
    Ok((key, entry))
}

/// Judges one batch against what the window holds so far, and gathers what storing it writes.
fn judge(
    append: &Append,
    held: &mut HashMap<PartitionKey, Held>,
    entries: &mut HashMap<ProducerKey, ProducerEntry>,
    writes: &mut Writes,
) -> Result<Appended, AppendRefused> {
    let key = (append.topic_id, append.partition);
    let Some(partition) = held.get_mut(&key) else {
        return Err(AppendRefused::UnknownPartition {
            topic_id: append.topic_id,
            partition: append.partition,
        });
    };
    if append.offsets == 0 || append.bytes.len() < minibroker_records::HEADER_LEN {
        return Err(AppendRefused::NotABatch {
            bytes: append.bytes.len(),
            offsets: append.offsets,
        });
    }
    let base_offset = partition.high_watermark;
    let mut store = || {
        let mut batch = append.bytes.to_vec();
        minibroker_records::set_base_offset(&mut batch, base_offset);
        writes.topic_ids.push(append.topic_id);
        writes.partitions.push(append.partition);
        writes
            .last_offsets
            .push(base_offset + i64::from(append.offsets) - 1);
        writes.base_offsets.push(base_offset);
        writes
            .max_timestamps
            .push(minibroker_records::max_timestamp(&batch));
        writes.batches.push(batch);
        partition.high_watermark += i64::from(append.offsets);
        Ok::<_, std::convert::Infallible>(base_offset)
    };
    let verdict = match &append.header {
        None => {
            let Ok(base_offset) = store();
            Verdict {
                outcome: Outcome::Accepted,
                base_offset: Some(base_offset),
                known_producer: false,
            }
        }
        Some(header) => {
            let producer = (append.topic_id, append.partition, header.producer_id());
            let Ok((verdict, created)) =
                decide_and_record(entries.get_mut(&producer), header, |_| store());
            if let Some(created) = created {
                entries.insert(producer, created);
            }
            if verdict.outcome == Outcome::Accepted {
                writes.changed_producers.insert(producer);
            }
            verdict
        }
    };
    Ok(Appended {
        verdict,
        log_start_offset: partition.log_start_offset,
    })
}

/// The window's writes as the statements' columns: its batches, its partitions' new high
/// watermarks and its changed producers' rows.
struct WindowWrites {
    writes: Writes,
    advanced: (Vec<i64>, Vec<i32>, Vec<i64>),
    producer_rows: Vec<ProducerRow>,
}

impl WindowWrites {
    fn new(entries: &HashMap<ProducerKey, ProducerEntry>, writes: Writes) -> Self {
        // Each partition that took batches ends after its last one (batches are in offset
        // order); the others' rows stay as they were.
        let advanced: BTreeMap<PartitionKey, i64> = writes
            .topic_ids
            .iter()
            .zip(&writes.partitions)
            .zip(&writes.last_offsets)
            .map(|((&topic_id, &partition), &last_offset)| ((topic_id, partition), last_offset + 1))
            .collect();
        let producer_rows = writes
            .changed_producers
            .iter()
            .filter_map(|key| Some(ProducerRow::new(*key, entries.get(key)?)))
            .collect();
        Self {
            advanced: (
                advanced.keys().map(|key| key.0).collect(),
                advanced.keys().map(|key| key.1).collect(),
                advanced.values().copied().collect(),
            ),
            producer_rows,
            writes,
        }
    }

    /// Sends every write on `client` (each statement goes out on its first poll, which this
    /// gives it), returning them to be awaited: what is sent after this follows them.
    async fn send<'a>(&'a self, client: &'a Client, statements: &'a Statements) -> Vec<Sent<'a>> {
        let mut sent: Vec<Sent<'a>> = Vec::with_capacity(self.producer_rows.len() + 2);
        if self.writes.batches.is_empty() {
            return sent;
        }
        let writes = &self.writes;
        let batches: [&(dyn ToSql + Sync); 6] = [
            &writes.topic_ids,
            &writes.partitions,
            &writes.last_offsets,
            &writes.base_offsets,
            &writes.batches,
            &writes.max_timestamps,
        ];
        sent.push(MaybeDone::Future(Box::pin(
            client.execute_raw(&statements.insert_batches, batches),
        )));
        let advanced: [&(dyn ToSql + Sync); 3] =
            [&self.advanced.0, &self.advanced.1, &self.advanced.2];
        sent.push(MaybeDone::Future(Box::pin(
            client.execute_raw(&statements.advance_partitions, advanced),
        )));
        for row in &self.producer_rows {
            sent.push(MaybeDone::Future(Box::pin(
                client.execute_raw(&statements.write_producer, row.parameters()),
            )));
        }
        for write in &mut sent {
            // The first poll sends it; one already answered keeps its answer.
            let _sent = futures::poll!(write);
        }
        sent
    }
}

/// A write sent, its answer still to come.
type Sent<'a> =
    MaybeDone<Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a>>>;

/// Waits for the answers of writes [`WindowWrites::send`] sent: the first error, if any.
async fn answered(mut sent: Vec<Sent<'_>>) -> Result<(), tokio_postgres::Error> {
    futures::future::join_all(sent.iter_mut()).await;
    for write in &mut sent {
        if let Some(Err(error)) = Pin::new(write).take_output() {
            return Err(error);
        }
    }
    Ok(())
}

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
}

impl ProducerRow {
    fn new(key: ProducerKey, entry: &ProducerEntry) -> Self {
        let batches: Vec<BatchMetadata> = entry.batches().collect();
        Self {
            key,
            epoch: entry.epoch(),
            last_timestamp: entry.last_timestamp(),
            in_transaction: entry.in_transaction(),
            first_sequences: batches.iter().map(|batch| batch.first_sequence).collect(),
            last_sequences: batches.iter().map(|batch| batch.last_sequence).collect(),
            base_offsets: batches.iter().map(|batch| batch.base_offset).collect(),
        }
    }

    fn parameters(&self) -> [&(dyn ToSql + Sync); 9] {
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
        ]
    }
}
