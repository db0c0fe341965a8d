//! Transactions for [`KafkaProducer`]: a transactional id's producer from its coordinator, each
//! partition added to the open transaction before its first batch, and the transaction ended
//! with a commit or an abort (KIP-98), so a `read_committed` consumer sees each committed batch
//! once and no aborted one.
//!
//! Every request to the coordinator (FindCoordinator first, through the bootstrap broker) is
//! sent again after a lost answer or a retriable error, as the data batches are: adding a
//! partition twice and ending a transaction twice the same way are both answered as done.
//!
//! Where the broker finalizes `transaction.version` 2 (KIP-890 part 2) and speaks Produce v12
//! and EndTxn v5, the producer uses them: a transactional batch adds its own partition (no
//! AddPartitionsToTxn), and every end answers a new epoch (or, once the epoch runs out, a new
//! producer id), which the next transaction uses from sequence 0. A request of a transaction
//! that the network delays past its end can then never be taken for one of the next: its epoch
//! is fenced (KAFKA-17754).

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
    TopicName, TransactionalId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::HashSet;
use std::time::Instant;

use super::{KafkaProduceError, KafkaProducer, KafkaProducerConfig, RETRY_BACKOFF, retriable};
use crate::{KafkaClientError, KafkaConnection};

/// The versions a transactional producer speaks besides the idempotent one's: Produce and
/// EndTxn up to KIP-890 part 2's, used only where the broker finalizes it (else capped at
/// [`BEFORE_PART_2`]).
const TRANSACTION_VERSIONS: [(ApiKey, i16, i16); 6] = [
    (ApiKey::FindCoordinator, 1, 3),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::Produce, 3, 12),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    // Offsets are sent from version 3, where the group's generation and member id are checked
    // (KIP-447); a broker without it still takes the rest.
    (ApiKey::TxnOffsetCommit, 0, 3),
];

/// The versions KIP-890 part 2 needs: Produce that adds its own partition, EndTxn that answers
/// the new epoch.
const PART_2_VERSIONS: [(ApiKey, i16); 2] = [(ApiKey::Produce, 12), (ApiKey::EndTxn, 5)];

/// The highest versions of those without part 2.
const BEFORE_PART_2: [(ApiKey, i16); 2] = [(ApiKey::Produce, 9), (ApiKey::EndTxn, 3)];

/// FindCoordinator's key types: a group, a transactional id.
const GROUP_KEY: i8 = 0;
const TRANSACTION_KEY: i8 = 1;

/// How long a transaction may stay open before the coordinator aborts it.
const TRANSACTION_TIMEOUT_MS: i32 = 60_000;

/// A transactional producer's side of its transactions.
#[derive(Debug)]
pub(super) struct Transaction {
    pub(super) id: String,
    coordinator: Option<KafkaConnection>,
    open: bool,
    /// Partitions added to the open transaction.
    added: HashSet<(String, i32)>,
    /// Whether it uses KIP-890 part 2 (see the module docs).
    pub(super) part_2: bool,
    /// The coordinator of the group whose offsets it last committed, and that group.
    group_coordinator: Option<(String, KafkaConnection)>,
    /// Whether the open transaction carries a group's offsets.
    offsets: bool,
}

/// A consumer's place in its group, which a transaction's offsets are committed under: the
/// group's coordinator refuses them from a member of an older generation (KIP-447).
#[derive(Debug, Clone, Copy)]
pub struct GroupMember<'a> {
    /// The group.
    pub group: &'a str,
    /// Its generation.
    pub generation: i32,
    /// The member's id.
    pub member_id: &'a str,
}

impl Transaction {
    /// Opens a transaction (`open`) or closes one: nothing added to it yet.
    fn reset(&mut self, open: bool) {
        self.open = open;
        self.added.clear();
        self.offsets = false;
    }

    pub(super) fn transactional_id(&self) -> TransactionalId {
        TransactionalId(StrBytes::from_string(self.id.clone()))
    }
}

impl KafkaProducer {
    /// Connects to `bootstrap` as the producer of `transactional_id`: finds its transaction
    /// coordinator and gets the id's producer id and a new epoch (fencing any older instance).
    ///
    /// # Errors
    /// As [`KafkaProducer::connect`], and the coordinator's refusals.
    pub async fn connect_transactional(
        bootstrap: &str,
        config: KafkaProducerConfig,
        transactional_id: &str,
    ) -> Result<Self, KafkaProduceError> {
        let mut producer = Self::open(bootstrap, config, &TRANSACTION_VERSIONS).await?;
        let part_2 = !config.before_part_2
            && producer.transaction_version >= 2
            && PART_2_VERSIONS
                .iter()
                .all(|(api, needed)| producer.version(*api) >= *needed);
        if !part_2 {
            for (api, highest) in BEFORE_PART_2 {
                let agreed = producer.version(api).min(highest);
                producer.versions.insert(api, agreed);
            }
        }
        producer.transaction = Some(Transaction {
            id: transactional_id.to_owned(),
            coordinator: None,
            open: false,
            added: HashSet::new(),
            part_2,
            group_coordinator: None,
            offsets: false,
        });
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
                transactional_id.to_owned(),
            ))))
            .with_transaction_timeout_ms(TRANSACTION_TIMEOUT_MS)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let answer: InitProducerIdResponse = producer
            .coordinator_call(
                ApiKey::InitProducerId,
                &request,
                |a: &InitProducerIdResponse| a.error_code,
            )
            .await?;
        producer.producer_id = answer.producer_id.0;
        producer.epoch = answer.producer_epoch;
        Ok(producer)
    }

    /// Moves to a new epoch of the same producer id (KIP-360: InitProducerId with the current
    /// id and epoch), as a client does when the broker answers OUT_OF_ORDER_SEQUENCE_NUMBER: an
    /// open transaction is aborted, every partition's sequence starts again from 0, and every
    /// request still on its way from the old epoch is fenced.
    ///
    /// # Errors
    /// The coordinator's refusal (a broker without KIP-360 among them), or no answer within the
    /// delivery timeout.
    pub async fn bump_epoch(&mut self) -> Result<(), KafkaProduceError> {
        let transaction = self.transaction_mut()?;
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(transaction.transactional_id()))
            .with_transaction_timeout_ms(TRANSACTION_TIMEOUT_MS)
            .with_producer_id(ProducerId(self.producer_id))
            .with_producer_epoch(self.epoch);
        let answer: InitProducerIdResponse = self
            .coordinator_call(
                ApiKey::InitProducerId,
                &request,
                |a: &InitProducerIdResponse| a.error_code,
            )
            .await?;
        self.move_to(answer.producer_id.0, answer.producer_epoch);
        self.transaction_mut()?.reset(false);
        Ok(())
    }

    /// Moves to `producer_id` at `epoch`: every partition's sequence starts again from 0.
    fn move_to(&mut self, producer_id: i64, epoch: i16) {
        self.producer_id = producer_id;
        self.epoch = epoch;
        self.sequences.clear();
    }

    /// Commits `offsets` — (topic, partition, the next offset to read) — for `member`'s group
    /// as part of the open transaction (AddOffsetsToTxn to the transaction's coordinator, then
    /// TxnOffsetCommit to the group's): they take effect if it commits, and are dropped if it
    /// aborts.
    ///
    /// # Errors
    /// Outside a transaction; the coordinators' refusals (a member of an older generation is
    /// refused ILLEGAL_GENERATION); no answer within the delivery timeout.
    pub async fn send_offsets(
        &mut self,
        member: GroupMember<'_>,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), KafkaProduceError> {
        /// The first TxnOffsetCommit that names the member (KIP-447).
        const WITH_MEMBER: i16 = 3;
        if self.version(ApiKey::TxnOffsetCommit) < WITH_MEMBER {
            return Err(KafkaProduceError::Unsupported {
                api: ApiKey::TxnOffsetCommit,
                min: WITH_MEMBER,
                max: WITH_MEMBER,
            });
        }
        let transaction = self.transaction_mut()?;
        if !transaction.open {
            return Err(KafkaProduceError::Protocol("no transaction is open".into()));
        }
        transaction.offsets = true;
        let add = AddOffsetsToTxnRequest::default()
            .with_transactional_id(transaction.transactional_id())
            .with_producer_id(ProducerId(self.producer_id))
            .with_producer_epoch(self.epoch)
            .with_group_id(GroupId(StrBytes::from_string(member.group.to_owned())));
        self.coordinator_call(
            ApiKey::AddOffsetsToTxn,
            &add,
            |a: &AddOffsetsToTxnResponse| a.error_code,
        )
        .await?;
        let mut by_topic: Vec<TxnOffsetCommitRequestTopic> = Vec::new();
        for (topic, partition, offset) in offsets {
            let entry = TxnOffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset);
            match by_topic.iter_mut().find(|t| t.name.0.as_str() == topic) {
                Some(found) => found.partitions.push(entry),
                None => by_topic.push(
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.clone())))
                        .with_partitions(vec![entry]),
                ),
            }
        }
        let commit = TxnOffsetCommitRequest::default()
            .with_transactional_id(self.transaction_mut()?.transactional_id())
            .with_group_id(GroupId(StrBytes::from_string(member.group.to_owned())))
            .with_producer_id(ProducerId(self.producer_id))
            .with_producer_epoch(self.epoch)
            .with_generation_id(member.generation)
            .with_member_id(StrBytes::from_string(member.member_id.to_owned()))
            .with_topics(by_topic);
        self.group_call(member.group, &commit).await
    }

    /// Sends a TxnOffsetCommit to `group`'s coordinator (found first if need be) until it is
    /// answered, asking again after a lost answer or a moved coordinator.
    async fn group_call(
        &mut self,
        group: &str,
        request: &TxnOffsetCommitRequest,
    ) -> Result<(), KafkaProduceError> {
        let deadline = Instant::now() + self.config.delivery_timeout;
        let version = self.version(ApiKey::TxnOffsetCommit);
        loop {
            let outcome = match self.group_coordinator(group).await {
                Ok(conn) => conn
                    .call::<_, TxnOffsetCommitResponse>(ApiKey::TxnOffsetCommit, version, request)
                    .await
                    .map_err(Into::into),
                Err(error) => Err(error),
            };
            let last = match outcome {
                Ok(answer) => {
                    let code = answer
                        .topics
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .map(|p| p.error_code)
                        .find(|&code| code != 0)
                        .unwrap_or(0);
                    if code == 0 {
                        return Ok(());
                    }
                    if !retriable(code) {
                        return Err(KafkaProduceError::Broker {
                            code,
                            what: format!("TxnOffsetCommit for group {group:?}"),
                        });
                    }
                    crate::error_name(code)
                }
                Err(KafkaProduceError::Broker { code, what }) if !retriable(code) => {
                    return Err(KafkaProduceError::Broker { code, what });
                }
                Err(error) => error.to_string(),
            };
            self.transaction_mut()?.group_coordinator = None;
            if Instant::now() >= deadline {
                return Err(KafkaProduceError::CoordinatorTimeout {
                    api: ApiKey::TxnOffsetCommit,
                    timeout: self.config.delivery_timeout,
                    last,
                });
            }
            self.stats.retries += 1;
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// The connection to `group`'s coordinator, found through the bootstrap broker.
    async fn group_coordinator(
        &mut self,
        group: &str,
    ) -> Result<&mut KafkaConnection, KafkaProduceError> {
        let timeout = self.config.request_timeout;
        let bootstrap = self.bootstrap.clone();
        let transaction = self.transaction_mut()?;
        if transaction
            .group_coordinator
            .as_ref()
            .is_none_or(|(of, _)| of != group)
        {
            let coordinator = KafkaConnection::to_coordinator(
                &bootstrap,
                (group, GROUP_KEY),
                "minibroker-producer",
                timeout,
            )
            .await?
            .map_err(|code| KafkaProduceError::Broker {
                code,
                what: format!("the coordinator of group {group:?}"),
            })?;
            transaction.group_coordinator = Some((group.to_owned(), coordinator));
        }
        Ok(&mut transaction
            .group_coordinator
            .as_mut()
            .expect("connected just above")
            .1)
    }

    /// Whether the producer uses KIP-890 part 2: a new epoch at every transaction end.
    #[must_use]
    pub fn uses_part_2(&self) -> bool {
        self.transaction.as_ref().is_some_and(|t| t.part_2)
    }

    /// Starts a transaction: the batches sent until [`Self::commit`] or [`Self::abort`] belong
    /// to it.
    ///
    /// # Errors
    /// If the producer is not transactional, or a transaction is open already.
    pub fn begin(&mut self) -> Result<(), KafkaProduceError> {
        let transaction = self.transaction_mut()?;
        if transaction.open {
            return Err(KafkaProduceError::Protocol(
                "a transaction is open already".into(),
            ));
        }
        transaction.reset(true);
        Ok(())
    }

    /// Commits the open transaction: its batches become visible to `read_committed` consumers.
    ///
    /// # Errors
    /// The coordinator's refusal, or no answer within the delivery timeout.
    pub async fn commit(&mut self) -> Result<(), KafkaProduceError> {
        self.end(true).await
    }

    /// Aborts the open transaction: none of its batches is ever shown to `read_committed`
    /// consumers.
    ///
    /// # Errors
    /// As [`Self::commit`].
    pub async fn abort(&mut self) -> Result<(), KafkaProduceError> {
        self.end(false).await
    }

    fn transaction_mut(&mut self) -> Result<&mut Transaction, KafkaProduceError> {
        self.transaction
            .as_mut()
            .ok_or_else(|| KafkaProduceError::Protocol("the producer is not transactional".into()))
    }

    async fn end(&mut self, commit: bool) -> Result<(), KafkaProduceError> {
        let transaction = self.transaction_mut()?;
        if !transaction.open {
            return Err(KafkaProduceError::Protocol("no transaction is open".into()));
        }
        let id = transaction.transactional_id();
        let part_2 = transaction.part_2;
        if !transaction.added.is_empty() || transaction.offsets {
            let request = EndTxnRequest::default()
                .with_transactional_id(id)
                .with_producer_id(ProducerId(self.producer_id))
                .with_producer_epoch(self.epoch)
                .with_committed(commit);
            let answer = self
                .coordinator_call(ApiKey::EndTxn, &request, |a: &EndTxnResponse| a.error_code)
                .await?;
            if part_2 && answer.producer_id.0 >= 0 {
                // The next transaction's epoch.
                self.move_to(answer.producer_id.0, answer.producer_epoch);
            }
        }
        let transaction = self.transaction_mut()?;
        transaction.reset(false);
        Ok(())
    }

    /// Adds `topic`/`partition` to the open transaction, once per transaction (its first
    /// batch does it if this is not called); nothing for an idempotent producer.
    ///
    /// # Errors
    /// Outside a transaction, and the coordinator's refusals.
    pub async fn add_to_transaction(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Result<(), KafkaProduceError> {
        let Some(transaction) = self.transaction.as_mut() else {
            return Ok(());
        };
        if !transaction.open {
            return Err(KafkaProduceError::Protocol(
                "a transactional producer sends inside a transaction: begin one first".into(),
            ));
        }
        let key = (topic.to_owned(), partition);
        if transaction.added.contains(&key) {
            return Ok(());
        }
        self.learn_leaders(topic, &key).await?;
        let transaction = self.transaction_mut()?;
        if transaction.part_2 {
            // Its first batch adds it (Produce v12).
            transaction.added.insert(key);
            return Ok(());
        }
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(transaction.transactional_id())
            .with_v3_and_below_producer_id(ProducerId(self.producer_id))
            .with_v3_and_below_producer_epoch(self.epoch)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![partition]),
            ]);
        self.coordinator_call(
            ApiKey::AddPartitionsToTxn,
            &request,
            |a: &AddPartitionsToTxnResponse| {
                a.results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| &t.results_by_partition)
                    .map(|p| p.partition_error_code)
                    .find(|&code| code != 0)
                    .unwrap_or(a.error_code)
            },
        )
        .await?;
        self.transaction_mut()?.added.insert(key);
        Ok(())
    }

    /// Asks for `topic`'s leaders unless `key`'s is known — which also creates the topic, where
    /// the broker creates topics on demand, before a transaction names it — retrying a lost
    /// answer until the delivery timeout.
    async fn learn_leaders(
        &mut self,
        topic: &str,
        key: &(String, i32),
    ) -> Result<(), KafkaProduceError> {
        let deadline = Instant::now() + self.config.delivery_timeout;
        while !self.leaders.contains_key(key) {
            match self.refresh(topic).await {
                // Known now, or never: the Produce says which.
                Ok(()) => break,
                Err(KafkaProduceError::Broker { code, what }) if !retriable(code) => {
                    return Err(KafkaProduceError::Broker { code, what });
                }
                Err(error) if Instant::now() >= deadline => return Err(error),
                Err(_) => tokio::time::sleep(RETRY_BACKOFF).await,
            }
        }
        Ok(())
    }

    /// Sends `request` to the transaction coordinator (found first if need be) until it is
    /// answered with `code(answer)` 0; a lost answer or a retriable code is retried, a moved
    /// coordinator found again, until the delivery timeout.
    async fn coordinator_call<R: Encodable, T: Decodable>(
        &mut self,
        api: ApiKey,
        request: &R,
        code: impl Fn(&T) -> i16,
    ) -> Result<T, KafkaProduceError> {
        let deadline = Instant::now() + self.config.delivery_timeout;
        let version = self.version(api);
        loop {
            let outcome = match self.coordinator().await {
                Ok(conn) => conn
                    .call::<R, T>(api, version, request)
                    .await
                    .map_err(Into::into),
                Err(error) => Err(error),
            };
            let last = match outcome {
                Ok(answer) if code(&answer) == 0 => return Ok(answer),
                Ok(answer) if retriable(code(&answer)) => {
                    // NOT_COORDINATOR and its kin: ask again where the coordinator is.
                    self.transaction_mut()?.coordinator = None;
                    crate::error_name(code(&answer))
                }
                Ok(answer) => {
                    return Err(KafkaProduceError::Broker {
                        code: code(&answer),
                        what: format!(
                            "{api:?} for transactional id {:?}",
                            self.transaction_mut()?.id
                        ),
                    });
                }
                Err(KafkaProduceError::Broker { code, what }) if !retriable(code) => {
                    return Err(KafkaProduceError::Broker { code, what });
                }
                Err(error) => {
                    self.transaction_mut()?.coordinator = None;
                    error.to_string()
                }
            };
            if Instant::now() >= deadline {
                return Err(KafkaProduceError::CoordinatorTimeout {
                    api,
                    timeout: self.config.delivery_timeout,
                    last,
                });
            }
            self.stats.retries += 1;
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// The connection to the transaction coordinator, found through the bootstrap broker.
    async fn coordinator(&mut self) -> Result<&mut KafkaConnection, KafkaProduceError> {
        let timeout = self.config.request_timeout;
        let version = self.version(ApiKey::FindCoordinator);
        let bootstrap = self.bootstrap.clone();
        let transaction = self.transaction_mut()?;
        if transaction.coordinator.is_none() {
            let request = FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(transaction.id.clone()))
                .with_key_type(TRANSACTION_KEY);
            let mut conn = KafkaConnection::connect(bootstrap.as_str())
                .await?
                .with_client_id("minibroker-producer")
                .with_answer_timeout(timeout);
            let found: FindCoordinatorResponse = conn
                .call(ApiKey::FindCoordinator, version, &request)
                .await?;
            if found.error_code != 0 {
                return Err(KafkaProduceError::Broker {
                    code: found.error_code,
                    what: format!("the coordinator of transactional id {:?}", transaction.id),
                });
            }
            let addr = format!("{}:{}", found.host, found.port);
            let coordinator = KafkaConnection::connect(addr.as_str())
                .await
                .map_err(|error| match error {
                    KafkaClientError::Io { source, .. } => KafkaClientError::Io { addr, source },
                    other => other,
                })?
                .with_client_id("minibroker-producer")
                .with_answer_timeout(timeout);
            transaction.coordinator = Some(coordinator);
        }
        Ok(transaction
            .coordinator
            .as_mut()
            .expect("connected just above"))
    }
}
