//! What the coordinator's tests share: a coordinator (in memory, or on a durable broker's
//! simulated disk) and members' join requests.
#![allow(dead_code, reason = "each test binary uses its own share of these")]

use bytes::Bytes;
use minibroker_broker::{Broker, BrokerConfig, ServerError};
use minibroker_groups::{GroupConfig, GroupCoordinator, GroupError, JoinRequest, Joined};
use minibroker_storage::sim::SimStorage;
use std::sync::Arc;
use std::time::Duration;

pub fn config() -> GroupConfig {
    GroupConfig {
        group_min_session_timeout_ms: 1,
        max_group_members: 3,
        ..GroupConfig::default()
    }
}

/// A durable broker on `storage` and its group coordinator, built as the host builds them:
/// the coordinator keeps its offsets in the broker's data directory, charged to its budget.
pub struct Durable {
    _broker: Broker,
    groups: Arc<GroupCoordinator>,
}

impl Durable {
    pub fn groups(&self) -> &GroupCoordinator {
        &self.groups
    }

    /// The coordinator, for tasks a test spawns.
    pub fn shared(&self) -> Arc<GroupCoordinator> {
        Arc::clone(&self.groups)
    }
}

pub fn open(config: &BrokerConfig, storage: SimStorage) -> Result<Durable, ServerError> {
    let broker = Broker::with_storage(config, Arc::new(storage))?;
    let groups = Arc::new(GroupCoordinator::for_broker(&broker, &self::config())?);
    Ok(Durable {
        _broker: broker,
        groups,
    })
}

pub fn coordinator() -> Arc<GroupCoordinator> {
    Arc::new(GroupCoordinator::new(&config(), None).unwrap())
}

pub fn request(member_id: &str, session_ms: u64) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: member_id.into(),
        group_instance_id: None,
        client_id: "test".into(),
        client_host: String::new(),
        session_timeout: Duration::from_millis(session_ms),
        rebalance_timeout: Duration::from_secs(5),
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"subscription"))],
        require_known_member: true,
    }
}

/// A first join: MEMBER_ID_REQUIRED with an id, then the join with it.
pub async fn join_new(groups: &GroupCoordinator, session_ms: u64) -> Joined {
    let Err(GroupError::MemberIdRequired(id)) = groups.join(request("", session_ms)).await else {
        panic!("a first join must be asked for its member id");
    };
    groups.join(request(&id, session_ms)).await.unwrap()
}

/// A durable broker on `storage` whose groups commit offsets to its data directory.
pub fn durable_broker(storage: &SimStorage) -> Durable {
    let config = BrokerConfig {
        data_dir: Some("/data".into()),
        max_stored_bytes: 1 << 30,
        ..BrokerConfig::default()
    };
    open(&config, storage.clone()).unwrap()
}
