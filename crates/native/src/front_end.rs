//! [`NativeFrontEnd`]: decode a request frame, call the broker core, encode the answer. The only
//! place that knows both the native wire types and the core's domain types; every error kind is
//! mapped to its wire code here, once.
//!
//! On a listener that asks for a login (`listen_security_protocol` SASL_PLAINTEXT or SASL_SSL)
//! only Authenticate is served until the connection has logged in — the same SASL exchange and
//! users as the Kafka listener's (`minibroker_host::login`); anything else is answered
//! AUTHENTICATION_REQUIRED and the connection closes. With `acls_file` set, each request asks
//! what its Kafka counterpart asks (`minibroker_host::access`): produce Write on the topic (and
//! Create to create it) with a producer id of the principal's own, fetch Read, init-producer
//! IdempotentWrite on the cluster or Write on a topic, describe-producers Read, metadata
//! Describe (others are left out), create-topic Create, delete-topic Delete, describe-topic
//! Describe; a refusal is NOT_AUTHORIZED.

use bytes::{Bytes, BytesMut};
use minibroker_broker::{
    Broker, BrokerError, ConfigSource, ErrorKind, Fetched, Isolation, ProducerPage, SettingChange,
    Unacknowledged,
};
use minibroker_host::Node;
use minibroker_host::access::{Guard, ProducerUse};
use minibroker_host::login::{Choice, Session, Step};
use minibroker_host::timings::ConnectionTimings;
use minibroker_net::framing::FramingError;
use minibroker_net::{FrontEnd, Next, NotStored, Peer};
use minibroker_protocol::{
    AuthenticateResponse, BadFrame, ConfigOrigin, CreateTopicRequest, CreateTopicWithRequest,
    DescribeProducersResponse, DescribeTopicResponse, ErrorCode, ErrorResponse, FetchResponse,
    FrameCodec, InitProducerResponse, MetadataResponse, PartitionDescription, ProduceResponse,
    ProducerState, ProtocolError, Request, Response, TopicConfig, TopicConfigChange,
    TopicConfigsResponse, TopicMetadata, codec,
};
use minibroker_security::{Operation, ResourceType};
use std::sync::Arc;
use tokio_util::codec::Encoder;

/// A frame as the codec decoded it: the request (borrowing from the frame), or why not.
type Decoded<'a> = Result<(u32, Request<'a>), BadFrame>;

/// Bytes a native fetch answer spends on each batch besides its bytes (postcard's length prefix).
const FETCH_BATCH_OVERHEAD: usize = 5;

/// Bytes one producer takes in a describe-producers answer, at most.
const DESCRIBED_PRODUCER_BYTES: usize = 40;

/// One connection's view of the broker through the native protocol.
pub struct NativeFrontEnd {
    /// The core.
    broker: Arc<Broker>,
    /// The connection's produces whose answers wait for their batches to be stored.
    unacknowledged: Unacknowledged,
    /// The largest answer frame, which bounds fetch and describe answers.
    max_frame_bytes: usize,
    /// Encodes answers straight into the connection's output buffer.
    codec: FrameCodec,
    /// Request latencies, when metrics are on.
    timings: Option<ConnectionTimings>,
    /// Where the connection is in its login.
    session: Session,
    /// Who the requests are authorised as, and the ACLs the current one is judged by.
    guard: Guard,
}

impl FrontEnd for NativeFrontEnd {
    async fn answer(&mut self, frame: Bytes, out: &mut BytesMut) -> Next {
        // A login step may wait (PLAIN's PBKDF2, a failure's delay); every other native request
        // is served without waiting (a produce's write and fsync wait in `store_answered`).
        // The frame is decoded once; the request borrows from it.
        let decoded = codec::decode_request(&frame);
        if let Ok((correlation_id, Request::Authenticate(step))) = &decoded {
            let mechanism = step.mechanism.to_owned();
            let token = Bytes::copy_from_slice(step.token);
            return self
                .authenticate(*correlation_id, &mechanism, token, out)
                .await;
        }
        self.answer_now(decoded, out)
    }

    fn authenticated(&self) -> bool {
        self.session.lets_through()
    }

    async fn store_answered(&mut self, _out: &mut BytesMut) -> Result<(), NotStored> {
        Ok(self.unacknowledged.commit().await?)
    }

    fn framing_error(&mut self, error: &FramingError, out: &mut BytesMut) {
        let response = Response::Error(ErrorResponse::new(
            ErrorCode::MalformedRequest,
            format!("{error}; closing the connection"),
        ));
        self.encode_error(0, &response, out);
    }

    fn refusal(max_connections: usize, out: &mut BytesMut) {
        let response = Response::Error(ErrorResponse::new(
            ErrorCode::TooManyConnections,
            format!(
                "the broker already serves its maximum of {max_connections} connections; try again later"
            ),
        ));
        let _ = FrameCodec::default().encode((0, &response), out);
    }
}

impl NativeFrontEnd {
    /// Serves one decoded frame and encodes its answer into `out`.
    fn answer_now(&mut self, decoded: Decoded<'_>, out: &mut BytesMut) -> Next {
        if !self.session.lets_through() || self.session.expired() {
            // As the Kafka listener: nothing but the login before the login.
            let correlation_id = decoded.as_ref().map_or(0, |(id, _)| *id);
            tracing::info!("a request before authentication; closing the connection");
            let response = Response::Error(ErrorResponse::new(
                ErrorCode::AuthenticationRequired,
                "log in first (Authenticate); closing the connection",
            ));
            self.encode_error(correlation_id, &response, out);
            return Next::Close;
        }
        self.guard.refresh();
        let (correlation_id, response) = self.respond(decoded);
        match self.codec.encode((correlation_id, &response), out) {
            Ok(()) => {}
            Err(ProtocolError::FrameTooLarge { size, max }) => {
                // Answers are sized to fit a frame, so this is a bug; say so, and go on.
                tracing::warn!(size, max, "an answer did not fit a frame");
                let error = Response::Error(ErrorResponse::new(
                    ErrorCode::Internal,
                    format!(
                        "internal error: the answer of {size} bytes exceeds the maximum frame of {max} bytes"
                    ),
                ));
                self.encode_error(correlation_id, &error, out);
            }
            Err(error) => {
                tracing::warn!(%error, "an answer did not encode");
                return Next::Close;
            }
        }
        Next::Continue
    }

    /// A front end for one connection to `node`'s broker from `peer`, with answers of at most
    /// `max_frame_bytes`, asking for a login first when `login` is set.
    #[must_use]
    pub fn new(node: &Node, max_frame_bytes: usize, peer: &Peer, login: bool) -> Self {
        Self {
            session: node.session(login),
            guard: node.guard(peer),
            unacknowledged: Unacknowledged::default(),
            max_frame_bytes,
            codec: FrameCodec::new(max_frame_bytes),
            timings: node
                .timings()
                .map(|timings| ConnectionTimings::new(Arc::clone(timings), "native")),
            broker: Arc::clone(node.broker()),
        }
    }

    /// One login step: the mechanism chosen by the first, then its tokens. A failed login is
    /// answered AUTHENTICATION_FAILED (after the failure delay) and the connection closes.
    async fn authenticate(
        &mut self,
        correlation_id: u32,
        mechanism: &str,
        token: Bytes,
        out: &mut BytesMut,
    ) -> Next {
        let refuse = |this: &mut Self, message: String, out: &mut BytesMut| {
            let response =
                Response::Error(ErrorResponse::new(ErrorCode::AuthenticationFailed, message));
            this.encode_error(correlation_id, &response, out);
            Next::Close
        };
        if self.session.expects_mechanism() {
            match self.session.choose(mechanism) {
                Choice::Chosen => {}
                Choice::Unsupported => {
                    let offered = self
                        .session
                        .settings()
                        .map(|s| s.mechanism_names().join(", "))
                        .unwrap_or_default();
                    return refuse(
                        self,
                        format!("mechanism {mechanism:?} not offered; offered: {offered}"),
                        out,
                    );
                }
                Choice::IllegalState => {
                    return refuse(
                        self,
                        "this listener asks for no login, or it is done".into(),
                        out,
                    );
                }
            }
        }
        let answer = match self.session.step(token).await {
            Step::Challenge(token) => AuthenticateResponse {
                token: Bytes::from(token),
                complete: false,
                session_lifetime_ms: 0,
            },
            Step::LoggedIn {
                user,
                last,
                lifetime,
            } => {
                self.guard.logged_in(&user);
                AuthenticateResponse {
                    token: Bytes::from(last),
                    complete: true,
                    session_lifetime_ms: minibroker_host::login::lifetime_ms(lifetime),
                }
            }
            Step::Failed(message) => return refuse(self, message, out),
            Step::IllegalState => {
                return refuse(self, "an Authenticate out of turn".into(), out);
            }
        };
        self.encode_error(correlation_id, &Response::Authenticate(answer), out);
        Next::Continue
    }

    /// NOT_AUTHORIZED, naming what the principal may not do.
    fn denied(&self, operation: Operation, resource: &str) -> Response {
        Response::Error(ErrorResponse::new(
            ErrorCode::NotAuthorized,
            format!("{} may not {operation} {resource}", self.guard.principal()),
        ))
    }

    /// The refusal of `request` by the ACLs, if they refuse it (see the module docs).
    fn refusal(&self, request: &Request<'_>) -> Option<Response> {
        if !self.guard.is_on() {
            return None;
        }
        let topic = |operation: Operation, name: &str| {
            (!self.guard.may(operation, ResourceType::Topic, name))
                .then(|| self.denied(operation, &format!("TOPIC {name}")))
        };
        match request {
            Request::Produce(produce) => topic(Operation::Write, produce.topic)
                .or_else(|| {
                    let missing = self.broker.topic(produce.topic, false).is_err();
                    (missing && !self.guard.may_create_topic(produce.topic)).then(|| {
                        self.denied(Operation::Create, &format!("TOPIC {}", produce.topic))
                    })
                })
                .or_else(|| {
                    let producer_id = minibroker_records::inspect(produce.batch).ok()?.producer_id;
                    match self.guard.producer_use(producer_id) {
                        ProducerUse::Allowed => None,
                        ProducerUse::Refused => Some(Response::Error(ErrorResponse::new(
                            ErrorCode::NotAuthorized,
                            format!(
                                "producer id {producer_id} was not issued to {}",
                                self.guard.principal()
                            ),
                        ))),
                        ProducerUse::Forgotten => Some(Response::Error(ErrorResponse::new(
                            ErrorCode::UnknownProducerId,
                            format!(
                                "producer id {producer_id} was forgotten: init the producer again"
                            ),
                        ))),
                        ProducerUse::StorageFailed => Some(Response::Error(ErrorResponse::new(
                            ErrorCode::StorageError,
                            "the producer-owners file could not be written",
                        ))),
                    }
                }),
            Request::Fetch(fetch) => topic(Operation::Read, fetch.topic),
            Request::DescribeProducers(describe) => topic(Operation::Read, describe.topic),
            Request::DescribeTopic(describe) => topic(Operation::Describe, describe.topic),
            Request::DeleteTopic(delete) => topic(Operation::Describe, delete.topic)
                .or_else(|| topic(Operation::Delete, delete.topic)),
            Request::CreateTopic(CreateTopicRequest { topic, .. })
            | Request::CreateTopicWith(CreateTopicWithRequest { topic, .. }) => {
                (!self.guard.may_create_topic(topic))
                    .then(|| self.denied(Operation::Create, &format!("TOPIC {topic}")))
            }
            Request::DescribeTopicConfigs(describe) => {
                topic(Operation::DescribeConfigs, describe.topic)
            }
            Request::AlterTopicConfigs(alter) => topic(Operation::AlterConfigs, alter.topic),
            Request::InitProducer(_) => (!self.guard.may_write_idempotently())
                .then(|| self.denied(Operation::IdempotentWrite, "CLUSTER kafka-cluster")),
            Request::Metadata | Request::Authenticate(_) => None,
        }
    }

    /// Encodes a short error answer; such answers always fit a frame.
    fn encode_error(&mut self, correlation_id: u32, response: &Response, out: &mut BytesMut) {
        if let Err(error) = self.codec.encode((correlation_id, response), out) {
            tracing::warn!(%error, "an error answer did not encode");
        }
    }
    /// Serves one decoded frame; a frame that did not decode gets an error answer with its
    /// correlation id (0 when even the header is missing).
    fn respond(&mut self, decoded: Decoded<'_>) -> (u32, Response) {
        match decoded {
            Ok((correlation_id, request)) => {
                tracing::trace!(correlation_id, kind = request.kind(), "request");
                let kind = request.kind();
                let started = self.timings.as_ref().map(ConnectionTimings::start);
                let handled = match self.refusal(&request) {
                    Some(refused) => Ok(refused),
                    None => self.handle(request),
                };
                if let (Some(timings), Some(started)) = (&mut self.timings, started) {
                    timings.record_since(kind, started);
                }
                let response = handled.unwrap_or_else(|error| {
                    tracing::debug!(%error, "request refused");
                    Response::Error(ErrorResponse::new(
                        wire_code(error.kind()),
                        error.to_string(),
                    ))
                });
                (correlation_id, response)
            }
            Err(BadFrame {
                correlation_id,
                error,
            }) => {
                tracing::debug!(%error, "undecodable request");
                let code = match error {
                    ProtocolError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
                    _ => ErrorCode::MalformedRequest,
                };
                let message = match code {
                    ErrorCode::MalformedRequest => format!("malformed request: {error}"),
                    _ => error.to_string(),
                };
                (
                    correlation_id.unwrap_or(0),
                    Response::Error(ErrorResponse::new(code, message)),
                )
            }
        }
    }

    /// Serves `request`, which borrows from its frame (a produce request's batch is read in
    /// place and copied once, into the log).
    fn handle(&mut self, request: Request<'_>) -> Result<Response, BrokerError> {
        let broker = &*self.broker;
        // Batch data an answer may hold, so that a fetch answer always fits one frame.
        let room = minibroker_broker::batch_room(self.max_frame_bytes);
        Ok(match request {
            Request::Produce(produce) => {
                // The batch is borrowed from the frame: the log copies it, nothing keeps it.
                let verdict = broker.produce(
                    &mut self.unacknowledged,
                    produce.topic,
                    produce.partition,
                    produce.batch,
                )?;
                Response::Produce(ProduceResponse {
                    outcome: verdict.outcome,
                    base_offset: verdict.base_offset,
                })
            }
            Request::Fetch(fetch) => {
                let max_bytes = (fetch.max_bytes as usize).min(room);
                let fetched = broker.fetch(
                    fetch.topic,
                    fetch.partition,
                    fetch.offset,
                    max_bytes,
                    FETCH_BATCH_OVERHEAD,
                    // Native producers are not transactional: there is nothing to hide.
                    Isolation::ReadUncommitted,
                )?;
                Response::Fetch(fetch_response(fetched))
            }
            Request::InitProducer(init) => {
                // With authorisation on, only the id's owner may bump it: anyone else gets a
                // new id.
                let known = init.producer_id.filter(|&id| self.guard.owns_producer(id));
                let identity = broker.init_producer(known)?;
                if let Err(error) = self.guard.record_producer(identity.producer_id) {
                    tracing::warn!(%error, "the producer-owners file could not be written");
                    return Ok(Response::Error(ErrorResponse::new(
                        ErrorCode::StorageError,
                        "the producer-owners file could not be written",
                    )));
                }
                Response::InitProducer(InitProducerResponse {
                    producer_id: identity.producer_id,
                    epoch: identity.epoch,
                })
            }
            Request::DescribeProducers(describe) => {
                let fits = (room / DESCRIBED_PRODUCER_BYTES).max(1);
                let limit = match describe.limit as usize {
                    0 => fits,
                    n => n.min(fits),
                };
                let page = broker.describe_producers(
                    describe.topic,
                    describe.partition,
                    describe.after_producer_id,
                    limit,
                )?;
                Response::DescribeProducers(describe_response(page))
            }
            Request::CreateTopic(create) => {
                broker.create_topic(create.topic, create.partitions)?;
                Response::Done
            }
            Request::CreateTopicWith(create) => {
                let settings: Vec<(&str, &str)> = create
                    .settings
                    .iter()
                    .map(|setting| (setting.name, setting.value))
                    .collect();
                broker.create_topic_with(create.topic, create.partitions, &settings)?;
                Response::Done
            }
            Request::DescribeTopicConfigs(describe) => {
                Response::TopicConfigs(topic_configs(broker, describe.topic)?)
            }
            Request::AlterTopicConfigs(alter) => {
                let changes: Vec<SettingChange<'_>> = alter
                    .changes
                    .iter()
                    .map(|change| match *change {
                        TopicConfigChange::Set(setting) => {
                            SettingChange::Set(setting.name, setting.value)
                        }
                        TopicConfigChange::Delete(name) => SettingChange::Delete(name),
                    })
                    .collect();
                broker.change_topic_settings(alter.topic, &changes, false)?;
                Response::Done
            }
            Request::DeleteTopic(delete) => {
                broker.delete_topic(delete.topic)?;
                Response::Done
            }
            Request::DescribeTopic(describe) => {
                let partitions = broker.describe_topic(describe.topic)?;
                Response::DescribeTopic(DescribeTopicResponse {
                    name: describe.topic.to_owned(),
                    partitions: partitions
                        .into_iter()
                        .map(|p| PartitionDescription {
                            partition: p.partition,
                            log_start_offset: p.log_start_offset,
                            log_end_offset: p.log_end_offset,
                            stored_bytes: p.stored_bytes,
                            producers: p.producers,
                        })
                        .collect(),
                })
            }
            Request::Metadata => Response::Metadata(MetadataResponse {
                topics: broker
                    .metadata()
                    .into_iter()
                    // Only what the principal may describe.
                    .filter(|topic| {
                        self.guard
                            .may_see(Operation::Describe, ResourceType::Topic, &topic.name)
                    })
                    .map(|topic| TopicMetadata {
                        name: topic.name,
                        partitions: topic.partitions,
                    })
                    .collect(),
            }),
            // Served before the request reaches here (`answer`); one out of turn is refused.
            Request::Authenticate(_) => Response::Error(ErrorResponse::new(
                ErrorCode::AuthenticationFailed,
                "an Authenticate out of turn",
            )),
        })
    }
}

fn fetch_response(fetched: Fetched) -> FetchResponse {
    FetchResponse {
        high_watermark: fetched.high_watermark,
        log_start_offset: fetched.log_start_offset,
        batches: fetched.batches,
    }
}

/// `topic`'s settings, each with where its value comes from.
fn topic_configs(broker: &Broker, topic: &str) -> Result<TopicConfigsResponse, BrokerError> {
    let configs = broker
        .topic_configs(topic)?
        .into_iter()
        .map(|entry| TopicConfig {
            name: entry.name.to_owned(),
            value: entry.value,
            source: match entry.source {
                ConfigSource::Topic => ConfigOrigin::Topic,
                ConfigSource::Broker => ConfigOrigin::Broker,
                ConfigSource::Default => ConfigOrigin::Default,
            },
        })
        .collect();
    Ok(TopicConfigsResponse {
        topic: topic.to_owned(),
        configs,
    })
}

fn describe_response(page: ProducerPage) -> DescribeProducersResponse {
    DescribeProducersResponse {
        producers: page
            .producers
            .into_iter()
            .map(|producer| ProducerState {
                producer_id: producer.producer_id,
                epoch: producer.entry.epoch(),
                last_sequence: producer.entry.last_sequence().unwrap_or(-1),
                last_base_offset: producer.entry.batches().next().and_then(|b| b.base_offset),
                // At most CACHED_BATCHES (5).
                cached_batches: producer.entry.batches().len() as u8,
            })
            .collect(),
        next_after: page.next_after,
    }
}

/// The native wire code of each kind of refusal.
fn wire_code(kind: ErrorKind) -> ErrorCode {
    match kind {
        ErrorKind::InvalidInput => ErrorCode::InvalidInput,
        ErrorKind::UnknownTopic => ErrorCode::UnknownTopic,
        ErrorKind::PartitionOutOfRange => ErrorCode::PartitionOutOfRange,
        ErrorKind::CorruptBatch => ErrorCode::CorruptBatch,
        ErrorKind::InvalidBatch | ErrorKind::BatchTooLarge => ErrorCode::InvalidBatch,
        // The native protocol has no transactions: a transactional batch is never expected.
        ErrorKind::InvalidTxnState
        | ErrorKind::NotAddedToTransaction
        | ErrorKind::AbortedEpoch
        | ErrorKind::ProducerFenced => ErrorCode::Unsupported,
        ErrorKind::OffsetOutOfRange => ErrorCode::OffsetOutOfRange,
        ErrorKind::UnknownProducerId => ErrorCode::UnknownProducerId,
        ErrorKind::EpochExhausted => ErrorCode::EpochExhausted,
        ErrorKind::StorageFull => ErrorCode::StorageFull,
        ErrorKind::Storage => ErrorCode::StorageError,
        // The native protocol has no topic administration; these never reach it.
        ErrorKind::TopicAlreadyExists | ErrorKind::InvalidPartitions => ErrorCode::InvalidInput,
    }
}
