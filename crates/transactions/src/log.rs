//! [`TransactionLog`]: where the coordinator makes each transition durable before answering.
//!
//! One file in the data directory, `transactions.log`, to which every changed transactional id's
//! record ([`Transaction::encode`]) is appended — a u32 big-endian length, then the sealed
//! record — and synced: the changes of several ids in one write and one sync when they wait
//! together ([`TransactionLog::append_all`], driven by the coordinator's writer thread). The last whole record of an id is its state, with the additions after
//! it (an add to an open transaction writes only what it added, never the whole record again:
//! see `record`); a Dead one is a tombstone.
//!
//! At open the file is read whole. The torn-tail rule is the segments' (and Kafka's log
//! recovery's): bytes at the end that are not a whole record are what a crash in the middle of an
//! append leaves — an append that was never synced, so never answered — and are cut, with a
//! warning naming the file, where they began and how many bytes went (anything else that cuts a
//! record off the end, a copy that lost its last bytes, is lost data, and the warning is how it
//! is seen). `minibroker check-data` reports such a tail as damage, as it reports a segment's. A
//! damaged record before the tail refuses the open, naming the file and the offset, since what
//! it held cannot be known — and so does a damaged length that looks like a torn tail but has
//! whole records after it. The file is then rewritten with one
//! record per live id (atomically: a crash leaves the old file or the new one), and again
//! whenever it grows past [`COMPACT_BYTES`] and twice what its live records take.

use minibroker_storage::{Storage, StorageFile};
use minibroker_storage::{read_whole, write_atomically};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

use crate::record::Entry;
use crate::{RecordError, Transaction, TxnState};
use minibroker_envelope::framed::{TornTail, frame, read_framed};

/// The log's file name in the data directory.
pub const FILE_NAME: &str = "transactions.log";

/// A log larger than this, and than twice its live records, is rewritten with those alone.
pub const COMPACT_BYTES: u64 = 1 << 20;

/// Why the log could not be opened or written. Cloned for each change of a group that one
/// failed write or sync refused.
#[derive(Debug, Clone, Error)]
pub enum TransactionLogError {
    /// The file system refused an operation on the log.
    #[error("{what} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The log's file.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: Arc<io::Error>,
    },
    /// A record before the last one is damaged.
    #[error("{} is damaged at byte {at}: {source}", .path.display())]
    Damaged {
        /// The log's file.
        path: PathBuf,
        /// Where the damaged record starts.
        at: usize,
        /// What is wrong with it.
        #[source]
        source: RecordError,
    },
}

/// The transaction log of a data directory; see the module docs.
#[derive(Debug)]
pub struct TransactionLog {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    /// Bytes in the file.
    size: u64,
    /// Each live id's state, and what its records since its last whole one take in the file.
    live: BTreeMap<String, (Transaction, u64)>,
    /// What those records take together.
    live_bytes: u64,
    /// A sync failed: what the file holds past `size` is unknown, so nothing more is appended
    /// (the coordinator refuses changes until a restart reads the file again), as a partition
    /// goes read-only after a failed sync.
    failed_sync: bool,
}

impl TransactionLog {
    /// Opens (or creates) the log in `dir` and returns every live transactional id's last state.
    ///
    /// # Errors
    /// [`TransactionLogError::Damaged`] for a damaged record before the last;
    /// [`TransactionLogError::Io`] when the file cannot be read or rewritten.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
    ) -> Result<(Self, Vec<Transaction>), TransactionLogError> {
        let path = dir.join(FILE_NAME);
        let bytes = match read_whole(&*storage, &path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(TransactionLogError::Io {
                    what: "reading",
                    path,
                    source: Arc::new(source),
                });
            }
        };
        let (states, torn) = read_records(&bytes, &path)?;
        if let Some(torn) = &torn {
            tracing::warn!(
                file = %path.display(),
                at = torn.at,
                bytes = torn.bytes,
                "cut a torn tail off the transaction log: an append a crash interrupted (never answered), or lost data"
            );
        }
        let mut live = states.into_iter().map(|(id, txn)| (id, (txn, 0))).collect();
        let (file, size) = rewrite(&*storage, &path, &mut live).map_err(|failed| match failed {
            Rewrite::NotWritten(error) | Rewrite::NotReopened(error) => error,
        })?;
        let states = live.values().map(|(txn, _)| txn.clone()).collect();
        let log = Self {
            storage,
            path,
            file,
            size,
            live_bytes: size,
            live,
            failed_sync: false,
        };
        Ok((log, states))
    }

    /// Reads the log in `dir` without changing it (`minibroker check-data`): its path, and what
    /// is wrong with it, if anything; `None` when there is no log.
    #[must_use]
    pub fn check(storage: &dyn Storage, dir: &Path) -> Option<(PathBuf, Option<String>)> {
        let path = dir.join(FILE_NAME);
        let problem = match read_whole(storage, &path) {
            Ok(bytes) => match read_records(&bytes, &path) {
                Ok((_, Some(torn))) => Some(torn.to_string()),
                Ok(_) => None,
                Err(error) => Some(error.to_string()),
            },
            Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
            Err(error) => Some(format!("cannot read it: {error}")),
        };
        Some((path, problem))
    }

    /// Appends `transaction`'s record and syncs it: the change is durable when this returns.
    /// When all it changed is partitions or groups added to the open transaction, only those
    /// are written. A Dead one is forgotten at the next compaction.
    ///
    /// # Errors
    /// [`TransactionLogError::Io`] when the write or the sync fails.
    pub fn append(&mut self, transaction: &Transaction) -> Result<(), TransactionLogError> {
        self.append_all(&[transaction])
    }

    /// Appends the records of `transactions` in one write and syncs them once (a group
    /// commit): all of them are durable when this returns, or none is answered as durable.
    /// Each record is an addition or a whole one as in [`Self::append`], against what the log
    /// has written for its id — the one before it in the group, if the group holds the id
    /// twice.
    ///
    /// # Errors
    /// [`TransactionLogError::Io`] when the write or the sync fails.
    pub fn append_all(&mut self, transactions: &[&Transaction]) -> Result<(), TransactionLogError> {
        if self.failed_sync {
            return Err(self.failed(
                "appending after a failed sync to",
                io::Error::other("an earlier sync failed; restart the broker"),
            ));
        }
        let mut bytes = Vec::new();
        // Each record's length and whether it is an addition, in the group's order.
        let mut written = Vec::with_capacity(transactions.len());
        let mut in_group: HashMap<&str, &Transaction> = HashMap::new();
        for &transaction in transactions {
            let id = transaction.transactional_id();
            let before = in_group
                .get(id)
                .copied()
                .or_else(|| self.live.get(id).map(|(before, _)| before));
            let addition = before.and_then(|before| transaction.addition_since(before));
            let record = addition
                .as_ref()
                .map_or_else(|| transaction.encode(), crate::record::Addition::encode);
            let framed = frame(&record);
            written.push((framed.len() as u64, addition.is_some()));
            bytes.extend_from_slice(&framed);
            in_group.insert(id, transaction);
        }
        if let Err(error) = self.file.append(&bytes) {
            // Cut what part of it was written, so the next record follows a whole one.
            let _ = self.file.truncate(self.size);
            return Err(self.failed("appending to", error));
        }
        if let Err(error) = self.file.sync() {
            // Never answered, and never to be followed by a record that a later sync would
            // make durable with it; whatever of it a crash keeps, whole or torn, the next start
            // reads by the torn-tail rule.
            self.failed_sync = true;
            return Err(self.failed("syncing", error));
        }
        self.size += bytes.len() as u64;
        for (&transaction, (added, addition)) in transactions.iter().zip(written) {
            self.note_written(transaction, added, addition);
        }
        if self.size > COMPACT_BYTES && self.size > 2 * self.live_bytes {
            self.compact();
        }
        Ok(())
    }

    /// Notes a record of `added` bytes written for `transaction`: what its id's records take
    /// (a whole record starts them again, an addition adds to them) and its state as written.
    fn note_written(&mut self, transaction: &Transaction, added: u64, addition: bool) {
        let id = transaction.transactional_id();
        let earlier = self.live.get(id).map_or(0, |(_, bytes)| *bytes);
        self.live_bytes -= earlier;
        if transaction.state() == TxnState::Dead {
            self.live.remove(id);
        } else {
            let bytes = if addition { earlier + added } else { added };
            self.live_bytes += bytes;
            self.live
                .insert(id.to_owned(), (transaction.clone(), bytes));
        }
    }

    /// Rewrites the file with one whole record per live id, from what the log has written
    /// (never from a state not yet written). The records it replaces are durable already, so a
    /// failure is logged, not returned: a rewrite that fails before its rename leaves the old
    /// file, which the log goes on appending to; one that renamed and then could not open the
    /// new file leaves nothing to append to, and the log refuses changes until a restart.
    fn compact(&mut self) {
        match rewrite(&*self.storage, &self.path, &mut self.live) {
            Ok((file, size)) => {
                (self.file, self.size) = (file, size);
                self.live_bytes = size;
            }
            Err(Rewrite::NotWritten(error)) => {
                tracing::warn!(%error, "could not compact the transaction log; appending to it as it is");
            }
            Err(Rewrite::NotReopened(error)) => {
                self.failed_sync = true;
                tracing::error!(%error, "compacted the transaction log but cannot append to it: transactions are refused until a restart");
            }
        }
    }

    fn failed(&self, what: &'static str, source: io::Error) -> TransactionLogError {
        TransactionLogError::Io {
            what,
            path: self.path.clone(),
            source: Arc::new(source),
        }
    }

    /// Bytes the log's file holds (for tests and metrics).
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// Each live id's state, and the torn tail left out.
type Records = (BTreeMap<String, Transaction>, Option<TornTail>);

/// Each live id's state from the log's `bytes`, with the torn record at the end (an append
/// that never finished), which is left out.
fn read_records(bytes: &[u8], path: &Path) -> Result<Records, TransactionLogError> {
    let mut states: BTreeMap<String, Transaction> = BTreeMap::new();
    let apply = |_at: usize, record: &[u8]| -> Result<(), RecordError> {
        let entry = Entry::decode(record)?;
        let id = entry.transactional_id().to_owned();
        match entry {
            Entry::Whole(transaction) if transaction.state() == TxnState::Dead => {
                states.remove(&id);
            }
            Entry::Whole(transaction) => {
                states.insert(id, transaction);
            }
            Entry::Addition(addition) => states
                .get_mut(&id)
                .ok_or(RecordError::Impossible("an addition to an unknown id"))?
                .apply_addition(addition)?,
        }
        Ok(())
    };
    let magics = [crate::record::MAGIC, crate::record::ADDITION_MAGIC];
    let reads_whole = |record: &[u8]| Entry::decode(record).is_ok();
    let torn = read_framed(bytes, &magics, apply, reads_whole).map_err(|error| {
        TransactionLogError::Damaged {
            path: path.to_owned(),
            at: error.at,
            source: error.source.unwrap_or(RecordError::Damaged(
                "its length is damaged: whole records follow it",
            )),
        }
    })?;
    Ok((states, torn))
}

/// Why [`rewrite`] failed: before the new file replaced the old one, or after.
#[derive(Debug)]
enum Rewrite {
    /// The old file is still in place.
    NotWritten(TransactionLogError),
    /// The new file is in place but could not be opened.
    NotReopened(TransactionLogError),
}

/// Replaces the file at `path` with a whole record of each `live` id, atomically, noting what
/// each takes, and opens it for appends.
fn rewrite(
    storage: &dyn Storage,
    path: &Path,
    live: &mut BTreeMap<String, (Transaction, u64)>,
) -> Result<(Arc<dyn StorageFile>, u64), Rewrite> {
    let failed = |what, source| TransactionLogError::Io {
        what,
        path: path.to_owned(),
        source: Arc::new(source),
    };
    let mut records = Vec::new();
    let mut sizes = Vec::with_capacity(live.len());
    for (transaction, _) in live.values() {
        let framed = frame(&transaction.encode());
        sizes.push(framed.len() as u64);
        records.extend_from_slice(&framed);
    }
    write_atomically(storage, path, &records)
        .map_err(|error| Rewrite::NotWritten(failed("rewriting", error)))?;
    for ((_, bytes), size) in live.values_mut().zip(sizes) {
        *bytes = size;
    }
    let file = storage
        .open(path)
        .map_err(|error| Rewrite::NotReopened(failed("opening", error)))?;
    Ok((file, records.len() as u64))
}
