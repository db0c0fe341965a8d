//! File descriptors: the process's limit, raised at start, and the share of it partitions may
//! take.
//!
//! Every connection, segment file and listener is a descriptor, and the soft limit a shell
//! hands a process is often 1,024, far below what the kernel allows (the hard limit). A broker
//! raises its soft limit to the hard one at start, as Kafka's packaging does with `ulimit -n`,
//! and then keeps partitions within what is left once connections have their share
//! ([`plan`]): a topic whose partitions would pass it is refused, instead of one
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

/// Most sealed segment files kept open at once, across every partition (see
/// `minibroker_log::OpenFiles`).
pub const MAX_OPEN_SEALED_FILES: u64 = 512;

/// How a durable broker shares its descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorPlan {
    /// Sealed segment files open at once.
    pub sealed_files: usize,
    /// Partitions (each holds its active segment open); `None` for no limit.
    pub partitions: Option<u64>,
}

/// The plan under a soft limit of `limit` (`None`: unlimited) for a broker serving up to
/// `max_connections`: the reserve first, then connections (at most half the limit, so a limit
/// set below `max_connections` still leaves partitions some), sealed files (at most an eighth),
/// and partitions what is left.
#[must_use]
pub fn plan(limit: Option<u64>, max_connections: usize) -> DescriptorPlan {
    let Some(limit) = limit else {
        return DescriptorPlan {
            sealed_files: MAX_OPEN_SEALED_FILES as usize,
            partitions: None,
        };
    };
    let sealed_files = MAX_OPEN_SEALED_FILES.min(limit / 8).max(1);
    let connections = (max_connections as u64).min(limit / 2);
    DescriptorPlan {
        sealed_files: sealed_files as usize,
        partitions: Some(limit.saturating_sub(RESERVED_DESCRIPTORS + connections + sealed_files)),
    }
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
    fn partitions_get_what_connections_sealed_files_and_the_reserve_leave() {
        let unlimited = plan(None, 1024);
        assert_eq!(unlimited.partitions, None);
        let roomy = plan(Some(65_536), 1024);
        assert_eq!(roomy.sealed_files, 512);
        assert_eq!(roomy.partitions, Some(65_536 - 256 - 1024 - 512));
        // A shell's 1,024: connections get half, sealed files an eighth.
        let tight = plan(Some(1024), 1024);
        assert_eq!(tight.sealed_files, 128);
        assert_eq!(tight.partitions, Some(1024 - 256 - 512 - 128));
        assert_eq!(plan(Some(100), 1024).partitions, Some(0));
    }
}
