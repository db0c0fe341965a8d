//! Simulated retries and faults through the proxy: lost acks, lost requests, resets, stale
//! retries, zombies, gaps, and a seeded soak — each checked against what the broker stored.

use anyhow::Result;
use minibroker_broker::{Broker, BrokerConfig};
use minibroker_client::{
    Ack, Client, ClientConfig, NewRecord, Producer, ProducerConfig, ProducerError,
};
use minibroker_faults::{Fault, FaultConfig};
use minibroker_host::Config;
use minibroker_protocol::Outcome;
use minibroker_tests::{TestBroker, TestProxy, start_broker, stored_batches};
use minibroker_verify::AckedBatch;
use std::time::Duration;

fn producer_config(timeout: Duration) -> ProducerConfig {
    ProducerConfig {
        client: ClientConfig {
            request_timeout: timeout,
            ..ClientConfig::default()
        },
        retry_backoff: Duration::from_millis(5),
        ..ProducerConfig::default()
    }
}

fn batch(label: &str) -> Vec<NewRecord> {
    vec![NewRecord::value(label.to_owned())]
}

/// (epoch, base sequence) of every stored batch of partition 0 of `topic`, in log order.
fn stored(broker: &Broker, topic: &str) -> Vec<(i16, i32)> {
    stored_batches(broker, topic, 0)
        .into_iter()
        .map(|(_, info)| (info.epoch, info.base_sequence))
        .collect()
}

/// A broker, a proxy injecting `faults` in front of it, and a producer connected through the
/// proxy that resends after `timeout`.
async fn through_faults(
    faults: FaultConfig,
    timeout: Duration,
) -> Result<(TestBroker, TestProxy, Producer)> {
    let broker = start_broker().await?;
    let proxy = TestProxy::start(broker.addr, faults).await?;
    let producer = Producer::connect(&proxy.address(), producer_config(timeout)).await?;
    Ok((broker, proxy, producer))
}

#[tokio::test]
async fn lost_ack_is_resent_and_answered_as_a_duplicate_with_the_original_offset() -> Result<()> {
    // Response 1 answers init-producer; response 2 is the first batch's ack.
    let faults = FaultConfig {
        drop_response: Fault::at(&[2]),
        ..FaultConfig::default()
    };
    let (broker, proxy, mut producer) = through_faults(faults, Duration::from_millis(300)).await?;
    let ack = producer.send("t", 0, batch("once")).await?;
    assert_eq!(
        ack,
        Ack {
            sequence: 0,
            records: 1,
            base_offset: Some(0),
            duplicate: true
        }
    );
    assert_eq!(stored(&broker.broker, "t"), vec![(0, 0)]);
    let outcomes = broker.broker.outcome_counts();
    assert_eq!((outcomes.accepted, outcomes.duplicate), (1, 1));
    assert_eq!(producer.stats().retries, 1);
    assert_eq!(proxy.proxy.counts().responses_dropped, 1);
    Ok(())
}

#[tokio::test]
async fn a_request_passed_on_twice_is_stored_once_and_answered_once() -> Result<()> {
    // Request 2, the first batch, reaches the broker twice in a row on its connection: the
    // second copy is judged a DUPLICATE, and its answer never reaches the producer, which gets
    // exactly one answer and sends nothing again.
    let faults = FaultConfig {
        duplicate_request: Fault::at(&[2]),
        ..FaultConfig::default()
    };
    let (broker, proxy, mut producer) = through_faults(faults, Duration::from_millis(300)).await?;
    let first = producer.send("t", 0, batch("twice")).await?;
    let second = producer.send("t", 0, batch("after")).await?;
    assert_eq!((first.base_offset, first.duplicate), (Some(0), false));
    assert_eq!((second.base_offset, second.duplicate), (Some(1), false));
    assert_eq!(stored(&broker.broker, "t"), vec![(0, 0), (0, 1)]);
    let outcomes = broker.broker.outcome_counts();
    assert_eq!((outcomes.accepted, outcomes.duplicate), (2, 1));
    assert_eq!(producer.stats().retries, 0);
    let counts = proxy.proxy.counts();
    assert_eq!(counts.duplicated, 1);
    assert_eq!(counts.responses_received, counts.responses_forwarded + 1);
    Ok(())
}

#[tokio::test]
async fn lost_request_is_resent_and_accepted_once() -> Result<()> {
    // The first of five pipelined batches (request 2) never reaches the broker, so the four
    // behind it arrive after a gap and are refused; after the timeout all five are resent.
    let faults = FaultConfig {
        drop_request: Fault::at(&[2]),
        ..FaultConfig::default()
    };
    let (broker, proxy, mut producer) = through_faults(faults, Duration::from_millis(300)).await?;
    let batches = (0..5).map(|i| batch(&format!("b{i}"))).collect();
    let acks = producer.send_batches("t", 0, batches).await?;
    let expected: Vec<Ack> = (0..5)
        .map(|i| Ack {
            sequence: i,
            records: 1,
            base_offset: Some(i64::from(i)),
            duplicate: false,
        })
        .collect();
    assert_eq!(acks, expected);
    assert_eq!(
        stored(&broker.broker, "t"),
        (0..5).map(|s| (0, s)).collect::<Vec<_>>()
    );
    let outcomes = broker.broker.outcome_counts();
    assert_eq!((outcomes.accepted, outcomes.out_of_order), (5, 4));
    assert_eq!(proxy.proxy.counts().requests_dropped, 1);
    Ok(())
}

#[tokio::test]
async fn reset_with_five_batches_in_flight_resends_all_five_and_stores_each_once() -> Result<()> {
    // Every response is held up 300 ms, so when the connection is reset right after the fifth
    // batch (request 6) has been written to the broker, none of the five has been acknowledged
    // (the five are pipelined in well under 300 ms, and a reset drops the delayed answers).
    let faults = FaultConfig {
        reset: Fault::at(&[6]),
        delay_response: Fault::rate(1.0),
        delay: Duration::from_millis(300),
        ..FaultConfig::default()
    };
    let (broker, proxy, mut producer) = through_faults(faults, Duration::from_secs(5)).await?;
    let batches = (0..5).map(|i| batch(&format!("b{i}"))).collect();
    let acks = producer.send_batches("t", 0, batches).await?;
    let offsets: Vec<Option<i64>> = acks.iter().map(|a| a.base_offset).collect();
    assert_eq!(offsets, (0..5).map(Some).collect::<Vec<_>>());
    assert_eq!(
        stored(&broker.broker, "t"),
        (0..5).map(|s| (0, s)).collect::<Vec<_>>()
    );
    assert_eq!(producer.stats().retries, 5);
    assert_eq!(producer.stats().reconnects, 1);
    let outcomes = broker.broker.outcome_counts();
    assert_eq!(outcomes.accepted, 5);
    assert_eq!(outcomes.accepted + outcomes.duplicate, 10);
    assert_eq!(proxy.proxy.counts().resets, 1);
    Ok(())
}

#[tokio::test]
async fn stale_retry_released_after_newer_batches_is_a_duplicate_and_changes_nothing() -> Result<()>
{
    // The first batch (request 2) is held until the test releases it; the producer gives up on
    // it after 300 ms, resends it on a new connection and moves on, and only then does the stale
    // copy arrive.
    let faults = FaultConfig {
        hold_request: Fault::at(&[2]),
        hold: Duration::from_secs(3600),
        ..FaultConfig::default()
    };
    let (broker, proxy, mut producer) = through_faults(faults, Duration::from_millis(300)).await?;
    producer.send("t", 0, batch("s0")).await?;
    producer.send("t", 0, batch("s1")).await?;
    producer.send("t", 0, batch("s2")).await?;
    let before = broker.broker.producers("t", 0)?;
    assert_eq!(broker.broker.outcome_counts().duplicate, 0);
    // Answers so far: init-producer, the resent s0, s1 and s2. The fifth is the stale copy's.
    assert_eq!(proxy.proxy.counts().responses_received, 4);
    proxy.proxy.release_held();
    proxy.wait_until(|c| c.responses_received == 5).await?;
    assert_eq!(broker.broker.outcome_counts().duplicate, 1);
    assert_eq!(broker.broker.producers("t", 0)?, before);
    assert_eq!(stored(&broker.broker, "t"), vec![(0, 0), (0, 1), (0, 2)]);
    assert_eq!(proxy.proxy.counts().held, 1);
    Ok(())
}

#[tokio::test]
async fn zombie_producer_is_fenced_and_nothing_of_it_lands_after_the_new_instance() -> Result<()> {
    let broker = start_broker().await?;
    // Instance A's second batch (request 3) stalls in the network until the test releases it.
    let faults = FaultConfig {
        hold_request: Fault::at(&[3]),
        hold: Duration::from_secs(3600),
        ..FaultConfig::default()
    };
    let proxy = TestProxy::start(broker.addr, faults).await?;
    let mut a =
        Producer::connect(&proxy.address(), producer_config(Duration::from_secs(5))).await?;
    a.send("t", 0, batch("a0")).await?;
    let stalled = tokio::spawn(async move {
        let result = a.send("t", 0, batch("a1")).await;
        (result, a)
    });
    // Instance B takes over the same producer id while A's batch is stuck.
    proxy.wait_until(|c| c.held == 1).await?;
    let id = broker.broker.producers("t", 0)?[0].producer_id;
    let mut b = Producer::resume(&broker.address(), id, ProducerConfig::default()).await?;
    assert_eq!(b.epoch(), 1);
    b.send("t", 0, batch("b0")).await?;
    b.send("t", 0, batch("b1")).await?;
    proxy.proxy.release_held();
    let (result, mut a) = stalled.await?;
    assert!(
        matches!(result, Err(ProducerError::Fenced { epoch: 0, .. })),
        "{result:?}"
    );
    assert!(
        a.send("t", 0, batch("a2")).await.is_err(),
        "a fenced producer stays stopped"
    );
    assert_eq!(stored(&broker.broker, "t"), vec![(0, 0), (1, 0), (1, 1)]);
    assert_eq!(broker.broker.outcome_counts().fenced_epoch, 1);
    Ok(())
}

#[tokio::test]
async fn gap_is_out_of_order_leaves_state_untouched_and_the_right_sequence_follows() -> Result<()> {
    let broker = start_broker().await?;
    let proxy = TestProxy::start(broker.addr, FaultConfig::default()).await?;
    let client = Client::connect(&proxy.address(), ClientConfig::default()).await?;
    let send = |sequence| {
        let batch = minibroker_tests::batch(5, 0, sequence, &[b"r"]);
        let client = &client;
        async move { client.produce("t", 0, &batch).await }
    };
    assert_eq!(send(0).await?.outcome, Outcome::Accepted);
    let before = broker.broker.producers("t", 0)?;
    let gap = send(2).await?;
    assert_eq!((gap.outcome, gap.base_offset), (Outcome::OutOfOrder, None));
    assert_eq!(broker.broker.producers("t", 0)?, before);
    let next = send(1).await?;
    assert_eq!(
        (next.outcome, next.base_offset),
        (Outcome::Accepted, Some(1))
    );
    assert_eq!(stored(&broker.broker, "t"), vec![(0, 0), (0, 1)]);
    Ok(())
}

const SOAK_PRODUCERS: usize = 16;
const SOAK_PARTITIONS: u32 = 4;
const SOAK_ROUNDS: usize = 16;
const SOAK_WINDOW: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_with_every_fault_at_a_fixed_seed_stays_exactly_once() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            default_partitions: SOAK_PARTITIONS,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let faults = FaultConfig {
        drop_request: Fault::rate(0.02),
        drop_response: Fault::rate(0.02),
        delay_request: Fault::rate(0.01),
        delay_response: Fault::rate(0.01),
        reset: Fault::rate(0.005),
        hold_request: Fault::rate(0.01),
        delay: Duration::from_millis(20),
        hold: Duration::from_millis(400),
        seed: 7,
        ..FaultConfig::default()
    };
    let proxy = TestProxy::start(broker.addr, faults).await?;
    let mut producers = tokio::task::JoinSet::new();
    for p in 0..SOAK_PRODUCERS {
        let address = proxy.address();
        producers.spawn(async move {
            let mut producer =
                Producer::connect(&address, producer_config(Duration::from_millis(250))).await?;
            let mut acked = Vec::new();
            for round in 0..SOAK_ROUNDS {
                for partition in 0..SOAK_PARTITIONS {
                    let batches = (0..SOAK_WINDOW)
                        .map(|i| {
                            vec![
                                NewRecord::value(format!("p{p}-r{round}-{i}-a")),
                                NewRecord::value("b"),
                            ]
                        })
                        .collect();
                    for ack in producer.send_batches("soak", partition, batches).await? {
                        acked.push(AckedBatch {
                            partition,
                            producer_id: producer.producer_id(),
                            epoch: producer.epoch(),
                            sequence: ack.sequence,
                            offset: ack.base_offset,
                            records: ack.records as usize,
                            first_payload: None,
                        });
                    }
                }
            }
            anyhow::Ok((acked, producer.stats()))
        });
    }
    let mut acked = Vec::new();
    let mut retries = 0;
    while let Some(result) = producers.join_next().await {
        let (mut batches, stats) = result??;
        acked.append(&mut batches);
        retries += stats.retries;
    }
    let expected_batches = SOAK_PRODUCERS * SOAK_PARTITIONS as usize * SOAK_ROUNDS * SOAK_WINDOW;
    assert_eq!(acked.len(), expected_batches);

    // Read back directly from the broker, not through the faulty network.
    let client = Client::connect(&broker.address(), ClientConfig::default()).await?;
    let report = minibroker_verify::verify(&client, "soak", Some(&acked)).await?;
    assert!(report.passed(), "{report}");
    assert_eq!(report.batches, expected_batches);
    assert_eq!(report.records, expected_batches * 2);

    // The faults really happened, and the broker really had to deduplicate.
    let counts = proxy.proxy.counts();
    assert!(
        counts.requests_dropped > 0 && counts.responses_dropped > 0,
        "{counts}"
    );
    assert!(
        counts.resets > 0 && counts.held > 0 && counts.delayed > 0,
        "{counts}"
    );
    assert!(retries > 0);
    assert!(broker.broker.outcome_counts().duplicate > 0);
    Ok(())
}
