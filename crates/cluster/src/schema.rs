//! The cluster's tables in PostgreSQL, in their own schema (`minibroker`), and their version.
//!
//! Every broker migrates the database when it starts, so the first broker of a new version
//! brings the schema up to it. The steps are append-only: step `n` takes the schema from
//! version `n` to `n + 1` and is never changed once released, so a database made by any older
//! broker is brought forward by the same statements a new one runs. The whole migration is one
//! transaction under an advisory lock, so brokers starting together migrate once, one after the
//! other, and a failed migration leaves the schema as it was. A database whose schema is newer
//! than the broker knows is refused, never read: an older broker could misread what a newer one
//! wrote.

use thiserror::Error;

/// The statements that take the schema from version `n` to `n + 1`, for each `n` from 0.
const STEPS: &[&str] = &[
    // 1: the brokers of the cluster, each with its lease (kept alive by its heartbeat; a broker
    // whose lease has run out is not a member).
    "CREATE TABLE minibroker.brokers (
        node_id integer PRIMARY KEY,
        kafka_host text NOT NULL,
        kafka_port integer NOT NULL CHECK (kafka_port BETWEEN 0 AND 65535),
        lease_expires timestamptz NOT NULL,
        registered timestamptz NOT NULL DEFAULT now()
    )",
    // 2: each broker's run (a random id chosen at start), so a second broker started with a
    // node id that a live one holds is refused; topics and their partitions, each partition's producer state and batches, and the
    // producer ids. A partition's row is the lock every write to it takes; its high watermark
    // is where the next batch goes. A producer's row is the rule's entry (`crates/state`): its
    // epoch and its last batches (at most 5) newest first, as parallel arrays. Batches are
    // keyed by their last offset, so a read from an offset finds its batch with the index.
    "ALTER TABLE minibroker.brokers ADD COLUMN run_id text NOT NULL DEFAULT '';
    CREATE TABLE minibroker.topics (
        topic_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        name text NOT NULL UNIQUE,
        partitions integer NOT NULL CHECK (partitions > 0),
        created timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE minibroker.partitions (
        topic_id bigint NOT NULL REFERENCES minibroker.topics ON DELETE CASCADE,
        partition integer NOT NULL CHECK (partition >= 0),
        log_start_offset bigint NOT NULL DEFAULT 0,
        high_watermark bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (topic_id, partition)
    );
    CREATE TABLE minibroker.producer_states (
        topic_id bigint NOT NULL,
        partition integer NOT NULL,
        producer_id bigint NOT NULL CHECK (producer_id >= 0),
        epoch smallint NOT NULL CHECK (epoch >= 0),
        last_timestamp bigint NOT NULL,
        in_transaction boolean NOT NULL,
        first_sequences integer[] NOT NULL,
        last_sequences integer[] NOT NULL,
        base_offsets bigint[] NOT NULL,
        PRIMARY KEY (topic_id, partition, producer_id),
        FOREIGN KEY (topic_id, partition) REFERENCES minibroker.partitions ON DELETE CASCADE
    );
    CREATE TABLE minibroker.batches (
        topic_id bigint NOT NULL,
        partition integer NOT NULL,
        last_offset bigint NOT NULL,
        base_offset bigint NOT NULL,
        bytes bytea NOT NULL,
        PRIMARY KEY (topic_id, partition, last_offset),
        FOREIGN KEY (topic_id, partition) REFERENCES minibroker.partitions ON DELETE CASCADE
    );
    CREATE SEQUENCE minibroker.producer_ids AS bigint MINVALUE 0 START 0",
    // 3: what else every broker shares. A topic's own settings, as `name=value` items (Kafka's
    // names, checked and written as a broker writes them). Each batch's newest timestamp, for
    // retention by age and lookups by time: written by the broker that stores the batch, and
    // read here from the header (bytes 35 to 43) of the batches stored before.
    // Which principal each producer id was issued to, so that with authorisation on only its
    // owner writes with it, on any broker.
    "ALTER TABLE minibroker.topics ADD COLUMN settings text[] NOT NULL DEFAULT '{}';
    ALTER TABLE minibroker.batches ADD COLUMN max_timestamp bigint;
    UPDATE minibroker.batches
        SET max_timestamp = ('x' || encode(substring(bytes FROM 36 FOR 8), 'hex'))::bit(64)::bigint;
    ALTER TABLE minibroker.batches ALTER COLUMN max_timestamp SET NOT NULL;
    CREATE TABLE minibroker.producer_owners (
        producer_id bigint PRIMARY KEY CHECK (producer_id >= 0),
        principal text NOT NULL,
        issued timestamptz NOT NULL DEFAULT now()
    )",
    // 4: a version on each producer's row, a new random one at every write, so a broker may
    // judge a window against the rows it wrote last and have the server check they are still
    // those (`minibroker.expect_window`, under the partitions' locks). A writer that does not
    // set it (a broker of version 3 still running) gets one from the trigger, so its writes
    // are seen as changes too.
    // Batches and producers' rows no longer name their partition's row by foreign key: every
    // window writes them with that row locked, having read it, so the check the key ran for
    // each row only doubled the cost of storing a window. Nothing deletes a partition in a
    // cluster; whatever comes to delete one deletes its batches and producers' rows with it.
    "ALTER TABLE minibroker.batches DROP CONSTRAINT batches_topic_id_partition_fkey;
    ALTER TABLE minibroker.producer_states
        DROP CONSTRAINT producer_states_topic_id_partition_fkey;
    ALTER TABLE minibroker.producer_states
        ADD COLUMN version bigint NOT NULL DEFAULT (random() * 9e18)::bigint;
    CREATE FUNCTION minibroker.new_producer_version() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.version := (random() * 9e18)::bigint;
        RETURN NEW;
    END $$;
    CREATE TRIGGER producer_state_changes BEFORE UPDATE ON minibroker.producer_states
        FOR EACH ROW WHEN (NEW.version = OLD.version)
        EXECUTE FUNCTION minibroker.new_producer_version();
    CREATE FUNCTION minibroker.expect_window(partitions_found bigint, partitions bigint,
                                             producers_found bigint, producers bigint)
        RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN
        IF partitions_found <> partitions OR producers_found <> producers THEN
            RAISE EXCEPTION 'the window was judged against producer rows that have changed'
                USING ERRCODE = 'MB001';
        END IF;
        RETURN true;
    END $$",
];

/// The version of the schema this broker writes and reads.
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
pub const SCHEMA_VERSION: i32 = STEPS.len() as i32;

/// The advisory lock every broker's migration takes: an arbitrary key of this project's
/// (the bytes of "mbschema").
const MIGRATION_LOCK: i64 = 0x6d62_7363_6865_6d61;

/// Why the schema could not be brought to [`SCHEMA_VERSION`].
#[derive(Debug, Error)]
pub enum SchemaError {
    /// The database was migrated by a newer broker.
    #[error(
        "the database's minibroker schema is version {found}, newer than the {known} this broker knows: run a broker of that version or newer"
    )]
    Newer {
        /// The version found.
        found: i32,
        /// The newest this broker knows.
        known: i32,
    },
    /// PostgreSQL refused or could not be reached.
    #[error("migrating the minibroker schema: {0}")]
    Postgres(#[from] tokio_postgres::Error),
}

/// Brings the database's schema to [`SCHEMA_VERSION`]; returns the version it found (0 for a
/// database without one).
///
/// # Errors
/// [`SchemaError::Newer`] for a schema newer than this broker knows (nothing is changed), or
/// PostgreSQL's error (the transaction is rolled back: the schema is as it was).
pub async fn migrate(client: &mut tokio_postgres::Client) -> Result<i32, SchemaError> {
    migrate_to(client, SCHEMA_VERSION).await
}

/// As [`migrate`], stopping at version `target` (at most [`SCHEMA_VERSION`]): how a test makes
/// the database an older broker left, to show a newer one reads it.
///
/// # Errors
/// As [`migrate`]; [`SchemaError::Newer`] also for a `target` past [`SCHEMA_VERSION`].
pub async fn migrate_to(
    client: &mut tokio_postgres::Client,
    target: i32,
) -> Result<i32, SchemaError> {
    if target > SCHEMA_VERSION {
        return Err(SchemaError::Newer {
            found: target,
            known: SCHEMA_VERSION,
        });
    }
    let transaction = client.transaction().await?;
    transaction
        .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    transaction
        .batch_execute(
            "CREATE SCHEMA IF NOT EXISTS minibroker;
             CREATE TABLE IF NOT EXISTS minibroker.schema_version (
                 only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                 version integer NOT NULL
             )",
        )
        .await?;
    let found: i32 = transaction
        .query_opt("SELECT version FROM minibroker.schema_version", &[])
        .await?
        .map_or(0, |row| row.get(0));
    if found > SCHEMA_VERSION {
        return Err(SchemaError::Newer {
            found,
            known: SCHEMA_VERSION,
        });
    }
    let steps = usize::try_from(target.max(found)).unwrap_or(0);
    for step in STEPS
        .iter()
        .take(steps)
        .skip(usize::try_from(found).unwrap_or(0))
    {
        transaction.batch_execute(step).await?;
    }
    transaction
        .execute(
            "INSERT INTO minibroker.schema_version (version) VALUES ($1)
             ON CONFLICT (only_row) DO UPDATE SET version = EXCLUDED.version",
            &[&target.max(found)],
        )
        .await?;
    transaction.commit().await?;
    Ok(found)
}
