//! The seam where a cluster's brokers share their transactions ([`SharedTransactions`]): a
//! broker coordinates a transactional id only while it holds the id's lease, and every change of
//! it is a compare-and-set in the cluster's database on what the broker last read there
//! (producer id, epoch, state), so two brokers can never both move one transaction on. An end
//! goes to the database whole: the markers, the groups' offsets and Complete* in one database
//! transaction, so there is never a Prepare* left for anyone to finish.
//!
//! The coordinator knows nothing of the database: the host implements this trait with the
//! cluster's crate.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::{CoordinatorError, Transaction};

/// A future a [`SharedTransactions`] returns.
pub type SharedFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, CoordinatorError>> + Send + 'a>>;

/// Where a cluster keeps its transactions; see the module docs.
pub trait SharedTransactions: Send + Sync + fmt::Debug {
    /// Takes transactional id `id`'s lease for this broker (or keeps it): the lease's epoch, and
    /// the id's transaction as the cluster keeps it (`None` for an id it does not know).
    ///
    /// # Errors
    /// [`CoordinatorError::NotCoordinator`] when another broker holds it; a storage error.
    fn claim<'a>(&'a self, id: &'a str) -> SharedFuture<'a, (i64, Option<Transaction>)>;

    /// The epoch of this broker's live lease of `id`, as far as it knows without asking the
    /// database.
    fn epoch(&self, id: &str) -> Option<i64>;

    /// Stores `changed` in place of `before` (`None`: a new id) under the lease of `epoch`, if
    /// the database still holds `before`.
    ///
    /// # Errors
    /// [`CoordinatorError::NotCoordinator`]; [`CoordinatorError::Changed`] when the id is not
    /// `before` there; a storage error. Nothing changed then.
    fn save<'a>(
        &'a self,
        epoch: i64,
        before: Option<&'a Transaction>,
        changed: &'a Transaction,
    ) -> SharedFuture<'a, ()>;

    /// Ends `prepared` (PrepareCommit or PrepareAbort, made from `before`) under the lease of
    /// `epoch`: its markers, its groups' offsets and `completed` in place of `before`, in one
    /// database transaction.
    ///
    /// # Errors
    /// As [`Self::save`]: nothing of the end happened then.
    fn end<'a>(
        &'a self,
        epoch: i64,
        before: &'a Transaction,
        prepared: &'a Transaction,
        completed: &'a Transaction,
    ) -> SharedFuture<'a, ()>;

    /// A producer id no broker of the cluster has given.
    ///
    /// # Errors
    /// [`CoordinatorError::ProducerId`].
    fn issue_producer_id(&self) -> SharedFuture<'_, i64>;

    /// The transactional ids whose transaction ran past its timeout while no broker held their
    /// lease (their coordinator died): a live broker takes and aborts them.
    ///
    /// # Errors
    /// A storage error.
    fn orphaned(&self, now_ms: i64) -> SharedFuture<'_, Vec<String>>;
}
