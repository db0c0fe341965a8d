//! Producer ids and epochs handed out by init-producer.
//!
//! A new producer gets a fresh id at epoch 0; a restarted instance asks with its id and gets the
//! next epoch, which fences the older instance on every partition (rule 2). Ids start at
//! [`FIRST_ISSUED_ID`], leaving the small ids free for hand-driven experiments with `send`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::RequestError;

/// The first producer id the broker issues.
pub const FIRST_ISSUED_ID: i64 = 1000;

/// Issued producer ids and their current epochs.
#[derive(Debug)]
pub struct ProducerIds {
    issued: Mutex<Issued>,
    max_ids: usize,
}

#[derive(Debug)]
struct Issued {
    next_id: i64,
    epochs: HashMap<i64, i16>,
}

impl ProducerIds {
    /// A registry that issues at most `max_ids` producer ids.
    #[must_use]
    pub fn new(max_ids: usize) -> Self {
        Self {
            issued: Mutex::new(Issued {
                next_id: FIRST_ISSUED_ID,
                epochs: HashMap::new(),
            }),
            max_ids,
        }
    }

    /// A new id at epoch 0, or — given an issued id — that id at its next epoch.
    ///
    /// # Errors
    /// [`RequestError::UnknownProducerId`] for an id never issued; [`RequestError::EpochExhausted`]
    /// when the epoch is already `i16::MAX`.
    pub fn init(&self, producer_id: Option<i64>) -> Result<(i64, i16), RequestError> {
        let mut issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
        match producer_id {
            None => {
                if issued.epochs.len() >= self.max_ids {
                    return Err(RequestError::StorageFull(format!(
                        "the broker has issued its maximum of {} producer ids",
                        self.max_ids
                    )));
                }
                let id = issued.next_id;
                issued.next_id += 1;
                issued.epochs.insert(id, 0);
                Ok((id, 0))
            }
            Some(id) => {
                let epoch = issued
                    .epochs
                    .get_mut(&id)
                    .ok_or(RequestError::UnknownProducerId(id))?;
                *epoch = epoch
                    .checked_add(1)
                    .ok_or(RequestError::EpochExhausted(id))?;
                Ok((id, *epoch))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_distinct_and_start_at_epoch_zero() {
        let ids = ProducerIds::new(10);
        assert_eq!(ids.init(None).unwrap(), (FIRST_ISSUED_ID, 0));
        assert_eq!(ids.init(None).unwrap(), (FIRST_ISSUED_ID + 1, 0));
    }

    #[test]
    fn reinit_bumps_the_epoch() {
        let ids = ProducerIds::new(10);
        let (id, _) = ids.init(None).unwrap();
        assert_eq!(ids.init(Some(id)).unwrap(), (id, 1));
        assert_eq!(ids.init(Some(id)).unwrap(), (id, 2));
    }

    #[test]
    fn issuing_stops_at_the_limit() {
        let ids = ProducerIds::new(2);
        ids.init(None).unwrap();
        let (id, _) = ids.init(None).unwrap();
        assert!(matches!(ids.init(None), Err(RequestError::StorageFull(_))));
        // Bumping an issued id's epoch still works.
        assert_eq!(ids.init(Some(id)).unwrap(), (id, 1));
    }

    #[test]
    fn epoch_cannot_grow_past_the_largest() {
        let ids = ProducerIds::new(1);
        let (id, _) = ids.init(None).unwrap();
        for epoch in 1..=i16::MAX {
            assert_eq!(ids.init(Some(id)).unwrap(), (id, epoch));
        }
        assert!(matches!(
            ids.init(Some(id)),
            Err(RequestError::EpochExhausted(_))
        ));
    }

    #[test]
    fn unknown_id_is_refused() {
        let ids = ProducerIds::new(10);
        assert!(matches!(
            ids.init(Some(5)),
            Err(RequestError::UnknownProducerId(5))
        ));
    }
}
