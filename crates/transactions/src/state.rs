//! [`TxnState`]: where a transactional id's transaction is, and which states may follow which
//! (Apache Kafka's `TransactionState`; its ids are the ones Kafka's transaction log stores).

/// The state of one transactional id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction open.
    Empty,
    /// A transaction is open: partitions or groups were added to it.
    Ongoing,
    /// The producer asked to commit; the COMMIT markers are being written.
    PrepareCommit,
    /// The transaction is being aborted (asked for, timed out or fenced); the ABORT markers are
    /// being written.
    PrepareAbort,
    /// The last transaction committed.
    CompleteCommit,
    /// The last transaction aborted.
    CompleteAbort,
    /// The id expired and is forgotten.
    Dead,
    /// A newer instance fenced the open transaction: passing, on the way to PrepareAbort, and
    /// never stored as the current state.
    PrepareEpochFence,
}

impl TxnState {
    /// Kafka's id of the state, as its transaction log stores it.
    #[must_use]
    pub const fn id(self) -> u8 {
        match self {
            Self::Empty => 0,
            Self::Ongoing => 1,
            Self::PrepareCommit => 2,
            Self::PrepareAbort => 3,
            Self::CompleteCommit => 4,
            Self::CompleteAbort => 5,
            Self::Dead => 6,
            Self::PrepareEpochFence => 7,
        }
    }

    /// The state of a stored id, if it is one.
    #[must_use]
    pub const fn from_id(id: u8) -> Option<Self> {
        Some(match id {
            0 => Self::Empty,
            1 => Self::Ongoing,
            2 => Self::PrepareCommit,
            3 => Self::PrepareAbort,
            4 => Self::CompleteCommit,
            5 => Self::CompleteAbort,
            6 => Self::Dead,
            7 => Self::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Whether `self` may follow `previous` (Kafka's `validPreviousStates`).
    #[must_use]
    pub fn may_follow(self, previous: Self) -> bool {
        use TxnState::{
            CompleteAbort, CompleteCommit, Dead, Empty, Ongoing, PrepareAbort, PrepareCommit,
            PrepareEpochFence,
        };
        match self {
            Empty => matches!(previous, Empty | CompleteCommit | CompleteAbort),
            Ongoing => matches!(previous, Ongoing | Empty | CompleteCommit | CompleteAbort),
            PrepareCommit => previous == Ongoing,
            // From Empty or Complete*: an abort with nothing open that bumps the epoch (KIP-890
            // part 2, as Kafka's coordinator allows it).
            PrepareAbort => matches!(
                previous,
                Ongoing | PrepareEpochFence | Empty | CompleteCommit | CompleteAbort
            ),
            CompleteCommit => previous == PrepareCommit,
            CompleteAbort => previous == PrepareAbort,
            Dead => matches!(previous, Empty | CompleteCommit | CompleteAbort),
            PrepareEpochFence => previous == Ongoing,
        }
    }

    /// The state's name as Kafka's tools show it (`kafka-transactions.sh`, DescribeTransactions).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Ongoing => "Ongoing",
            Self::PrepareCommit => "PrepareCommit",
            Self::PrepareAbort => "PrepareAbort",
            Self::CompleteCommit => "CompleteCommit",
            Self::CompleteAbort => "CompleteAbort",
            Self::Dead => "Dead",
            Self::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state Kafka's tools name `name` (DescribeTransactions, ListTransactions' filter).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        (0..=7)
            .filter_map(Self::from_id)
            .find(|state| state.name() == name)
    }

    /// Whether markers are being written: every request but a retry of the same end waits.
    #[must_use]
    pub const fn is_preparing(self) -> bool {
        matches!(
            self,
            Self::PrepareCommit | Self::PrepareAbort | Self::PrepareEpochFence
        )
    }

    /// Whether the last transaction ended and its markers are written.
    #[must_use]
    pub const fn is_complete(self) -> bool {
        matches!(self, Self::CompleteCommit | Self::CompleteAbort)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    #[test]
    fn ids_round_trip_and_unknown_ids_are_refused() {
        for state in ALL {
            assert_eq!(TxnState::from_id(state.id()), Some(state));
        }
        assert_eq!(TxnState::from_id(8), None);
    }

    #[test]
    fn the_valid_previous_states_are_kafkas() {
        use TxnState::*;
        let allowed: Vec<(TxnState, TxnState)> = ALL
            .iter()
            .flat_map(|next| ALL.iter().map(move |previous| (*previous, *next)))
            .filter(|(previous, next)| next.may_follow(*previous))
            .collect();
        let expected = [
            (Empty, Empty),
            (CompleteCommit, Empty),
            (CompleteAbort, Empty),
            (Empty, Ongoing),
            (Ongoing, Ongoing),
            (CompleteCommit, Ongoing),
            (CompleteAbort, Ongoing),
            (Ongoing, PrepareCommit),
            (Ongoing, PrepareAbort),
            (PrepareEpochFence, PrepareAbort),
            // KIP-890 part 2: an abort with nothing open, which bumps the epoch.
            (Empty, PrepareAbort),
            (CompleteCommit, PrepareAbort),
            (CompleteAbort, PrepareAbort),
            (PrepareCommit, CompleteCommit),
            (PrepareAbort, CompleteAbort),
            (Empty, Dead),
            (CompleteCommit, Dead),
            (CompleteAbort, Dead),
            (Ongoing, PrepareEpochFence),
        ];
        assert_eq!(allowed.len(), expected.len(), "{allowed:?}");
        for pair in expected {
            assert!(allowed.contains(&pair), "{pair:?} missing");
        }
    }
}
