//! The one stored format, checked from outside: batches the native producer built, read back over
//! the wire, decode with the `kafka-protocol` crate's own decoder (not this project's wrapper) and
//! carry exactly the producer id, epoch and sequences the exactly-once rule recorded.

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use minibroker_client::{Client, ClientConfig, NewRecord, Producer, ProducerConfig};
use minibroker_tests::start_broker;

#[tokio::test]
async fn native_batches_decode_with_kafka_protocol_and_match_the_rule() -> Result<()> {
    let broker = start_broker().await?;
    let mut producer = Producer::connect(&broker.address(), ProducerConfig::default()).await?;
    let batches: Vec<Vec<NewRecord>> = (0..4)
        .map(|b| {
            (0..=b)
                .map(|i| {
                    NewRecord::value(format!("b{b}-r{i}"))
                        .with_key(format!("k{i}"))
                        .with_header("batch", format!("{b}"))
                })
                .collect()
        })
        .collect();
    producer.send_batches("fmt", 0, batches).await?;

    let client = Client::connect(&broker.address(), ClientConfig::default()).await?;
    let fetched = client.fetch("fmt", 0, 0, 1 << 20).await?;
    let mut bytes: Bytes = fetched.batches.concat().into();
    let sets = RecordBatchDecoder::decode_all(&mut bytes)?;
    assert_eq!(sets.len(), 4);
    let mut expected_sequence = 0;
    for (b, set) in sets.iter().enumerate() {
        assert_eq!(set.records.len(), b + 1);
        for (i, record) in set.records.iter().enumerate() {
            assert_eq!(record.producer_id, producer.producer_id());
            assert_eq!(record.producer_epoch, producer.epoch());
            assert_eq!(record.sequence, expected_sequence);
            assert_eq!(record.offset, i64::from(expected_sequence));
            assert_eq!(record.key.as_deref(), Some(format!("k{i}").as_bytes()));
            assert_eq!(
                record.value.as_deref(),
                Some(format!("b{b}-r{i}").as_bytes())
            );
            let headers: Vec<(&str, Option<&[u8]>)> = record
                .headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_deref()))
                .collect();
            assert_eq!(headers, vec![("batch", Some(format!("{b}").as_bytes()))]);
            expected_sequence += 1;
        }
    }
    // The rule saw the same producer and recorded the last sequence the log holds.
    let state = broker.broker.producers("fmt", 0)?;
    assert_eq!(state.len(), 1);
    assert_eq!(state[0].producer_id, producer.producer_id());
    assert_eq!(state[0].entry.epoch(), producer.epoch());
    assert_eq!(state[0].entry.last_sequence(), Some(expected_sequence - 1));
    Ok(())
}
