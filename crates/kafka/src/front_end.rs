//! [`KafkaFrontEnd`]: one Kafka connection's translator — decode a request with the
//! `kafka-protocol` crate (Produce: read in place by `produce_wire`), call the broker core,
//! encode the answer.

use bytes::{Bytes, BytesMut};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use minibroker_broker::{Broker, Unacknowledged};
use minibroker_groups::GroupCoordinator;
use minibroker_host::Node;
use minibroker_host::timings::ConnectionTimings;
use minibroker_net::framing::{FrameStart, FramingError, MAX_LENGTH, put_frame};
use minibroker_net::{FrontEnd, Next, NotStored, Peer};
use minibroker_transactions::TransactionService;
use std::future::Future;
use std::sync::Arc;

use crate::KafkaConfig;
use crate::answer_room::AnswerTooLarge;
use crate::apis::{self, SUPPORTED};
use crate::preflight;
use crate::produce_wire;

/// One Kafka connection's view of the broker.
pub struct KafkaFrontEnd {
    pub(crate) broker: Arc<Broker>,
    /// The cluster this broker is one of, if any (`handlers::shared`).
    pub(crate) cluster: Option<Arc<minibroker_host::ClusterLink>>,
    pub(crate) groups: Arc<GroupCoordinator>,
    pub(crate) transactions: Arc<TransactionService>,
    /// This connection's place among the connections opened, which the transaction coordinator
    /// judges a late EndTxn by.
    pub(crate) connection: minibroker_transactions::ConnectionNumber,
    /// The partitions this connection's Produce v12 requests added to their transaction.
    pub(crate) implicitly_added: crate::implicitly_added::ImplicitlyAdded,
    /// The connection's produces whose answers wait for their batches to be stored.
    pub(crate) unacknowledged: Unacknowledged,
    /// On a broker of a cluster: produces whose answers wait for the cluster's commit.
    pub(crate) deferred: Vec<crate::deferred::DeferredProduce>,
    pub(crate) config: Arc<KafkaConfig>,
    /// Where the connection is in its SASL login (on a SASL listener).
    pub(crate) session: minibroker_host::login::Session,
    /// Whether the next frames are bare SASL tokens (after SaslHandshake v0).
    pub(crate) raw_sasl: bool,
    /// Request latencies, when metrics are on.
    timings: Option<ConnectionTimings>,
    /// Who the requests are authorised as, and the ACLs the current one is judged by.
    pub(crate) guard: minibroker_host::access::Guard,
}

impl KafkaFrontEnd {
    /// A front end for one connection to `node` from `peer`.
    #[must_use]
    pub fn new(node: &Node, config: Arc<KafkaConfig>, peer: &Peer) -> Self {
        Self {
            timings: node
                .timings()
                .map(|timings| ConnectionTimings::new(Arc::clone(timings), "kafka")),
            broker: Arc::clone(node.broker()),
            cluster: node.cluster().cloned(),
            groups: Arc::clone(node.groups()),
            transactions: Arc::clone(node.transactions()),
            connection: node.transactions().open_connection(),
            implicitly_added: crate::implicitly_added::ImplicitlyAdded::default(),
            unacknowledged: Unacknowledged::default(),
            deferred: Vec::new(),
            raw_sasl: false,
            session: node.session(config.login),
            guard: node.guard(peer),
            config,
        }
    }

    async fn serve(&mut self, mut frame: Bytes, out: &mut BytesMut) -> Next {
        if self.raw_sasl {
            // After SaslHandshake v0 the SASL tokens come bare, each in a frame of its own.
            return self.raw_sasl_token(frame, out).await;
        }
        let Some((api, version)) = peek_api(&frame) else {
            tracing::debug!("a Kafka request too short for its header; closing");
            return Next::Close;
        };
        if is_native_request(&frame) {
            tracing::info!("a native-protocol request on the Kafka listener; closing");
            wrong_listener(out);
            return Next::Close;
        }
        let Ok(api) = ApiKey::try_from(api) else {
            tracing::debug!(api, version, "unknown Kafka API; closing the connection");
            return Next::Close;
        };
        if api == ApiKey::Produce && apis::supports(api, version) {
            return self.serve_produce(&frame, version, out).await;
        }
        let header = match RequestHeader::decode(&mut frame, api.request_header_version(version)) {
            Ok(header) => header,
            Err(error) => {
                tracing::debug!(%error, "undecodable Kafka request header; closing");
                return Next::Close;
            }
        };
        if !apis::supports(api, version) {
            if api == ApiKey::ApiVersions {
                // Kafka's answer to an ApiVersions it does not speak: v0, with the error and the
                // versions it does speak, so the client can retry with one of them.
                let answer = api_versions(
                    ResponseError::UnsupportedVersion.code(),
                    0,
                    self.cluster.is_some(),
                );
                return encode(
                    out,
                    header.correlation_id,
                    api,
                    0,
                    &ResponseKind::ApiVersions(answer),
                );
            }
            tracing::info!(
                ?api,
                version,
                "unsupported Kafka API version; closing the connection"
            );
            return Next::Close;
        }
        if self.refused_by_session(api) {
            return Next::Close;
        }
        self.guard.refresh();
        if let Err(refused) = preflight::check(api, version, &frame) {
            tracing::debug!(
                ?api,
                version,
                reason = refused.0,
                "malformed Kafka request; closing"
            );
            return Next::Close;
        }
        let request = match RequestKind::decode(api, &mut frame, version) {
            Ok(request) => request,
            Err(error) => {
                tracing::debug!(?api, version, %error, "undecodable Kafka request; closing");
                return Next::Close;
            }
        };
        tracing::trace!(
            ?api,
            version,
            correlation_id = header.correlation_id,
            "request"
        );
        let started = self.timings.as_ref().map(ConnectionTimings::start);
        let next = Box::pin(self.dispatch(request, &header, version, api, out)).await;
        if let (Some(timings), Some(started)) = (&mut self.timings, started) {
            timings.record_since(apis::name(api), started);
        }
        next
    }

    /// Whether the session lets nothing but its login through now (before it, or after its
    /// lifetime), for a request of `api`; says why in the log.
    fn refused_by_session(&self, api: ApiKey) -> bool {
        if !self.session.lets_through()
            && !matches!(
                api,
                ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
            )
        {
            // As Kafka: before the login only the SASL exchange is served.
            tracing::info!(
                ?api,
                "a request before authentication; closing the connection"
            );
            return true;
        }
        if self.session.expired()
            && !matches!(
                api,
                ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
            )
        {
            // KIP-368: a session past its lifetime serves nothing until it logs in again.
            tracing::info!(
                ?api,
                principal = %self.guard.principal(),
                "the session's lifetime is over and it did not re-authenticate; closing the connection"
            );
            return true;
        }
        false
    }

    /// Serves a Produce of a served version, read in place (`produce_wire`). The hot path
    /// never waits (the write and any fsync wait in `store_answered`; a Produce v12's add of
    /// its partitions to their transaction, once per partition and transaction, is boxed), so
    /// it is served here, outside `dispatch`, whose future holds the largest of every other
    /// API's (a fetch's wait, the group calls) and is boxed.
    async fn serve_produce(&mut self, frame: &Bytes, version: i16, out: &mut BytesMut) -> Next {
        if self.refused_by_session(ApiKey::Produce) {
            return Next::Close;
        }
        self.guard.refresh();
        let request = match produce_wire::read(frame, version) {
            Ok(request) => request,
            Err(error) => {
                tracing::debug!(version, %error, "malformed Kafka Produce; closing");
                return Next::Close;
            }
        };
        tracing::trace!(
            version,
            correlation_id = request.correlation_id,
            "produce request"
        );
        let started = self.timings.as_ref().map(ConnectionTimings::start);
        self.produce(&request, frame, version, out).await;
        if let (Some(timings), Some(started)) = (&mut self.timings, started) {
            timings.record_since(apis::name(ApiKey::Produce), started);
        }
        Next::Continue
    }

    /// Serves a decoded request other than Produce and appends its answer.
    async fn dispatch(
        &mut self,
        request: RequestKind,
        header: &RequestHeader,
        version: i16,
        api: ApiKey,
        out: &mut BytesMut,
    ) -> Next {
        let answer = match request {
            RequestKind::ApiVersions(_) => Ok(ResponseKind::ApiVersions(api_versions(
                0,
                version,
                self.cluster.is_some(),
            ))),
            RequestKind::Metadata(request) => self
                .metadata(request, version)
                .await
                .map(ResponseKind::Metadata),
            RequestKind::DescribeCluster(request) => Ok(ResponseKind::DescribeCluster(
                self.describe_cluster(&request, version),
            )),
            RequestKind::Fetch(request) => {
                Ok(ResponseKind::Fetch(self.fetch(request, version).await))
            }
            RequestKind::ListOffsets(request) => self
                .list_offsets(request, version)
                .await
                .map(ResponseKind::ListOffsets),
            RequestKind::InitProducerId(request) => Ok(ResponseKind::InitProducerId(
                self.init_producer_id(request, version).await,
            )),
            RequestKind::AddPartitionsToTxn(request) => Ok(ResponseKind::AddPartitionsToTxn(
                self.add_partitions_to_txn(&request, version).await,
            )),
            RequestKind::AddOffsetsToTxn(request) => Ok(ResponseKind::AddOffsetsToTxn(
                self.add_offsets_to_txn(&request, version).await,
            )),
            RequestKind::TxnOffsetCommit(request) => Ok(ResponseKind::TxnOffsetCommit(
                self.txn_offset_commit(request, version).await,
            )),
            RequestKind::EndTxn(request) => {
                Ok(ResponseKind::EndTxn(self.end_txn(&request, version).await))
            }
            RequestKind::SaslHandshake(request) => {
                let answer = self.sasl_handshake(&request);
                // After a version 0 handshake the tokens come bare, each in a frame of its own.
                self.raw_sasl = version == 0 && answer.error_code == 0;
                Ok(ResponseKind::SaslHandshake(answer))
            }
            RequestKind::SaslAuthenticate(request) => {
                let answered = self.sasl_authenticate(request).await;
                let next = encode(
                    out,
                    header.correlation_id,
                    api,
                    version,
                    &ResponseKind::SaslAuthenticate(answered.answer),
                );
                return if answered.close { Next::Close } else { next };
            }
            RequestKind::CreateAcls(request) => {
                Ok(ResponseKind::CreateAcls(self.create_acls(request)))
            }
            RequestKind::DescribeAcls(request) => {
                Ok(ResponseKind::DescribeAcls(self.describe_acls(&request)))
            }
            RequestKind::DeleteAcls(request) => {
                Ok(ResponseKind::DeleteAcls(self.delete_acls(&request)))
            }
            RequestKind::DescribeUserScramCredentials(request) => {
                Ok(ResponseKind::DescribeUserScramCredentials(
                    self.describe_user_scram_credentials(&request),
                ))
            }
            RequestKind::AlterUserScramCredentials(request) => {
                Ok(ResponseKind::AlterUserScramCredentials(
                    self.alter_user_scram_credentials(&request),
                ))
            }
            RequestKind::DescribeTransactions(request) => self
                .describe_transactions(&request, version)
                .await
                .map(ResponseKind::DescribeTransactions),
            RequestKind::ListTransactions(request) => self
                .list_transactions(&request, version)
                .await
                .map(ResponseKind::ListTransactions),
            RequestKind::DescribeProducers(request) => self
                .describe_producers(&request, version)
                .await
                .map(ResponseKind::DescribeProducers),
            RequestKind::CreateTopics(request) => Ok(ResponseKind::CreateTopics(
                self.create_topics(request, version).await,
            )),
            RequestKind::DeleteTopics(request) => Ok(ResponseKind::DeleteTopics(
                self.delete_topics(request, version),
            )),
            RequestKind::FindCoordinator(request) => Ok(ResponseKind::FindCoordinator(
                self.find_coordinator(request).await,
            )),
            RequestKind::JoinGroup(request) => {
                let client_id = header.client_id.as_deref().unwrap_or_default().to_owned();
                Ok(ResponseKind::JoinGroup(
                    self.join_group(request, version, &client_id).await,
                ))
            }
            RequestKind::SyncGroup(request) => {
                Ok(ResponseKind::SyncGroup(self.sync_group(request).await))
            }
            RequestKind::Heartbeat(request) => Ok(ResponseKind::Heartbeat(self.heartbeat(request))),
            RequestKind::LeaveGroup(request) => {
                Ok(ResponseKind::LeaveGroup(self.leave_group(request, version)))
            }
            RequestKind::OffsetCommit(request) => Ok(ResponseKind::OffsetCommit(
                self.offset_commit(request).await,
            )),
            RequestKind::OffsetFetch(request) => self
                .offset_fetch(request, version)
                .await
                .map(ResponseKind::OffsetFetch),
            RequestKind::ListGroups(request) => {
                Ok(ResponseKind::ListGroups(self.list_groups(request).await))
            }
            RequestKind::DescribeGroups(request) => self
                .describe_groups(request, version)
                .await
                .map(ResponseKind::DescribeGroups),
            RequestKind::DeleteGroups(request) => Ok(ResponseKind::DeleteGroups(
                self.delete_groups(request).await,
            )),
            RequestKind::DescribeConfigs(request) => Ok(ResponseKind::DescribeConfigs(
                self.describe_configs(&request, version).await,
            )),
            RequestKind::AlterConfigs(request) => Ok(ResponseKind::AlterConfigs(
                self.alter_configs(&request).await,
            )),
            RequestKind::IncrementalAlterConfigs(request) => {
                Ok(ResponseKind::IncrementalAlterConfigs(
                    self.incremental_alter_configs(&request).await,
                ))
            }
            RequestKind::OffsetForLeaderEpoch(request) => Ok(ResponseKind::OffsetForLeaderEpoch(
                self.offset_for_leader_epoch(&request),
            )),
            RequestKind::DescribeLogDirs(request) => Ok(ResponseKind::DescribeLogDirs(
                self.describe_log_dirs(&request, version),
            )),
            RequestKind::CreatePartitions(request) => Ok(ResponseKind::CreatePartitions(
                self.create_partitions(&request),
            )),
            RequestKind::OffsetDelete(request) => Ok(ResponseKind::OffsetDelete(
                self.offset_delete(request).await,
            )),
            RequestKind::DeleteRecords(request) => Ok(ResponseKind::DeleteRecords(
                self.delete_records(request).await,
            )),
            _ => {
                tracing::info!(?api, "unexpected Kafka request; closing the connection");
                return Next::Close;
            }
        };
        match answer {
            Ok(answer) => encode(out, header.correlation_id, api, version, &answer),
            Err(AnswerTooLarge) => {
                tracing::info!(
                    ?api,
                    version,
                    "an answer would pass max_frame_bytes; closing the connection"
                );
                Next::Close
            }
        }
    }
}

impl FrontEnd for KafkaFrontEnd {
    fn answer(&mut self, frame: Bytes, out: &mut BytesMut) -> impl Future<Output = Next> + Send {
        self.serve(frame, out)
    }

    async fn store_answered(&mut self, out: &mut BytesMut) -> Result<(), NotStored> {
        self.unacknowledged.commit().await?;
        self.answer_deferred(out).await;
        Ok(())
    }

    fn authenticated(&self) -> bool {
        self.session.lets_through()
    }

    fn framing_error(&mut self, error: &FramingError, _out: &mut BytesMut) {
        // Kafka has no way to answer a broken frame: the connection just closes.
        tracing::debug!(%error, "Kafka framing lost; closing the connection");
    }
}

/// The API key and version at the start of a request header.
fn peek_api(frame: &[u8]) -> Option<(i16, i16)> {
    let key = i16::from_be_bytes(frame.get(0..2)?.try_into().ok()?);
    let version = i16::from_be_bytes(frame.get(2..4)?.try_into().ok()?);
    Some((key, version))
}

/// Whether `frame` is a request of minibroker's native protocol: its body begins with the
/// native version byte (1 or 2), where a Kafka request's API key begins with 0 (every key is
/// below 256).
fn is_native_request(frame: &[u8]) -> bool {
    frame
        .first()
        .is_some_and(|&first| (1..=minibroker_protocol::VERSION).contains(&first))
}

/// The native protocol's answer to a native client at this listener: a connection-level error
/// (correlation id 0) that the native client reports and does not retry.
fn wrong_listener(out: &mut BytesMut) {
    use minibroker_protocol::{ErrorCode, ErrorResponse, Response, codec};
    let answer = Response::Error(ErrorResponse::new(
        ErrorCode::WrongListener,
        "this is the broker's Kafka listener (for Kafka clients and minibroker's --kafka); \
         minibroker's own commands take --broker with the native listener's address (listen)",
    ));
    if let Ok(body) = codec::encode_body(0, &answer) {
        let _fits = put_frame(out, &body, MAX_LENGTH);
    }
}

/// The ApiVersions answer to a request of `version`: every API and version implemented, and,
/// from v3, the features finalized (see [`apis::features`]; a broker of a cluster, `in_cluster`,
/// finalizes the older transaction protocol).
fn api_versions(error_code: i16, version: i16, in_cluster: bool) -> ApiVersionsResponse {
    let api_keys = SUPPORTED
        .iter()
        .map(|(key, min, max)| {
            kafka_protocol::messages::api_versions_response::ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(apis::advertised_min(*key, *min))
                .with_max_version(*max)
        })
        .collect();
    let transaction_version = if in_cluster {
        apis::CLUSTER_TRANSACTION_VERSION
    } else {
        apis::TRANSACTION_VERSION
    };
    let (supported, finalized) = apis::features(version, transaction_version);
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
        .with_supported_features(supported)
        .with_finalized_features_epoch(apis::FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(finalized)
}

/// Appends one answer frame: length, response header, body.
fn encode(
    out: &mut BytesMut,
    correlation_id: i32,
    api: ApiKey,
    version: i16,
    body: &ResponseKind,
) -> Next {
    let frame = FrameStart::begin(out);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let encoded = header
        .encode(out, api.response_header_version(version))
        .and_then(|()| body.encode(out, version));
    if let Err(error) = encoded {
        tracing::warn!(?api, version, %error, "a Kafka answer did not encode; closing");
        frame.abandon(out);
        return Next::Close;
    }
    if frame.end(out, MAX_LENGTH).is_err() {
        return Next::Close;
    }
    Next::Continue
}
