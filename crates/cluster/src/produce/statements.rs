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
    pub(super) write_producer: Statement,
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
        let (insert_batches, write_producer, advance_partitions) = futures::try_join!(
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
            // Base offsets at or above $10 were given by this window before it knew where
            // the partition ended: they are that far past its high watermark.
            client.prepare(
                "INSERT INTO minibroker.producer_states (topic_id, partition, producer_id,
                     epoch, last_timestamp, in_transaction, first_sequences,
                     last_sequences, base_offsets, version)
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8,
                        ARRAY(SELECT CASE WHEN o >= $10 THEN p.high_watermark + (o - $10)
                                          ELSE o END
                              FROM unnest($9::bigint[]) WITH ORDINALITY AS u(o, n)
                              ORDER BY n),
                        $11
                 FROM minibroker.partitions p
                 WHERE p.topic_id = $1 AND p.partition = $2
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
            write_producer,
            advance_partitions,
        })
    }
}
