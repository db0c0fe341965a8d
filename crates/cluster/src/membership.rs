//! Who is in the cluster: every broker holds a lease on its node id in PostgreSQL, renewed by
//! a heartbeat, and the members are the brokers whose lease has not run out. A broker killed
//! with SIGKILL stops renewing and drops out once its lease ends; nothing has to notice it die.
//!
//! Each run of a broker has an id of its own (a random UUID). Registering takes the node id
//! only when no other run holds a live lease on it, so two brokers started with one node id
//! cannot both be members: the second is refused with the first's address. A run whose lease
//! was taken over after it ran out (it was paused too long) learns so at its next heartbeat.
//!
//! Times are the database's (`now()`), never the brokers' clocks, so brokers whose clocks
//! disagree still agree on who is live.

use std::time::Duration;
use thiserror::Error;

use tokio_postgres::GenericClient;

/// A broker as the cluster lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its node id.
    pub node_id: i32,
    /// The host its Kafka listener is advertised at.
    pub kafka_host: String,
    /// That listener's port.
    pub kafka_port: u16,
}

/// One run of a broker: its node id, its advertised listener and its run id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The broker as it is listed.
    pub member: Member,
    /// This run's id.
    pub run_id: String,
}

/// Why a broker could not join, or lost its place.
#[derive(Debug, Error)]
pub enum MembershipError {
    /// Another run holds a live lease on the node id.
    #[error(
        "node id {node_id} is held by a live broker advertising {kafka_host}:{kafka_port}: give \
         each broker its own --node-id (a killed broker's lease runs out after cluster_lease_ms)"
    )]
    NodeIdTaken {
        /// The node id asked for.
        node_id: i32,
        /// The holder's advertised host.
        kafka_host: String,
        /// The holder's advertised port.
        kafka_port: i32,
    },
    /// The lease ran out and another run took the node id.
    #[error("node id {node_id}'s lease ran out and another broker took it")]
    LeaseLost {
        /// The node id.
        node_id: i32,
    },
    /// PostgreSQL refused or could not be reached.
    #[error("cluster membership: {0}")]
    Postgres(#[from] tokio_postgres::Error),
}

impl Registration {
    /// A new run of broker `member`.
    #[must_use]
    pub fn new(member: Member) -> Self {
        Self {
            member,
            run_id: uuid::Uuid::new_v4().to_string(),
        }
    }

    /// Takes the node id with a lease of `lease`, unless another run holds a live one on it.
    ///
    /// # Errors
    /// [`MembershipError::NodeIdTaken`], or PostgreSQL's error.
    pub async fn register(
        &self,
        client: &impl GenericClient,
        lease: Duration,
    ) -> Result<(), MembershipError> {
        let member = &self.member;
        let taken = client
            .query_opt(
                "INSERT INTO minibroker.brokers
                     (node_id, kafka_host, kafka_port, lease_expires, run_id)
                 VALUES ($1, $2, $3, now() + $4::float8 * interval '1 millisecond', $5)
                 ON CONFLICT (node_id) DO UPDATE SET
                     kafka_host = EXCLUDED.kafka_host,
                     kafka_port = EXCLUDED.kafka_port,
                     lease_expires = EXCLUDED.lease_expires,
                     run_id = EXCLUDED.run_id,
                     registered = now()
                 WHERE brokers.lease_expires < now() OR brokers.run_id = EXCLUDED.run_id
                 RETURNING node_id",
                &[
                    &member.node_id,
                    &member.kafka_host,
                    &i32::from(member.kafka_port),
                    &lease_ms(lease),
                    &self.run_id,
                ],
            )
            .await?
            .is_none();
        if !taken {
            return Ok(());
        }
        let holder = client
            .query_one(
                "SELECT kafka_host, kafka_port FROM minibroker.brokers WHERE node_id = $1",
                &[&member.node_id],
            )
            .await?;
        Err(MembershipError::NodeIdTaken {
            node_id: member.node_id,
            kafka_host: holder.get(0),
            kafka_port: holder.get(1),
        })
    }

    /// Renews the lease for another `lease`.
    ///
    /// # Errors
    /// [`MembershipError::LeaseLost`] when another run holds the node id now, or PostgreSQL's
    /// error.
    pub async fn renew(
        &self,
        client: &impl GenericClient,
        lease: Duration,
    ) -> Result<(), MembershipError> {
        let renewed = client
            .execute(
                "UPDATE minibroker.brokers
                 SET lease_expires = now() + $3::float8 * interval '1 millisecond'
                 WHERE node_id = $1 AND run_id = $2",
                &[&self.member.node_id, &self.run_id, &lease_ms(lease)],
            )
            .await?;
        if renewed == 0 {
            return Err(MembershipError::LeaseLost {
                node_id: self.member.node_id,
            });
        }
        Ok(())
    }

    /// Gives the lease up (a clean shutdown): the broker leaves Metadata at once.
    ///
    /// # Errors
    /// PostgreSQL's error.
    pub async fn leave(&self, client: &impl GenericClient) -> Result<(), MembershipError> {
        client
            .execute(
                "DELETE FROM minibroker.brokers WHERE node_id = $1 AND run_id = $2",
                &[&self.member.node_id, &self.run_id],
            )
            .await?;
        Ok(())
    }
}

/// The brokers whose lease has not run out, by node id.
///
/// # Errors
/// PostgreSQL's error.
pub async fn live_members(
    client: &impl GenericClient,
) -> Result<Vec<Member>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT node_id, kafka_host, kafka_port FROM minibroker.brokers
             WHERE lease_expires > now() ORDER BY node_id",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            Some(Member {
                node_id: row.get(0),
                kafka_host: row.get(1),
                kafka_port: u16::try_from(row.get::<_, i32>(2)).ok()?,
            })
        })
        .collect())
}

/// A lease as the milliseconds the statements add to `now()`.
pub(crate) fn lease_ms(lease: Duration) -> f64 {
    lease.as_secs_f64() * 1000.0
}
