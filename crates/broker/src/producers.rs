//! Producer ids and epochs handed out by init-producer.
//!
//! A new producer gets a fresh id at epoch 0; a restarted instance asks with its id and gets the
//! next epoch, which fences the older instance on every partition (rule 2). Ids start at
//! [`FIRST_ISSUED_ID`], leaving the small ids free for hand-driven experiments with `send`, and
//! come from the whole `i64` range, as Kafka's do: issuing never runs out.
//!
//! What is remembered per id (its current epoch, so the next init can bump it) is bounded: an id
//! not initialised for `expiration` is forgotten, and when `max_remembered` ids are remembered the
//! least recently initialised one is forgotten to make room. A forgotten id asking for a bump is
//! answered UNKNOWN_PRODUCER_ID and simply asks for a new id; the partitions' producer state,
//! which does the fencing, is not affected.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::data_dir::{DataDir, PRODUCER_ID_BLOCK};
use crate::{BrokerError, ServerError};

/// The first producer id the broker issues.
pub const FIRST_ISSUED_ID: i64 = 1000;

/// Issued producer ids and their current epochs.
#[derive(Debug)]
pub struct ProducerIds {
    issued: Mutex<Issued>,
    /// Where a durable broker reserves ids, a block at a time, so none is issued twice across
    /// restarts.
    reservations: Option<Arc<DataDir>>,
    max_remembered: usize,
    expiration: Duration,
}

#[derive(Debug)]
struct Issued {
    next_id: i64,
    /// Ids below this are reserved on disk (durable brokers only).
    reserved_until: i64,
    /// Id → (epoch, when last initialised, its place in `by_age`).
    remembered: HashMap<i64, Remembered>,
    /// Ids by when they were last initialised, oldest first; the key is a running count, so
    /// order follows time without comparing clocks.
    by_age: BTreeMap<u64, i64>,
    touches: u64,
}

#[derive(Debug, Clone, Copy)]
struct Remembered {
    epoch: i16,
    at: Instant,
    age_key: u64,
}

impl Issued {
    /// Forgets ids idle for longer than `expiration` at `now`, and the oldest ones beyond
    /// `keep`.
    fn forget(&mut self, now: Instant, expiration: Duration, keep: usize) {
        while let Some((&age_key, &id)) = self.by_age.first_key_value() {
            let expired = self
                .remembered
                .get(&id)
                .is_none_or(|r| now.saturating_duration_since(r.at) > expiration);
            if !expired && self.remembered.len() <= keep {
                return;
            }
            self.by_age.remove(&age_key);
            self.remembered.remove(&id);
        }
    }

    fn remember(&mut self, id: i64, epoch: i16, now: Instant) {
        if let Some(old) = self.remembered.get(&id) {
            self.by_age.remove(&old.age_key);
        }
        self.touches += 1;
        let age_key = self.touches;
        self.by_age.insert(age_key, id);
        self.remembered.insert(
            id,
            Remembered {
                epoch,
                at: now,
                age_key,
            },
        );
    }
}

impl ProducerIds {
    /// A registry remembering at most `max_remembered` ids (at least one), each for
    /// `expiration` after its last init.
    #[must_use]
    pub fn new(max_remembered: usize, expiration: Duration) -> Self {
        Self {
            issued: Mutex::new(Issued {
                next_id: FIRST_ISSUED_ID,
                reserved_until: FIRST_ISSUED_ID,
                remembered: HashMap::new(),
                by_age: BTreeMap::new(),
                touches: 0,
            }),
            reservations: None,
            max_remembered: max_remembered.max(1),
            expiration,
        }
    }

    /// This registry, issuing ids after the last block `data` reserved and reserving new blocks
    /// there. Epochs are not kept across restarts: a restarted broker answers an epoch bump for
    /// an older id UNKNOWN_PRODUCER_ID, and that producer asks for a new id.
    ///
    /// # Errors
    /// [`ServerError::DataDir`] if the reservation cannot be read.
    pub fn reserving_in(self, data: Arc<DataDir>) -> Result<Self, ServerError> {
        let start = data.reserved_producer_ids()?.unwrap_or(FIRST_ISSUED_ID);
        {
            let mut issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
            issued.next_id = start.max(FIRST_ISSUED_ID);
            issued.reserved_until = issued.next_id;
        }
        Ok(Self {
            reservations: Some(data),
            ..self
        })
    }

    /// A new id at epoch 0, or — given a remembered id — that id at its next epoch.
    ///
    /// # Errors
    /// [`BrokerError::UnknownProducerId`] for an id never issued or forgotten;
    /// [`BrokerError::EpochExhausted`] when the epoch is already `i16::MAX`;
    /// [`BrokerError::ProducerIdsExhausted`] once every id up to `i64::MAX` has been issued.
    pub fn init(&self, producer_id: Option<i64>) -> Result<(i64, i16), BrokerError> {
        self.init_at(producer_id, Instant::now())
    }

    /// [`Self::init`] at the time `now`.
    ///
    /// # Errors
    /// As [`Self::init`].
    pub fn init_at(
        &self,
        producer_id: Option<i64>,
        now: Instant,
    ) -> Result<(i64, i16), BrokerError> {
        let mut issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
        issued.forget(now, self.expiration, self.max_remembered);
        let (id, epoch) = match producer_id {
            None => {
                let id = issued.next_id;
                let next = id.checked_add(1).ok_or(BrokerError::ProducerIdsExhausted)?;
                if let Some(data) = &self.reservations
                    && id >= issued.reserved_until
                {
                    let until = id.saturating_add(PRODUCER_ID_BLOCK);
                    data.reserve_producer_ids(until)
                        .map_err(|source| BrokerError::Storage {
                            what: "reserving producer ids",
                            source,
                        })?;
                    issued.reserved_until = until;
                }
                issued.next_id = next;
                (id, 0)
            }
            Some(id) => {
                let epoch = issued
                    .remembered
                    .get(&id)
                    .ok_or(BrokerError::UnknownProducerId(id))?
                    .epoch;
                let epoch = epoch
                    .checked_add(1)
                    .ok_or(BrokerError::EpochExhausted(id))?;
                (id, epoch)
            }
        };
        issued.remember(id, epoch, now);
        // Room for the id just remembered was made by `forget` only up to the cap; trim again.
        issued.forget(now, self.expiration, self.max_remembered);
        Ok((id, epoch))
    }

    /// How many ids are remembered.
    #[must_use]
    pub fn remembered(&self) -> usize {
        self.issued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remembered
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn new_ids_are_distinct_and_start_at_epoch_zero() {
        let ids = ProducerIds::new(10, DAY);
        assert_eq!(ids.init(None).unwrap(), (FIRST_ISSUED_ID, 0));
        assert_eq!(ids.init(None).unwrap(), (FIRST_ISSUED_ID + 1, 0));
    }

    #[test]
    fn reinit_bumps_the_epoch() {
        let ids = ProducerIds::new(10, DAY);
        let (id, _) = ids.init(None).unwrap();
        assert_eq!(ids.init(Some(id)).unwrap(), (id, 1));
        assert_eq!(ids.init(Some(id)).unwrap(), (id, 2));
    }

    #[test]
    fn issuing_never_stops_and_memory_stays_bounded() {
        let ids = ProducerIds::new(2, DAY);
        let first = ids.init(None).unwrap().0;
        for _ in 0..100 {
            ids.init(None).unwrap();
        }
        assert_eq!(ids.remembered(), 2);
        // The oldest id was forgotten, so it cannot be bumped; the newest can.
        assert!(matches!(
            ids.init(Some(first)),
            Err(BrokerError::UnknownProducerId(_))
        ));
        let newest = FIRST_ISSUED_ID + 100;
        assert_eq!(ids.init(Some(newest)).unwrap(), (newest, 1));
    }

    #[test]
    fn a_bump_keeps_an_id_remembered_over_newer_ones() {
        let ids = ProducerIds::new(2, DAY);
        let (a, _) = ids.init(None).unwrap();
        let (b, _) = ids.init(None).unwrap();
        ids.init(Some(a)).unwrap(); // a is now the most recently initialised
        ids.init(None).unwrap(); // forgets b, not a
        assert_eq!(ids.init(Some(a)).unwrap(), (a, 2));
        assert!(ids.init(Some(b)).is_err());
    }

    #[test]
    fn ids_expire_after_the_expiration() {
        let ids = ProducerIds::new(10, Duration::from_secs(60));
        let start = Instant::now();
        let (old, _) = ids.init_at(None, start).unwrap();
        let (kept, _) = ids.init_at(None, start + Duration::from_secs(50)).unwrap();
        let later = start + Duration::from_secs(61);
        assert!(matches!(
            ids.init_at(Some(old), later),
            Err(BrokerError::UnknownProducerId(_))
        ));
        assert_eq!(ids.init_at(Some(kept), later).unwrap(), (kept, 1));
        assert_eq!(ids.remembered(), 1);
    }

    #[test]
    fn epoch_cannot_grow_past_the_largest() {
        let ids = ProducerIds::new(1, DAY);
        let (id, _) = ids.init(None).unwrap();
        for epoch in 1..=i16::MAX {
            assert_eq!(ids.init(Some(id)).unwrap(), (id, epoch));
        }
        assert!(matches!(
            ids.init(Some(id)),
            Err(BrokerError::EpochExhausted(_))
        ));
    }

    #[test]
    fn unknown_id_is_refused() {
        let ids = ProducerIds::new(10, DAY);
        assert!(matches!(
            ids.init(Some(5)),
            Err(BrokerError::UnknownProducerId(5))
        ));
    }
}
