//! Producer ids for the whole cluster: one PostgreSQL sequence, so InitProducerId on any broker
//! gives an id no other broker gives.

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
