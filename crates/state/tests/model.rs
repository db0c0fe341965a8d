//! Property test: the sharded manager against a tiny reference model that restates the rule as
//! plainly as possible (a list of every accepted batch per producer and partition).

use minibroker_state::{BatchHeader, Outcome, ProducerStateManager, SequenceRange, Verdict};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

/// Every batch accepted from one producer on one partition in its current epoch, in order.
#[derive(Debug, Clone, Default)]
struct ModelEntry {
    epoch: i16,
    /// (first sequence, last sequence, base offset), oldest first.
    accepted: Vec<(i32, i32, i64)>,
}

#[derive(Debug, Default)]
struct Model {
    entries: HashMap<(u32, i64), ModelEntry>,
    next_offset: i64,
}

impl Model {
    /// The mission's four rules, on batches of `count` sequences starting at `first`.
    fn decide(&self, key: (u32, i64), epoch: i16, first: i32, count: i32) -> Verdict {
        let last = first + count - 1;
        let known_producer = self.entries.contains_key(&key);
        let verdict = |outcome, base_offset| Verdict {
            outcome,
            base_offset,
            known_producer,
        };
        let Some(entry) = self.entries.get(&key) else {
            return if first == 0 {
                verdict(Outcome::Accepted, None)
            } else {
                verdict(Outcome::OutOfOrder, None)
            };
        };
        if epoch < entry.epoch {
            return verdict(Outcome::FencedEpoch, None);
        }
        if epoch > entry.epoch {
            return if first == 0 {
                verdict(Outcome::Accepted, None)
            } else {
                verdict(Outcome::OutOfOrder, None)
            };
        }
        let stored_last = entry.accepted.last().map_or(-1, |b| b.1);
        if first == stored_last + 1 {
            return verdict(Outcome::Accepted, None);
        }
        if last <= stored_last {
            let recent = entry.accepted.iter().rev().take(5);
            let original = recent
                .into_iter()
                .find(|b| b.0 == first && b.1 == last)
                .map(|b| b.2);
            return verdict(Outcome::Duplicate, original);
        }
        verdict(Outcome::OutOfOrder, None)
    }

    fn accept(&mut self, key: (u32, i64), epoch: i16, first: i32, count: i32) -> i64 {
        let offset = self.next_offset;
        self.next_offset += 1;
        let entry = self.entries.entry(key).or_default();
        if entry.epoch != epoch {
            *entry = ModelEntry {
                epoch,
                accepted: Vec::new(),
            };
        }
        entry.accepted.push((first, first + count - 1, offset));
        offset
    }

    /// The sequence an op aims at, resolved against what the model has stored.
    fn resolve(&self, key: (u32, i64), aim: Aim) -> i32 {
        let last = self
            .entries
            .get(&key)
            .and_then(|e| e.accepted.last())
            .map_or(-1, |b| b.1);
        match aim {
            Aim::Next => last + 1,
            Aim::Retry(back) => (last - i32::from(back)).max(0),
            Aim::Gap(ahead) => last + 2 + i32::from(ahead),
            Aim::Exact(seq) => i32::from(seq),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Aim {
    Next,
    Retry(u8),
    Gap(u8),
    Exact(u8),
}

#[derive(Debug, Clone, Copy)]
struct Op {
    producer: i64,
    partition: u32,
    epoch: i16,
    aim: Aim,
    count: i32,
    append_fails: bool,
}

fn op() -> impl Strategy<Value = Op> {
    let aim = prop_oneof![
        6 => Just(Aim::Next),
        2 => (0u8..8).prop_map(Aim::Retry),
        1 => (0u8..3).prop_map(Aim::Gap),
        1 => (0u8..10).prop_map(Aim::Exact),
    ];
    (
        0i64..3,
        0u32..4,
        prop_oneof![8 => Just(0i16), 2 => Just(1), 1 => Just(2)],
        aim,
        prop_oneof![4 => Just(1i32), 1 => 2i32..4],
        prop::bool::weighted(0.05),
    )
        .prop_map(
            |(producer, partition, epoch, aim, count, append_fails)| Op {
                producer,
                partition,
                epoch,
                aim,
                count,
                append_fails,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn manager_agrees_with_the_reference_model(
        ops in prop::collection::vec(op(), 1..200),
        shards in 1usize..5,
    ) {
        let mgr = ProducerStateManager::with_shards(shards);
        let mut model = Model::default();
        for op in ops {
            let key = (op.partition, op.producer);
            let first = model.resolve(key, op.aim);
            let expected = model.decide(key, op.epoch, first, op.count);
            let sequences = SequenceRange::spanning(first, op.count as u32).unwrap();
            let header = BatchHeader::new(op.producer, op.partition, op.epoch, sequences).unwrap();
            let before = mgr.snapshot();
            let offset = model.next_offset;
            let result = mgr.append_batch(&header, |_| {
                if op.append_fails { Err("disk full") } else { Ok(offset) }
            });
            match result {
                Err(_) => {
                    prop_assert_eq!(expected.outcome, Outcome::Accepted);
                    prop_assert_eq!(mgr.snapshot(), before, "a failed append changed state");
                }
                Ok(verdict) => {
                    if expected.outcome == Outcome::Accepted {
                        let offset = model.accept(key, op.epoch, first, op.count);
                        prop_assert_eq!(verdict, Verdict { outcome: Outcome::Accepted, base_offset: Some(offset), known_producer: expected.known_producer });
                    } else {
                        prop_assert_eq!(verdict, expected);
                        prop_assert_eq!(mgr.snapshot(), before, "{:?} changed state", verdict.outcome);
                    }
                }
            }
        }
        // Final state: every model entry matches the manager's, and there are no others.
        let actual = mgr.snapshot();
        let expected: BTreeMap<_, _> = model.entries.iter().map(|(k, e)| {
            let recent: Vec<(i32, i32, Option<i64>)> = e.accepted.iter().rev().take(5)
                .map(|b| (b.0, b.1, Some(b.2))).collect();
            (*k, (e.epoch, Some(e.accepted.last().unwrap().1), recent))
        }).collect();
        let actual: BTreeMap<_, _> = actual.iter().map(|(k, e)| {
            let recent: Vec<(i32, i32, Option<i64>)> = e.batches()
                .map(|b| (b.first_sequence, b.last_sequence, b.base_offset)).collect();
            (*k, (e.epoch(), e.last_sequence(), recent))
        }).collect();
        prop_assert_eq!(actual, expected);
    }
}
