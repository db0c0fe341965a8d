//! A check of every array count in a request body before `kafka-protocol` decodes it.
//!
//! The crate's decoder reserves room for an array from its count before reading a single
//! element (`Vec::with_capacity(n)`), so a 20-byte frame claiming two billion topics made it
//! allocate 150 GB and abort the whole broker. This walk reads the request's layout (for the APIs
//! and versions implemented, from Kafka's message schemas) without building anything, and refuses
//! a body whose array counts are larger than the bytes left could hold. Strings, byte fields and
//! tagged fields need no check: the decoder bounds those by the bytes present.
//!
//! It only walks; it never decides what a field means. A body it passes is then decoded by the
//! crate as usual.

use kafka_protocol::messages::ApiKey;

/// Why a body was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refused(pub &'static str);

/// A cursor over a request body.
struct Walk<'a> {
    bytes: &'a [u8],
    flexible: bool,
}

type Step = Result<(), Refused>;

impl Walk<'_> {
    fn skip(&mut self, n: usize) -> Step {
        if self.bytes.len() < n {
            return Err(Refused("the body ends early"));
        }
        self.bytes = &self.bytes[n..];
        Ok(())
    }

    fn int(&mut self, width: usize) -> Result<i64, Refused> {
        let Some(field) = self.bytes.get(..width) else {
            return Err(Refused("the body ends early"));
        };
        let value = field.iter().fold(0i64, |v, b| (v << 8) | i64::from(*b));
        self.bytes = &self.bytes[width..];
        // Sign-extend from `width` bytes.
        let shift = 64 - 8 * width as u32;
        Ok((value << shift) >> shift)
    }

    fn uvarint(&mut self) -> Result<u64, Refused> {
        let mut at = 0;
        let value = minibroker_records::varint::unsigned(self.bytes, &mut at, 10)
            .ok_or(Refused("a bad varint"))?;
        self.bytes = &self.bytes[at..];
        Ok(value)
    }

    /// A string or byte field: compact (varint length + 1) or classic (`width`-byte length).
    fn sized(&mut self, width: usize) -> Step {
        let length = if self.flexible {
            self.uvarint()?.checked_sub(1)
        } else {
            u64::try_from(self.int(width)?).ok()
        };
        match length {
            None => Ok(()), // null
            Some(n) => self.skip(usize::try_from(n).map_err(|_| Refused("a huge field"))?),
        }
    }

    fn string(&mut self) -> Step {
        self.sized(2)
    }

    fn bytes(&mut self) -> Step {
        self.sized(4)
    }

    /// An array whose elements each take at least `min_element` bytes, walked with `element`.
    fn array(&mut self, min_element: usize, mut element: impl FnMut(&mut Self) -> Step) -> Step {
        let count = if self.flexible {
            self.uvarint()?.checked_sub(1)
        } else {
            u64::try_from(self.int(4)?).ok()
        };
        let Some(count) = count else {
            return Ok(()); // null
        };
        let most = (self.bytes.len() / min_element.max(1)) as u64;
        if count > most {
            return Err(Refused("an array count larger than the request"));
        }
        for _ in 0..count {
            element(self)?;
        }
        Ok(())
    }

    /// Tagged fields, in flexible versions: each is skipped by its size.
    fn tags(&mut self) -> Step {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint()?;
        if count > self.bytes.len() as u64 {
            return Err(Refused("more tagged fields than bytes"));
        }
        for _ in 0..count {
            self.uvarint()?;
            let size = self.uvarint()?;
            self.skip(usize::try_from(size).map_err(|_| Refused("a huge tagged field"))?)?;
        }
        Ok(())
    }
}

/// Walks a request body of `api` at `version` (a version this broker implements).
///
/// # Errors
/// [`Refused`] for an array count the bytes cannot hold, or a body that ends early.
pub(crate) fn check(api: ApiKey, version: i16, body: &[u8]) -> Result<(), Refused> {
    // A flexible version (compact arrays and strings, tagged fields) is one whose request
    // header is v2.
    let mut walk = Walk {
        bytes: body,
        flexible: api.request_header_version(version) >= 2,
    };
    let w = &mut walk;
    match api {
        ApiKey::Fetch => fetch(w, version),
        ApiKey::ListOffsets => list_offsets(w, version),
        ApiKey::Metadata => metadata(w, version),
        ApiKey::CreateTopics => create_topics(w),
        ApiKey::DeleteTopics => delete_topics(w, version),
        ApiKey::JoinGroup => join_group(w, version),
        ApiKey::SyncGroup => sync_group(w, version),
        ApiKey::LeaveGroup => leave_group(w, version),
        ApiKey::OffsetCommit => offset_commit(w, version),
        ApiKey::OffsetFetch => offset_fetch(w, version),
        ApiKey::ListGroups => list_groups(w, version),
        ApiKey::DescribeGroups => describe_groups(w, version),
        ApiKey::DeleteGroups => w.array(1, Walk::string),
        ApiKey::AddPartitionsToTxn => add_partitions_to_txn(w, version),
        ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs => {
            let incremental = api == ApiKey::IncrementalAlterConfigs;
            w.array(3, |w| {
                w.skip(1)?; // resource type
                w.string()?; // resource name
                w.array(2, |w| {
                    w.string()?; // name
                    if incremental {
                        w.skip(1)?; // operation
                    }
                    w.string()?; // value (nullable)
                    w.tags()
                })?;
                w.tags()
            })?;
            w.skip(1)?; // validate only
            w.tags()
        }
        ApiKey::DescribeConfigs => {
            w.array(3, |w| {
                w.skip(1)?; // resource type
                w.string()?; // resource name
                w.array(1, Walk::string)?; // keys (nullable)
                w.tags()
            })?;
            w.skip(1)?; // include synonyms
            if version >= 3 {
                w.skip(1)?; // include documentation
            }
            w.tags()
        }
        ApiKey::OffsetForLeaderEpoch => {
            if version >= 3 {
                w.skip(4)?; // replica id
            }
            w.array(2, |w| {
                w.string()?; // topic
                w.array(12, |w| {
                    w.skip(4 + 4 + 4)?; // partition, current leader epoch, leader epoch
                    w.tags()
                })?;
                w.tags()
            })?;
            w.tags()
        }
        ApiKey::DescribeLogDirs => {
            // Topics (nullable): each a name and its partitions.
            w.array(2, topic_partitions)?;
            w.tags()
        }
        ApiKey::CreatePartitions => {
            w.array(3, |w| {
                w.string()?; // topic
                w.skip(4)?; // count
                // Assignments (nullable): each a list of broker ids.
                w.array(1, |w| {
                    w.array(4, |w| w.skip(4))?;
                    w.tags()
                })?;
                w.tags()
            })?;
            w.skip(4 + 1)?; // timeout, validate only
            w.tags()
        }
        ApiKey::DescribeCluster => {
            w.skip(1)?; // include the cluster's authorized operations
            if version >= 1 {
                w.skip(1)?; // endpoint type
            }
            w.tags()
        }
        ApiKey::OffsetDelete => {
            w.string()?; // group id
            w.array(2, topic_partitions)?;
            w.tags()
        }
        ApiKey::DeleteRecords => {
            w.array(2, |w| {
                w.string()?; // topic
                w.array(12, |w| {
                    w.skip(4 + 8)?; // partition, offset
                    w.tags()
                })?;
                w.tags()
            })?;
            w.skip(4)?; // timeout
            w.tags()
        }
        ApiKey::TxnOffsetCommit => txn_offset_commit(w, version),
        ApiKey::DescribeTransactions => {
            w.array(1, Walk::string)?; // transactional ids
            w.tags()
        }
        ApiKey::ListTransactions => {
            w.array(1, Walk::string)?; // state filters
            w.array(8, |w| w.skip(8))?; // producer id filters
            if version >= 1 {
                w.skip(8)?; // duration filter
            }
            w.tags()
        }
        ApiKey::DescribeProducers => {
            w.array(2, topic_partitions)?;
            w.tags()
        }
        // A creation and a deletion filter have the same layout.
        ApiKey::CreateAcls | ApiKey::DeleteAcls => {
            w.array(7, acl_binding)?;
            w.tags()
        }
        ApiKey::DescribeUserScramCredentials => {
            w.array(2, |w| {
                w.string()?; // user
                w.tags()
            })?;
            w.tags()
        }
        ApiKey::AlterUserScramCredentials => {
            w.array(3, |w| {
                w.string()?; // user
                w.skip(1)?; // mechanism
                w.tags()
            })?;
            w.array(10, |w| {
                w.string()?; // user
                w.skip(1 + 4)?; // mechanism, iterations
                w.bytes()?; // salt
                w.bytes()?; // salted password
                w.tags()
            })?;
            w.tags()
        }
        // ApiVersions, InitProducerId, FindCoordinator (below v4), Heartbeat, AddOffsetsToTxn,
        // EndTxn and DescribeAcls have no arrays: nothing to check. Produce is not decoded by
        // the crate: `produce_wire` reads it and bounds its own counts.
        _ => Ok(()),
    }
}

/// A topic name and a list of partition indexes (in several requests).
fn topic_partitions(w: &mut Walk<'_>) -> Step {
    w.string()?;
    w.array(4, |w| w.skip(4))?;
    w.tags()
}

/// An ACL creation, or a deletion filter: resource type, name, pattern type, principal, host,
/// operation, permission.
fn acl_binding(w: &mut Walk<'_>) -> Step {
    w.skip(1)?; // resource type
    w.string()?; // resource name
    w.skip(1)?; // pattern type
    w.string()?; // principal
    w.string()?; // host
    w.skip(2)?; // operation, permission
    w.tags()
}

fn fetch(w: &mut Walk<'_>, version: i16) -> Step {
    w.skip(4 + 4 + 4 + 4 + 1)?; // replica id, max wait, min bytes, max bytes, isolation level
    if version >= 7 {
        w.skip(4 + 4)?; // session id and epoch
    }
    w.array(2, |w| {
        w.string()?; // topic
        w.array(16, |w| {
            w.skip(4)?; // partition
            if version >= 9 {
                w.skip(4)?; // current leader epoch
            }
            w.skip(8)?; // fetch offset
            if version >= 12 {
                w.skip(4)?; // last fetched epoch
            }
            if version >= 5 {
                w.skip(8)?; // log start offset
            }
            w.skip(4)?; // partition max bytes
            w.tags()
        })?;
        w.tags()
    })?;
    if version >= 7 {
        w.array(2, topic_partitions)?;
    }
    if version >= 11 {
        w.string()?; // rack id
    }
    w.tags()
}

fn list_offsets(w: &mut Walk<'_>, version: i16) -> Step {
    w.skip(4)?; // replica id
    if version >= 2 {
        w.skip(1)?; // isolation level
    }
    w.array(2, |w| {
        w.string()?; // topic
        w.array(12, |w| {
            w.skip(4)?; // partition
            if version >= 4 {
                w.skip(4)?; // current leader epoch
            }
            w.skip(8)?; // timestamp
            w.tags()
        })?;
        w.tags()
    })?;
    w.tags()
}

fn metadata(w: &mut Walk<'_>, version: i16) -> Step {
    w.array(1, |w| {
        if version >= 10 {
            w.skip(16)?; // topic id
        }
        w.string()?; // topic
        w.tags()
    })?;
    if version >= 4 {
        w.skip(1)?; // allow auto topic creation
    }
    if (8..=10).contains(&version) {
        w.skip(1)?; // include cluster authorized operations
    }
    if version >= 8 {
        w.skip(1)?; // include topic authorized operations
    }
    w.tags()
}

fn create_topics(w: &mut Walk<'_>) -> Step {
    w.array(4, |w| {
        w.string()?; // topic
        w.skip(4 + 2)?; // partitions, replication factor
        w.array(5, |w| {
            w.skip(4)?; // partition
            w.array(4, |w| w.skip(4))?; // broker ids
            w.tags()
        })?;
        w.array(2, |w| {
            w.string()?; // config name
            w.string()?; // config value
            w.tags()
        })?;
        w.tags()
    })?;
    w.skip(4 + 1)?; // timeout, validate only
    w.tags()
}

fn delete_topics(w: &mut Walk<'_>, version: i16) -> Step {
    if version >= 6 {
        w.array(17, |w| {
            w.string()?; // topic
            w.skip(16)?; // topic id
            w.tags()
        })?;
    } else {
        w.array(1, Walk::string)?;
    }
    w.skip(4)?; // timeout
    w.tags()
}

fn join_group(w: &mut Walk<'_>, version: i16) -> Step {
    w.string()?; // group id
    w.skip(4)?; // session timeout
    if version >= 1 {
        w.skip(4)?; // rebalance timeout
    }
    w.string()?; // member id
    if version >= 5 {
        w.string()?; // group instance id
    }
    w.string()?; // protocol type
    w.array(2, |w| {
        w.string()?; // protocol name
        w.bytes()?; // metadata
        w.tags()
    })?;
    w.tags()
}

fn sync_group(w: &mut Walk<'_>, version: i16) -> Step {
    w.string()?; // group id
    w.skip(4)?; // generation
    w.string()?; // member id
    if version >= 3 {
        w.string()?; // group instance id
    }
    w.array(2, |w| {
        w.string()?; // member id
        w.bytes()?; // assignment
        w.tags()
    })?;
    w.tags()
}

fn leave_group(w: &mut Walk<'_>, version: i16) -> Step {
    w.string()?; // group id
    if version >= 3 {
        w.array(2, |w| {
            w.string()?; // member id
            w.string()?; // group instance id
            w.tags()
        })?;
    } else {
        w.string()?; // member id
    }
    w.tags()
}

fn offset_commit(w: &mut Walk<'_>, version: i16) -> Step {
    w.string()?; // group id
    if version >= 1 {
        w.skip(4)?; // generation
        w.string()?; // member id
    }
    if version >= 7 {
        w.string()?; // group instance id
    }
    if (2..=4).contains(&version) {
        w.skip(8)?; // retention time
    }
    w.array(2, |w| {
        w.string()?; // topic
        w.array(13, |w| {
            w.skip(4 + 8)?; // partition, offset
            if version >= 6 {
                w.skip(4)?; // leader epoch
            }
            w.string()?; // metadata
            w.tags()
        })?;
        w.tags()
    })?;
    w.tags()
}

fn offset_fetch(w: &mut Walk<'_>, version: i16) -> Step {
    w.string()?; // group id
    w.array(2, topic_partitions)?;
    if version >= 7 {
        w.skip(1)?; // require stable
    }
    w.tags()
}

/// Versions 0-3 (4 and later are between brokers).
/// v0-3: one transaction's partitions; v4-5 (a broker's request): several transactions', each
/// with its verify-only flag.
fn add_partitions_to_txn(w: &mut Walk<'_>, version: i16) -> Step {
    if version >= 4 {
        w.array(2 + 8 + 2 + 1 + 1, |w| {
            w.string()?; // transactional id
            w.skip(8 + 2 + 1)?; // producer id, epoch, verify only
            w.array(2, topic_partitions)?;
            w.tags()
        })?;
        return w.tags();
    }
    w.string()?; // transactional id
    w.skip(8 + 2)?; // producer id, epoch
    w.array(2, topic_partitions)?;
    w.tags()
}

fn txn_offset_commit(w: &mut Walk<'_>, version: i16) -> Step {
    w.string()?; // transactional id
    w.string()?; // group id
    w.skip(8 + 2)?; // producer id, epoch
    if version >= 3 {
        w.skip(4)?; // generation
        w.string()?; // member id
        w.string()?; // group instance id
    }
    w.array(2, |w| {
        w.string()?; // topic
        w.array(13, |w| {
            w.skip(4 + 8)?; // partition, offset
            if version >= 2 {
                w.skip(4)?; // leader epoch
            }
            w.string()?; // metadata
            w.tags()
        })?;
        w.tags()
    })?;
    w.tags()
}

fn list_groups(w: &mut Walk<'_>, version: i16) -> Step {
    if version >= 4 {
        w.array(1, Walk::string)?; // states filter
    }
    w.tags()
}

fn describe_groups(w: &mut Walk<'_>, version: i16) -> Step {
    w.array(1, Walk::string)?; // group ids
    if version >= 3 {
        w.skip(1)?; // include authorized operations
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::MetadataRequest;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn a_count_larger_than_the_request_is_refused() {
        // Metadata v12 claiming 2^31 - 2 topics in three bytes.
        let body = [0xff, 0xff, 0xff, 0xff, 0x07];
        assert!(check(ApiKey::Metadata, 12, &body).is_err());
        // Classic encoding, v1: an int32 count.
        let body = 0x7fff_ffffi32.to_be_bytes();
        assert!(check(ApiKey::Metadata, 1, &body).is_err());
    }

    fn name(topic: &'static str) -> kafka_protocol::messages::TopicName {
        kafka_protocol::messages::TopicName(StrBytes::from_static_str(topic))
    }

    fn passes<R: Encodable>(api: ApiKey, versions: std::ops::RangeInclusive<i16>, request: &R) {
        for version in versions {
            let mut body = bytes::BytesMut::new();
            request.encode(&mut body, version).unwrap();
            assert_eq!(check(api, version, &body), Ok(()), "{api:?} v{version}");
            // And one byte short is refused, not read past.
            if !body.is_empty() {
                assert!(
                    check(api, version, &body[..body.len() - 1]).is_err(),
                    "{api:?} v{version}"
                );
            }
        }
    }

    #[test]
    fn every_implemented_request_the_crate_encodes_passes() {
        use kafka_protocol::messages::*;
        let records = bytes::Bytes::from_static(b"some batch bytes");
        let group = || GroupId(StrBytes::from_static_str("g"));
        let member = StrBytes::from_static_str("m");
        let join = JoinGroupRequest::default()
            .with_group_id(group())
            .with_member_id(member.clone())
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![
                join_group_request::JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str("range"))
                    .with_metadata(records.clone());
                2
            ]);
        passes(ApiKey::JoinGroup, 0..=5, &join);
        let sync = SyncGroupRequest::default()
            .with_group_id(group())
            .with_member_id(member.clone())
            .with_assignments(vec![
                sync_group_request::SyncGroupRequestAssignment::default(
                )
                .with_member_id(member.clone())
                .with_assignment(records.clone());
                2
            ]);
        passes(ApiKey::SyncGroup, 0..=3, &sync);
        let leave = LeaveGroupRequest::default()
            .with_group_id(group())
            .with_member_id(member.clone());
        passes(ApiKey::LeaveGroup, 0..=2, &leave);
        let leave_many = LeaveGroupRequest::default()
            .with_group_id(group())
            .with_members(vec![
                leave_group_request::MemberIdentity::default()
                    .with_member_id(member.clone());
                2
            ]);
        passes(ApiKey::LeaveGroup, 3..=3, &leave_many);
        let commit = OffsetCommitRequest::default()
            .with_group_id(group())
            .with_member_id(member.clone())
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(name("a"))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default();
                        3
                    ]),
            ]);
        passes(ApiKey::OffsetCommit, 2..=7, &commit);
        let fetch_offsets = OffsetFetchRequest::default()
            .with_group_id(group())
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(name("a"))
                    .with_partition_indexes(vec![0, 1, 2]),
            ]));
        passes(ApiKey::OffsetFetch, 1..=7, &fetch_offsets);
        passes(
            ApiKey::OffsetFetch,
            2..=7,
            &OffsetFetchRequest::default()
                .with_group_id(group())
                .with_topics(None),
        );
        passes(ApiKey::ListGroups, 0..=3, &ListGroupsRequest::default());
        passes(
            ApiKey::ListGroups,
            4..=4,
            &ListGroupsRequest::default()
                .with_states_filter(vec![StrBytes::from_static_str("Stable")]),
        );
        passes(
            ApiKey::DescribeGroups,
            0..=4,
            &DescribeGroupsRequest::default().with_groups(vec![group(), group()]),
        );
        passes(
            ApiKey::DeleteGroups,
            0..=1,
            &DeleteGroupsRequest::default().with_groups_names(vec![group()]),
        );
        let grow = CreatePartitionsRequest::default().with_topics(vec![
            create_partitions_request::CreatePartitionsTopic::default()
                .with_name(name("a"))
                .with_count(4)
                .with_assignments(Some(vec![
                    create_partitions_request::CreatePartitionsAssignment::default()
                        .with_broker_ids(vec![BrokerId(1)]),
                ])),
            create_partitions_request::CreatePartitionsTopic::default()
                .with_name(name("b"))
                .with_count(2),
        ]);
        passes(ApiKey::CreatePartitions, 0..=3, &grow);
        let log_dirs = DescribeLogDirsRequest::default().with_topics(Some(vec![
            describe_log_dirs_request::DescribableLogDirTopic::default()
                .with_topic(name("a"))
                .with_partitions(vec![0, 2]),
        ]));
        passes(ApiKey::DescribeLogDirs, 1..=4, &log_dirs);
        let epochs = OffsetForLeaderEpochRequest::default().with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(name("a"))
                .with_partitions(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_partition(1)
                        .with_current_leader_epoch(0),
                ]),
        ]);
        passes(ApiKey::OffsetForLeaderEpoch, 2..=4, &epochs);
        let configs = DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("a"))
                .with_configuration_keys(Some(vec![StrBytes::from_static_str("retention.ms")])),
            describe_configs_request::DescribeConfigsResource::default().with_resource_type(4),
        ]);
        passes(ApiKey::DescribeConfigs, 1..=4, &configs);
        let alter = AlterConfigsRequest::default().with_resources(vec![
            alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("a"))
                .with_configs(vec![
                    alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_value(Some(StrBytes::from_static_str("5"))),
                    alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("segment.ms")),
                ]),
        ]);
        passes(ApiKey::AlterConfigs, 0..=2, &alter);
        let incremental = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("a"))
                .with_configs(vec![
                    incremental_alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_config_operation(1),
                ]),
        ]);
        passes(ApiKey::IncrementalAlterConfigs, 0..=1, &incremental);
        let delete_offsets = OffsetDeleteRequest::default()
            .with_group_id(group())
            .with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(name("a"))
                    .with_partitions(vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default()
                            .with_partition_index(3),
                    ]),
            ]);
        passes(ApiKey::OffsetDelete, 0..=0, &delete_offsets);
        let delete_records = DeleteRecordsRequest::default().with_topics(vec![
            delete_records_request::DeleteRecordsTopic::default()
                .with_name(name("a"))
                .with_partitions(vec![
                    delete_records_request::DeleteRecordsPartition::default(
                    )
                    .with_offset(7);
                    2
                ]),
        ]);
        passes(ApiKey::DeleteRecords, 0..=2, &delete_records);
        passes(
            ApiKey::DescribeCluster,
            0..=1,
            &DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
        );
        let fetch = FetchRequest::default().with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(name("a"))
                .with_partitions(vec![fetch_request::FetchPartition::default(); 3]),
        ]);
        passes(ApiKey::Fetch, 4..=6, &fetch);
        let forgotten = fetch.clone().with_forgotten_topics_data(vec![
            fetch_request::ForgottenTopic::default()
                .with_topic(name("b"))
                .with_partitions(vec![1, 2]),
        ]);
        passes(ApiKey::Fetch, 7..=12, &forgotten);
        let list = ListOffsetsRequest::default().with_topics(vec![
            list_offsets_request::ListOffsetsTopic::default()
                .with_name(name("a"))
                .with_partitions(vec![
                    list_offsets_request::ListOffsetsPartition::default();
                    2
                ]),
        ]);
        passes(ApiKey::ListOffsets, 1..=7, &list);
        let create = CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(name("a"))
                .with_assignments(vec![
                    create_topics_request::CreatableReplicaAssignment::default()
                        .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
                ])
                .with_configs(vec![
                    create_topics_request::CreatableTopicConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_value(Some(StrBytes::from_static_str("1000"))),
                ]),
        ]);
        passes(ApiKey::CreateTopics, 2..=7, &create);
        let delete_by_name = DeleteTopicsRequest::default().with_topic_names(vec![name("a")]);
        passes(ApiKey::DeleteTopics, 1..=5, &delete_by_name);
        let delete = DeleteTopicsRequest::default().with_topics(vec![
            delete_topics_request::DeleteTopicState::default().with_name(Some(name("a"))),
        ]);
        passes(ApiKey::DeleteTopics, 6..=6, &delete);
    }

    #[test]
    fn every_transactional_request_the_crate_encodes_passes() {
        use kafka_protocol::messages::*;
        let add = AddPartitionsToTxnRequest::default().with_v3_and_below_topics(vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(name("a"))
                .with_partitions(vec![0, 1, 2]),
        ]);
        passes(ApiKey::AddPartitionsToTxn, 0..=3, &add);
        let batched = AddPartitionsToTxnRequest::default().with_transactions(vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(StrBytes::from_static_str("t")))
                .with_verify_only(true)
                .with_topics(vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(name("a"))
                        .with_partitions(vec![0, 1]),
                ]),
        ]);
        passes(ApiKey::AddPartitionsToTxn, 4..=5, &batched);
        passes(
            ApiKey::AddPartitionsToTxn,
            4..=5,
            &AddPartitionsToTxnRequest::default(),
        );
        let commit = TxnOffsetCommitRequest::default().with_topics(vec![
            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(name("a"))
                .with_partitions(vec![
                        txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                            .with_committed_metadata(Some(StrBytes::from_static_str("m")));
                        2
                    ]),
        ]);
        passes(ApiKey::TxnOffsetCommit, 0..=2, &commit);
        let describe = DescribeTransactionsRequest::default().with_transactional_ids(vec![
            TransactionalId(StrBytes::from_static_str("a")),
            TransactionalId(StrBytes::from_static_str("b")),
        ]);
        passes(ApiKey::DescribeTransactions, 0..=0, &describe);
        let list = ListTransactionsRequest::default()
            .with_state_filters(vec![StrBytes::from_static_str("Ongoing")])
            .with_producer_id_filters(vec![ProducerId(7), ProducerId(8)]);
        passes(ApiKey::ListTransactions, 0..=1, &list);
        let producers = DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default()
                .with_name(name("a"))
                .with_partition_indexes(vec![0, 1]),
        ]);
        passes(ApiKey::DescribeProducers, 0..=0, &producers);
        let member = commit
            .with_member_id(StrBytes::from_static_str("member"))
            .with_group_instance_id(Some(StrBytes::from_static_str("instance")));
        passes(ApiKey::TxnOffsetCommit, 3..=3, &member);
        // A count no body could hold.
        let mut huge = bytes::BytesMut::new();
        AddPartitionsToTxnRequest::default()
            .encode(&mut huge, 0)
            .unwrap();
        let at = huge.len() - 4;
        huge[at..].copy_from_slice(&0x7fff_ffffi32.to_be_bytes());
        assert!(check(ApiKey::AddPartitionsToTxn, 0, &huge).is_err());
    }

    #[test]
    fn requests_the_crate_encodes_pass_at_every_version() {
        let topic = MetadataRequestTopic::default().with_name(Some(
            kafka_protocol::messages::TopicName(StrBytes::from_static_str("orders")),
        ));
        let request = MetadataRequest::default().with_topics(Some(vec![topic.clone(), topic]));
        for version in 0..=12 {
            let request = if version >= 4 {
                request.clone().with_allow_auto_topic_creation(true)
            } else {
                request.clone()
            };
            let mut body = bytes::BytesMut::new();
            request.encode(&mut body, version).unwrap();
            assert_eq!(
                check(ApiKey::Metadata, version, &body),
                Ok(()),
                "v{version}"
            );
        }
    }
}
