//! What the transaction tests share: a durable broker on a simulated disk, with its group
//! coordinator and its transaction service, as a host builds them.

#![allow(dead_code)] // each test binary uses its own part of this

use minibroker_broker::{Broker, BrokerConfig, FlushPolicy};
use minibroker_groups::{GroupConfig, GroupCoordinator};
use minibroker_storage::sim::SimStorage;
use minibroker_transactions::{TransactionConfig, TransactionService};
use std::sync::Arc;

/// A broker (flush policy `always`), its group coordinator and its transaction service.
pub struct Node {
    pub broker: Arc<Broker>,
    pub groups: Arc<GroupCoordinator>,
    pub service: TransactionService,
}

/// The node on `storage` (recovering whatever it holds).
pub fn open(storage: &SimStorage) -> Node {
    let config = BrokerConfig {
        data_dir: Some("/data".into()),
        flush: FlushPolicy::Always,
        ..BrokerConfig::default()
    };
    let broker = Arc::new(Broker::with_storage(&config, Arc::new(storage.clone())).unwrap());
    let groups = Arc::new(GroupCoordinator::for_broker(&broker, &GroupConfig::default()).unwrap());
    let service = TransactionService::for_broker(
        Arc::clone(&broker),
        Arc::clone(&groups),
        &TransactionConfig::default(),
    )
    .unwrap();
    Node {
        broker,
        groups,
        service,
    }
}
