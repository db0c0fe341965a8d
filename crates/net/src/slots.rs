//! What every listener of one process shares: the connection slots (`max_connections` is one
//! limit whatever the protocols), the open connections per client address, and the counts the
//! metrics read; and the limits each connection is served under.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

use crate::quotas::Quota;

/// The limits a listener serves its connections under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once, by every listener together (the size of [`Slots`]).
    pub max_connections: usize,
    /// The largest frame read (after its length prefix).
    pub max_frame_bytes: usize,
    /// Answers (or requests read) that may wait unwritten.
    pub max_in_flight: usize,
    /// A connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// A write to the peer that takes longer closes the connection.
    pub write_timeout: Duration,
    /// A connection not authenticated this long after its accept is closed (a TLS handshake
    /// included).
    pub authentication_timeout: Duration,
    /// How long a stopping listener lets its connections finish.
    pub drain_timeout: Duration,
}

/// How many connections the listeners have accepted, refused and hold open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Connections served since the process started.
    pub accepted: u64,
    /// Connections closed at once because `max_connections` were already served.
    pub refused: u64,
    /// Connections being served now.
    pub open: u64,
}

/// The connection slots and counts every listener of one process shares.
#[derive(Debug)]
pub struct Slots {
    pub(crate) slots: Arc<Semaphore>,
    /// Open connections per client address (`max_connections_per_ip`).
    pub(crate) per_ip: Arc<Quota<IpAddr>>,
    pub(crate) accepted: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) closed: AtomicU64,
}

impl Slots {
    /// `max_connections` slots, and at most `max_per_ip` of them held by one address.
    #[must_use]
    pub fn new(max_connections: usize, max_per_ip: Option<usize>) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max_connections)),
            per_ip: Quota::new(max_per_ip),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            closed: AtomicU64::new(0),
        }
    }

    /// How many connections were accepted and refused, and how many are open.
    #[must_use]
    pub fn counts(&self) -> ConnectionCounts {
        let accepted = self.accepted.load(Ordering::Relaxed);
        ConnectionCounts {
            accepted,
            refused: self.refused.load(Ordering::Relaxed),
            open: accepted.saturating_sub(self.closed.load(Ordering::Relaxed)),
        }
    }
}
