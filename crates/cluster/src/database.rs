//! [`Database`]: a broker's connection for the cluster's small questions (topics, members,
//! producer ids, the copy's reads), made again on first use after it broke, so a broker goes on
//! by itself once the database is back.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio_postgres::Client;

/// One connection to the cluster's database, shared by a broker's tasks (its queries are
/// pipelined on it).
#[derive(Debug)]
pub struct Database {
    url: String,
    connect_timeout: Duration,
    client: Mutex<Option<Arc<Client>>>,
}

impl Database {
    /// A handle on the database at `url`; it connects on first use.
    #[must_use]
    pub fn new(url: &str, connect_timeout: Duration) -> Self {
        Self {
            url: url.to_owned(),
            connect_timeout,
            client: Mutex::new(None),
        }
    }

    /// The open connection, or a new one when there is none or it broke.
    ///
    /// # Errors
    /// The database cannot be reached.
    pub async fn client(&self) -> Result<Arc<Client>, tokio_postgres::Error> {
        let mut held = self.client.lock().await;
        if let Some(client) = held.as_ref().filter(|client| !client.is_closed()) {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(crate::connect_with_timeout(&self.url, self.connect_timeout).await?);
        *held = Some(Arc::clone(&client));
        Ok(client)
    }
}
