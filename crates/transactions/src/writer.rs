//! [`LogWriter`]: the transaction log's own thread, where the coordinator's changes are written
//! and synced in groups.
//!
//! A request decides its change on the runtime, under its id's turn (see `coordinator`), then
//! hands the changed transaction here and waits for its answer. The thread takes every change
//! queued since its last sync, appends them in one write, syncs once
//! ([`TransactionLog::append_all`]) and then settles each: its `done` applies it to the
//! coordinator's state and hands its id's turn on. So while one fsync runs, the changes of every
//! other transactional id queue for the next, and many producers share each fsync; before, each
//! change was written and synced on a runtime thread under one lock of the whole coordinator,
//! and every transactional request of the broker waited in line for the disk.
//!
//! A change is settled here, not by the request that made it: a request whose client went away
//! mid-wait still has its change applied once it is durable, so the coordinator's state never
//! falls behind its log.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::{Transaction, TransactionLog, TransactionLogError};

/// Most changes one sync covers; more wait for the next (bounds one write's size).
const MOST_PER_SYNC: usize = 1024;

/// What to do with a change once its write ended: given the change back and whether it is
/// durable.
pub(crate) type Settle = Box<dyn FnOnce(Transaction, Result<(), TransactionLogError>) + Send>;

/// A change waiting for its write.
struct Pending {
    transaction: Transaction,
    settle: Settle,
}

/// The writer thread and its queue; see the module docs. Dropping it lets the thread finish
/// what is queued and waits for it.
#[derive(Debug)]
pub(crate) struct LogWriter {
    queue: Option<mpsc::Sender<Pending>>,
    thread: Option<JoinHandle<()>>,
    group_writes: Arc<AtomicU64>,
}

impl LogWriter {
    /// Starts the thread that owns `log`.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub(crate) fn start(mut log: TransactionLog) -> std::io::Result<Self> {
        let (queue, changes) = mpsc::channel::<Pending>();
        let group_writes = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&group_writes);
        let thread = std::thread::Builder::new()
            .name("transaction-log".to_owned())
            .spawn(move || {
                while let Ok(first) = changes.recv() {
                    let mut group = vec![first];
                    group.extend(changes.try_iter().take(MOST_PER_SYNC - 1));
                    let transactions: Vec<&Transaction> =
                        group.iter().map(|pending| &pending.transaction).collect();
                    let written = log.append_all(&transactions);
                    counted.fetch_add(1, Ordering::Relaxed);
                    for pending in group {
                        (pending.settle)(pending.transaction, written.clone());
                    }
                }
            })?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
            group_writes,
        })
    }

    /// Queues `transaction`'s record; `settle` runs on the writer thread once it is written
    /// and synced, or refused (at once, on this thread, if the writer is gone).
    pub(crate) fn submit(&self, transaction: Transaction, settle: Settle) {
        let pending = Pending {
            transaction,
            settle,
        };
        let Some(queue) = &self.queue else {
            return;
        };
        if let Err(mpsc::SendError(pending)) = queue.send(pending) {
            let gone = TransactionLogError::Io {
                what: "writing to",
                path: crate::FILE_NAME.into(),
                source: Arc::new(std::io::Error::other(
                    "the transaction log's writer stopped",
                )),
            };
            (pending.settle)(pending.transaction, Err(gone));
        }
    }

    /// Group writes done (each one append and one sync of every change queued at the time).
    pub(crate) fn group_writes(&self) -> u64 {
        self.group_writes.load(Ordering::Relaxed)
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
