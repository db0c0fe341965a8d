//! Producer ids for the whole cluster: one PostgreSQL sequence, so InitProducerId on any broker
//! gives an id no other broker gives; and, with authorisation on, the principal each id was
//! issued to, so only its owner writes with it, whichever broker it asks.

use tokio_postgres::GenericClient;

/// A new producer id, unique across every broker of the cluster.
///
/// # Errors
/// PostgreSQL's error.
pub async fn next_producer_id(client: &impl GenericClient) -> Result<i64, tokio_postgres::Error> {
    Ok(client
        .query_one("SELECT nextval('minibroker.producer_ids')", &[])
        .await?
        .get(0))
}

/// A new producer id, as [`next_producer_id`], recorded as `principal`'s in the same statement:
/// an id is never handed out without its owner.
///
/// # Errors
/// PostgreSQL's error (no id is handed out then).
pub async fn issue_producer_id(
    client: &impl GenericClient,
    principal: &str,
) -> Result<i64, tokio_postgres::Error> {
    Ok(client
        .query_one(
            "INSERT INTO minibroker.producer_owners (producer_id, principal)
             VALUES (nextval('minibroker.producer_ids'), $1) RETURNING producer_id",
            &[&principal],
        )
        .await?
        .get(0))
}

/// The principal `producer_id` was issued to by [`issue_producer_id`], if any.
///
/// # Errors
/// PostgreSQL's error.
pub async fn producer_owner(
    client: &impl GenericClient,
    producer_id: i64,
) -> Result<Option<String>, tokio_postgres::Error> {
    Ok(client
        .query_opt(
            "SELECT principal FROM minibroker.producer_owners WHERE producer_id = $1",
            &[&producer_id],
        )
        .await?
        .map(|row| row.get(0)))
}

/// Records `principal` as the owner of `producer_id` (issued by the cluster's sequence without
/// one: a transactional id's), unless it has one already.
///
/// # Errors
/// PostgreSQL's error.
pub async fn record_producer_owner(
    client: &impl GenericClient,
    producer_id: i64,
    principal: &str,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO minibroker.producer_owners (producer_id, principal) VALUES ($1, $2)
             ON CONFLICT (producer_id) DO NOTHING",
            &[&producer_id, &principal],
        )
        .await?;
    Ok(())
}
