//! [`AnswerRoom`]: the bytes one answer may still take, counted while it is built.
//!
//! A request names what it wants (topics, groups, partitions), and the answer for each name can
//! be far larger than the name: a topic's every partition, a group's every member with its
//! metadata. A broker that builds the whole answer first and measures it afterwards lets a
//! 1 KB request make it allocate gigabytes. So an answer is built entry by entry, each entry's
//! encoded size (`kafka-protocol`'s own `compute_size`) taken from the room of one frame
//! (`max_frame_bytes`) as it is added; the first entry that does not fit stops the building,
//! and the request is refused by closing the connection (Kafka has no error code for "your
//! answer is too large", and clients treat a closed connection as a retriable failure).
//! Repeated names are answered once (Kafka keeps a request's names in a set), so only
//! distinct, existing things can fill the room.

use kafka_protocol::protocol::Encodable;
use std::collections::HashSet;
use std::hash::Hash;

/// An answer that would not fit in one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AnswerTooLarge;

/// Room left in the answer being built.
#[derive(Debug)]
pub(crate) struct AnswerRoom {
    left: usize,
    version: i16,
}

impl AnswerRoom {
    /// Room for an answer of at most `max_bytes` encoded at `version`.
    pub(crate) fn new(max_bytes: usize, version: i16) -> Self {
        Self {
            left: max_bytes,
            version,
        }
    }

    /// Takes `entry`'s encoded size from the room.
    ///
    /// # Errors
    /// [`AnswerTooLarge`] when it does not fit (or does not encode at this version).
    pub(crate) fn take<T: Encodable>(&mut self, entry: &T) -> Result<(), AnswerTooLarge> {
        let size = entry
            .compute_size(self.version)
            .map_err(|_| AnswerTooLarge)?;
        self.left = self.left.checked_sub(size).ok_or(AnswerTooLarge)?;
        Ok(())
    }

    /// Takes `entry`'s encoded size from the room and hands the entry back.
    ///
    /// # Errors
    /// [`AnswerTooLarge`] when it does not fit.
    pub(crate) fn keep<T: Encodable>(&mut self, entry: T) -> Result<T, AnswerTooLarge> {
        self.take(&entry).map(|()| entry)
    }

    /// Takes every entry `build` makes from `names`, each distinct name once, in the order of
    /// its first appearance.
    ///
    /// # Errors
    /// [`AnswerTooLarge`] at the first entry that does not fit.
    pub(crate) fn fill<N, T>(
        &mut self,
        names: impl IntoIterator<Item = N>,
        mut build: impl FnMut(N) -> T,
    ) -> Result<Vec<T>, AnswerTooLarge>
    where
        N: Hash + Eq + Clone,
        T: Encodable,
    {
        let mut seen = HashSet::new();
        let mut entries = Vec::new();
        for name in names {
            if !seen.insert(name.clone()) {
                continue;
            }
            entries.push(self.keep(build(name))?);
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;

    fn entry() -> MetadataRequestTopic {
        MetadataRequestTopic::default()
    }

    #[test]
    fn repeated_names_are_answered_once_in_first_order() {
        let mut order = Vec::new();
        AnswerRoom::new(1 << 20, 9)
            .fill(["b", "a", "b", "a", "c"], |name| {
                order.push(name);
                entry()
            })
            .unwrap();
        assert_eq!(order, ["b", "a", "c"]);
    }

    #[test]
    fn the_first_entry_past_the_room_stops_the_answer() {
        let one = entry().compute_size(9).unwrap();
        let mut room = AnswerRoom::new(one * 3, 9);
        assert_eq!(room.fill(0..3, |_| entry()).map(|e| e.len()), Ok(3));
        assert_eq!(room.take(&entry()), Err(AnswerTooLarge));
        assert!(AnswerRoom::new(one * 3, 9).fill(0..4, |_| entry()).is_err());
    }
}
