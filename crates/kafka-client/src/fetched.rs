//! What a Fetch answer's records are to a consumer: the whole batches in them (a broker may cut
//! the last one short), and which of those a `read_committed` consumer keeps — Kafka's client
//! rule over the aborted transactions the broker names. The verifier and [`crate::KafkaConsumer`]
//! both read Fetch answers, so the rule is written once.

use bytes::{Buf, Bytes};
use minibroker_records::BatchInfo;
use std::collections::HashSet;

/// The whole batches in a Fetch answer's records (a broker may cut the last one short).
#[must_use]
pub fn whole_batches(mut records: Bytes) -> Vec<Bytes> {
    let mut batches = Vec::new();
    while records.len() >= 12 {
        let length = (&records[8..12]).get_i32();
        let Ok(length) = usize::try_from(length) else {
            break;
        };
        if records.len() < 12 + length {
            break;
        }
        batches.push(records.split_to(12 + length));
    }
    batches
}

/// The base offsets of the data batches a `read_committed` client keeps of `batches` — each
/// (base offset, header, for a marker whether it commits), in offset order — given the
/// `aborted` transactions the broker named, (producer id, first offset): a transactional batch
/// of a producer from its aborted transaction's first offset up to that producer's ABORT marker
/// is dropped, as are the markers themselves.
#[must_use]
pub fn kept_by_read_committed<'a>(
    batches: impl IntoIterator<Item = (i64, &'a BatchInfo, Option<bool>)>,
    aborted: &[(i64, i64)],
) -> HashSet<i64> {
    let mut aborted = aborted.to_vec();
    aborted.sort_unstable_by_key(|&(_, first)| first);
    let mut aborted = aborted.into_iter().peekable();
    let mut dropping: HashSet<i64> = HashSet::new();
    let mut kept = HashSet::new();
    for (base_offset, info, commit) in batches {
        while let Some(&(producer, first)) = aborted.peek()
            && first <= base_offset
        {
            dropping.insert(producer);
            aborted.next();
        }
        let producer = info.producer_id;
        match commit {
            Some(false) => {
                dropping.remove(&producer);
            }
            Some(true) => {}
            None if info.transactional && dropping.contains(&producer) => {}
            None => {
                kept.insert(base_offset);
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn a_batch_cut_short_at_the_end_is_left_out() {
        let writer = minibroker_records::Writer {
            producer_id: 1,
            epoch: 0,
            base_sequence: 0,
        };
        let one = minibroker_records::encode(writer, &["a".into()], 0).expect("encodes");
        let mut records = BytesMut::new();
        records.extend_from_slice(&one);
        records.extend_from_slice(&one);
        records.extend_from_slice(&one[..20]);
        assert_eq!(whole_batches(records.freeze()).len(), 2);
    }
}
