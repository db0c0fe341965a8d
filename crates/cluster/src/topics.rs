//! The cluster's topics: one row per topic and one per partition, created together by one
//! statement, so every broker sees a topic with all its partitions or not at all.

use tokio_postgres::GenericClient;

/// A topic as the cluster stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedTopic {
    /// The cluster's id of the topic (its rows' key; a topic deleted and created again under
    /// the same name gets a new one).
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its partition count.
    pub partitions: i32,
}

/// Creates topic `name` with `partitions` partitions, unless a topic of that name exists:
/// `Some` with the new topic, `None` when one already did (it is left as it is).
///
/// # Errors
/// PostgreSQL's error (nothing is created then), including a partition count below one.
pub async fn create_topic(
    client: &impl GenericClient,
    name: &str,
    partitions: i32,
) -> Result<Option<SharedTopic>, tokio_postgres::Error> {
    let created = client
        .query_opt(
            "WITH topic AS (
                 INSERT INTO minibroker.topics (name, partitions) VALUES ($1, $2)
                 ON CONFLICT (name) DO NOTHING
                 RETURNING topic_id, partitions
             ), created AS (
                 INSERT INTO minibroker.partitions (topic_id, partition)
                 SELECT topic_id, generate_series(0, partitions - 1) FROM topic
             )
             SELECT topic_id FROM topic",
            &[&name, &partitions],
        )
        .await?;
    Ok(created.map(|row| SharedTopic {
        id: row.get(0),
        name: name.to_owned(),
        partitions,
    }))
}

/// The topic named `name`, if the cluster has one.
///
/// # Errors
/// PostgreSQL's error.
pub async fn find_topic(
    client: &impl GenericClient,
    name: &str,
) -> Result<Option<SharedTopic>, tokio_postgres::Error> {
    let found = client
        .query_opt(
            "SELECT topic_id, partitions FROM minibroker.topics WHERE name = $1",
            &[&name],
        )
        .await?;
    Ok(found.map(|row| SharedTopic {
        id: row.get(0),
        name: name.to_owned(),
        partitions: row.get(1),
    }))
}

/// The topic named `name`, created with `partitions` partitions when the cluster has none (a
/// broker's auto-creation; two brokers creating it at once make one topic).
///
/// # Errors
/// PostgreSQL's error.
pub async fn find_or_create_topic(
    client: &impl GenericClient,
    name: &str,
    partitions: i32,
) -> Result<SharedTopic, tokio_postgres::Error> {
    loop {
        if let Some(topic) = create_topic(client, name, partitions).await? {
            return Ok(topic);
        }
        // Created by another broker; found unless deleted in between, then created here.
        if let Some(topic) = find_topic(client, name).await? {
            return Ok(topic);
        }
    }
}
