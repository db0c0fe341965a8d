//! What every broker of a cluster shares besides its batches, on a real PostgreSQL: a
//! partition's start moved by DeleteRecords and by retention (by age and by size, as a broker's
//! own log applies it, the aborted transactions below the start going too), a topic's settings
//! changed by compare-and-set, and producer ids with their owners.

mod support;

use bytes::Bytes;
use minibroker_cluster::{
    Append, Committer, Deleted, Keep, WindowSettings, apply_retention, connect, create_topic,
    create_topic_with, delete_records, find_topic, issue_producer_id, migrate, producer_owner,
    replace_settings,
};
use minibroker_records::{NewRecord, Writer};
use support::Postgres;
use tokio_postgres::Client;

const DAY_MS: i64 = 86_400_000;

/// A one-record batch of no producer, its record written at `timestamp`.
fn batch(timestamp: i64) -> Bytes {
    let writer = Writer {
        producer_id: minibroker_records::NO_PRODUCER_ID,
        epoch: -1,
        base_sequence: -1,
    };
    let record = NewRecord {
        timestamp: Some(timestamp),
        ..NewRecord::value(vec![7; 100])
    };
    minibroker_records::encode(writer, &[record], timestamp).unwrap()
}

/// A database with topic `name` of one partition, holding one batch per timestamp (offsets 0,
/// 1, ...).
async fn topic_with(postgres: &Postgres, name: &str, timestamps: &[i64]) -> (Client, i64) {
    let mut client = connect(&postgres.url).await.unwrap();
    migrate(&mut client).await.unwrap();
    let topic_id = create_topic(&client, name, 1).await.unwrap().unwrap().id;
    let committer = Committer::start(&postgres.url, WindowSettings::default());
    for &timestamp in timestamps {
        let append = Append {
            topic_id,
            partition: 0,
            header: None,
            offsets: 1,
            bytes: batch(timestamp),
        };
        committer.append(append).await.unwrap();
    }
    (client, topic_id)
}

/// The partition's start, and the first and last offsets of the batches it still stores.
async fn held(client: &Client, topic_id: i64) -> (i64, Option<i64>, Option<i64>) {
    let start: i64 = client
        .query_one(
            "SELECT log_start_offset FROM minibroker.partitions WHERE topic_id = $1",
            &[&topic_id],
        )
        .await
        .unwrap()
        .get(0);
    let row = client
        .query_one(
            "SELECT min(base_offset), max(last_offset) FROM minibroker.batches
             WHERE topic_id = $1",
            &[&topic_id],
        )
        .await
        .unwrap();
    (start, row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_state_is_kept_for_every_broker() {
    let postgres = Postgres::start();
    retention_by_age_keeps_from_the_first_batch_new_enough(&postgres).await;
    retention_by_size_drops_the_oldest_while_the_rest_is_enough(&postgres).await;
    delete_records_moves_the_start_and_nothing_past_the_end(&postgres).await;
    settings_change_only_from_what_was_read(&postgres).await;
    producer_ids_are_issued_with_their_owner(&postgres).await;
}

async fn retention_by_age_keeps_from_the_first_batch_new_enough(postgres: &Postgres) {
    let now = minibroker_records::now_millis();
    let old = now - 3 * DAY_MS;
    let (client, topic_id) = topic_with(postgres, "aged", &[old, old, old, now, old, now]).await;
    let keep = Keep {
        ms: Some(DAY_MS),
        bytes: None,
    };
    let moved = apply_retention(&client, topic_id, keep, now).await.unwrap();
    assert_eq!(moved, vec![(0, 3)]);
    // As a log drops its oldest pieces: the old batch after a new one stays.
    assert_eq!(held(&client, topic_id).await, (3, Some(3), Some(5)));
    // Once more moves nothing.
    assert!(
        apply_retention(&client, topic_id, keep, now)
            .await
            .unwrap()
            .is_empty()
    );
    // All too old: the start is the end, and nothing is stored.
    let later = now + 3 * DAY_MS;
    assert_eq!(
        apply_retention(&client, topic_id, keep, later)
            .await
            .unwrap(),
        vec![(0, 6)]
    );
    assert_eq!(held(&client, topic_id).await, (6, None, None));
}

async fn retention_by_size_drops_the_oldest_while_the_rest_is_enough(postgres: &Postgres) {
    let now = minibroker_records::now_millis();
    let (client, topic_id) = topic_with(postgres, "sized", &[now; 5]).await;
    let len = i64::try_from(batch(now).len()).unwrap();
    // The log's own rule: drop the oldest while what remains without it is at least the limit.
    let mut log = minibroker_log::Retention {
        bytes: Some(u64::try_from(2 * len).unwrap()),
        ms: None,
    };
    let mut stored = 5 * u64::try_from(len).unwrap();
    let mut start = 0;
    while log.too_big(stored, u64::try_from(len).unwrap()) {
        stored -= u64::try_from(len).unwrap();
        start += 1;
    }
    assert_eq!(start, 3);
    let keep = Keep {
        ms: None,
        bytes: log.bytes.take().map(|bytes| i64::try_from(bytes).unwrap()),
    };
    let moved = apply_retention(&client, topic_id, keep, now).await.unwrap();
    assert_eq!(moved, vec![(0, start)]);
    assert_eq!(held(&client, topic_id).await, (start, Some(start), Some(4)));
}

async fn delete_records_moves_the_start_and_nothing_past_the_end(postgres: &Postgres) {
    let now = minibroker_records::now_millis();
    let (client, topic_id) = topic_with(postgres, "deleted", &[now; 4]).await;
    // Two aborted transactions, ended at offsets 1 and 3: the one wholly below the new start
    // goes with its batches.
    client
        .execute(
            "INSERT INTO minibroker.aborted_transactions
                 (topic_id, partition, producer_id, first_offset, last_offset)
             VALUES ($1, 0, 9, 0, 1), ($1, 0, 9, 2, 3)",
            &[&topic_id],
        )
        .await
        .unwrap();
    assert_eq!(
        delete_records(&client, topic_id, 0, 2).await.unwrap(),
        Deleted::Start(2)
    );
    assert_eq!(held(&client, topic_id).await, (2, Some(2), Some(3)));
    let aborted = minibroker_cluster::transactions::aborted_between(&client, (topic_id, 0), 0, 9);
    assert_eq!(aborted.await.unwrap(), [(9, 2)]);
    // Below the start: nothing changes.
    assert_eq!(
        delete_records(&client, topic_id, 0, 1).await.unwrap(),
        Deleted::Start(2)
    );
    assert_eq!(
        delete_records(&client, topic_id, 0, 5).await.unwrap(),
        Deleted::PastEnd { high_watermark: 4 }
    );
    assert_eq!(
        delete_records(&client, topic_id, 0, -2).await.unwrap(),
        Deleted::PastEnd { high_watermark: 4 }
    );
    assert_eq!(
        delete_records(&client, topic_id, 1, 0).await.unwrap(),
        Deleted::UnknownPartition
    );
    assert_eq!(
        delete_records(&client, topic_id, 0, -1).await.unwrap(),
        Deleted::Start(4)
    );
    assert_eq!(held(&client, topic_id).await, (4, None, None));
}

async fn settings_change_only_from_what_was_read(postgres: &Postgres) {
    let client = connect(&postgres.url).await.unwrap();
    let pair = |name: &str, value: &str| (name.to_owned(), value.to_owned());
    let first = vec![pair("retention.ms", "1000")];
    let topic = create_topic_with(&client, "configured", 2, &first)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        find_topic(&client, "configured").await.unwrap(),
        Some(topic.clone())
    );
    let second = vec![pair("retention.bytes", "10"), pair("retention.ms", "2000")];
    assert!(
        replace_settings(&client, &topic, &first, &second)
            .await
            .unwrap()
    );
    // A change made from what is no longer there is refused: the other one stays.
    assert!(
        !replace_settings(&client, &topic, &first, &[])
            .await
            .unwrap()
    );
    let found = find_topic(&client, "configured").await.unwrap().unwrap();
    assert_eq!(found.settings, second);
}

async fn producer_ids_are_issued_with_their_owner(postgres: &Postgres) {
    let client = connect(&postgres.url).await.unwrap();
    let alice = issue_producer_id(&client, "User:alice").await.unwrap();
    let bob = issue_producer_id(&client, "User:bob").await.unwrap();
    assert_ne!(alice, bob);
    assert_eq!(
        producer_owner(&client, alice).await.unwrap().as_deref(),
        Some("User:alice")
    );
    assert_eq!(
        producer_owner(&client, bob).await.unwrap().as_deref(),
        Some("User:bob")
    );
    assert_eq!(producer_owner(&client, bob + 1).await.unwrap(), None);
}
