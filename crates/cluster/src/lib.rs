//! The shared side of the broker core's seam: brokers that keep their state in one PostgreSQL
//! database, so that several of them form one cluster and any of them may be lost. PostgreSQL is
//! the durability (its WAL) and the availability (its replication and failover); this crate
//! writes no consensus of its own.
//!
//! # Layout
//! - [`schema`] — the database's tables, created or migrated at start and versioned: a broker
//!   that finds a schema newer than it knows refuses to start.
//! - [`connect`] — one connection to the database from its URL.

pub mod schema;

pub use schema::{SCHEMA_VERSION, SchemaError, migrate};

/// A connection to the database at `url` (`postgresql://USER@HOST:PORT/DB`), its connection
/// task spawned on the current runtime (it ends when the client is dropped or the server goes).
///
/// # Errors
/// The URL does not read, or the server cannot be reached or refuses the login.
pub async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "the connection to PostgreSQL ended");
        }
    });
    Ok(client)
}
