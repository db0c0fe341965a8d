//! Concurrency stress: many threads append to shared partitions with retries, some of them racing
//! each other with the same producer id. Every (producer, sequence) must reach each partition's
//! log exactly once, in sequence order per producer.

use minibroker_state::{BatchHeader, Outcome, ProducerStateManager, SequenceRange};
use std::collections::HashMap;
use std::sync::Mutex;

const PARTITIONS: u32 = 8;
const PRODUCERS: i64 = 4;
/// Two threads per producer id race to send every batch.
const THREADS_PER_PRODUCER: usize = 2;
const BATCHES: i32 = 2_000;

#[test]
fn every_sequence_is_stored_exactly_once_and_in_order() {
    let mgr = ProducerStateManager::with_shards(4);
    let logs: Vec<Mutex<Vec<(i64, i32)>>> =
        (0..PARTITIONS).map(|_| Mutex::new(Vec::new())).collect();

    std::thread::scope(|scope| {
        for producer in 0..PRODUCERS {
            for thread in 0..THREADS_PER_PRODUCER {
                let (mgr, logs) = (&mgr, &logs);
                scope.spawn(move || {
                    for seq in 0..BATCHES {
                        for step in 0..PARTITIONS {
                            let partition = (step + thread as u32 * 3) % PARTITIONS;
                            // Send each batch once or twice, and now and then retry an older one.
                            let attempts = 1 + (seq as usize + thread) % 2;
                            for _ in 0..attempts {
                                let outcome = send(mgr, logs, producer, partition, seq);
                                assert!(
                                    matches!(outcome, Outcome::Accepted | Outcome::Duplicate),
                                    "in-order send of {seq} got {outcome}"
                                );
                            }
                            if seq % 7 == 3 {
                                let outcome = send(mgr, logs, producer, partition, seq - 3);
                                assert_eq!(outcome, Outcome::Duplicate);
                            }
                        }
                    }
                });
            }
        }
    });

    for (partition, log) in logs.iter().enumerate() {
        let log = log.lock().unwrap();
        assert_eq!(log.len(), PRODUCERS as usize * BATCHES as usize);
        let mut next: HashMap<i64, i32> = HashMap::new();
        for &(producer, seq) in log.iter() {
            let expected = next.entry(producer).or_insert(0);
            assert_eq!(
                seq, *expected,
                "partition {partition}: producer {producer} stored {seq}, expected {expected}"
            );
            *expected += 1;
        }
    }
}

fn send(
    mgr: &ProducerStateManager,
    logs: &[Mutex<Vec<(i64, i32)>>],
    producer: i64,
    partition: u32,
    seq: i32,
) -> Outcome {
    let header =
        BatchHeader::new(producer, partition, 0, SequenceRange::single(seq).unwrap()).unwrap();
    mgr.append_batch(&header, |_| {
        let mut log = logs[partition as usize].lock().unwrap();
        log.push((producer, seq));
        Ok::<_, std::convert::Infallible>(log.len() as i64 - 1)
    })
    .unwrap()
    .outcome
}
