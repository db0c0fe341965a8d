//! [`KafkaConnection`]: one connection to a Kafka listener, speaking request and answer with the
//! `kafka-protocol` crate's messages. The verifier reads topics with it, `minibroker groups`
//! asks for groups and offsets, [`KafkaProducer`] produces idempotently (or in transactions)
//! over it, and the tests
//! drive the Kafka front end with it, so the framing, the correlation ids and the header
//! versions are written once.
//!
//! A request is framed by [`encode_request`] (length, header, body); an
//! answer is read as a length-prefixed frame of at most [`MAX_ANSWER_BYTES`], its response
//! header decoded at the version the API asks for, and its correlation id checked. Every read
//! has a timeout ([`KafkaConnection::with_answer_timeout`]), so a broker that stops answering
//! is an error, never a hang.

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use minibroker_framing::{Frames, FramingError};
use std::fmt::Display;
use std::time::Duration;
use thiserror::Error;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio_util::codec::Framed;

mod consumer;
mod fetched;
mod producer;
mod request;
pub use consumer::{
    Assigned, KafkaConsumer, KafkaConsumerConfig, KafkaConsumerError, Polled, PolledRecord,
};
pub use fetched::{kept_by_read_committed, whole_batches};
pub use producer::{
    GroupMember, KafkaAck, KafkaProduceError, KafkaProducer, KafkaProducerConfig,
    KafkaProducerStats, agree_versions,
};
pub use request::{EncodeError, encode_request};

/// The largest answer read (a Kafka fetch answer may be large; a frame claiming more is refused).
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// How long an answer may take unless set otherwise.
pub const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a request got no answer.
#[derive(Debug, Error)]
pub enum KafkaClientError {
    /// The connection failed.
    #[error("talking to {addr}: {source}")]
    Io {
        /// The broker.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The request did not encode.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The answer did not decode.
    #[error("an answer from {addr} did not decode (is it a Kafka listener?): {source}")]
    Decode {
        /// The broker.
        addr: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The broker closed the connection instead of answering.
    #[error("{addr} closed the connection instead of answering")]
    Closed {
        /// The broker.
        addr: String,
    },
    /// An answer to another request.
    #[error("{addr} answered request {answered}, not {asked}")]
    Correlation {
        /// The broker.
        addr: String,
        /// The correlation id asked.
        asked: i32,
        /// The one answered.
        answered: i32,
    },
    /// A frame longer than [`MAX_ANSWER_BYTES`].
    #[error("{addr} sent an answer of {bytes} bytes")]
    TooLarge {
        /// The broker.
        addr: String,
        /// Its length.
        bytes: usize,
    },
    /// No answer within the timeout.
    #[error("{addr} did not answer within {timeout:?}")]
    Timeout {
        /// The broker.
        addr: String,
        /// The timeout.
        timeout: Duration,
    },
}

/// A coordinator as FindCoordinator names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    /// Its node id.
    pub node_id: i32,
    /// Its Kafka listener, `host:port`.
    pub addr: String,
}

/// One connection to a Kafka listener.
#[derive(Debug)]
pub struct KafkaConnection {
    addr: String,
    /// Answers are read through the frame decoder; requests are written to the socket itself.
    stream: Framed<TcpStream, Frames>,
    next_correlation_id: i32,
    client_id: &'static str,
    answer_timeout: Duration,
}

impl KafkaConnection {
    /// Connects to `addr`.
    ///
    /// # Errors
    /// [`KafkaClientError::Io`] if it cannot.
    pub async fn connect(addr: impl ToSocketAddrs + Display) -> Result<Self, KafkaClientError> {
        let name = addr.to_string();
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| KafkaClientError::Io {
                addr: name.clone(),
                source,
            })?;
        Ok(Self {
            addr: name,
            stream: Framed::new(stream, Frames::new(MAX_ANSWER_BYTES)),
            next_correlation_id: 1,
            client_id: "minibroker",
            answer_timeout: DEFAULT_ANSWER_TIMEOUT,
        })
    }

    /// The client id sent in every request header.
    #[must_use]
    pub fn with_client_id(self, client_id: &'static str) -> Self {
        Self { client_id, ..self }
    }

    /// How long an answer may take.
    #[must_use]
    pub fn with_answer_timeout(self, answer_timeout: Duration) -> Self {
        Self {
            answer_timeout,
            ..self
        }
    }

    /// Changes how long the next answers may take.
    pub fn set_answer_timeout(&mut self, answer_timeout: Duration) {
        self.answer_timeout = answer_timeout;
    }

    fn io(&self, source: std::io::Error) -> KafkaClientError {
        KafkaClientError::Io {
            addr: self.addr.clone(),
            source,
        }
    }

    /// Writes one request of `api` at `version`; returns its correlation id.
    ///
    /// # Errors
    /// If it does not encode or the write fails.
    pub async fn send<R: Encodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &R,
    ) -> Result<i32, KafkaClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let mut frame = BytesMut::new();
        encode_request(
            &mut frame,
            api,
            version,
            correlation_id,
            Some(self.client_id),
            request,
        )?;
        self.write_raw(&frame).await?;
        Ok(correlation_id)
    }

    /// Writes `bytes` as they are (a test's malformed frame).
    ///
    /// # Errors
    /// If the write fails.
    pub async fn write_raw(&mut self, bytes: &[u8]) -> Result<(), KafkaClientError> {
        self.stream
            .get_mut()
            .write_all(bytes)
            .await
            .map_err(|e| self.io(e))
    }

    /// Reads the next answer, as `api` at `version`, with its correlation id; `None` if the
    /// broker closed the connection instead.
    ///
    /// # Errors
    /// If the frame is too large or does not decode, or nothing arrives in time.
    pub async fn receive<T: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
    ) -> Result<Option<(i32, T)>, KafkaClientError> {
        let timeout = self.answer_timeout;
        let frame = tokio::time::timeout(timeout, self.next_frame())
            .await
            .map_err(|_| KafkaClientError::Timeout {
                addr: self.addr.clone(),
                timeout,
            })??;
        let Some(mut frame) = frame else {
            return Ok(None);
        };
        let decode = |source: Box<dyn std::error::Error + Send + Sync>| KafkaClientError::Decode {
            addr: self.addr.clone(),
            source,
        };
        let header = ResponseHeader::decode(&mut frame, api.response_header_version(version))
            .map_err(|e| decode(e.into()))?;
        let answer = T::decode(&mut frame, version).map_err(|e| decode(e.into()))?;
        Ok(Some((header.correlation_id, answer)))
    }

    /// Sends `request` and reads its answer.
    ///
    /// # Errors
    /// As [`Self::send`] and [`Self::receive`]; [`KafkaClientError::Closed`] if the broker
    /// closed the connection, [`KafkaClientError::Correlation`] for an answer to another request.
    pub async fn call<R: Encodable, T: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &R,
    ) -> Result<T, KafkaClientError> {
        let asked = self.send(api, version, request).await?;
        match self.receive(api, version).await? {
            Some((answered, answer)) if answered == asked => Ok(answer),
            Some((answered, _)) => Err(KafkaClientError::Correlation {
                addr: self.addr.clone(),
                asked,
                answered,
            }),
            None => Err(KafkaClientError::Closed {
                addr: self.addr.clone(),
            }),
        }
    }

    /// The coordinator FindCoordinator names for `key` (a consumer group, `key_type` 0, or a
    /// transactional id, 1): its node id and `host:port`, or the broker's error code.
    ///
    /// # Errors
    /// As [`Self::call`].
    pub async fn find_coordinator(
        &mut self,
        key: &str,
        key_type: i8,
    ) -> Result<Result<Coordinator, i16>, KafkaClientError> {
        let request = kafka_protocol::messages::FindCoordinatorRequest::default()
            .with_key(kafka_protocol::protocol::StrBytes::from_string(
                key.to_owned(),
            ))
            .with_key_type(key_type);
        let found: kafka_protocol::messages::FindCoordinatorResponse =
            self.call(ApiKey::FindCoordinator, 3, &request).await?;
        if found.error_code != 0 {
            return Ok(Err(found.error_code));
        }
        Ok(Ok(Coordinator {
            node_id: found.node_id.0,
            addr: format!("{}:{}", found.host, found.port),
        }))
    }

    /// A connection to the coordinator that FindCoordinator, asked of `bootstrap`, names for
    /// `key` (a group, key type 0, or a transactional id, 1), sending `client_id` and waiting
    /// `timeout` for answers; the broker's error code when it names none.
    ///
    /// # Errors
    /// If either broker cannot be reached or does not answer.
    pub async fn to_coordinator(
        bootstrap: &str,
        (key, key_type): (&str, i8),
        client_id: &'static str,
        timeout: Duration,
    ) -> Result<Result<Self, i16>, KafkaClientError> {
        let mut asked = Self::connect(bootstrap)
            .await?
            .with_client_id(client_id)
            .with_answer_timeout(timeout);
        let found = match asked.find_coordinator(key, key_type).await? {
            Ok(found) => found,
            Err(code) => return Ok(Err(code)),
        };
        Ok(Ok(Self::connect(found.addr.as_str())
            .await?
            .with_client_id(client_id)
            .with_answer_timeout(timeout)))
    }

    /// The next length-prefixed frame, `None` at a close (clean, a reset, or in the middle of
    /// a frame).
    async fn next_frame(&mut self) -> Result<Option<Bytes>, KafkaClientError> {
        match self.stream.next().await {
            None => Ok(None),
            Some(Ok(frame)) => Ok(Some(frame.freeze())),
            Some(Err(FramingError::TooLarge { size, .. })) => Err(KafkaClientError::TooLarge {
                addr: self.addr.clone(),
                bytes: size,
            }),
            Some(Err(FramingError::Io(error)))
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                Ok(None)
            }
            Some(Err(FramingError::Io(error))) => Err(self.io(error)),
        }
    }
}

/// A Metadata request for `topic` alone; `create` lets a broker that creates topics on demand
/// create it.
#[must_use]
pub fn metadata_request(topic: &str, create: bool) -> kafka_protocol::messages::MetadataRequest {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    kafka_protocol::messages::MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_string(
                topic.to_owned(),
            )),
        ))]))
        .with_allow_auto_topic_creation(create)
}

/// A Kafka error code as Kafka names it, with the number: `UNKNOWN_TOPIC_OR_PARTITION (3)`.
#[must_use]
pub fn error_name(code: i16) -> String {
    match kafka_protocol::ResponseError::try_from_code(code) {
        None => "NONE (0)".to_owned(),
        Some(kafka_protocol::ResponseError::Unknown(code)) => format!("UNKNOWN ({code})"),
        Some(error) => {
            let mut name = String::new();
            for (at, c) in error.to_string().chars().enumerate() {
                if c.is_ascii_uppercase() && at > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            format!("{name} ({code})")
        }
    }
}

#[cfg(test)]
mod error_names {
    #[test]
    fn codes_are_named_as_kafka_names_them() {
        assert_eq!(super::error_name(3), "UNKNOWN_TOPIC_OR_PARTITION (3)");
        assert_eq!(super::error_name(29), "TOPIC_AUTHORIZATION_FAILED (29)");
        assert_eq!(super::error_name(0), "NONE (0)");
        assert_eq!(super::error_name(-999), "UNKNOWN (-999)");
    }
}
