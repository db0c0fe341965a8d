//! Request and response types.
//!
//! Requests borrow from the frame they were decoded from (topic names and batch bytes are not
//! copied until the broker stores them); responses own their data. Records travel as Kafka v2
//! record batches (see `minibroker_records`), the format the broker stores: a produce request
//! carries one batch, whose header holds the producer id, epoch and base sequence, and a fetch
//! answer carries whole stored batches. Enum variants are encoded by position, so new variants
//! are only ever added at the end.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The four outcomes of the exactly-once rule: the state crate's, carried as they are.
pub use minibroker_state::Outcome;

/// A request from a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request<'a> {
    /// Append one batch of records, validated by the exactly-once rule.
    #[serde(borrow)]
    Produce(ProduceRequest<'a>),
    /// Read records from an offset.
    #[serde(borrow)]
    Fetch(FetchRequest<'a>),
    /// Get a new producer id, or bump the epoch of an issued one (fencing its old instance).
    InitProducer(InitProducerRequest),
    /// The stored producer state of one partition.
    #[serde(borrow)]
    DescribeProducers(DescribeProducersRequest<'a>),
    /// Every topic and its partition count.
    Metadata,
    /// Create a topic (an admin request; topics are also created on first produce).
    #[serde(borrow)]
    CreateTopic(CreateTopicRequest<'a>),
    /// Delete a topic and everything it stores.
    #[serde(borrow)]
    DeleteTopic(TopicRequest<'a>),
    /// A topic's partitions: offsets, bytes and producers.
    #[serde(borrow)]
    DescribeTopic(TopicRequest<'a>),
    /// One step of a SASL login, on a listener that asks for one: the mechanism, and its next
    /// token (PLAIN's message; SCRAM's client-first, then client-final).
    #[serde(borrow)]
    Authenticate(AuthenticateRequest<'a>),
    /// Create a topic with settings of its own (Kafka's topic-level names and values).
    #[serde(borrow)]
    CreateTopicWith(CreateTopicWithRequest<'a>),
    /// A topic's settings, each with where its value comes from.
    #[serde(borrow)]
    DescribeTopicConfigs(TopicRequest<'a>),
    /// Change a topic's own settings, in order, all or none.
    #[serde(borrow)]
    AlterTopicConfigs(AlterTopicConfigsRequest<'a>),
}

/// Create a topic with settings of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTopicWithRequest<'a> {
    /// Its name.
    pub topic: &'a str,
    /// How many partitions.
    pub partitions: u32,
    /// Its settings (`retention.ms` and the like), each checked before anything is made.
    #[serde(borrow)]
    pub settings: Vec<TopicSetting<'a>>,
}

/// One setting, by Kafka's topic-level name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSetting<'a> {
    /// Its name (`retention.ms`).
    pub name: &'a str,
    /// Its value, as Kafka writes it (`-1` for no limit).
    pub value: &'a str,
}

/// Change a topic's own settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterTopicConfigsRequest<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The changes, applied in order; one refused refuses them all.
    #[serde(borrow)]
    pub changes: Vec<TopicConfigChange<'a>>,
}

/// One change to a topic's own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TopicConfigChange<'a> {
    /// Give the topic its own value.
    #[serde(borrow)]
    Set(TopicSetting<'a>),
    /// Drop the topic's own value: the broker's (or the default) applies again.
    Delete(&'a str),
}

/// A topic's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfigsResponse {
    /// The topic.
    pub topic: String,
    /// Every setting, by name.
    pub configs: Vec<TopicConfig>,
}

/// One setting of a topic, as it applies now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// Kafka's name for it.
    pub name: String,
    /// Its value, as Kafka writes it.
    pub value: String,
    /// Where the value comes from.
    pub source: ConfigOrigin,
}

/// Where a setting's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigOrigin {
    /// The topic's own (set when it was created, or changed since).
    Topic,
    /// The broker's configuration, for every topic without its own.
    Broker,
    /// Nobody set it.
    Default,
}

impl fmt::Display for ConfigOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Topic => "topic",
            Self::Broker => "broker",
            Self::Default => "default",
        })
    }
}

/// One step of a login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthenticateRequest<'a> {
    /// The mechanism (SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN); it is chosen by the first step
    /// and must be the same in the next.
    pub mechanism: &'a str,
    /// The step's token.
    #[serde(borrow)]
    pub token: &'a serde_bytes::Bytes,
}

/// The broker's answer to a login step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthenticateResponse {
    /// The broker's token: SCRAM's server-first, or its server-final once logged in.
    pub token: Bytes,
    /// Whether the login is done: requests are served from now on.
    pub complete: bool,
    /// How long the session lasts, in ms (0: for the connection's life); log in again on the
    /// connection before it ends.
    pub session_lifetime_ms: u64,
}

impl Request<'_> {
    /// A short name for logs.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Produce(_) => "produce",
            Self::Fetch(_) => "fetch",
            Self::InitProducer(_) => "init-producer",
            Self::DescribeProducers(_) => "describe-producers",
            Self::Metadata => "metadata",
            Self::CreateTopic(_) => "create-topic",
            Self::DeleteTopic(_) => "delete-topic",
            Self::DescribeTopic(_) => "describe-topic",
            Self::Authenticate(_) => "authenticate",
            Self::CreateTopicWith(_) => "create-topic",
            Self::DescribeTopicConfigs(_) => "describe-topic-configs",
            Self::AlterTopicConfigs(_) => "alter-topic-configs",
        }
    }
}

/// Append one batch. Its records take one sequence each, from the batch's base sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProduceRequest<'a> {
    /// Topic name.
    pub topic: &'a str,
    /// Partition within the topic.
    pub partition: u32,
    /// One Kafka v2 record batch, at least one record, stored as it is.
    #[serde(borrow)]
    pub batch: &'a serde_bytes::Bytes,
}

/// Read the batches holding `offset` and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchRequest<'a> {
    /// Topic name.
    pub topic: &'a str,
    /// Partition within the topic.
    pub partition: u32,
    /// First offset wanted.
    pub offset: i64,
    /// Stop before the batches exceed this many bytes (at least one batch is returned if any).
    pub max_bytes: u32,
}

/// Ask for a producer id and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitProducerRequest {
    /// `None` for a new producer id at epoch 0; `Some(id)` to bump the epoch of an issued id.
    pub producer_id: Option<i64>,
}

/// Ask for one page of a partition's producer state, in ascending producer id order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeProducersRequest<'a> {
    /// Topic name.
    pub topic: &'a str,
    /// Partition within the topic.
    pub partition: u32,
    /// Start after this producer id: `None` for the first page, else the previous answer's
    /// [`DescribeProducersResponse::next_after`].
    pub after_producer_id: Option<i64>,
    /// Most producers in the answer; the broker caps it further (so one answer always fits a
    /// frame), and 0 asks for the broker's cap.
    pub limit: u32,
}

/// The broker's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The outcome of a produce request.
    Produce(ProduceResponse),
    /// Records read.
    Fetch(FetchResponse),
    /// The producer id and epoch to use.
    InitProducer(InitProducerResponse),
    /// A partition's producer state.
    DescribeProducers(DescribeProducersResponse),
    /// Topics and partition counts.
    Metadata(MetadataResponse),
    /// The request could not be served.
    Error(ErrorResponse),
    /// An admin request was carried out.
    Done,
    /// A topic's partitions.
    DescribeTopic(DescribeTopicResponse),
    /// A login step's answer.
    Authenticate(AuthenticateResponse),
    /// A topic's settings.
    TopicConfigs(TopicConfigsResponse),
}

/// Create a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTopicRequest<'a> {
    /// Its name.
    pub topic: &'a str,
    /// How many partitions.
    pub partitions: u32,
}

/// A request about one topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRequest<'a> {
    /// The topic.
    pub topic: &'a str,
}

/// A topic's partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeTopicResponse {
    /// The topic.
    pub name: String,
    /// Every partition, by index.
    pub partitions: Vec<PartitionDescription>,
}

/// One partition of a described topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionDescription {
    /// Its index.
    pub partition: u32,
    /// The first offset held.
    pub log_start_offset: i64,
    /// The next offset to be written.
    pub log_end_offset: i64,
    /// Batch bytes held.
    pub stored_bytes: u64,
    /// Producers with state on it.
    pub producers: u64,
}

/// The answer to a produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProduceResponse {
    /// What the rule decided.
    pub outcome: Outcome,
    /// ACCEPTED: the batch's base offset. DUPLICATE: the original's base offset when known.
    pub base_offset: Option<i64>,
}

/// Batches read from a partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchResponse {
    /// The offset the next appended record will get.
    pub high_watermark: i64,
    /// The first offset the partition holds.
    pub log_start_offset: i64,
    /// Whole stored batches in offset order (Kafka v2 record batches); the first may begin before
    /// the offset asked for.
    pub batches: Vec<Bytes>,
}

/// A producer id and the epoch to use with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitProducerResponse {
    /// The producer id.
    pub producer_id: i64,
    /// The epoch; older epochs of this id are now fenced.
    pub epoch: i16,
}

/// One page of the producer state of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeProducersResponse {
    /// One entry per producer, by producer id.
    pub producers: Vec<ProducerState>,
    /// When more producers follow: the id to pass as `after_producer_id` for the next page.
    pub next_after: Option<i64>,
}

/// What the broker remembers about one producer on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    /// The producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
    /// The last sequence accepted in that epoch (-1 when a transaction marker began the epoch
    /// and no batch followed yet).
    pub last_sequence: i32,
    /// Base offset of the last accepted batch.
    pub last_base_offset: Option<i64>,
    /// How many recent batches are cached for answering duplicates with their offsets.
    pub cached_batches: u8,
}

/// Topics and partition counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataResponse {
    /// Every topic, by name.
    pub topics: Vec<TopicMetadata>,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMetadata {
    /// Its name.
    pub name: String,
    /// How many partitions it has.
    pub partitions: u32,
}

/// Why a request failed: a code to branch on and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// What kind of failure.
    pub code: ErrorCode,
    /// What exactly went wrong, for a person.
    pub message: String,
}

/// Kinds of failure. Expected rejections of the rule (DUPLICATE and so on) are outcomes, not
/// errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The frame's body could not be decoded (including an unknown request kind).
    MalformedRequest,
    /// The frame's version byte is not supported.
    UnsupportedVersion,
    /// The topic does not exist and auto-creation is off.
    UnknownTopic,
    /// The topic exists but has no such partition.
    PartitionOutOfRange,
    /// A field is outside its range: a negative producer id, epoch, sequence or offset, a bad
    /// topic name.
    InvalidInput,
    /// A record batch whose bytes are damaged: bad length, CRC or encoding.
    CorruptBatch,
    /// A fetch offset outside the partition's log.
    OffsetOutOfRange,
    /// An init-producer request named a producer id this broker never issued, or a batch's
    /// producer id was forgotten since it was issued (init the producer again).
    UnknownProducerId,
    /// The producer's epoch cannot be bumped further.
    EpochExhausted,
    /// The broker's storage limit (stored bytes or topic count) is reached.
    StorageFull,
    /// An unexpected failure inside the broker.
    Internal,
    /// The broker already serves its maximum of connections; this one is closed.
    TooManyConnections,
    /// A well-formed record batch the broker does not accept: no records, a record count that
    /// does not match its offsets, an old format.
    InvalidBatch,
    /// Something this broker does not do (yet): transactional batches.
    Unsupported,
    /// The broker could not write or sync the partition's files; the partition is read-only
    /// until the broker is restarted. Nothing of the refused batch was acknowledged.
    StorageError,
    /// The login failed (a wrong password, an unknown user, a bad message); the connection is
    /// closed.
    AuthenticationFailed,
    /// The listener asks for a login first (or the session's lifetime is over); the
    /// connection is closed.
    AuthenticationRequired,
    /// The ACLs do not let the connection's principal do this.
    NotAuthorized,
    /// A native request reached the broker's Kafka listener; the connection is closed. Not to
    /// be retried: the address is the wrong one.
    WrongListener,
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::MalformedRequest => "MALFORMED_REQUEST",
            Self::UnsupportedVersion => "UNSUPPORTED_VERSION",
            Self::UnknownTopic => "UNKNOWN_TOPIC",
            Self::PartitionOutOfRange => "PARTITION_OUT_OF_RANGE",
            Self::InvalidInput => "INVALID_INPUT",
            Self::CorruptBatch => "CORRUPT_BATCH",
            Self::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            Self::UnknownProducerId => "UNKNOWN_PRODUCER_ID",
            Self::EpochExhausted => "EPOCH_EXHAUSTED",
            Self::StorageFull => "STORAGE_FULL",
            Self::Internal => "INTERNAL",
            Self::TooManyConnections => "TOO_MANY_CONNECTIONS",
            Self::InvalidBatch => "INVALID_BATCH",
            Self::Unsupported => "UNSUPPORTED",
            Self::StorageError => "STORAGE_ERROR",
            Self::AuthenticationFailed => "AUTHENTICATION_FAILED",
            Self::AuthenticationRequired => "AUTHENTICATION_REQUIRED",
            Self::NotAuthorized => "NOT_AUTHORIZED",
            Self::WrongListener => "WRONG_LISTENER",
        };
        f.write_str(name)
    }
}

impl ErrorResponse {
    /// An error response with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for ErrorResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}
