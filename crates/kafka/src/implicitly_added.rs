//! What a connection remembers of the partitions its Produce v12 requests added to their
//! transaction themselves (see `handlers::implicit_add`): kept in the connection's state, read and
//! written only by that handler.

use std::collections::{HashMap, HashSet};

/// The partitions this connection added implicitly for one producer id and epoch, by topic (a
/// batch's look-up borrows its topic name, allocating nothing).
#[derive(Debug, Default)]
pub(crate) struct ImplicitlyAdded {
    producer: Option<(i64, i16)>,
    partitions: HashMap<String, HashSet<u32>>,
}

impl ImplicitlyAdded {
    pub(crate) fn contains(&self, producer: (i64, i16), topic: &str, partition: u32) -> bool {
        self.producer == Some(producer)
            && self
                .partitions
                .get(topic)
                .is_some_and(|added| added.contains(&partition))
    }

    pub(crate) fn remember(&mut self, producer: (i64, i16), added: Vec<(String, u32)>) {
        if self.producer != Some(producer) {
            self.producer = Some(producer);
            self.partitions.clear();
        }
        for (topic, partition) in added {
            self.partitions.entry(topic).or_default().insert(partition);
        }
    }
}
