//! File descriptors: the process's limit, raised at start, and the share of it partitions may
//! take.
//!
//! Every connection, segment file and listener is a descriptor, and the soft limit a shell
//! hands a process is often 1,024, far below what the kernel allows (the hard limit). A broker
//! raises its soft limit to the hard one at start, as Kafka's packaging does with `ulimit -n`,
//! and then keeps partitions within what is left once connections have their share
//! ([`partition_budget`]): a topic whose partitions would pass it is refused, instead of one
//! client's topics taking the descriptors another client's partition needs to roll.

use rustix::process::{Resource, getrlimit, setrlimit};

/// Descriptors kept for what is neither a connection nor a partition: listeners, the metrics
/// endpoint's connections, standard streams, the data directory's lock, files being replaced,
/// segments being rolled or read.
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// Raises the soft limit on open files to the hard limit and returns the soft limit now in
/// force (`None` when unlimited).
pub fn raise_limit() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                tracing::debug!(from = ?limit.current, to = ?limit.maximum, "raised the open-file limit")
            }
            Err(error) => {
                tracing::warn!(%error, limit = ?limit.current, "could not raise the open-file limit")
            }
        }
    }
    getrlimit(Resource::Nofile).current
}

/// How many descriptors partitions' open files may hold under a soft limit of `limit`, with
/// `max_connections` kept for connections (`None`: no limit).
#[must_use]
pub fn partition_budget(limit: Option<u64>, max_connections: usize) -> Option<u64> {
    limit.map(|limit| limit.saturating_sub(RESERVED_DESCRIPTORS + max_connections as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let hard = getrlimit(Resource::Nofile).maximum;
        assert_eq!(raise_limit(), hard);
    }

    #[test]
    fn partitions_get_what_connections_and_the_reserve_leave() {
        assert_eq!(partition_budget(None, 1024), None);
        assert_eq!(
            partition_budget(Some(65_536), 1024),
            Some(65_536 - 1024 - 256)
        );
        assert_eq!(partition_budget(Some(1024), 1024), Some(0));
    }
}
