//! The cluster's topics: one row per topic and one per partition, created together by one
//! statement, so every broker sees a topic with all its partitions or not at all. A topic's own
//! settings live in its row, as `name=value` items; every broker's copy applies them.

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
    /// Its own settings (Kafka's names), in name order.
    pub settings: Vec<(String, String)>,
}

/// `name=value` items as the `settings` column keeps them.
fn items(settings: &[(String, String)]) -> Vec<String> {
    settings
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect()
}

/// The settings `items` of the `settings` column hold (an item without `=` is left out: no
/// broker writes one).
#[must_use]
pub fn settings_of(items: &[String]) -> Vec<(String, String)> {
    items
        .iter()
        .filter_map(|item| item.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// Creates topic `name` with `partitions` partitions and its own `settings`, unless a topic of
/// that name exists: `Some` with the new topic, `None` when one already did (it is left as it
/// is).
///
/// # Errors
/// PostgreSQL's error (nothing is created then), including a partition count below one.
pub async fn create_topic_with(
    client: &impl GenericClient,
    name: &str,
    partitions: i32,
    settings: &[(String, String)],
) -> Result<Option<SharedTopic>, tokio_postgres::Error> {
    let created = client
        .query_opt(
            "WITH topic AS (
                 INSERT INTO minibroker.topics (name, partitions, settings) VALUES ($1, $2, $3)
                 ON CONFLICT (name) DO NOTHING
                 RETURNING topic_id, partitions
             ), created AS (
                 INSERT INTO minibroker.partitions (topic_id, partition)
                 SELECT topic_id, generate_series(0, partitions - 1) FROM topic
             )
             SELECT topic_id FROM topic",
            &[&name, &partitions, &items(settings)],
        )
        .await?;
    Ok(created.map(|row| SharedTopic {
        id: row.get(0),
        name: name.to_owned(),
        partitions,
        settings: settings.to_vec(),
    }))
}

/// [`create_topic_with`], with no settings of its own.
///
/// # Errors
/// As [`create_topic_with`].
pub async fn create_topic(
    client: &impl GenericClient,
    name: &str,
    partitions: i32,
) -> Result<Option<SharedTopic>, tokio_postgres::Error> {
    create_topic_with(client, name, partitions, &[]).await
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
            "SELECT topic_id, partitions, settings FROM minibroker.topics WHERE name = $1",
            &[&name],
        )
        .await?;
    Ok(found.map(|row| SharedTopic {
        id: row.get(0),
        name: name.to_owned(),
        partitions: row.get(1),
        settings: settings_of(&row.get::<_, Vec<String>>(2)),
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

/// Sets `topic`'s own settings to `settings`, if they are still `expected` (what the caller
/// read and changed): `false` when another broker changed them meanwhile, and the caller reads
/// them again. A compare-and-set, so two brokers changing one topic's settings at once never
/// lose one change to the other.
///
/// # Errors
/// PostgreSQL's error.
pub async fn replace_settings(
    client: &impl GenericClient,
    topic: &SharedTopic,
    expected: &[(String, String)],
    settings: &[(String, String)],
) -> Result<bool, tokio_postgres::Error> {
    let changed = client
        .execute(
            "UPDATE minibroker.topics SET settings = $3 WHERE topic_id = $1 AND settings = $2",
            &[&topic.id, &items(expected), &items(settings)],
        )
        .await?;
    Ok(changed == 1)
}
