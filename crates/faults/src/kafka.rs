//! What the proxy understands of the Kafka protocol, so Kafka clients cannot go around it.
//!
//! Kafka clients learn broker addresses from answers — Metadata, FindCoordinator, DescribeCluster
//! — and connect to those, so a proxy that forwards bytes only carries the bootstrap request.
//! A Kafka-aware proxy reads each request's header (API, version, correlation id), remembers it
//! per connection, and rewrites every broker address in those answers to a listener of its own,
//! one per upstream broker (so a cluster of several works too). A Produce answer from version
//! 10 may name a new leader's endpoint (KIP-951) and is rewritten too (Produce v12 is what
//! KIP-890 part 2 clients need); Fetch answers, which carry the records, are not taken apart, so
//! the highest Fetch version advertised by ApiVersions is lowered to the last one whose answers
//! name no endpoint. Everything else passes as it came; knowing each frame's API lets faults be
//! aimed at some APIs only.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, DescribeClusterResponse, FindCoordinatorResponse,
    MetadataResponse, ProduceResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// Produce answers name leaders' endpoints from version 10, Fetch answers from 16.
const PRODUCE_WITH_ENDPOINTS: i16 = 10;
const FETCH_WITHOUT_ENDPOINTS: i16 = 15;

/// The largest Kafka frame relayed: twice a consumer's default `fetch.max.bytes` (50 MiB).
pub const MAX_FRAME_BYTES: usize = 100 << 20;

/// Requests remembered per connection before the oldest are forgotten (a client sending
/// requests that get no answer, such as Produce with acks=0, must not grow the map for ever).
const MAX_IN_FLIGHT: usize = 4096;

/// How the proxy treats Kafka traffic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KafkaAware {
    /// API keys faults are aimed at; empty for every API. Frames of other APIs pass untouched
    /// and are not counted by the fault schedules.
    pub apis: BTreeSet<i16>,
    /// The host written into rewritten addresses (default: the proxy's listening address).
    pub advertise_host: Option<String>,
}

impl KafkaAware {
    /// Whether faults may hit a frame of `api` (unknown: only when faults aim at every API).
    #[must_use]
    pub fn aims_at(&self, api: Option<i16>) -> bool {
        self.apis.is_empty() || api.is_some_and(|api| self.apis.contains(&api))
    }
}

/// A Kafka API named that no API has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownApi {
    /// A number that is no API's key.
    #[error("no Kafka API has key {0}")]
    Key(i16),
    /// A name that is no API's.
    #[error("no Kafka API is called {0:?}")]
    Name(String),
}

/// An API key from its name as Kafka spells it (`Produce`, `produce`, `FindCoordinator`,
/// `find-coordinator`, `find_coordinator`) or its number.
///
/// # Errors
/// [`UnknownApi`] when no API has it.
pub fn api_key(name: &str) -> Result<i16, UnknownApi> {
    if let Ok(number) = name.parse::<i16>() {
        return ApiKey::try_from(number)
            .map(|key| key as i16)
            .map_err(|()| UnknownApi::Key(number));
    }
    let wanted = name.replace(['-', '_'], "").to_ascii_lowercase();
    (0..=i16::MAX)
        .take(1000)
        .filter_map(|key| ApiKey::try_from(key).ok())
        .find(|api| format!("{api:?}").to_ascii_lowercase() == wanted)
        .map(|api| api as i16)
        .ok_or_else(|| UnknownApi::Name(name.to_owned()))
}

/// The name of API `key`, for logs.
#[must_use]
pub fn api_name(key: i16) -> String {
    ApiKey::try_from(key).map_or_else(|()| format!("api {key}"), |api| format!("{api:?}"))
}

/// A request's API key, version and correlation id, from the first 8 bytes of its header.
#[must_use]
pub fn request_header(frame: &[u8]) -> Option<(i16, i16, i32)> {
    let field = |at: usize, n: usize| frame.get(at..at + n);
    let api = i16::from_be_bytes(field(0, 2)?.try_into().ok()?);
    let version = i16::from_be_bytes(field(2, 2)?.try_into().ok()?);
    let correlation = i32::from_be_bytes(field(4, 4)?.try_into().ok()?);
    Some((api, version, correlation))
}

/// An answer's correlation id (its first 4 bytes, in every response header version).
#[must_use]
pub fn response_correlation(frame: &[u8]) -> Option<i32> {
    Some(i32::from_be_bytes(frame.get(..4)?.try_into().ok()?))
}

/// One connection's requests awaiting answers: correlation id → (API key, version).
#[derive(Debug, Default)]
pub(crate) struct InFlight(Mutex<HashMap<i32, (i16, i16)>>);

impl InFlight {
    pub(crate) fn asked(&self, correlation: i32, api: i16, version: i16) {
        let mut asked = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if asked.len() >= MAX_IN_FLIGHT {
            asked.clear();
        }
        asked.insert(correlation, (api, version));
    }

    pub(crate) fn answered(&self, correlation: i32) -> Option<(i16, i16)> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&correlation)
    }
}

/// A broker address as (host, port).
type HostPort = (String, i32);

/// Given a broker's (host, port), the one to write instead, if any.
type Readdress<'a> = dyn FnMut(&str, i32) -> Option<HostPort> + 'a;

/// An answer that names brokers (or advertises versions), decoded to be rewritten.
pub(crate) enum Addressed {
    Metadata(MetadataResponse),
    FindCoordinator(FindCoordinatorResponse),
    DescribeCluster(DescribeClusterResponse),
    ApiVersions(ApiVersionsResponse),
    Produce(ProduceResponse),
}

/// An answer taken apart: its header, its body and how to put it back.
pub(crate) struct Answer {
    header: ResponseHeader,
    api: ApiKey,
    version: i16,
    pub(crate) body: Addressed,
}

impl Answer {
    /// `frame` as an answer to `api` at `version`, if it is one the proxy rewrites and it decodes.
    pub(crate) fn decode(frame: &BytesMut, api: i16, version: i16) -> Option<Self> {
        let api = ApiKey::try_from(api).ok()?;
        // Only these answers are taken apart: every other one (a Fetch's records among them)
        // passes without a copy.
        let names_brokers = match api {
            ApiKey::Metadata
            | ApiKey::FindCoordinator
            | ApiKey::DescribeCluster
            | ApiKey::ApiVersions => true,
            ApiKey::Produce => version >= PRODUCE_WITH_ENDPOINTS,
            _ => false,
        };
        if !names_brokers {
            return None;
        }
        let mut bytes = Bytes::copy_from_slice(frame);
        let header =
            ResponseHeader::decode(&mut bytes, api.response_header_version(version)).ok()?;
        let body = match api {
            ApiKey::Metadata => {
                Addressed::Metadata(MetadataResponse::decode(&mut bytes, version).ok()?)
            }
            ApiKey::FindCoordinator => Addressed::FindCoordinator(
                FindCoordinatorResponse::decode(&mut bytes, version).ok()?,
            ),
            ApiKey::DescribeCluster => Addressed::DescribeCluster(
                DescribeClusterResponse::decode(&mut bytes, version).ok()?,
            ),
            ApiKey::ApiVersions => {
                Addressed::ApiVersions(ApiVersionsResponse::decode(&mut bytes, version).ok()?)
            }
            ApiKey::Produce => {
                Addressed::Produce(ProduceResponse::decode(&mut bytes, version).ok()?)
            }
            _ => return None,
        };
        Some(Self {
            header,
            api,
            version,
            body,
        })
    }

    /// The broker addresses (`host:port`) the answer names.
    pub(crate) fn addresses(&mut self) -> Vec<String> {
        let mut found = Vec::new();
        self.visit(&mut |host, port| {
            found.push(format!("{host}:{port}"));
            None
        });
        found
    }

    /// Replaces every address the answer names by `routes[address]` (host, port), and lowers
    /// the advertised Fetch versions.
    pub(crate) fn readdress(&mut self, routes: &HashMap<String, HostPort>) {
        self.visit(&mut |host, port| routes.get(&format!("{host}:{port}")).cloned());
        if let Addressed::ApiVersions(versions) = &mut self.body {
            for key in &mut versions.api_keys {
                if ApiKey::try_from(key.api_key) == Ok(ApiKey::Fetch) {
                    key.max_version = key
                        .max_version
                        .min(FETCH_WITHOUT_ENDPOINTS)
                        .max(key.min_version);
                }
            }
        }
    }

    /// Calls `change(host, port)` on every address; where it returns a new one, writes it.
    fn visit(&mut self, change: &mut Readdress<'_>) {
        let mut one = |host: &mut StrBytes, port: &mut i32| {
            if host.is_empty() || *port < 0 {
                return; // an error answer names no broker
            }
            if let Some((new_host, new_port)) = change(host, *port) {
                *host = StrBytes::from_string(new_host);
                *port = new_port;
            }
        };
        match &mut self.body {
            Addressed::Metadata(answer) => {
                for broker in &mut answer.brokers {
                    one(&mut broker.host, &mut broker.port);
                }
            }
            Addressed::FindCoordinator(answer) => {
                one(&mut answer.host, &mut answer.port);
                for coordinator in &mut answer.coordinators {
                    one(&mut coordinator.host, &mut coordinator.port);
                }
            }
            Addressed::DescribeCluster(answer) => {
                for broker in &mut answer.brokers {
                    one(&mut broker.host, &mut broker.port);
                }
            }
            Addressed::Produce(answer) => {
                for endpoint in &mut answer.node_endpoints {
                    one(&mut endpoint.host, &mut endpoint.port);
                }
            }
            Addressed::ApiVersions(_) => {}
        }
    }

    /// The answer encoded again, header first; `None` if it does not encode (it is then
    /// forwarded as it came).
    pub(crate) fn encode(&self) -> Option<BytesMut> {
        let mut out = BytesMut::new();
        self.header
            .encode(&mut out, self.api.response_header_version(self.version))
            .ok()?;
        match &self.body {
            Addressed::Metadata(answer) => answer.encode(&mut out, self.version),
            Addressed::FindCoordinator(answer) => answer.encode(&mut out, self.version),
            Addressed::DescribeCluster(answer) => answer.encode(&mut out, self.version),
            Addressed::ApiVersions(answer) => answer.encode(&mut out, self.version),
            Addressed::Produce(answer) => answer.encode(&mut out, self.version),
        }
        .ok()?;
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;

    #[test]
    fn apis_are_named_as_kafka_names_them() {
        assert_eq!(api_key("produce"), Ok(0));
        assert_eq!(api_key("Produce"), Ok(0));
        assert_eq!(api_key("find-coordinator"), Ok(10));
        assert_eq!(api_key("InitProducerId"), Ok(22));
        assert_eq!(api_key("1"), Ok(1));
        assert!(api_key("nosuch").is_err());
        assert_eq!(api_name(3), "Metadata");
        assert_eq!(api_name(-7), "api -7");
    }

    #[test]
    fn metadata_brokers_are_readdressed() {
        let answer = MetadataResponse::default().with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("kafka-1"))
                .with_port(9092),
        ]);
        for version in [1, 9, 12] {
            let mut frame = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(5)
                .encode(
                    &mut frame,
                    ApiKey::Metadata.response_header_version(version),
                )
                .unwrap();
            answer.encode(&mut frame, version).unwrap();
            let mut decoded = Answer::decode(&frame, 3, version).expect("decodes");
            assert_eq!(decoded.addresses(), vec!["kafka-1:9092".to_owned()]);
            let routes = [("kafka-1:9092".to_owned(), ("127.0.0.1".to_owned(), 4000))].into();
            decoded.readdress(&routes);
            let again = decoded.encode().expect("encodes");
            assert_eq!(response_correlation(&again), Some(5));
            let mut back = Answer::decode(&again, 3, version).expect("decodes again");
            assert_eq!(back.addresses(), vec!["127.0.0.1:4000".to_owned()]);
        }
    }

    fn frame_of<M: Encodable>(api: ApiKey, version: i16, answer: &M) -> BytesMut {
        let mut frame = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(9)
            .encode(&mut frame, api.response_header_version(version))
            .unwrap();
        answer.encode(&mut frame, version).unwrap();
        frame
    }

    #[test]
    fn coordinators_are_readdressed_in_every_version() {
        use kafka_protocol::messages::find_coordinator_response::Coordinator;
        let routes = [("kafka-2:9093".to_owned(), ("127.0.0.1".to_owned(), 4001))].into();
        let old = FindCoordinatorResponse::default()
            .with_node_id(BrokerId(2))
            .with_host(StrBytes::from_static_str("kafka-2"))
            .with_port(9093);
        let new = FindCoordinatorResponse::default().with_coordinators(vec![
            Coordinator::default()
                .with_node_id(BrokerId(2))
                .with_host(StrBytes::from_static_str("kafka-2"))
                .with_port(9093),
        ]);
        for (version, answer) in [(1, &old), (3, &old), (4, &new), (5, &new)] {
            let frame = frame_of(ApiKey::FindCoordinator, version, answer);
            let mut decoded = Answer::decode(&frame, 10, version).expect("decodes");
            assert_eq!(
                decoded.addresses(),
                vec!["kafka-2:9093".to_owned()],
                "v{version}"
            );
            decoded.readdress(&routes);
            let again = decoded.encode().expect("encodes");
            let mut back = Answer::decode(&again, 10, version).expect("decodes again");
            assert_eq!(
                back.addresses(),
                vec!["127.0.0.1:4001".to_owned()],
                "v{version}"
            );
        }
    }

    #[test]
    fn api_versions_stop_fetch_below_answers_that_name_leaders() {
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        let versions = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(0)
                .with_min_version(3)
                .with_max_version(12),
            ApiVersion::default()
                .with_api_key(1)
                .with_min_version(4)
                .with_max_version(17),
            ApiVersion::default()
                .with_api_key(3)
                .with_min_version(0)
                .with_max_version(12),
        ]);
        let frame = frame_of(ApiKey::ApiVersions, 3, &versions);
        let mut decoded = Answer::decode(&frame, 18, 3).expect("decodes");
        decoded.readdress(&HashMap::new());
        let Addressed::ApiVersions(capped) = decoded.body else {
            panic!("an ApiVersions answer")
        };
        let max: Vec<i16> = capped.api_keys.iter().map(|k| k.max_version).collect();
        assert_eq!(
            max,
            vec![12, 15, 12],
            "Produce answers are rewritten instead"
        );
    }

    #[test]
    fn a_produce_answer_naming_a_new_leader_is_readdressed() {
        use kafka_protocol::messages::produce_response::NodeEndpoint;
        let answer = ProduceResponse::default().with_node_endpoints(vec![
            NodeEndpoint::default()
                .with_node_id(BrokerId(2))
                .with_host(StrBytes::from_static_str("kafka-2"))
                .with_port(9093),
        ]);
        let routes = HashMap::from([("kafka-2:9093".to_owned(), ("127.0.0.1".to_owned(), 4001))]);
        for version in 10..=12 {
            let frame = frame_of(ApiKey::Produce, version, &answer);
            let mut decoded = Answer::decode(&frame, 0, version).expect("decodes");
            assert_eq!(decoded.addresses(), vec!["kafka-2:9093".to_owned()]);
            decoded.readdress(&routes);
            let again = decoded.encode().expect("encodes");
            let mut back = Answer::decode(&again, 0, version).expect("decodes again");
            assert_eq!(back.addresses(), vec!["127.0.0.1:4001".to_owned()]);
        }
        // Before version 10 no Produce answer is taken apart.
        let frame = frame_of(ApiKey::Produce, 9, &ProduceResponse::default());
        assert!(Answer::decode(&frame, 0, 9).is_none());
    }
}
