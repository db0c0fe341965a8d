//! Structure-aware fuzzing of the native front end over a real connection: valid requests of
//! every kind, encoded, then with bytes flipped, fields overwritten, bodies cut short or extended
//! — framed correctly, so the connection must survive every one. Each frame must get exactly one
//! well-formed answer, with its correlation id whenever the header survived, and the broker must
//! go on serving. Seeded, so a failure can be replayed.

use anyhow::{Result, ensure};
use bytes::{BufMut, BytesMut};
use minibroker_broker::BrokerConfig;
use minibroker_faults::SplitMix64;
use minibroker_host::Config;
use minibroker_protocol::{
    DescribeProducersRequest, FetchRequest, InitProducerRequest, Request, Response, codec,
};
use minibroker_tests::{AsRequest, RawConnection, TestBroker, produce};

/// Mutated frames sent per seed.
const FRAMES: usize = 3000;
/// Frames written before their answers are read.
const WINDOW: usize = 64;

/// The encoded bodies the mutations start from: requests of every kind, with ordinary and
/// extreme fields, produce requests carrying real batches.
fn seed_bodies(records: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let produces = [
        produce("fuzz", 0, 1, 0, 0, &slices),
        produce("fuzz", 3, i64::MAX, i16::MAX, i32::MAX, &slices[..1]),
        produce("a-much-longer.topic_name", 0, 7, 2, 9, &slices[1..]),
    ];
    let mut requests: Vec<Request> = produces.iter().map(AsRequest::as_request).collect();
    requests.extend([
        Request::Fetch(FetchRequest {
            topic: "fuzz",
            partition: 0,
            offset: 0,
            max_bytes: 1 << 20,
        }),
        Request::Fetch(FetchRequest {
            topic: "fuzz",
            partition: u32::MAX,
            offset: i64::MIN,
            max_bytes: 0,
        }),
        Request::InitProducer(InitProducerRequest { producer_id: None }),
        Request::InitProducer(InitProducerRequest {
            producer_id: Some(1000),
        }),
        Request::DescribeProducers(DescribeProducersRequest {
            topic: "fuzz",
            partition: 0,
            after_producer_id: Some(-1),
            limit: 3,
        }),
        Request::Metadata,
    ]);
    Ok(requests
        .iter()
        .map(|request| codec::encode_body(0, request).map(|body| body.to_vec()))
        .collect::<Result<_, _>>()?)
}

/// One to three random mutations of an encoded body (version byte, correlation id, message).
fn mutate(body: &mut Vec<u8>, rng: &mut SplitMix64) {
    let mutations = 1 + rng.next_u64() % 3;
    for _ in 0..mutations {
        let at = |rng: &mut SplitMix64, len: usize| (rng.next_u64() % len.max(1) as u64) as usize;
        // Leave the 5-byte header alone most of the time, so most frames reach the decoder.
        let from = if rng.chance(0.9) && body.len() > 5 {
            5
        } else {
            0
        };
        match rng.next_u64() % 6 {
            0 if body.len() > from => {
                let i = from + at(rng, body.len() - from);
                body[i] ^= 1 << (rng.next_u64() % 8);
            }
            1 if body.len() > from => {
                let i = from + at(rng, body.len() - from);
                body[i] = [0x00, 0x7f, 0x80, 0xff][at(rng, 4)];
            }
            2 => {
                let cut = at(rng, body.len() + 1);
                body.truncate(cut.max(from));
            }
            3 => {
                for _ in 0..1 + at(rng, 16) {
                    body.push(rng.next_u64() as u8);
                }
            }
            4 if body.len() > from => {
                // Overwrite a field-sized run with a varint-looking value.
                let i = from + at(rng, body.len() - from);
                let end = (i + 1 + at(rng, 10)).min(body.len());
                for byte in &mut body[i..end] {
                    *byte = 0x80 | rng.next_u64() as u8;
                }
                body[end - 1] &= 0x7f;
            }
            _ if body.len() > 5 => {
                // Another request kind for the same bytes.
                body[5] = at(rng, 8) as u8;
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn mutated_requests_get_well_formed_answers_and_never_break_the_connection() -> Result<()> {
    let config = Config {
        broker: BrokerConfig {
            default_partitions: 4,
            max_stored_bytes: 64 << 20,
            ..BrokerConfig::default()
        },
        ..Config::default()
    };
    let broker = TestBroker::start(config).await?;
    let records = vec![b"value".to_vec(), Vec::new(), vec![0xff; 300]];
    let bodies = seed_bodies(&records)?;
    for seed in [1u64, 2, 3] {
        let mut rng = SplitMix64::new(seed);
        let mut conn = RawConnection::connect(broker.addr).await?;
        let mut sent = 0usize;
        let (mut errors, mut served) = (0usize, 0usize);
        while sent < FRAMES {
            let mut expected = Vec::with_capacity(WINDOW);
            let mut frames = BytesMut::new();
            for _ in 0..WINDOW {
                let mut body = bodies[sent % bodies.len()].clone();
                // A correlation id of our own, then the mutations (which may change it).
                body[1..5].copy_from_slice(&(sent as u32 + 1).to_be_bytes());
                mutate(&mut body, &mut rng);
                let id = codec::split_header(&body).map_or_else(
                    |bad| bad.correlation_id.unwrap_or(0),
                    |(correlation_id, _)| correlation_id,
                );
                expected.push(id);
                frames.put_u32(body.len() as u32);
                frames.put_slice(&body);
                sent += 1;
            }
            conn.write_raw(&frames).await?;
            for id in expected {
                let (correlation_id, response) = conn.receive().await?;
                ensure!(
                    correlation_id == id,
                    "seed {seed}: answer {correlation_id} where {id} was due"
                );
                match response {
                    Response::Error(error) => {
                        ensure!(!error.message.is_empty(), "an error without a message");
                        ensure!(
                            error.message.len() < 4096,
                            "a {}-byte message",
                            error.message.len()
                        );
                        errors += 1;
                    }
                    _ => served += 1,
                }
            }
        }
        // Both kinds of answer happened, and the connection still serves a plain request.
        ensure!(errors > 0 && served > 0, "errors={errors} served={served}");
        ensure!(matches!(
            conn.call(u32::MAX, &Request::Metadata).await?,
            Response::Metadata(_)
        ));
    }
    Ok(())
}
