//! The cluster's schema on a real PostgreSQL (started by `scripts/postgres`): a new database is
//! migrated once, brokers starting together migrate it once between them, and a schema newer
//! than the broker knows is refused and left as it was. Databases of older schemas are brought
//! forward with what they hold.

mod support;

use bytes::Bytes;
use minibroker_cluster::{
    Append, KnownProducers, SCHEMA_VERSION, SchemaError, Statements, commit_window, connect,
    migrate, migrate_to,
};
use minibroker_state::{BatchHeader, Outcome, SequenceRange};
use support::Postgres;

#[tokio::test]
async fn a_new_database_is_migrated_and_a_second_start_changes_nothing() {
    let postgres = Postgres::start();
    let mut client = connect(&postgres.url).await.unwrap();
    assert_eq!(migrate(&mut client).await.unwrap(), 0);
    let brokers: Option<String> = client
        .query_one("SELECT to_regclass('minibroker.brokers')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(brokers.as_deref(), Some("minibroker.brokers"));
    assert_eq!(migrate(&mut client).await.unwrap(), SCHEMA_VERSION);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_starting_together_migrate_once_between_them() {
    let postgres = Postgres::start();
    let mut starts = Vec::new();
    for _ in 0..8 {
        let url = postgres.url.clone();
        starts.push(tokio::spawn(async move {
            let mut client = connect(&url).await.unwrap();
            migrate(&mut client).await.unwrap()
        }));
    }
    let mut found = Vec::new();
    for start in starts {
        found.push(start.await.unwrap());
    }
    found.sort_unstable();
    let mut expected = vec![SCHEMA_VERSION; 8];
    expected[0] = 0;
    assert_eq!(found, expected, "exactly one start found no schema");
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_left_as_it_was() {
    let postgres = Postgres::start();
    let mut client = connect(&postgres.url).await.unwrap();
    migrate(&mut client).await.unwrap();
    let newer = SCHEMA_VERSION + 1;
    client
        .execute(
            "UPDATE minibroker.schema_version SET version = $1",
            &[&newer],
        )
        .await
        .unwrap();
    let error = migrate(&mut client).await.unwrap_err();
    assert!(
        matches!(error, SchemaError::Newer { found, known } if found == newer && known == SCHEMA_VERSION),
        "{error}"
    );
    assert!(error.to_string().contains("newer than the"), "{error}");
    let version: i32 = client
        .query_one("SELECT version FROM minibroker.schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, newer);
}

#[tokio::test]
async fn a_database_of_schema_2_is_brought_forward_with_its_batches_read() {
    let postgres = Postgres::start();
    let mut client = connect(&postgres.url).await.unwrap();
    assert_eq!(migrate_to(&mut client, 2).await.unwrap(), 0);
    // What a broker of schema 2 stored: a topic without settings, a batch without its newest
    // timestamp.
    let timestamp = 1_700_000_000_123_i64;
    let writer = minibroker_records::Writer {
        producer_id: minibroker_records::NO_PRODUCER_ID,
        epoch: -1,
        base_sequence: -1,
    };
    let record = minibroker_records::NewRecord {
        timestamp: Some(timestamp),
        ..minibroker_records::NewRecord::value(&b"kept"[..])
    };
    let batch = minibroker_records::encode(writer, &[record], 0).unwrap();
    client
        .batch_execute(
            "INSERT INTO minibroker.topics (name, partitions) VALUES ('old', 1);
             INSERT INTO minibroker.partitions (topic_id, partition, high_watermark)
                 SELECT topic_id, 0, 1 FROM minibroker.topics",
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO minibroker.batches (topic_id, partition, last_offset, base_offset, bytes)
             SELECT topic_id, 0, 0, 0, $1 FROM minibroker.topics",
            &[&batch.as_ref()],
        )
        .await
        .unwrap();

    assert_eq!(migrate(&mut client).await.unwrap(), 2);
    let stored: i64 = client
        .query_one("SELECT max_timestamp FROM minibroker.batches", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, minibroker_records::max_timestamp(&batch));
    assert_eq!(stored, timestamp);
    let topic = minibroker_cluster::find_topic(&client, "old")
        .await
        .unwrap()
        .unwrap();
    assert!(topic.settings.is_empty());
}

#[tokio::test]
async fn a_database_of_schema_3_keeps_its_producers_and_a_writer_of_schema_3_is_noticed() {
    let postgres = Postgres::start();
    let mut client = connect(&postgres.url).await.unwrap();
    assert_eq!(migrate_to(&mut client, 3).await.unwrap(), 0);
    // What a broker of schema 3 stored: producer 5's batch of sequence 0 at offset 0.
    client
        .batch_execute(
            "INSERT INTO minibroker.topics (name, partitions) VALUES ('old', 1);
             INSERT INTO minibroker.partitions (topic_id, partition, high_watermark)
                 SELECT topic_id, 0, 1 FROM minibroker.topics;
             INSERT INTO minibroker.batches
                 (topic_id, partition, last_offset, base_offset, bytes, max_timestamp)
                 SELECT topic_id, 0, 0, 0, '\\x00', 0 FROM minibroker.topics;
             INSERT INTO minibroker.producer_states (topic_id, partition, producer_id, epoch,
                     last_timestamp, in_transaction, first_sequences, last_sequences,
                     base_offsets)
                 SELECT topic_id, 0, 5, 0, 0, false, '{0}', '{0}', '{0}'
                 FROM minibroker.topics",
        )
        .await
        .unwrap();
    assert_eq!(migrate(&mut client).await.unwrap(), 3);
    let topic_id = minibroker_cluster::find_topic(&client, "old")
        .await
        .unwrap()
        .unwrap()
        .id;
    let statements = Statements::prepare(&client).await.unwrap();
    let known = KnownProducers::new();
    let append = |sequence| Append {
        topic_id,
        partition: 0,
        header: Some(BatchHeader::new(5, 0, 0, SequenceRange::single(sequence).unwrap()).unwrap()),
        offsets: 1,
        bytes: Bytes::from(vec![0; minibroker_records::HEADER_LEN]),
    };
    let verdict = |answers: Vec<Result<minibroker_cluster::Appended, _>>| {
        let verdict = answers[0].unwrap().verdict;
        (verdict.outcome, verdict.base_offset)
    };
    // The row of schema 3 is read and judged by.
    let first = commit_window(&mut client, &statements, &known, &[append(0)])
        .await
        .unwrap();
    assert_eq!(verdict(first), (Outcome::Duplicate, Some(0)));
    let second = commit_window(&mut client, &statements, &known, &[append(1)])
        .await
        .unwrap();
    assert_eq!(verdict(second), (Outcome::Accepted, Some(1)));
    // A broker of schema 3, still running, stores sequence 2 without knowing of versions.
    client
        .batch_execute(
            "UPDATE minibroker.producer_states SET first_sequences = '{2,1,0}',
                 last_sequences = '{2,1,0}', base_offsets = '{2,1,0}';
             UPDATE minibroker.partitions SET high_watermark = 3;
             INSERT INTO minibroker.batches
                 (topic_id, partition, last_offset, base_offset, bytes, max_timestamp)
                 SELECT topic_id, 0, 2, 2, '\\x00', 0 FROM minibroker.topics",
        )
        .await
        .unwrap();
    // Its retry here is a duplicate of that one, not a new batch.
    let retry = commit_window(&mut client, &statements, &known, &[append(2)])
        .await
        .unwrap();
    assert_eq!(verdict(retry), (Outcome::Duplicate, Some(2)));
    assert_eq!(support::stored_batches(&client).await, 3);
}
