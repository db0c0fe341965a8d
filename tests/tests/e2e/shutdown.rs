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
    assert_eq!(producers[0].entry.last_sequence(), 99);
    Ok(())
}
