//! Graceful shutdown: requests already sent are answered, then new connections are refused.

use anyhow::Result;
use minibroker_protocol::{Outcome, ProduceResponse, Response};
use minibroker_tests::{RawConnection, frame, produce, start_broker};

#[tokio::test]
async fn in_flight_requests_complete_and_new_connections_are_refused() -> Result<()> {
    let broker = start_broker().await?;
    let addr = broker.addr;
    let mut conn = RawConnection::connect(addr).await?;
    let mut pipelined = Vec::new();
    for sequence in 0..100 {
        pipelined.extend_from_slice(&frame(
            sequence as u32,
            &produce("t", 0, 1, 0, sequence, &[b"x"]),
        )?);
    }
    conn.write_raw(&pipelined).await?;
    // Once the first answer is here, every request is in the broker's socket buffer.
    let (first_id, _) = conn.receive().await?;
    assert_eq!(first_id, 0);
    broker.begin_stop();
    for sequence in 1..100 {
        let (id, response) = conn.receive().await?;
        assert_eq!(id, sequence);
        assert_eq!(
            response,
            Response::Produce(ProduceResponse {
                outcome: Outcome::Accepted,
                base_offset: Some(i64::from(sequence))
            })
        );
    }
    conn.expect_closed().await?;
    let core = std::sync::Arc::clone(&broker.broker);
    broker.stop().await?;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    let producers = core.producers("t", 0)?;
    assert_eq!(producers[0].entry.last_sequence(), Some(99));
    Ok(())
}

/// The host's two ways to stop a durable broker: `stop` closes it (every partition synced and its
/// producer state snapshotted, so the next start replays nothing), `halt` leaves the data
/// directory as a crash would (no snapshot: the next start replays the log).
#[tokio::test]
async fn a_stopped_host_snapshots_its_partitions_and_a_halted_one_does_not() -> Result<()> {
    for halt in [false, true] {
        let storage = minibroker_storage::sim::SimStorage::new();
        let config = minibroker_broker::BrokerConfig {
            data_dir: Some("/data".into()),
            ..minibroker_broker::BrokerConfig::default()
        };
        let broker =
            minibroker_broker::Broker::with_storage(&config, std::sync::Arc::new(storage.clone()))?;
        let host = minibroker_host::Host::with_broker(broker, &Default::default())?;
        let embedded = minibroker_native::EmbeddedBroker::around(host).await?;
        let mut conn = RawConnection::connect(embedded.addr).await?;
        let answer = conn.call(1, &produce("t", 0, 1, 0, 0, &[b"x"])).await?;
        assert!(matches!(answer, Response::Produce(_)), "{answer:?}");
        drop(conn);
        if halt {
            embedded.host.halt().await?;
        } else {
            embedded.stop().await?;
        }
        let snapshots = storage
            .paths()
            .into_iter()
            .filter(|path| path.to_string_lossy().ends_with(".snapshot"))
            .count();
        assert_eq!(snapshots > 0, !halt, "halt: {halt}, snapshots: {snapshots}");
    }
    Ok(())
}
