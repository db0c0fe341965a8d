//! [`TakenSnapshot`]: a partition's producer state, taken under its locks and written to its
//! snapshot file later, off the produce path (a write, a rename and their fsyncs).

use minibroker_log::SnapshotStore;

/// A producer-state snapshot taken, not yet written.
#[derive(Debug)]
pub(crate) struct TakenSnapshot {
    /// The offset it covers up to.
    pub offset: i64,
    /// Where it goes.
    pub store: SnapshotStore,
    /// The encoded state.
    pub bytes: Vec<u8>,
}

impl TakenSnapshot {
    /// Writes it to its file (blocking). A failure is logged: recovery then replays from an
    /// older snapshot.
    pub(crate) fn write(self) {
        let offset = self.offset;
        if let Err(error) = self.try_write() {
            tracing::warn!(offset, %error, "could not write a producer-state snapshot");
        }
    }

    /// Writes it to its file (blocking), for a caller that must not go on without it.
    pub(crate) fn try_write(self) -> std::io::Result<()> {
        self.store.write(self.offset, &self.bytes)
    }
}
