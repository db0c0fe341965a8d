//! Who coordinates a consumer group or a transactional id: the broker holding the key's lease.
//!
//! A lease is a row of `minibroker.coordinator_leases`, taken by one statement that succeeds
//! only when nobody else holds a live one, and renewed by the broker's heartbeat with its
//! membership. Its epoch moves on whenever it changes hands (or lapsed), so the broker can tell
//! a tenure of its own that never broke from a new one, whose state it must read again.
//!
//! The broker's own view of its leases ([`Leases`]) is kept by instant: a lease counts as held
//! until one lease after the statement that took or renewed it was *sent*, which is never later
//! than the database's own expiry. A broker paused past its lease therefore stops serving the
//! key by itself; and whatever it still tries to write is refused by the database, since every
//! coordinator's write checks the lease in its own transaction (`minibroker.hold_lease`).
//!
//! Which broker should take a free lease: the key hashed (PostgreSQL's `hashtext`, the same on
//! every broker) over the live brokers by node id. A live lease is never taken from its holder,
//! so a key stays where it is while its coordinator lives.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tokio_postgres::GenericClient;

use crate::membership::{Member, Registration, lease_ms};

/// What a lease is for: FindCoordinator's key types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyType {
    /// A consumer group.
    Group,
    /// A transactional id.
    Transaction,
}

impl KeyType {
    /// The key type as the database (and Kafka's FindCoordinator) numbers it.
    #[must_use]
    pub fn code(self) -> i16 {
        match self {
            Self::Group => 0,
            Self::Transaction => 1,
        }
    }

    fn from_code(code: i16) -> Option<Self> {
        match code {
            0 => Some(Self::Group),
            1 => Some(Self::Transaction),
            _ => None,
        }
    }
}

/// One lease of this broker's, as it knows it.
#[derive(Debug, Clone, Copy)]
struct Held {
    epoch: i64,
    until: Instant,
}

/// The leases this broker's run holds, by key type and key.
#[derive(Debug, Default)]
pub struct Leases {
    held: Mutex<HashMap<(KeyType, String), Held>>,
}

impl Leases {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<(KeyType, String), Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The epoch of this broker's live lease of `key`, if it holds one.
    #[must_use]
    pub fn epoch(&self, key_type: KeyType, key: &str) -> Option<i64> {
        let now = Instant::now();
        self.held()
            .get(&(key_type, key.to_owned()))
            .filter(|held| held.until > now)
            .map(|held| held.epoch)
    }

    /// The epoch this broker last knew for `key`'s lease, live or not: when the database's is
    /// still that one, nobody else held the key in between.
    fn last_epoch(&self, key_type: KeyType, key: &str) -> Option<i64> {
        self.held()
            .get(&(key_type, key.to_owned()))
            .map(|held| held.epoch)
    }

    /// Whether this broker still holds `key`'s lease at `epoch`.
    #[must_use]
    pub fn holds(&self, key_type: KeyType, key: &str, epoch: i64) -> bool {
        self.epoch(key_type, key) == Some(epoch)
    }

    fn note(&self, key_type: KeyType, key: &str, epoch: i64, until: Instant) {
        self.held()
            .insert((key_type, key.to_owned()), Held { epoch, until });
    }

    /// Forgets every lease (the broker leaves, or lost its place).
    pub fn forget_all(&self) {
        self.held().clear();
    }

    /// Renews every lease this run holds in the database for another `lease`; a lease that ran
    /// out or was taken is forgotten, so the key is claimed afresh when next asked for.
    ///
    /// # Errors
    /// PostgreSQL's error: nothing is renewed, and leases lapse on their own.
    pub async fn renew(
        &self,
        client: &impl GenericClient,
        run_id: &str,
        lease: Duration,
    ) -> Result<(), tokio_postgres::Error> {
        let sent = Instant::now();
        let rows = client
            .query(
                "UPDATE minibroker.coordinator_leases
                 SET expires = clock_timestamp() + $2::float8 * interval '1 millisecond'
                 WHERE run_id = $1 AND expires > clock_timestamp()
                 RETURNING key_type, key, epoch",
                &[&run_id, &lease_ms(lease)],
            )
            .await?;
        let renewed: HashMap<(KeyType, String), i64> = rows
            .iter()
            .filter_map(|row| {
                let key_type = KeyType::from_code(row.get(0))?;
                Some(((key_type, row.get::<_, String>(1)), row.get(2)))
            })
            .collect();
        let until = sent + lease;
        let mut held = self.held();
        // A lease taken while the renewal ran is kept as its claim noted it.
        held.retain(|key, held| held.until > until || renewed.get(key) == Some(&held.epoch));
        for held in held.values_mut() {
            held.until = held.until.max(until);
        }
        Ok(())
    }
}

/// Takes `key`'s lease for `registration`'s run (or renews it, when the run holds it), unless
/// another run holds a live one; its epoch, noted in `leases`.
///
/// # Errors
/// PostgreSQL's error.
pub async fn claim(
    client: &impl GenericClient,
    leases: &Leases,
    registration: &Registration,
    (key_type, key): (KeyType, &str),
    lease: Duration,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let sent = Instant::now();
    let epoch: Option<i64> = client
        .query_one(
            "SELECT minibroker.claim_lease($1, $2, $3, $4, $5::float8)",
            &[
                &key_type.code(),
                &key,
                &registration.member.node_id,
                &registration.run_id,
                &lease_ms(lease),
            ],
        )
        .await?
        .get(0);
    if let Some(epoch) = epoch {
        leases.note(key_type, key, epoch, sent + lease);
    }
    Ok(epoch)
}

/// Takes group `group_id`'s lease as [`claim`] does, and with it the group's generation: one
/// past the last one when the tenure is new (its members must join again), the last one when
/// this run's tenure never broke. `None` when another run holds it.
///
/// # Errors
/// PostgreSQL's error.
pub async fn claim_group(
    client: &impl GenericClient,
    leases: &Leases,
    registration: &Registration,
    group_id: &str,
    lease: Duration,
) -> Result<Option<(i64, i32)>, tokio_postgres::Error> {
    let known = leases.last_epoch(KeyType::Group, group_id).unwrap_or(0);
    let sent = Instant::now();
    let row = client
        .query_one(
            "SELECT held_epoch, generation
             FROM minibroker.claim_group($1, $2, $3, $4::float8, $5)",
            &[
                &group_id,
                &registration.member.node_id,
                &registration.run_id,
                &lease_ms(lease),
                &known,
            ],
        )
        .await?;
    let Some(epoch) = row.get::<_, Option<i64>>(0) else {
        return Ok(None);
    };
    leases.note(KeyType::Group, group_id, epoch, sent + lease);
    Ok(Some((epoch, row.get::<_, Option<i32>>(1).unwrap_or(0))))
}

/// Gives up every lease `run_id` holds, so other brokers take its keys at once (a clean
/// shutdown).
///
/// # Errors
/// PostgreSQL's error: the leases then run out on their own.
pub async fn release_all(
    client: &impl GenericClient,
    run_id: &str,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "UPDATE minibroker.coordinator_leases SET expires = clock_timestamp()
             WHERE run_id = $1",
            &[&run_id],
        )
        .await?;
    Ok(())
}

/// Which broker coordinates `key`: the live holder of its lease, or else the live broker it
/// hashes to (which is to take the lease); `None` when no broker is live.
///
/// # Errors
/// PostgreSQL's error.
pub async fn coordinator(
    client: &impl GenericClient,
    (key_type, key): (KeyType, &str),
) -> Result<Option<Member>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "WITH live AS (
                 SELECT node_id, run_id, kafka_host, kafka_port,
                        row_number() OVER (ORDER BY node_id) - 1 AS place,
                        count(*) OVER () AS total
                 FROM minibroker.brokers WHERE lease_expires > clock_timestamp()
             ), holder AS (
                 SELECT live.node_id, live.kafka_host, live.kafka_port
                 FROM minibroker.coordinator_leases lease
                 JOIN live ON live.node_id = lease.node_id AND live.run_id = lease.run_id
                 WHERE lease.key_type = $1 AND lease.key = $2
                   AND lease.expires > clock_timestamp()
             )
             SELECT node_id, kafka_host, kafka_port FROM holder
             UNION ALL
             SELECT node_id, kafka_host, kafka_port FROM live
             WHERE place = abs(hashtext($2)::bigint) % total
               AND NOT EXISTS (SELECT 1 FROM holder)
             LIMIT 1",
            &[&key_type.code(), &key],
        )
        .await?;
    Ok(row.and_then(|row| {
        Some(Member {
            node_id: row.get(0),
            kafka_host: row.get(1),
            kafka_port: u16::try_from(row.get::<_, i32>(2)).ok()?,
        })
    }))
}
