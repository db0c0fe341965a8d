//! A window's statements, prepared once on a connection (a statement prepared for each use
//! would cost a round trip of its own).
//!
//! A window takes two (and, with transactional batches, the read of the partitions their
//! transactions added): the lock of its partitions, and then one statement that checks the rows
//! the window was judged against and writes everything it stores. The writes take their offsets
//! from the partitions' rows as the server holds them under the lock: a batch is sent with its
//! offset relative to its partition's high watermark before the window, and stamped with its
//! base offset there. So a window judged before its rows come back (see [`super::known`]) sends
//! the same writes as one judged after.

use tokio_postgres::{Client, Statement};

/// The prepared statements of [`super::commit_window`].
#[derive(Debug, Clone)]
pub struct Statements {
    pub(super) lock_partitions: Statement,
    pub(super) read_producers: Statement,
    pub(super) read_added: Statement,
    pub(super) note_first_offsets: Statement,
    pub(super) write_window: Statement,
}

/// The window's check and writes, in one statement (every part of it sees the rows as they
/// were when it began, under the window's locks, and it succeeds or fails whole).
///
/// - `$1`-`$6`, the check: every partition of the window ($1, $2) is there, and every producer
///   row it was judged against ($3-$5) is still the version it was ($6); otherwise
///   `minibroker.expect_window` fails the statement with SQLSTATE MB001.
/// - `$7`-`$12`, the batches; `relative` is a batch's offset past its partition's high
///   watermark before the window, and its base offset goes into its first eight bytes.
/// - `$13`-`$24`, the changed producers' rows as columns ($13-$19), their batches as columns
///   too ($20-$23), each naming its row by its place among them (from 1). Base offsets at or
///   above `$24` were given before the window knew where its partitions ended: they are that
///   far past the high watermark.
/// - `$25`-`$27`, the offsets each partition took: its high watermark moves up by them.
const WRITE_WINDOW: &str = "
    WITH checked AS (
        SELECT minibroker.expect_window(
            (SELECT count(*) FROM minibroker.partitions
             JOIN unnest($1::bigint[], $2::integer[]) AS k(topic_id, partition)
                 USING (topic_id, partition)),
            cardinality($1::bigint[]),
            (SELECT count(*) FROM minibroker.producer_states
             JOIN unnest($3::bigint[], $4::integer[], $5::bigint[], $6::bigint[])
                 AS k(topic_id, partition, producer_id, version)
                 USING (topic_id, partition, producer_id, version)),
            cardinality($3::bigint[])) AS holds
    ), stored AS (
        INSERT INTO minibroker.batches
            (topic_id, partition, last_offset, base_offset, bytes, max_timestamp)
        SELECT t.topic_id, t.partition,
               p.high_watermark + t.relative + t.offsets - 1,
               p.high_watermark + t.relative,
               overlay(t.bytes PLACING int8send(p.high_watermark + t.relative) FROM 1 FOR 8),
               t.max_timestamp
        FROM unnest($7::bigint[], $8::integer[], $9::bigint[], $10::bigint[], $11::bytea[],
                    $12::bigint[])
            AS t(topic_id, partition, relative, offsets, bytes, max_timestamp)
        JOIN minibroker.partitions p USING (topic_id, partition)
        WHERE (SELECT holds FROM checked)
        RETURNING 1
    ), written AS (
        INSERT INTO minibroker.producer_states (topic_id, partition, producer_id, epoch,
            last_timestamp, in_transaction, first_sequences, last_sequences, base_offsets,
            version)
        SELECT k.topic_id, k.partition, k.producer_id, k.epoch, k.last_timestamp,
               k.in_transaction, coalesce(b.first_sequences, '{}'),
               coalesce(b.last_sequences, '{}'), coalesce(b.base_offsets, '{}'), k.version
        FROM unnest($13::bigint[], $14::integer[], $15::bigint[], $16::smallint[],
                    $17::bigint[], $18::boolean[], $19::bigint[])
            WITH ORDINALITY AS k(topic_id, partition, producer_id, epoch, last_timestamp,
                                 in_transaction, version, row_number)
        JOIN minibroker.partitions p USING (topic_id, partition)
        CROSS JOIN LATERAL (
            SELECT array_agg(u.first_sequence ORDER BY u.n) AS first_sequences,
                   array_agg(u.last_sequence ORDER BY u.n) AS last_sequences,
                   array_agg(CASE WHEN u.base_offset >= $24
                                  THEN p.high_watermark + (u.base_offset - $24)
                                  ELSE u.base_offset END
                             ORDER BY u.n) AS base_offsets
            FROM unnest($20::bigint[], $21::integer[], $22::integer[], $23::bigint[])
                WITH ORDINALITY AS u(row_number, first_sequence, last_sequence, base_offset, n)
            WHERE u.row_number = k.row_number
        ) b
        WHERE (SELECT holds FROM checked)
        ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET
            epoch = EXCLUDED.epoch,
            last_timestamp = EXCLUDED.last_timestamp,
            in_transaction = EXCLUDED.in_transaction,
            first_sequences = EXCLUDED.first_sequences,
            last_sequences = EXCLUDED.last_sequences,
            base_offsets = EXCLUDED.base_offsets,
            version = EXCLUDED.version
        RETURNING 1
    ), advanced AS (
        UPDATE minibroker.partitions p SET high_watermark = p.high_watermark + u.taken
        FROM unnest($25::bigint[], $26::integer[], $27::bigint[])
            AS u(topic_id, partition, taken)
        WHERE p.topic_id = u.topic_id AND p.partition = u.partition
            AND (SELECT holds FROM checked)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM stored), (SELECT count(*) FROM written),
           (SELECT count(*) FROM advanced)";

impl Statements {
    /// Prepares them on `client`.
    ///
    /// # Errors
    /// PostgreSQL's error (a schema older than this broker's, for one).
    pub async fn prepare(client: &Client) -> Result<Self, tokio_postgres::Error> {
        let (lock_partitions, read_producers, read_added, note_first_offsets, write_window) = futures::try_join!(
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
            // The partitions an ongoing transaction of each producer added, at which epoch, and
            // the epoch of each producer refused on each partition (an abort came before any
            // batch of its transaction: one may be late).
            client.prepare(
                "SELECT k.topic_id, k.partition, k.producer_id, tp.epoch, ae.epoch
                 FROM (SELECT DISTINCT * FROM unnest($1::bigint[], $2::integer[], $3::bigint[])
                       AS u(topic_id, partition, producer_id)) AS k
                 LEFT JOIN minibroker.transaction_partitions tp
                     USING (topic_id, partition, producer_id)
                 LEFT JOIN minibroker.aborted_epochs ae
                     USING (topic_id, partition, producer_id)
                 WHERE tp.epoch IS NOT NULL OR ae.epoch IS NOT NULL",
            ),
            // Where each transaction's first batch in a partition goes (sent before the
            // window's writes, which move the high watermark).
            client.prepare(
                "UPDATE minibroker.transaction_partitions tp
                 SET first_offset = p.high_watermark + u.relative
                 FROM unnest($1::bigint[], $2::integer[], $3::bigint[], $4::bigint[])
                     AS u(topic_id, partition, producer_id, relative)
                 JOIN minibroker.partitions p USING (topic_id, partition)
                 WHERE tp.topic_id = u.topic_id AND tp.partition = u.partition
                   AND tp.producer_id = u.producer_id AND tp.first_offset IS NULL",
            ),
            client.prepare(WRITE_WINDOW),
        )?;
        Ok(Self {
            lock_partitions,
            read_producers,
            read_added,
            note_first_offsets,
            write_window,
        })
    }
}
