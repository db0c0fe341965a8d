//! A test double of a broker that breaks exactly-once on purpose: a relay in front of a real
//! minibroker's Kafka listener (which advertises the relay, so clients stay on it) that, for
//! some Produce requests, either acknowledges without storing or stores a second copy with the
//! producer id stripped (so the real broker cannot recognise it). `check` must fail on both.
//! Other misbehaviours commit what was aborted, or add a partition to a transaction only when a
//! batch for it arrives, so that a batch delayed past its transaction's abort lands in the next
//! transaction (KAFKA-17754).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, FetchResponse,
    ProduceRequest, ProduceResponse, ProducerId, RequestHeader, ResponseHeader, TransactionalId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the double misbehaves on every `every`th Produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehaviour {
    /// Relay everything faithfully (the double's own control).
    None,
    /// Answer success without passing the request on: an acknowledged batch lost.
    AckWithoutStoring,
    /// Pass it on, then store it again with no producer id: a duplicate the broker cannot see.
    StoreTwice,
    /// Turn every EndTxn that aborts into one that commits (no Produce is touched): what the
    /// producer aborted and wrote again becomes visible twice.
    CommitAborted,
    /// Answer AddPartitionsToTxn at once but pass it on only before the first batch for the
    /// partition, forgetting it at the transaction's end: the broker never learns that an
    /// aborted transaction had added a partition where none of its batches arrived, so a late
    /// batch of it is taken into the next transaction.
    AddOnFirstBatch,
    /// In every `every`th Fetch answer to a consumer in a group (not to the verifier's read),
    /// leave out the first batch of a partition that has more than one: the consumer jumps
    /// past records it should have seen.
    SkipForConsumers,
    /// Name no aborted transaction in a `read_committed` Fetch answer: consumers are shown
    /// records of aborted transactions.
    HideAborted,
    /// Answer TxnOffsetCommit as done without passing it on: a transaction commits its output
    /// without the offsets it read, so what it processed is processed again.
    ForgetTransactionOffsets,
}

/// A partition answered as added: (transactional id, topic, partition).
type AddedPartition = (String, String, i32);

/// What passing an add on needs: its header and version, the producer id and epoch.
type Add = (RequestHeader, i16, i64, i16);

/// The partitions the double has answered as added but not yet passed on.
#[derive(Debug, Default)]
struct DeferredAdds(Mutex<HashMap<AddedPartition, Add>>);

impl DeferredAdds {
    /// Keeps the partitions of an AddPartitionsToTxn (version 3 or below), and the answer that
    /// says they were added.
    fn defer(&self, request: &Bytes, version: i16) -> BytesMut {
        let mut bytes = request.clone();
        let header_version = ApiKey::AddPartitionsToTxn.request_header_version(version);
        let header = RequestHeader::decode(&mut bytes, header_version).expect("an add's header");
        let add = AddPartitionsToTxnRequest::decode(&mut bytes, version).expect("an add");
        let id = add.v3_and_below_transactional_id.to_string();
        let mut deferred = self.0.lock().expect("not poisoned");
        let mut results = Vec::new();
        for topic in &add.v3_and_below_topics {
            for &partition in &topic.partitions {
                deferred.insert(
                    (id.clone(), topic.name.to_string(), partition),
                    (
                        header.clone(),
                        version,
                        add.v3_and_below_producer_id.0,
                        add.v3_and_below_producer_epoch,
                    ),
                );
            }
            results.push(
                AddPartitionsToTxnTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_results_by_partition(
                        topic
                            .partitions
                            .iter()
                            .map(|&p| {
                                AddPartitionsToTxnPartitionResult::default().with_partition_index(p)
                            })
                            .collect(),
                    ),
            );
        }
        let answer =
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(
                &mut out,
                ApiKey::AddPartitionsToTxn.response_header_version(version),
            )
            .expect("header encodes");
        answer.encode(&mut out, version).expect("answer encodes");
        out
    }

    /// The adds to pass on before a transactional Produce: one request per partition of it
    /// that was answered as added and not passed on yet.
    fn take_for(&self, request: &Bytes, version: i16) -> Vec<BytesMut> {
        let (_, produce) = decode_produce(request, version);
        let Some(id) = produce.transactional_id.map(|id| id.to_string()) else {
            return Vec::new();
        };
        let mut deferred = self.0.lock().expect("not poisoned");
        let mut adds = Vec::new();
        for topic in &produce.topic_data {
            for partition in &topic.partition_data {
                let key = (id.clone(), topic.name.to_string(), partition.index);
                let Some((header, version, producer_id, epoch)) = deferred.remove(&key) else {
                    continue;
                };
                let add = AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
                        id.clone(),
                    )))
                    .with_v3_and_below_producer_id(ProducerId(producer_id))
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(vec![
                        AddPartitionsToTxnTopic::default()
                            .with_name(topic.name.clone())
                            .with_partitions(vec![partition.index]),
                    ]);
                let mut out = BytesMut::new();
                header
                    .with_correlation_id(COPY_CORRELATION)
                    .encode(
                        &mut out,
                        ApiKey::AddPartitionsToTxn.request_header_version(version),
                    )
                    .expect("header encodes");
                add.encode(&mut out, version).expect("add encodes");
                adds.push(out);
            }
        }
        adds
    }

    /// Forgets the partitions of the transaction an EndTxn ends; how many it had not passed on.
    fn forget(&self, request: &Bytes, version: i16) -> u64 {
        let mut bytes = request.clone();
        RequestHeader::decode(&mut bytes, ApiKey::EndTxn.request_header_version(version))
            .expect("an EndTxn header");
        let end = EndTxnRequest::decode(&mut bytes, version).expect("an EndTxn request");
        let id = end.transactional_id.to_string();
        let mut deferred = self.0.lock().expect("not poisoned");
        let before = deferred.len();
        deferred.retain(|(of, _, _), _| *of != id);
        (before - deferred.len()) as u64
    }
}

/// Starts the double on `listener`, relaying to `upstream`; returns how many Produce requests
/// it broke.
pub fn start(
    listener: TcpListener,
    upstream: String,
    misbehaviour: Misbehaviour,
    every: u64,
) -> Arc<AtomicU64> {
    let produces = Arc::new(AtomicU64::new(0));
    let broken = Arc::new(AtomicU64::new(0));
    let deferred = Arc::new(DeferredAdds::default());
    let counted = Arc::clone(&broken);
    tokio::spawn(async move {
        // The adds passed on late go through a connection of their own, opened before any
        // client's: a broker takes an EndTxn only from a connection no older than the one that
        // began the transaction.
        let Ok(adds) = TcpStream::connect(&upstream).await else {
            return;
        };
        let adds = Arc::new(tokio::sync::Mutex::new(adds));
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            let (produces, broken) = (Arc::clone(&produces), Arc::clone(&broken));
            let (deferred, adds) = (Arc::clone(&deferred), Arc::clone(&adds));
            tokio::spawn(async move {
                let Ok(broker) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let relay = Relay {
                    misbehaviour,
                    every,
                    produces,
                    broken,
                    deferred,
                    adds,
                };
                let _ = relay.run(client, broker).await;
            });
        }
    });
    counted
}

struct Relay {
    misbehaviour: Misbehaviour,
    every: u64,
    produces: Arc<AtomicU64>,
    broken: Arc<AtomicU64>,
    /// With [`Misbehaviour::AddOnFirstBatch`], shared by every connection.
    deferred: Arc<DeferredAdds>,
    /// The connection the deferred adds are passed on through.
    adds: Arc<tokio::sync::Mutex<TcpStream>>,
}

async fn read_frame(stream: &mut TcpStream) -> std::io::Result<Bytes> {
    let length = stream.read_u32().await?;
    let mut frame = vec![0; length as usize];
    stream.read_exact(&mut frame).await?;
    Ok(Bytes::from(frame))
}

async fn write_frame(stream: &mut TcpStream, frame: &[u8]) -> std::io::Result<()> {
    stream.write_u32(frame.len() as u32).await?;
    stream.write_all(frame).await
}

impl Relay {
    /// One request at a time (what the check's producers and verifier send): request in,
    /// answer out.
    async fn run(self, mut client: TcpStream, mut broker: TcpStream) -> std::io::Result<()> {
        loop {
            let request = read_frame(&mut client).await?;
            let (api, version, correlation) =
                minibroker_faults::kafka::request_header(&request).expect("a request header");
            let broken = api == ApiKey::Produce as i16
                && matches!(
                    self.misbehaviour,
                    Misbehaviour::AckWithoutStoring | Misbehaviour::StoreTwice
                )
                && (self.produces.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(self.every);
            if broken && self.misbehaviour == Misbehaviour::AckWithoutStoring {
                self.broken.fetch_add(1, Ordering::Relaxed);
                write_frame(&mut client, &forged_ack(&request, version, correlation)).await?;
                continue;
            }
            if self.misbehaviour == Misbehaviour::ForgetTransactionOffsets
                && api == ApiKey::TxnOffsetCommit as i16
            {
                self.broken.fetch_add(1, Ordering::Relaxed);
                write_frame(&mut client, &offsets_taken(&request, version)).await?;
                continue;
            }
            if self.misbehaviour == Misbehaviour::AddOnFirstBatch {
                if api == ApiKey::AddPartitionsToTxn as i16 {
                    write_frame(&mut client, &self.deferred.defer(&request, version)).await?;
                    continue;
                }
                if api == ApiKey::EndTxn as i16 {
                    let never_passed_on = self.deferred.forget(&request, version);
                    self.broken.fetch_add(never_passed_on, Ordering::Relaxed);
                }
                if api == ApiKey::Produce as i16 {
                    let mut adds = self.adds.lock().await;
                    for add in self.deferred.take_for(&request, version) {
                        write_frame(&mut adds, &add).await?;
                        read_frame(&mut adds).await?;
                    }
                }
            }
            let request = if api == ApiKey::EndTxn as i16
                && self.misbehaviour == Misbehaviour::CommitAborted
            {
                self.broken.fetch_add(1, Ordering::Relaxed);
                committing(&request, version)
            } else {
                request
            };
            write_frame(&mut broker, &request).await?;
            let mut answer = read_frame(&mut broker).await?;
            if api == ApiKey::Fetch as i16
                && let Some(changed) = self.fetch_answer(&request, &answer, version)
            {
                self.broken.fetch_add(1, Ordering::Relaxed);
                answer = changed;
            }
            write_frame(&mut client, &answer).await?;
            if broken {
                // The same records again, as a producer without idempotence would send them.
                self.broken.fetch_add(1, Ordering::Relaxed);
                write_frame(&mut broker, &stripped_copy(&request, version)).await?;
                read_frame(&mut broker).await?;
            }
        }
    }
}

impl Relay {
    /// A Fetch answer as the double serves it, if it changes it.
    fn fetch_answer(&self, request: &Bytes, answer: &Bytes, version: i16) -> Option<Bytes> {
        let mut asked = request.clone();
        let header =
            RequestHeader::decode(&mut asked, ApiKey::Fetch.request_header_version(version))
                .expect("a Fetch header");
        let response_header_version = ApiKey::Fetch.response_header_version(version);
        let mut bytes = answer.clone();
        let answer_header =
            ResponseHeader::decode(&mut bytes, response_header_version).expect("a Fetch answer");
        let mut fetched = FetchResponse::decode(&mut bytes, version).expect("a Fetch answer");
        let changed = match self.misbehaviour {
            Misbehaviour::SkipForConsumers => {
                let consumer = header
                    .client_id
                    .as_ref()
                    .is_some_and(|id| id.as_str() == "minibroker-consumer");
                consumer
                    && (self.produces.fetch_add(1, Ordering::Relaxed) + 1)
                        .is_multiple_of(self.every)
                    && fetched
                        .responses
                        .iter_mut()
                        .flat_map(|t| t.partitions.iter_mut())
                        .any(|partition| {
                            let batches = minibroker_kafka_client::whole_batches(
                                partition.records.clone().unwrap_or_default(),
                            );
                            let Some((_, kept)) =
                                batches.split_first().filter(|(_, rest)| !rest.is_empty())
                            else {
                                return false;
                            };
                            partition.records = Some(kept.concat().into());
                            true
                        })
            }
            Misbehaviour::HideAborted => fetched
                .responses
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
                .any(|partition| {
                    partition
                        .aborted_transactions
                        .as_mut()
                        .is_some_and(|aborted| !std::mem::take(aborted).is_empty())
                }),
            _ => false,
        };
        if !changed {
            return None;
        }
        let mut out = BytesMut::new();
        answer_header
            .encode(&mut out, response_header_version)
            .expect("header encodes");
        fetched.encode(&mut out, version).expect("answer encodes");
        Some(out.freeze())
    }
}

/// A TxnOffsetCommit answer saying every partition of `request` was taken.
fn offsets_taken(request: &Bytes, version: i16) -> BytesMut {
    let mut bytes = request.clone();
    let header = RequestHeader::decode(
        &mut bytes,
        ApiKey::TxnOffsetCommit.request_header_version(version),
    )
    .expect("a TxnOffsetCommit header");
    let commit = TxnOffsetCommitRequest::decode(&mut bytes, version).expect("a TxnOffsetCommit");
    let answer = TxnOffsetCommitResponse::default().with_topics(
        commit
            .topics
            .iter()
            .map(|topic| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(
                        topic
                            .partitions
                            .iter()
                            .map(|p| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                            })
                            .collect(),
                    )
            })
            .collect(),
    );
    let mut out = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .encode(
            &mut out,
            ApiKey::TxnOffsetCommit.response_header_version(version),
        )
        .expect("header encodes");
    answer.encode(&mut out, version).expect("answer encodes");
    out
}

/// An EndTxn request that commits, whatever it asked.
fn committing(request: &Bytes, version: i16) -> Bytes {
    let mut bytes = request.clone();
    let header_version = ApiKey::EndTxn.request_header_version(version);
    let header = RequestHeader::decode(&mut bytes, header_version).expect("an EndTxn header");
    let end = EndTxnRequest::decode(&mut bytes, version).expect("an EndTxn request");
    let mut out = BytesMut::new();
    header
        .encode(&mut out, header_version)
        .expect("header encodes");
    end.with_committed(true)
        .encode(&mut out, version)
        .expect("request encodes");
    out.freeze()
}

/// The correlation id of a copy; its answer is read and dropped.
const COPY_CORRELATION: i32 = i32::MAX;

/// The request's header and body.
fn decode_produce(request: &Bytes, version: i16) -> (RequestHeader, ProduceRequest) {
    let mut bytes = request.clone();
    let header = RequestHeader::decode(&mut bytes, ApiKey::Produce.request_header_version(version))
        .expect("a Produce header");
    let body = ProduceRequest::decode(&mut bytes, version).expect("a Produce request");
    (header, body)
}

/// A success answer naming offset 0 for every partition of the request.
fn forged_ack(request: &Bytes, version: i16, correlation: i32) -> BytesMut {
    let (_, produce) = decode_produce(request, version);
    let answer = ProduceResponse::default().with_responses(
        produce
            .topic_data
            .iter()
            .map(|topic| {
                TopicProduceResponse::default()
                    .with_name(topic.name.clone())
                    .with_partition_responses(
                        topic
                            .partition_data
                            .iter()
                            .map(|p| PartitionProduceResponse::default().with_index(p.index))
                            .collect(),
                    )
            })
            .collect(),
    );
    let mut out = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation)
        .encode(&mut out, ApiKey::Produce.response_header_version(version))
        .expect("header encodes");
    answer.encode(&mut out, version).expect("answer encodes");
    out
}

/// The request again under another correlation id, each batch's producer id, epoch and sequence
/// set to -1 (no idempotence) and its CRC made right.
fn stripped_copy(request: &Bytes, version: i16) -> BytesMut {
    let (header, mut produce) = decode_produce(request, version);
    for topic in &mut produce.topic_data {
        for partition in &mut topic.partition_data {
            let Some(records) = &partition.records else {
                continue;
            };
            let mut batch = records.to_vec();
            batch[43..51].copy_from_slice(&(-1i64).to_be_bytes()); // producer id
            batch[51..53].copy_from_slice(&(-1i16).to_be_bytes()); // epoch
            minibroker_records::set_base_sequence(&mut batch, -1); // and the CRC
            partition.records = Some(Bytes::from(batch));
        }
    }
    let mut out = BytesMut::new();
    header
        .with_correlation_id(COPY_CORRELATION)
        .encode(&mut out, ApiKey::Produce.request_header_version(version))
        .expect("header encodes");
    produce.encode(&mut out, version).expect("request encodes");
    out
}
