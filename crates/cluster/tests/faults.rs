//! A committer through a PostgreSQL crash: while the server is down every batch is answered
//! with a retriable error, never as stored; once it is back the committer connects again on
//! its own, and the producer's retry is stored once, with a later retry answered DUPLICATE with
//! its offset.

mod support;

use bytes::Bytes;
use minibroker_cluster::{
    Append, AppendError, CommitError, Committer, KnownProducers, Statements, WindowSettings,
    commit_window, connect, create_topic, migrate,
};
use minibroker_state::{BatchHeader, Outcome, SequenceRange};
use std::time::Duration;
use support::Postgres;

/// A database with topic "t" of one partition: a client, and the topic's id.
async fn one_topic(postgres: &Postgres) -> (tokio_postgres::Client, i64) {
    let mut client = connect(&postgres.url).await.unwrap();
    migrate(&mut client).await.unwrap();
    let topic_id = create_topic(&client, "t", 1).await.unwrap().unwrap().id;
    (client, topic_id)
}

/// Producer 7's one-record batch of `sequence` (epoch 0) for partition 0 of `topic_id`.
fn append_to(topic_id: i64, sequence: i32) -> Append {
    Append {
        topic_id,
        partition: 0,
        header: Some(BatchHeader::new(7, 0, 0, SequenceRange::single(sequence).unwrap()).unwrap()),
        offsets: 1,
        bytes: Bytes::from(vec![0; minibroker_records::HEADER_LEN]),
    }
}

/// A stored row at `offset` of partition 0, in the way of the batch the window puts there.
async fn block(client: &tokio_postgres::Client, topic_id: i64, offset: i64) {
    client
        .execute(
            "INSERT INTO minibroker.batches
                 (topic_id, partition, last_offset, base_offset, bytes, max_timestamp)
             VALUES ($1, 0, $2, $2, '\\x00', 0)",
            &[&topic_id, &offset],
        )
        .await
        .unwrap();
}

/// Takes away what [`block`] put at `offset`.
async fn unblock(client: &tokio_postgres::Client, offset: i64) {
    client
        .execute(
            "DELETE FROM minibroker.batches WHERE last_offset = $1",
            &[&offset],
        )
        .await
        .unwrap();
}

/// The window's answers' base offsets, every batch answered.
fn base_offsets(
    answers: &[Result<minibroker_cluster::Appended, minibroker_cluster::AppendRefused>],
) -> Vec<Option<i64>> {
    answers
        .iter()
        .map(|answer| answer.as_ref().unwrap().verdict.base_offset)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_refused_while_postgres_is_down_and_stored_once_after() {
    let postgres = Postgres::start();
    let (client, topic_id) = one_topic(&postgres).await;
    drop(client);
    let committer = Committer::start(
        &postgres.url,
        WindowSettings {
            connect_timeout: Duration::from_secs(1),
            ..WindowSettings::default()
        },
    );
    let append = |sequence| append_to(topic_id, sequence);
    let first = committer.append(append(0)).await.unwrap();
    assert_eq!(first.verdict.outcome, Outcome::Accepted);

    postgres.stop();
    for _ in 0..3 {
        let refused = committer.append(append(1)).await.unwrap_err();
        assert!(
            matches!(
                refused,
                AppendError::Unavailable(_) | AppendError::Unknown(_)
            ),
            "{refused}"
        );
    }

    postgres.restart();
    let mut stored = None;
    for _ in 0..50 {
        match committer.append(append(1)).await {
            Ok(appended) => {
                stored = Some(appended);
                break;
            }
            Err(AppendError::Unavailable(_) | AppendError::Unknown(_)) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(other) => panic!("{other}"),
        }
    }
    let stored = stored.expect("the committer connects again once the server is back");
    assert_eq!(stored.verdict.outcome, Outcome::Accepted);
    assert_eq!(stored.verdict.base_offset, Some(1));
    let retry = committer.append(append(1)).await.unwrap();
    assert_eq!(retry.verdict.outcome, Outcome::Duplicate);
    assert_eq!(retry.verdict.base_offset, Some(1));

    let client = connect(&postgres.url).await.unwrap();
    let batches = support::stored_batches(&client).await;
    assert_eq!(batches, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_in_a_window_stores_none_of_it_and_the_next_window_goes_on() {
    // The window's writes go out with its COMMIT: a refused write must turn that COMMIT into
    // a rollback, and the connection must be ready for the next window.
    let postgres = Postgres::start();
    let (mut client, topic_id) = one_topic(&postgres).await;
    // A row in the way of the window's second batch (offset 1).
    block(&client, topic_id, 1).await;
    let statements = Statements::prepare(&client).await.unwrap();
    let known = KnownProducers::new();
    let append = |sequence| append_to(topic_id, sequence);
    let window = [append(0), append(1)];
    let refused = commit_window(&mut client, &statements, &known, &window)
        .await
        .unwrap_err();
    assert!(matches!(refused, CommitError::Failed(_)), "{refused}");
    let (high_watermark, producers): (i64, i64) = {
        let row = client
            .query_one(
                "SELECT (SELECT high_watermark FROM minibroker.partitions),
                        (SELECT count(*) FROM minibroker.producer_states)",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(
        (high_watermark, producers),
        (0, 0),
        "nothing of the window is stored"
    );

    unblock(&client, 1).await;
    let answers = commit_window(&mut client, &statements, &known, &window)
        .await
        .unwrap();
    assert_eq!(base_offsets(&answers), vec![Some(0), Some(1)]);
    assert_eq!(support::stored_batches(&client).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_in_a_window_judged_before_its_rows_were_read_stores_none_of_it() {
    // Once a broker knows a producer's row, its next window goes out in one round trip: lock,
    // check, writes and COMMIT together. A refused write there must roll all of it back too,
    // and the broker must not go on believing the row it expected.
    let postgres = Postgres::start();
    let (mut client, topic_id) = one_topic(&postgres).await;
    let statements = Statements::prepare(&client).await.unwrap();
    let known = KnownProducers::new();
    let append = |sequence| append_to(topic_id, sequence);
    let first = commit_window(&mut client, &statements, &known, &[append(0)])
        .await
        .unwrap();
    assert_eq!(first[0].unwrap().verdict.base_offset, Some(0));
    block(&client, topic_id, 2).await;
    let window = [append(1), append(2)];
    let refused = commit_window(&mut client, &statements, &known, &window)
        .await
        .unwrap_err();
    assert!(matches!(refused, CommitError::Failed(_)), "{refused}");
    let row = client
        .query_one(
            "SELECT (SELECT high_watermark FROM minibroker.partitions),
                    (SELECT last_sequences[1] FROM minibroker.producer_states)",
            &[],
        )
        .await
        .unwrap();
    let (high_watermark, last_sequence): (i64, i32) = (row.get(0), row.get(1));
    assert_eq!(
        (high_watermark, last_sequence),
        (1, 0),
        "nothing of it is stored"
    );

    unblock(&client, 2).await;
    let answers = commit_window(&mut client, &statements, &known, &window)
        .await
        .unwrap();
    assert_eq!(base_offsets(&answers), vec![Some(1), Some(2)]);
    let retried = commit_window(&mut client, &statements, &known, &[append(2)])
        .await
        .unwrap();
    assert_eq!(retried[0].unwrap().verdict.outcome, Outcome::Duplicate);
    assert_eq!(retried[0].unwrap().verdict.base_offset, Some(2));
    assert_eq!(support::stored_batches(&client).await, 3);
}
