//! The `always` flush policy over real TCP, on a storage that forgets unsynced bytes: a
//! connection's pipelined produces share fsyncs, and still no answer leaves before the fsync
//! that covers its batch. While producers pipeline, the test takes "power loss" images of the
//! storage; every batch answered before an image was taken is in it after recovery.

use minibroker_broker::{Broker, BrokerConfig, FlushPolicy};
use minibroker_client::{Client, ClientConfig};
use minibroker_protocol::message::Outcome;
use minibroker_records::{NewRecord, Writer};
use minibroker_storage::sim::SimStorage;
use minibroker_tests::stored_batches;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TOPIC: &str = "power";
const PRODUCERS: i64 = 2;
const BATCHES: i32 = 600;
const PIPELINE: i32 = 16;

fn config() -> BrokerConfig {
    BrokerConfig {
        data_dir: Some("/data".into()),
        flush: FlushPolicy::Always,
        // Small segments, so the run crosses rolls.
        segment_bytes: 64 << 10,
        ..BrokerConfig::default().with_default_partitions(PRODUCERS as u32)
    }
}

fn batch(producer_id: i64, sequence: i32) -> Vec<u8> {
    let writer = Writer {
        producer_id,
        epoch: 0,
        base_sequence: sequence,
    };
    let value = format!("{producer_id}:{sequence}");
    minibroker_records::encode(writer, &[NewRecord::value(value)], 0)
        .expect("encode")
        .to_vec()
}

/// Every (producer id, base sequence) stored in `broker`'s partitions.
fn stored(broker: &Broker) -> HashSet<(i64, i32)> {
    (0..PRODUCERS as u32)
        .flat_map(|partition| stored_batches(broker, TOPIC, partition))
        .map(|(_, info)| (info.producer_id, info.base_sequence))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_flush_always_pipelined_produces_share_fsyncs_and_survive_a_power_loss() {
    let storage = SimStorage::new();
    // A slow disk, so that produces pile up behind each fsync.
    storage.faults.sync_micros.store(300, Ordering::Relaxed);
    let broker = Broker::with_storage(&config(), Arc::new(storage.clone())).expect("opens");
    let host = minibroker_host::Host::with_broker(broker, &Default::default()).expect("a host");
    let embedded = minibroker_native::EmbeddedBroker::around(host)
        .await
        .expect("serves");
    let addr = embedded.address();

    let answered: Arc<Mutex<Vec<(i64, i32)>>> = Arc::default();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer_id| {
            let (addr, answered) = (addr.clone(), Arc::clone(&answered));
            tokio::spawn(async move {
                let client = Client::connect(&addr, ClientConfig::default())
                    .await
                    .expect("connects");
                let partition = producer_id as u32;
                for start in (0..BATCHES).step_by(PIPELINE as usize) {
                    let batches: Vec<_> = (start..start + PIPELINE)
                        .map(|sequence| batch(producer_id, sequence))
                        .collect();
                    let answers = futures::future::join_all(
                        batches
                            .iter()
                            .map(|bytes| client.produce(TOPIC, partition, bytes)),
                    )
                    .await;
                    for (sequence, answer) in (start..).zip(answers) {
                        let answer = answer.expect("an answer");
                        assert_eq!(answer.outcome, Outcome::Accepted);
                        answered.lock().unwrap().push((producer_id, sequence));
                    }
                }
            })
        })
        .collect();

    // Power losses while the producers run: what was answered first, then the disk's image.
    let mut images = Vec::new();
    for seed in 0..8 {
        tokio::time::sleep(Duration::from_millis(15)).await;
        let before = answered.lock().unwrap().clone();
        images.push((before, storage.crash(seed)));
    }
    for producer in producers {
        producer.await.expect("the producer finished");
    }
    embedded.stop().await.expect("the server stops");

    let total = (PRODUCERS * i64::from(BATCHES)) as u64;
    let syncs = storage.faults.syncs.load(Ordering::Relaxed);
    assert!(
        syncs < total / 4,
        "{syncs} fsyncs for {total} pipelined produces: they were not shared"
    );
    assert!(
        images.iter().any(|(answered, _)| !answered.is_empty()),
        "no image was taken while produces were answered"
    );
    for (seed, (answered, image)) in images.into_iter().enumerate() {
        let recovered = Broker::with_storage(&config(), Arc::new(image)).expect("recovers");
        let stored = stored(&recovered);
        for batch in &answered {
            assert!(
                stored.contains(batch),
                "image {seed}: batch {batch:?} was answered before the power loss and is gone"
            );
        }
    }
}
