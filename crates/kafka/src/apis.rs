//! The Kafka APIs this broker implements, and at which versions: advertised by ApiVersions
//! exactly as implemented (with Produce's one exception, [`advertised_min`]), and checked
//! before any other request is decoded.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::protocol::StrBytes;
use std::sync::LazyLock;

/// (API, lowest version, highest version) for every API implemented.
pub(crate) const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::FindCoordinator, 0, 3),
    (ApiKey::JoinGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 3),
    (ApiKey::Heartbeat, 0, 3),
    (ApiKey::LeaveGroup, 0, 3),
    (ApiKey::OffsetCommit, 2, 7),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::DescribeGroups, 0, 4),
    (ApiKey::DeleteGroups, 0, 1),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DeleteRecords, 0, 2),
];

/// Produce's lowest version as ApiVersions advertises it: 0, as Kafka 4 does (KAFKA-18659),
/// though v0-v2 are still refused (the connection closes, as Kafka 4 closes it). librdkafka
/// before 2.11.1 (Debian's kcat among them) sends gzip and snappy batches uncompressed unless
/// Produce v0 is advertised, and lz4 unless v2 is (librdkafka #4956).
const PRODUCE_ADVERTISED_MIN_VERSION: i16 = 0;

/// The lowest version of `api` ApiVersions advertises, `min` being the lowest implemented.
pub(crate) fn advertised_min(api: ApiKey, min: i16) -> i16 {
    if api == ApiKey::Produce {
        PRODUCE_ADVERTISED_MIN_VERSION
    } else {
        min
    }
}

/// The transaction protocol this broker finalizes: 2 is KIP-890 part 2 (every transaction end
/// bumps the producer's epoch; Produce v12 adds a partition to the transaction by its first
/// transactional batch). Clients that know the feature use it; the others keep the older
/// requests, which are served too.
pub(crate) const TRANSACTION_VERSION: i16 = 2;

/// The transaction protocol a broker of a cluster finalizes: the older requests (AddPartitionsToTxn
/// to the coordinator). Produce v12's implicit add needs the transaction's coordinator, which in a
/// cluster is usually another broker than the partition's.
pub(crate) const CLUSTER_TRANSACTION_VERSION: i16 = 1;

/// The epoch of the finalized features: they never change while the broker runs.
pub(crate) const FINALIZED_FEATURES_EPOCH: i64 = 1;

/// The features ApiVersions advertises to a request of `version` (the fields exist from v3):
/// supported `transaction.version` 0-2 (left out below v4, as Kafka leaves out features whose
/// lowest version is 0 for clients that cannot read it, KAFKA-17492) and finalized at
/// `finalized` ([`TRANSACTION_VERSION`], or [`CLUSTER_TRANSACTION_VERSION`] in a cluster).
pub(crate) fn features(
    version: i16,
    finalized: i16,
) -> (Vec<SupportedFeatureKey>, Vec<FinalizedFeatureKey>) {
    let name = || StrBytes::from_static_str("transaction.version");
    let supported = (version >= 4)
        .then(|| {
            SupportedFeatureKey::default()
                .with_name(name())
                .with_min_version(0)
                .with_max_version(TRANSACTION_VERSION)
        })
        .into_iter()
        .collect();
    let finalized = vec![
        FinalizedFeatureKey::default()
            .with_name(name())
            .with_min_version_level(finalized)
            .with_max_version_level(finalized),
    ];
    (supported, finalized)
}

/// Whether `version` of `api` is implemented.
pub(crate) fn supports(api: ApiKey, version: i16) -> bool {
    SUPPORTED
        .iter()
        .any(|(key, min, max)| *key == api && (*min..=*max).contains(&version))
}

/// The name metrics give `api`: its name in Kafka (as `kafka-protocol` spells the key) for those
/// implemented, "other" for any other. Derived once from [`SUPPORTED`], so a new API is named
/// where it is listed.
pub(crate) fn name(api: ApiKey) -> &'static str {
    static NAMES: LazyLock<Vec<(ApiKey, &'static str)>> = LazyLock::new(|| {
        SUPPORTED
            .iter()
            .map(|(key, _, _)| (*key, &*format!("{key:?}").leak()))
            .collect()
    });
    NAMES
        .iter()
        .find(|(key, _)| *key == api)
        .map_or("other", |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_api_is_named_as_kafka_names_it() {
        assert_eq!(name(ApiKey::Produce), "Produce");
        assert_eq!(
            name(ApiKey::IncrementalAlterConfigs),
            "IncrementalAlterConfigs"
        );
        assert_eq!(
            name(ApiKey::DescribeUserScramCredentials),
            "DescribeUserScramCredentials"
        );
        assert_eq!(name(ApiKey::WriteTxnMarkers), "other");
    }
}
