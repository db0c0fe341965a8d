//! `check --transactional`'s aimed scenario: a Produce delayed past the end of its transaction,
//! the shape of KAFKA-17754 (found by Jepsen in Bufstream, 2024, and in Kafka's own protocol).
//!
//! One transactional producer, running transactions as clients did before KIP-890 part 2 (one
//! epoch from one transaction to the next), does this through a proxy of its own with no other
//! faults, so the same steps happen on every run:
//! 1. transaction N: one batch to partition 0, acknowledged; then one batch, P, to partition 1,
//!    which the proxy holds; the producer gives up on it when its answer does not come;
//! 2. it aborts N;
//! 3. transaction N+1 adds partition 1, and only then does the proxy let P through;
//! 4. N+1's own batch, Q, goes to partition 1 at the sequence P had (P was never acknowledged),
//!    and N+1 commits.
//!
//! A broker that takes P into N+1 shows P's records, which their producer aborted, as committed
//! (an aborted read), and answers Q as P's duplicate, so Q's records are lost (a lost write).
//! A broker that refuses P refuses Q too (OUT_OF_ORDER_SEQUENCE_NUMBER, as minibroker does): the
//! producer then moves to a new epoch (KIP-360), which fences P for good, and writes Q again.
//! The verifier judges the outcome with the rest of the run: what the producer aborted must
//! never be read as committed, and what it was told is committed must be there.

use anyhow::{Context, Result, bail, ensure};
use kafka_protocol::messages::ApiKey;
use minibroker_client::NewRecord;
use minibroker_faults::{EmbeddedProxy, FaultConfig};
use minibroker_kafka_client::{KafkaProduceError, KafkaProducer, KafkaProducerConfig};
use minibroker_verify::{AckedBatch, PayloadId};
use std::time::Duration;

use crate::acks::PayloadCursor;
use crate::proxy::KafkaProxyArgs;

/// Records in each batch of the scenario.
const RECORDS: u64 = 3;

/// How long the scenario waits for the proxy to deliver the held batch and read its answer.
const RELEASE_WITHIN: Duration = Duration::from_secs(30);

/// Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER.
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;

/// What the scenario did, and what its producer was told.
#[derive(Debug, Default)]
pub struct LateProduce {
    /// Batches of the committed transaction, as acknowledged.
    pub committed: Vec<AckedBatch>,
    /// Batches sent in the aborted transaction (the held one among them).
    pub aborted: Vec<AckedBatch>,
    /// How the broker answered the next transaction's batch, sent after the held one arrived.
    pub next_batch: String,
    /// The epoch the producer moved to, if the broker made it move.
    pub moved_to_epoch: Option<i16>,
}

/// Runs the scenario on `topic` (two partitions at least) of the broker at `kafka`, as the
/// transactional id `transactional_id`, its records named as `writer`'s; `config` is the
/// check's producer settings.
///
/// # Errors
/// If the proxy cannot start or the producer fails outside what the scenario expects.
pub async fn run(
    kafka: &str,
    topic: &str,
    (transactional_id, writer): (&str, u64),
    config: KafkaProducerConfig,
) -> Result<LateProduce> {
    let faults = KafkaProxyArgs::new(Vec::new()).config(FaultConfig::default())?;
    let proxy = EmbeddedProxy::start(kafka, faults).await?;
    let config = KafkaProducerConfig {
        before_part_2: true,
        ..config
    };
    let mut producer =
        KafkaProducer::connect_transactional(&proxy.address(), config, transactional_id)
            .await
            .context("the late-Produce scenario's producer")?;
    let mut payloads = PayloadCursor::new(Some(PayloadId::first(writer, 0)));
    let mut done = LateProduce::default();

    // Transaction N: a batch to partition 0, then P to partition 1, held.
    producer.begin()?;
    let ack = producer.send(topic, 0, &records(&payloads)).await?;
    done.aborted
        .push(crate::acks::kafka_acked(&producer, &ack, &mut payloads));
    let held_before = proxy.proxy.counts().held;
    proxy.proxy.hold_next(ApiKey::Produce as i16);
    let late = records(&payloads);
    let sequence = producer.next_sequence(topic, 1);
    if producer.send_once(topic, 1, &late).await?.is_some() {
        bail!("the proxy did not hold the Produce it was told to hold");
    }
    ensure!(
        proxy.proxy.counts().held > held_before,
        "the Produce was lost without the proxy holding it"
    );
    let identity = (1, producer.producer_id(), producer.epoch(), sequence, None);
    done.aborted.push(payloads.acked(identity, RECORDS as u32));
    producer.abort().await?;

    // Transaction N+1 adds partition 1; only then does P arrive.
    producer.begin()?;
    producer.add_to_transaction(topic, 1).await?;
    let answered = proxy.proxy.counts().responses_received;
    proxy.proxy.release_held();
    tokio::time::timeout(
        RELEASE_WITHIN,
        proxy
            .proxy
            .wait_until(|counts| counts.responses_received > answered),
    )
    .await
    .context("the held Produce was never answered")?;

    // Q, at the sequence P had.
    let next = records(&payloads);
    match producer.send(topic, 1, &next).await {
        Ok(ack) => {
            done.next_batch = match ack.base_offset {
                Some(offset) => format!("acknowledged at offset {offset}"),
                None => "answered as a duplicate".to_owned(),
            };
            done.committed
                .push(crate::acks::kafka_acked(&producer, &ack, &mut payloads));
        }
        Err(KafkaProduceError::Broker { code, .. }) if code == OUT_OF_ORDER_SEQUENCE_NUMBER => {
            done.next_batch = minibroker_kafka_client::error_name(code);
            producer.bump_epoch().await?;
            done.moved_to_epoch = Some(producer.epoch());
            producer.begin()?;
            let ack = producer.send(topic, 1, &next).await?;
            done.committed
                .push(crate::acks::kafka_acked(&producer, &ack, &mut payloads));
        }
        Err(error) => return Err(error).context("the next transaction's batch"),
    }
    producer.commit().await?;
    proxy.stop().await?;
    Ok(done)
}

/// The next batch's records, their values the payload ids from `payloads` on.
fn records(payloads: &PayloadCursor) -> Vec<NewRecord> {
    let first = payloads
        .next_id()
        .expect("the scenario's records carry payload ids");
    (0..RECORDS)
        .map(|i| NewRecord::value(first.after(i).to_string()))
        .collect()
}
