//! Which connection began each open transaction, to refuse a delayed EndTxn of an earlier one.
//!
//! EndTxn before version 5 names only (producer id, epoch), and a producer without KIP-890 part
//! 2 keeps its epoch from one transaction to the next. So an EndTxn of transaction N that was
//! held up in the network, arriving after its retry ended N and the producer began N+1, would
//! end N+1 (KAFKA-17754): a torn transaction, a lost write. Its client gave up on it only
//! after its timeout, and every client retries a timed-out request on a new connection (the old
//! one is closed as broken), and sends N+1's adds after that retry's answer. So N+1 was begun on
//! a connection opened after the one the late EndTxn came on; a genuine end of N+1 comes on
//! that connection or a later one. An EndTxn from a connection opened before the one whose add
//! began the open transaction is the late copy, and is refused.
//!
//! Connections are numbered in the order this broker opened them; nothing here outlives the
//! broker (a transaction restored at start has no beginning connection, and no connection of an
//! earlier run can deliver anything now).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{Transaction, TxnState};

/// A client connection, numbered in the order the broker opened them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionNumber(u64);

/// Where each open transaction began: its start and the connection of the add that began it.
#[derive(Debug, Default)]
pub(crate) struct Openers {
    opened: AtomicU64,
    began: Mutex<HashMap<String, Began>>,
}

#[derive(Debug, Clone, Copy)]
struct Began {
    start_ms: i64,
    via: ConnectionNumber,
}

impl Openers {
    /// The number of a connection just opened.
    pub(crate) fn open_connection(&self) -> ConnectionNumber {
        ConnectionNumber(self.opened.fetch_add(1, Ordering::Relaxed))
    }

    fn began(&self) -> MutexGuard<'_, HashMap<String, Began>> {
        self.began.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An add on connection `via` left `txn` as it is: if it began `txn`'s open transaction,
    /// `via` is where it began.
    pub(crate) fn added(&self, txn: &Transaction, via: ConnectionNumber) {
        let (TxnState::Ongoing, Some(start_ms)) = (txn.state(), txn.start_ms()) else {
            return;
        };
        let mut began = self.began();
        let known = began
            .get(txn.transactional_id())
            .is_some_and(|began| began.start_ms == start_ms);
        if !known {
            began.insert(txn.transactional_id().to_owned(), Began { start_ms, via });
        }
    }

    /// Whether an EndTxn on connection `via` is a late one of an earlier transaction: `txn`'s
    /// open transaction began on a connection opened after `via`.
    pub(crate) fn is_late_end(&self, txn: &Transaction, via: ConnectionNumber) -> bool {
        if txn.state() != TxnState::Ongoing {
            return false;
        }
        self.began()
            .get(txn.transactional_id())
            .is_some_and(|began| Some(began.start_ms) == txn.start_ms() && via < began.via)
    }

    /// `id`'s transaction ended (or the id is gone): nothing to remember of it.
    pub(crate) fn ended(&self, id: &str) {
        self.began().remove(id);
    }

    /// Forgets every id `is_open` says has no open transaction any more (ended by a timeout,
    /// a fence or expiry).
    pub(crate) fn keep_only(&self, is_open: impl Fn(&str) -> bool) {
        self.began().retain(|id, _| is_open(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ongoing(start: i64) -> Transaction {
        let mut txn = Transaction::new("app", 7, 60_000, 0);
        txn.add_partitions(7, 0, [("t".to_owned(), 0)], start)
            .unwrap();
        txn
    }

    #[test]
    fn an_end_from_a_connection_older_than_the_beginning_one_is_late() {
        let openers = Openers::default();
        let (old, new, newer) = (
            openers.open_connection(),
            openers.open_connection(),
            openers.open_connection(),
        );
        let txn = ongoing(10);
        openers.added(&txn, new);
        // A later add of the same transaction on another connection changes nothing.
        openers.added(&txn, newer);
        assert!(openers.is_late_end(&txn, old));
        assert!(!openers.is_late_end(&txn, new));
        assert!(!openers.is_late_end(&txn, newer));
    }

    #[test]
    fn the_next_transaction_is_judged_by_its_own_beginning() {
        let openers = Openers::default();
        let (first, second) = (openers.open_connection(), openers.open_connection());
        openers.added(&ongoing(10), second);
        // The next transaction (another start) begins on the first connection.
        let next = ongoing(20);
        openers.added(&next, first);
        assert!(!openers.is_late_end(&next, first));
        // Nothing remembered, or not open: never late.
        openers.ended("app");
        assert!(!openers.is_late_end(&next, first));
        let empty = Transaction::new("app", 7, 60_000, 0);
        assert!(!openers.is_late_end(&empty, first));
    }

    #[test]
    fn ids_without_an_open_transaction_are_forgotten() {
        let openers = Openers::default();
        let (first, second) = (openers.open_connection(), openers.open_connection());
        let txn = ongoing(10);
        openers.added(&txn, second);
        openers.keep_only(|_| true);
        assert!(openers.is_late_end(&txn, first));
        openers.keep_only(|_| false);
        assert!(!openers.is_late_end(&txn, first));
    }
}
