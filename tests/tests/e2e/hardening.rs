//! What one hostile client could do to everyone else, each at the scale that showed it (with small
//! limits where that shows it faster). After each attack the broker still serves a normal client.

use anyhow::{Result, bail};
use minibroker_broker::{BrokerConfig, Unacknowledged};
use minibroker_host::{Config, NetConfig};
use minibroker_protocol::{
    DescribeProducersRequest, ErrorCode, FetchRequest, InitProducerRequest, Outcome, Request,
    Response, codec,
};
use minibroker_tests::{
    AsRequest, OwnedProduce, RawConnection, TestBroker, batch_of_len, produce, start_broker,
};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

/// Fails unless a fresh client gets a metadata answer (retrying while connection slots free up).
async fn still_serves(addr: SocketAddr) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut conn = RawConnection::connect(addr).await?;
        if let Ok(Response::Metadata(_)) = conn.call(u32::MAX, &Request::Metadata).await {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the broker stopped serving new clients");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn error_of(response: &Response) -> Option<(ErrorCode, &str)> {
    match response {
        Response::Error(error) => Some((error.code, error.message.as_str())),
        _ => None,
    }
}

/// Sends every request pipelined, then reads every answer in order.
async fn pipeline(conn: &mut RawConnection, requests: &[impl AsRequest]) -> Result<Vec<Response>> {
    for (id, request) in requests.iter().enumerate() {
        conn.send(id as u32 + 1, request).await?;
    }
    let mut answers = Vec::with_capacity(requests.len());
    for id in 1..=requests.len() as u32 {
        let (correlation_id, response) = conn.receive().await?;
        anyhow::ensure!(correlation_id == id, "answer {correlation_id} for {id}");
        answers.push(response);
    }
    Ok(answers)
}

/// Fetches partition 0 of `topic` from offset 0, as much as one answer holds.
async fn fetch_all(
    conn: &mut RawConnection,
    topic: &str,
) -> Result<minibroker_protocol::FetchResponse> {
    let fetch = Request::Fetch(FetchRequest {
        topic,
        partition: 0,
        offset: 0,
        max_bytes: u32::MAX,
    });
    match conn.call(3, &fetch).await? {
        Response::Fetch(answer) => Ok(answer),
        other => bail!("partition 0 of {topic} cannot be fetched: {other:?}"),
    }
}

fn accepted(response: &Response) -> bool {
    matches!(response, Response::Produce(p) if p.outcome == Outcome::Accepted)
}

#[tokio::test]
async fn tiny_produces_to_many_new_partitions_do_not_use_up_the_store() -> Result<()> {
    // Each new partition used to reserve 1 MiB of the limit and keep it: four of them filled a
    // 4 MiB store while it held four bytes.
    let limit = 4u64 << 20;
    let config = Config {
        broker: BrokerConfig {
            max_stored_bytes: limit,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let names: Vec<String> = (0..500).map(|i| format!("tiny-{i}")).collect();
    let requests: Vec<_> = names
        .iter()
        .map(|name| produce(name, 0, 1, 0, 0, &[b"x"]))
        .collect();
    let answers = pipeline(&mut conn, &requests).await?;
    assert!(answers.iter().all(accepted), "{:?}", answers.last());

    // The rest of the store is still usable: fill it from a few partitions until it is full.
    let record = vec![7u8; 16 << 10];
    let mut sequence = [0i32; 8];
    let refused = loop {
        let partition = (sequence.iter().sum::<i32>() % 8) as usize;
        let topic = format!("bulk-{partition}");
        let answer = conn
            .call(
                1,
                &produce(&topic, 0, 2, 0, sequence[partition], &[&record]),
            )
            .await?;
        if !accepted(&answer) {
            break answer;
        }
        sequence[partition] += 1;
    };
    assert_eq!(
        error_of(&refused).map(|e| e.0),
        Some(ErrorCode::StorageFull)
    );
    let stored = broker.broker.stored_bytes();
    assert!(
        stored >= limit * 3 / 4,
        "refused at {stored} bytes stored of {limit}"
    );
    let (charged, max) = broker.broker.storage_charged();
    assert!(charged <= max);
    still_serves(broker.addr).await
}

#[tokio::test]
async fn hostile_topic_names_get_a_short_invalid_input_answer() -> Result<()> {
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    // Nearly a whole 8 MiB frame of control characters: once echoed with Debug formatting, it
    // became a 42 MB message that no frame could carry.
    let name = "\u{1}".repeat((8 << 20) - 1024);
    let hostile_produce = produce(&name, 0, 1, 0, 0, &[b"x"]);
    let requests = [
        hostile_produce.request(),
        Request::Fetch(FetchRequest {
            topic: &name,
            partition: 0,
            offset: 0,
            max_bytes: 1024,
        }),
        Request::DescribeProducers(DescribeProducersRequest {
            topic: &name,
            partition: 0,
            after_producer_id: None,
            limit: 0,
        }),
    ];
    for (id, request) in requests.iter().enumerate() {
        let answer = conn.call(id as u32 + 1, request).await?;
        let (code, message) = error_of(&answer).expect("an error answer");
        assert_eq!(code, ErrorCode::InvalidInput, "{message}");
        assert!(message.len() < 1024, "a {}-byte message", message.len());
    }
    // Nothing was created, and the same connection goes on working.
    let answer = conn.call(9, &Request::Metadata).await?;
    assert!(matches!(answer, Response::Metadata(m) if m.topics.is_empty()));
    still_serves(broker.addr).await
}

#[tokio::test]
async fn a_partition_of_empty_records_stays_readable_within_the_fetch_limit() -> Result<()> {
    // Empty records cost nothing against the fetch budget, so one fetch returned them all, with
    // a per-batch header each: more than any frame holds, answered INTERNAL forever after.
    let max_fetch_bytes = 16 << 10;
    let config = Config {
        broker: BrokerConfig {
            max_frame_bytes: 64 << 10,
            max_fetch_bytes,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let batches = 5000;
    let requests: Vec<_> = (0..batches)
        .map(|sequence| produce("empty", 0, 1, 0, sequence, &[b""]))
        .collect();
    assert!(pipeline(&mut conn, &requests).await?.iter().all(accepted));

    let mut offset = 0;
    let mut fetches = 0;
    while offset < i64::from(batches) {
        let fetch = Request::Fetch(FetchRequest {
            topic: "empty",
            partition: 0,
            offset,
            max_bytes: u32::MAX,
        });
        let Response::Fetch(answer) = conn.call(1, &fetch).await? else {
            bail!("fetch at {offset} failed");
        };
        let encoded = codec::encode_body(1, &Response::Fetch(answer.clone()))?.len();
        assert!(
            encoded <= max_fetch_bytes as usize + 64,
            "a {encoded}-byte answer for a {max_fetch_bytes}-byte limit"
        );
        for batch in &answer.batches {
            let info = minibroker_records::inspect_stored(batch, offset)?;
            offset += i64::from(info.record_count);
        }
        fetches += 1;
    }
    assert_eq!(offset, i64::from(batches));
    assert!(fetches > 1, "the fetch limit never applied");
    still_serves(broker.addr).await
}

#[tokio::test]
async fn a_client_that_never_reads_loses_its_connection_and_its_slot() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            max_connections: 1,
            ..BrokerConfig::default()
        },
        net: NetConfig {
            write_timeout_ms: 300,
            ..NetConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let record = vec![1u8; 1 << 20];
    let batch = minibroker_tests::batch(1, 0, 0, &[&record]);
    let stored = broker
        .broker
        .produce_stored(&mut Unacknowledged::default(), "big", 0, &batch)
        .await?;
    assert_eq!(stored.outcome, Outcome::Accepted);

    // Pipeline 64 fetches of 1 MiB each and never read an answer: the socket buffers fill and
    // the broker's writes stall. The connection is idle for less than the idle timeout.
    let mut stalled = RawConnection::connect(broker.addr).await?;
    let fetch = Request::Fetch(FetchRequest {
        topic: "big",
        partition: 0,
        offset: 0,
        max_bytes: 1 << 20,
    });
    for id in 0..64 {
        stalled.send(id, &fetch).await?;
    }
    // The only slot was the stalled client's; a normal client gets it once the write times out.
    still_serves(broker.addr).await?;
    assert!(broker.host.node().connection_counts().accepted >= 2);
    drop(stalled);
    Ok(())
}

#[tokio::test]
async fn producer_ids_never_run_out_and_what_is_remembered_stays_bounded() -> Result<()> {
    // The broker used to stop issuing ids at the cap, for good; now the cap bounds only what it
    // remembers.
    let remembered = 1000;
    let config = Config {
        broker: BrokerConfig {
            max_producer_ids: remembered,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let requests =
        vec![Request::InitProducer(InitProducerRequest { producer_id: None }); remembered + 10];
    let mut ids = HashSet::new();
    for answer in pipeline(&mut conn, &requests).await? {
        let Response::InitProducer(init) = answer else {
            bail!("init-producer refused: {answer:?}");
        };
        assert_eq!(init.epoch, 0);
        assert!(
            ids.insert(init.producer_id),
            "id {} reissued",
            init.producer_id
        );
    }
    assert_eq!(broker.broker.remembered_producer_ids(), remembered);
    // A new producer still gets an id and writes with it.
    let Response::InitProducer(init) = conn.call(1, &requests[0]).await? else {
        bail!("no id for a new producer");
    };
    let answer = conn
        .call(2, &produce("t", 0, init.producer_id, 0, 0, &[b"x"]))
        .await?;
    assert!(accepted(&answer));
    still_serves(broker.addr).await
}

#[tokio::test]
async fn describe_producers_pages_a_partition_too_large_for_one_answer() -> Result<()> {
    // 5,000 producers take about 100 KB to describe: more than a 64 KiB frame.
    let config = Config {
        broker: BrokerConfig {
            max_frame_bytes: 64 << 10,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let producers = 5000i64;
    let requests: Vec<_> = (0..producers)
        .map(|id| produce("crowded", 0, id, 0, 0, &[b"x"]))
        .collect();
    assert!(pipeline(&mut conn, &requests).await?.iter().all(accepted));

    let mut seen = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let describe = Request::DescribeProducers(DescribeProducersRequest {
            topic: "crowded",
            partition: 0,
            after_producer_id: after,
            limit: 0,
        });
        let Response::DescribeProducers(page) = conn.call(1, &describe).await? else {
            bail!("describe-producers failed after {after:?}");
        };
        seen.extend(page.producers.iter().map(|p| p.producer_id));
        pages += 1;
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, (0..producers).collect::<Vec<_>>());
    assert!(pages > 1);
    // A client-chosen limit is honoured.
    let describe = Request::DescribeProducers(DescribeProducersRequest {
        topic: "crowded",
        partition: 0,
        after_producer_id: Some(99),
        limit: 10,
    });
    let Response::DescribeProducers(page) = conn.call(2, &describe).await? else {
        bail!("describe-producers failed");
    };
    let ids: Vec<i64> = page.producers.iter().map(|p| p.producer_id).collect();
    assert_eq!(ids, (100..110).collect::<Vec<_>>());
    assert_eq!(page.next_after, Some(109));
    still_serves(broker.addr).await
}

#[tokio::test]
async fn refused_produce_requests_create_no_topic() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            max_stored_bytes: 1 << 20,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    // Out of range for an auto-created topic of one partition.
    let names: Vec<String> = (0..3000).map(|i| format!("refused-{i}")).collect();
    let requests: Vec<_> = names
        .iter()
        .map(|name| produce(name, 1024, 1, 0, 0, &[b"x"]))
        .collect();
    for answer in pipeline(&mut conn, &requests).await? {
        assert_eq!(
            error_of(&answer).map(|e| e.0),
            Some(ErrorCode::PartitionOutOfRange)
        );
    }
    // Larger than the whole store.
    let huge = vec![0u8; 2 << 20];
    let answer = conn.call(1, &produce("huge", 0, 1, 0, 0, &[&huge])).await?;
    assert_eq!(error_of(&answer).map(|e| e.0), Some(ErrorCode::StorageFull));
    assert_eq!(broker.broker.metadata().len(), 0);
    assert_eq!(broker.broker.partition_count(), 0);
    still_serves(broker.addr).await
}

#[tokio::test]
async fn topics_and_partitions_are_charged_to_limits() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            default_partitions: 100,
            max_partitions: 250,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    for (id, topic) in ["a", "b"].into_iter().enumerate() {
        let answer = conn
            .call(id as u32, &produce(topic, 0, 1, 0, 0, &[b"x"]))
            .await?;
        assert!(accepted(&answer));
    }
    let answer = conn.call(3, &produce("c", 0, 1, 0, 0, &[b"x"])).await?;
    let (code, message) = error_of(&answer).expect("refused");
    assert_eq!(code, ErrorCode::StorageFull, "{message}");
    assert!(message.contains("partitions"), "{message}");
    assert_eq!(broker.broker.partition_count(), 200);
    // Every partition is charged to the storage budget as well.
    let (charged, _) = broker.broker.storage_charged();
    assert!(charged >= 200 * minibroker_broker::budget::PARTITION_BYTES);
    still_serves(broker.addr).await
}

#[tokio::test]
async fn connections_beyond_the_limit_are_told_and_closed_at_once() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            max_connections: 1,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let mut first = RawConnection::connect(broker.addr).await?;
    assert!(matches!(
        first.call(1, &Request::Metadata).await?,
        Response::Metadata(_)
    ));
    // The second connection hears why at once and is closed, instead of hanging in the backlog.
    let mut second = RawConnection::connect(broker.addr).await?;
    let answers = tokio::time::timeout(Duration::from_secs(2), second.expect_closed()).await??;
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(
        error_of(&answers[0]).map(|e| e.0),
        Some(ErrorCode::TooManyConnections)
    );
    assert_eq!(broker.host.node().connection_counts().refused, 1);
    // The first client was never disturbed, and once it leaves its slot is free again.
    assert!(matches!(
        first.call(2, &Request::Metadata).await?,
        Response::Metadata(_)
    ));
    drop(first);
    still_serves(broker.addr).await
}

#[tokio::test]
async fn a_batch_is_accepted_only_if_a_fetch_can_hand_it_back() -> Result<()> {
    // A batch filling an 8 MiB produce frame was accepted, and every fetch of its partition was
    // answered INTERNAL from then on: the answer needed 12 bytes more than a frame.
    let config = Config::default();
    let max = minibroker_broker::batch_room(config.broker.max_frame_bytes);
    let broker = TestBroker::start(config.clone()).await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    let big = |batch| OwnedProduce {
        topic: "big".into(),
        partition: 0,
        batch,
    };
    let filling = big(batch_of_len(1, 0, config.broker.max_frame_bytes - 64));
    match error_of(&conn.call(1, &filling).await?) {
        Some((ErrorCode::InvalidBatch, message)) => {
            assert!(message.contains("larger than"), "{message}");
        }
        other => bail!("a frame-filling batch was answered {other:?}"),
    }
    assert!(accepted(
        &conn.call(2, &big(batch_of_len(1, 0, max))).await?
    ));
    let answer = fetch_all(&mut conn, "big").await?;
    assert_eq!(
        answer.batches.iter().map(|b| b.len()).collect::<Vec<_>>(),
        [max]
    );
    still_serves(broker.addr).await
}

#[tokio::test]
async fn a_batch_no_consumer_could_read_is_refused_and_the_partition_stays_readable() -> Result<()>
{
    // Such batches were acknowledged, and every later record of the partition was unreadable:
    // `minibroker consume` exited 1 and Kafka consumers stopped at them.
    let broker = start_broker().await?;
    let mut conn = RawConnection::connect(broker.addr).await?;
    for (what, poison) in minibroker_tests::poison_batches(1) {
        let poison = OwnedProduce {
            topic: "p".into(),
            partition: 0,
            batch: poison,
        };
        let answer = conn.call(1, &poison).await?;
        assert!(
            matches!(error_of(&answer), Some((ErrorCode::CorruptBatch, _))),
            "{what}: {answer:?}"
        );
    }
    // Nothing of them was stored: the producer's real first batch is sequence 0 and offset 0.
    let good = produce("p", 0, 1, 0, 0, &[b"good"]);
    assert!(matches!(
        conn.call(2, &good).await?,
        Response::Produce(p) if p.outcome == Outcome::Accepted && p.base_offset == Some(0)
    ));
    let answer = fetch_all(&mut conn, "p").await?;
    assert_eq!(answer.batches.len(), 1);
    let decoded = minibroker_records::decode(&answer.batches[0])?;
    assert_eq!(decoded.records[0].value.as_deref(), Some(&b"good"[..]));
    Ok(())
}
