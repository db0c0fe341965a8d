//! A window's statements, prepared once on a connection (a statement prepared for each use
//! would cost a round trip of its own).
//!
//! The writes take their offsets from the partition's row as the server holds it under the
//! window's lock: a batch is sent with its offset relative to the partition's high watermark
//! before the window, and stamped with its base offset there. So a window judged before its
//! rows come back (see [`super::known`]) sends the same writes as one judged after.

use tokio_postgres::{Client, Statement};

/// The prepared statements of [`super::commit_window`].
#[derive(Debug, Clone)]
pub struct Statements {
    pub(super) lock_partitions: Statement,
    pub(super) read_producers: Statement,
    pub(super) check_window: Statement,
    pub(super) insert_batches: Statement,
    pub(super) write_producers: Statement,
    pub(super) advance_partitions: Statement,
}

impl Statements {
    /// Prepares them on `client`.
    ///
    /// # Errors
    /// PostgreSQL's error (a schema older than this broker's, for one).
    pub async fn prepare(client: &Client) -> Result<Self, tokio_postgres::Error> {
        let (lock_partitions, read_producers, check_window) = futures::try_join!(
            // In key order: two windows never deadlock, one waits for the other.
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
                        in_transaction, first_sequences, last_sequences, base_offsets, version
                 FROM minibroker.producer_states
                 JOIN unnest($1::bigint[], $2::integer[], $3::bigint[])
                     AS k(topic_id, partition, producer_id)
                     USING (topic_id, partition, producer_id)",
            ),
            // Fails the transaction (SQLSTATE MB001) unless every partition is there and every
            // producer's row is the version the window was judged against.
            client.prepare(
                "SELECT minibroker.expect_window(
                     (SELECT count(*) FROM minibroker.partitions
                      JOIN unnest($1::bigint[], $2::integer[]) AS k(topic_id, partition)
                          USING (topic_id, partition)),
                     cardinality($1::bigint[]),
                     (SELECT count(*) FROM minibroker.producer_states
                      JOIN unnest($3::bigint[], $4::integer[], $5::bigint[], $6::bigint[])
                          AS k(topic_id, partition, producer_id, version)
                          USING (topic_id, partition, producer_id, version)),
                     cardinality($3::bigint[]))",
            ),
        )?;
        let (insert_batches, write_producers, advance_partitions) = futures::try_join!(
            // `relative`: the batch's offset from the partition's high watermark before the
            // window; the base offset goes into the batch's first eight bytes.
            client.prepare(
                "INSERT INTO minibroker.batches
                     (topic_id, partition, last_offset, base_offset, bytes, max_timestamp)
                 SELECT t.topic_id, t.partition,
                        p.high_watermark + t.relative + t.offsets - 1,
                        p.high_watermark + t.relative,
                        overlay(t.bytes PLACING int8send(p.high_watermark + t.relative)
                                FROM 1 FOR 8),
                        t.max_timestamp
                 FROM unnest($1::bigint[], $2::integer[], $3::bigint[], $4::bigint[],
                             $5::bytea[], $6::bigint[])
                     AS t(topic_id, partition, relative, offsets, bytes, max_timestamp)
                 JOIN minibroker.partitions p USING (topic_id, partition)",
            ),
            // Every changed producer's row in one statement: the rows as columns ($1-$7),
            // their batches as columns too ($8-$11), each naming its row by its place in the
            // first (from 1). Base offsets at or above $12 were given by this window before it
            // knew where the partition ended: they are that far past its high watermark.
            client.prepare(
                "INSERT INTO minibroker.producer_states (topic_id, partition, producer_id,
                     epoch, last_timestamp, in_transaction, first_sequences,
                     last_sequences, base_offsets, version)
                 SELECT k.topic_id, k.partition, k.producer_id, k.epoch, k.last_timestamp,
                        k.in_transaction, coalesce(b.first_sequences, '{}'),
                        coalesce(b.last_sequences, '{}'), coalesce(b.base_offsets, '{}'),
                        k.version
                 FROM unnest($1::bigint[], $2::integer[], $3::bigint[], $4::smallint[],
                             $5::bigint[], $6::boolean[], $7::bigint[])
                     WITH ORDINALITY AS k(topic_id, partition, producer_id, epoch,
                                          last_timestamp, in_transaction, version, row_number)
                 JOIN minibroker.partitions p USING (topic_id, partition)
                 CROSS JOIN LATERAL (
                     SELECT array_agg(u.first_sequence ORDER BY u.n) AS first_sequences,
                            array_agg(u.last_sequence ORDER BY u.n) AS last_sequences,
                            array_agg(CASE WHEN u.base_offset >= $12
                                           THEN p.high_watermark + (u.base_offset - $12)
                                           ELSE u.base_offset END
                                      ORDER BY u.n) AS base_offsets
                     FROM unnest($8::bigint[], $9::integer[], $10::integer[], $11::bigint[])
                         WITH ORDINALITY AS u(row_number, first_sequence, last_sequence,
                                              base_offset, n)
                     WHERE u.row_number = k.row_number
                 ) b
                 ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET
                     epoch = EXCLUDED.epoch,
                     last_timestamp = EXCLUDED.last_timestamp,
                     in_transaction = EXCLUDED.in_transaction,
                     first_sequences = EXCLUDED.first_sequences,
                     last_sequences = EXCLUDED.last_sequences,
                     base_offsets = EXCLUDED.base_offsets,
                     version = EXCLUDED.version",
            ),
            client.prepare(
                "UPDATE minibroker.partitions p SET high_watermark = p.high_watermark + u.taken
                 FROM unnest($1::bigint[], $2::integer[], $3::bigint[])
                     AS u(topic_id, partition, taken)
                 WHERE p.topic_id = u.topic_id AND p.partition = u.partition",
            ),
        )?;
        Ok(Self {
            lock_partitions,
            read_producers,
            check_window,
            insert_batches,
            write_producers,
            advance_partitions,
        })
    }
}
