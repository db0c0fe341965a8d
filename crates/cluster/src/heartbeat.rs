//! [`Heartbeat`]: what keeps a broker a member of its cluster while it runs, and its
//! coordinators' leases with it.

use std::sync::Arc;
use std::time::Duration;

use crate::coordinators::Leases;
use crate::membership::{MembershipError, Registration};

/// A broker's heartbeat: renews its lease every third of the lease on a connection of its
/// own, connecting again after any failure, so a broker stays a member while it runs and drops
/// out one lease after it stops (a SIGKILL included). The leases it holds as a coordinator
/// ([`Leases`]) are renewed with it.
#[derive(Debug)]
pub struct Heartbeat {
    task: tokio::task::JoinHandle<()>,
    registration: Registration,
    url: String,
}

impl Heartbeat {
    /// Registers `registration` with a lease of `lease` (refused when a live broker holds its
    /// node id), then keeps the lease alive on the current runtime.
    ///
    /// # Errors
    /// [`MembershipError::NodeIdTaken`], or PostgreSQL's error: the broker is not a member.
    pub async fn start(
        url: &str,
        registration: Registration,
        lease: Duration,
        leases: Arc<Leases>,
    ) -> Result<Self, MembershipError> {
        let client = crate::connect(url).await?;
        registration.register(&client, lease).await?;
        let beating = Beating {
            url: url.to_owned(),
            registration: registration.clone(),
            lease,
            leases,
        };
        let task = tokio::spawn(beat(beating, client));
        Ok(Self {
            task,
            registration,
            url: url.to_owned(),
        })
    }

    /// Stops renewing and gives the lease up, and every coordinator's lease with it, so the
    /// broker leaves the members and other brokers take its groups at once (a clean shutdown).
    ///
    /// # Errors
    /// PostgreSQL's error: the leases then run out on their own.
    pub async fn leave(self) -> Result<(), MembershipError> {
        self.task.abort();
        let client = crate::connect(&self.url).await?;
        crate::coordinators::release_all(&client, &self.registration.run_id).await?;
        self.registration.leave(&client).await
    }
}

impl Heartbeat {
    /// The run it keeps alive.
    #[must_use]
    pub fn registration(&self) -> &Registration {
        &self.registration
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a heartbeat renews, and where.
struct Beating {
    url: String,
    registration: Registration,
    lease: Duration,
    leases: Arc<Leases>,
}

async fn beat(beating: Beating, client: tokio_postgres::Client) {
    let Beating {
        url,
        registration,
        lease,
        leases,
    } = beating;
    let mut client = Some(client);
    let mut ticks = tokio::time::interval(lease / 3);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let connected = match client.take() {
            Some(connected) if !connected.is_closed() => connected,
            _ => match crate::connect(&url).await {
                Ok(connected) => connected,
                Err(error) => {
                    tracing::warn!(%error, "cluster heartbeat: cannot reach PostgreSQL");
                    continue;
                }
            },
        };
        match registration.renew(&connected, lease).await {
            Ok(()) => {}
            Err(MembershipError::LeaseLost { node_id }) => {
                // Another run took the node id while this one could not renew: it is the
                // member now, and this broker is listed again only once that lease ends.
                tracing::error!(
                    node_id,
                    "cluster heartbeat: the lease ran out and another broker holds this node id"
                );
                if let Err(error) = registration.register(&connected, lease).await {
                    tracing::warn!(%error, "cluster heartbeat: cannot take the node id back");
                }
            }
            Err(error) => tracing::warn!(%error, "cluster heartbeat: the lease was not renewed"),
        }
        if let Err(error) = leases.renew(&connected, &registration.run_id, lease).await {
            tracing::warn!(%error, "cluster heartbeat: the coordinators' leases were not renewed");
        }
        client = Some(connected);
    }
}
