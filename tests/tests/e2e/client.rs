//! Client-API tests: the async client and the idempotent producer against a real broker.

use anyhow::Result;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use minibroker_broker::BrokerConfig;
use minibroker_client::{
    Client, ClientConfig, ClientError, NewRecord, PartitionReader, Producer, ProducerConfig,
    ProducerError,
};
use minibroker_host::Config;
use minibroker_protocol::{
    ErrorCode, FrameCodec, InitProducerResponse, Outcome, ProduceResponse, Request, Response, codec,
};
use minibroker_tests::{TestBroker, start_broker};
use std::time::Duration;
use tokio_util::codec::Framed;

fn records(prefix: &str, n: usize) -> Vec<NewRecord> {
    (0..n)
        .map(|i| NewRecord::value(format!("{prefix}-{i}")))
        .collect()
}

#[tokio::test]
async fn producer_batches_are_stored_once_in_order() -> Result<()> {
    let broker = start_broker().await?;
    let mut producer = Producer::connect(&broker.address(), ProducerConfig::default()).await?;
    let batches: Vec<Vec<NewRecord>> = (0..20).map(|b| records(&format!("b{b}"), 3)).collect();
    let acks = producer.send_batches("orders", 0, batches).await?;
    let offsets: Vec<Option<i64>> = acks.iter().map(|a| a.base_offset).collect();
    let expected: Vec<Option<i64>> = (0..20).map(|b| Some(b * 3)).collect();
    assert_eq!(offsets, expected);
    assert!(acks.iter().all(|a| !a.duplicate && a.records == 3));
    // Every record takes a sequence: batch b starts at 3b.
    let sequences: Vec<i32> = acks.iter().map(|a| a.sequence).collect();
    assert_eq!(sequences, (0..20).map(|b| b * 3).collect::<Vec<_>>());
    assert_eq!(producer.next_sequence("orders", 0), 60);

    let client = Client::connect(&broker.address(), ClientConfig::default()).await?;
    assert_eq!(
        client.fetch("orders", 0, 0, 1 << 20).await?.high_watermark,
        60
    );
    let mut reader = PartitionReader::new(&client, "orders", 0, 4);
    let mut values = Vec::new();
    while let Some(batch) = reader.next_batch().await? {
        assert_eq!(batch.info.producer_id, producer.producer_id());
        values.extend(
            batch
                .records
                .into_iter()
                .map(|r| (r.offset, r.sequence, r.value)),
        );
    }
    // Read from offset 4: the batch holding it is cut to the records from there.
    assert_eq!(values.len(), 56);
    assert_eq!(values[0], (4, 4, Some(Bytes::from("b1-1"))));
    Ok(())
}

#[tokio::test]
async fn sequences_are_numbered_per_partition() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            default_partitions: 2,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut producer = Producer::connect(&broker.address(), ProducerConfig::default()).await?;
    producer.send("t", 0, records("a", 1)).await?;
    producer.send("t", 0, records("a", 1)).await?;
    let ack = producer.send("t", 1, records("b", 1)).await?;
    assert_eq!(ack.sequence, 0);
    assert_eq!(producer.next_sequence("t", 0), 2);
    producer.send("t", 0, records("c", 4)).await?;
    assert_eq!(producer.next_sequence("t", 0), 6);
    Ok(())
}

#[tokio::test]
async fn a_resumed_instance_fences_the_old_one() -> Result<()> {
    let broker = start_broker().await?;
    let mut old = Producer::connect(&broker.address(), ProducerConfig::default()).await?;
    old.send("t", 0, records("old", 1)).await?;
    let mut new = Producer::resume(
        &broker.address(),
        old.producer_id(),
        ProducerConfig::default(),
    )
    .await?;
    assert_eq!(new.epoch(), old.epoch() + 1);
    new.send("t", 0, records("new", 1)).await?;
    let error = old.send("t", 0, records("zombie", 1)).await.unwrap_err();
    assert!(matches!(error, ProducerError::Fenced { .. }), "{error}");
    // The fenced producer stays stopped.
    let again = old.send("t", 0, records("zombie", 1)).await.unwrap_err();
    assert!(matches!(again, ProducerError::Stopped(_)), "{again}");
    let client = Client::connect(&broker.address(), ClientConfig::default()).await?;
    assert_eq!(client.fetch("t", 0, 0, 1 << 20).await?.high_watermark, 2);
    Ok(())
}

#[tokio::test]
async fn out_of_order_is_surfaced_not_hidden() -> Result<()> {
    // A broker whose state disagrees with the producer: it answers every batch OUT_OF_ORDER.
    let addr = fake_broker(|request| match request {
        Request::InitProducer(_) => Response::InitProducer(InitProducerResponse {
            producer_id: 1,
            epoch: 0,
        }),
        _ => Response::Produce(ProduceResponse {
            outcome: Outcome::OutOfOrder,
            base_offset: None,
        }),
    })
    .await?;
    let mut producer = Producer::connect(&addr, ProducerConfig::default()).await?;
    let error = producer.send("t", 0, records("a", 1)).await.unwrap_err();
    assert!(
        matches!(error, ProducerError::OutOfOrder { sequence: 0, .. }),
        "{error}"
    );
    assert_eq!(producer.stats().batches, 0);
    Ok(())
}

/// A stand-in broker on loopback that answers each request with `answer(request)`.
async fn fake_broker(answer: fn(&Request<'_>) -> Response) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut framed = Framed::new(stream, FrameCodec::default());
                while let Some(Ok(body)) = framed.next().await {
                    let Ok((id, request)) = codec::decode_request(&body) else {
                        return;
                    };
                    let response = answer(&request);
                    if framed.send((id, &response)).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

#[tokio::test]
async fn broker_errors_reach_the_caller_with_their_code() -> Result<()> {
    let broker = start_broker().await?;
    let client = Client::connect(&broker.address(), ClientConfig::default()).await?;
    match client.describe_producers("missing", 0).await {
        Err(ClientError::Broker(error)) => assert_eq!(error.code, ErrorCode::UnknownTopic),
        other => panic!("expected UnknownTopic, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn describe_producers_and_metadata() -> Result<()> {
    let broker = start_broker().await?;
    let mut producer = Producer::connect(&broker.address(), ProducerConfig::default()).await?;
    producer
        .send_batches("t", 0, vec![records("a", 2), records("b", 1)])
        .await?;
    let client = Client::connect(&broker.address(), ClientConfig::default()).await?;
    let described = client.describe_producers("t", 0).await?;
    assert_eq!(described.len(), 1);
    let state = described[0];
    assert_eq!(
        (
            state.producer_id,
            state.epoch,
            state.last_sequence,
            state.last_base_offset,
            state.cached_batches
        ),
        // Sequences count records: "a" took 0 and 1, "b" took 2.
        (producer.producer_id(), 0, 2, Some(2), 2)
    );
    let metadata = client.metadata().await?;
    assert_eq!(metadata.topics.len(), 1);
    assert_eq!(
        (
            metadata.topics[0].name.as_str(),
            metadata.topics[0].partitions
        ),
        ("t", 1)
    );
    Ok(())
}

#[tokio::test]
async fn a_silent_server_times_out() -> Result<()> {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let config = ClientConfig {
        request_timeout: Duration::from_millis(200),
        ..ClientConfig::default()
    };
    let client = Client::connect(&addr, config).await?;
    assert!(matches!(
        client.metadata().await,
        Err(ClientError::Timeout(_))
    ));
    Ok(())
}

#[tokio::test]
async fn a_dropped_connection_fails_waiting_requests() -> Result<()> {
    // Accepts one connection, reads a little, then closes it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    tokio::spawn(async move {
        if let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 4];
            let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await;
        }
    });
    let client = Client::connect(&addr, ClientConfig::default()).await?;
    assert!(matches!(
        client.metadata().await,
        Err(ClientError::ConnectionClosed(_))
    ));
    Ok(())
}

#[tokio::test]
async fn producer_gives_up_when_the_broker_is_gone() -> Result<()> {
    let broker = start_broker().await?;
    let address = broker.address();
    let config = ProducerConfig {
        delivery_timeout: Duration::from_millis(500),
        retry_backoff: Duration::from_millis(1),
        client: ClientConfig {
            request_timeout: Duration::from_millis(200),
            connect_timeout: Duration::from_millis(200),
            ..ClientConfig::default()
        },
        ..ProducerConfig::default()
    };
    let mut producer = Producer::connect(&address, config).await?;
    broker.stop().await?;
    let error = producer.send("t", 0, records("a", 1)).await.unwrap_err();
    assert!(
        matches!(error, ProducerError::RetriesExhausted { .. }),
        "{error}"
    );
    Ok(())
}
