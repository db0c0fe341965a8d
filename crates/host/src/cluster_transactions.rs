//! [`ClusterTransactions`]: the transaction coordinator's seam
//! (`minibroker_transactions::SharedTransactions`) on a broker of a cluster. A transactional id
//! is coordinated under its lease (`minibroker_cluster::coordinators`, key type 1), every change
//! of it is a compare-and-set in the database, and an end writes its markers, settles its
//! groups' offsets and completes it in one database transaction
//! (`minibroker_cluster::transactions`).

use minibroker_cluster::transactions::{self, Ending, TransactionRow, TransactionWriteError};
use minibroker_cluster::{Database, KeyType, Tenure};
use minibroker_records::Marker;
use minibroker_transactions::{
    CoordinatorError, SharedFuture, SharedTransactions, Transaction, TxnState,
};
use std::sync::Arc;

use crate::cluster_error::ClusterError;
use crate::coordinating::Coordinating;

/// A broker's transactions in its cluster; see the module docs.
#[derive(Debug)]
pub struct ClusterTransactions {
    on: Arc<Coordinating>,
    database: Database,
}

impl ClusterTransactions {
    pub(crate) fn new(on: Arc<Coordinating>) -> Self {
        let database = on.database();
        Self { on, database }
    }

    /// Every transactional id of the cluster, as its coordinator last left it.
    ///
    /// # Errors
    /// The database could not be asked; a record that does not read.
    pub async fn all(&self) -> Result<Vec<Transaction>, ClusterError> {
        let client = self.database.client().await?;
        let rows = transactions::list_transactions(&*client).await?;
        rows.iter().map(decoded).collect()
    }

    /// Transactional id `id`, as its coordinator last left it, if the cluster has it.
    ///
    /// # Errors
    /// As [`Self::all`].
    pub async fn find(&self, id: &str) -> Result<Option<Transaction>, ClusterError> {
        let client = self.database.client().await?;
        let row = transactions::find_transaction(&*client, id).await?;
        row.as_ref().map(decoded).transpose()
    }

    fn tenure(&self, epoch: i64) -> Tenure<'_> {
        Tenure {
            run_id: &self.on.registration.run_id,
            epoch,
        }
    }

    async fn claim_id(&self, id: &str) -> Result<(i64, Option<Transaction>), CoordinatorError> {
        let client = self.database.client().await.map_err(shared)?;
        let claimed = minibroker_cluster::coordinators::claim(
            &*client,
            &self.on.leases,
            &self.on.registration,
            (KeyType::Transaction, id),
            self.on.lease,
        )
        .await
        .map_err(shared)?;
        let epoch = claimed.ok_or(CoordinatorError::NotCoordinator)?;
        let found = transactions::find_transaction(&*client, id)
            .await
            .map_err(shared)?;
        let found = found
            .as_ref()
            .map(decoded)
            .transpose()
            .map_err(|error| CoordinatorError::Shared(error.to_string()))?;
        Ok((epoch, found))
    }

    async fn save_id(
        &self,
        epoch: i64,
        before: Option<&Transaction>,
        changed: &Transaction,
    ) -> Result<(), CoordinatorError> {
        let client = self.database.client().await.map_err(shared)?;
        let added: Vec<(String, i32)> = if changed.state() == TxnState::Ongoing {
            changed
                .partitions()
                .filter_map(|(topic, partition)| {
                    Some((topic.clone(), i32::try_from(*partition).ok()?))
                })
                .collect()
        } else {
            Vec::new()
        };
        let before = before.map(row_of);
        transactions::save_transaction(
            &*client,
            self.tenure(epoch),
            before.as_ref(),
            &row_of(changed),
            &added,
        )
        .await
        .map_err(refusal)
    }

    async fn end_id(
        &self,
        epoch: i64,
        before: &Transaction,
        prepared: &Transaction,
        completed: &Transaction,
    ) -> Result<(), CoordinatorError> {
        let client = self.database.client().await.map_err(shared)?;
        let commit = prepared.state() == TxnState::PrepareCommit;
        let now_ms = minibroker_records::now_millis();
        let marker = Marker {
            commit,
            // The lease's epoch would do as the coordinator's; no client reads it.
            coordinator_epoch: 0,
        };
        let batch = minibroker_records::encode_marker(
            prepared.producer_id(),
            prepared.epoch(),
            marker,
            now_ms,
        )
        .map_err(|error| CoordinatorError::Shared(error.to_string()))?;
        let markers: Vec<(String, i32, bytes::Bytes)> = prepared
            .partitions()
            .filter_map(|(topic, partition)| {
                Some((
                    topic.clone(),
                    i32::try_from(*partition).ok()?,
                    batch.clone(),
                ))
            })
            .collect();
        let ending = Ending {
            producer_id: prepared.producer_id(),
            epoch: prepared.epoch(),
            commit,
            markers: &markers,
            timestamp: now_ms,
        };
        let written = transactions::end_transaction(
            &*client,
            self.tenure(epoch),
            &row_of(before),
            &row_of(completed),
            &ending,
        )
        .await
        .map_err(refusal)?;
        tracing::debug!(
            transactional_id = prepared.transactional_id(),
            commit,
            markers = written,
            "a transaction ended in the cluster"
        );
        Ok(())
    }
}

impl SharedTransactions for ClusterTransactions {
    fn claim<'a>(&'a self, id: &'a str) -> SharedFuture<'a, (i64, Option<Transaction>)> {
        Box::pin(self.claim_id(id))
    }

    fn epoch(&self, id: &str) -> Option<i64> {
        self.on.leases.epoch(KeyType::Transaction, id)
    }

    fn save<'a>(
        &'a self,
        epoch: i64,
        before: Option<&'a Transaction>,
        changed: &'a Transaction,
    ) -> SharedFuture<'a, ()> {
        Box::pin(self.save_id(epoch, before, changed))
    }

    fn end<'a>(
        &'a self,
        epoch: i64,
        before: &'a Transaction,
        prepared: &'a Transaction,
        completed: &'a Transaction,
    ) -> SharedFuture<'a, ()> {
        Box::pin(self.end_id(epoch, before, prepared, completed))
    }

    fn issue_producer_id(&self) -> SharedFuture<'_, i64> {
        Box::pin(async {
            let client = self
                .database
                .client()
                .await
                .map_err(|error| CoordinatorError::ProducerId(Box::new(error)))?;
            minibroker_cluster::next_producer_id(&*client)
                .await
                .map_err(|error| CoordinatorError::ProducerId(Box::new(error)))
        })
    }

    fn orphaned(&self, now_ms: i64) -> SharedFuture<'_, Vec<String>> {
        Box::pin(async move {
            let client = self.database.client().await.map_err(shared)?;
            transactions::orphaned_transactions(&*client, now_ms)
                .await
                .map_err(shared)
        })
    }
}

/// `txn` as the cluster's row of it.
fn row_of(txn: &Transaction) -> TransactionRow {
    TransactionRow {
        transactional_id: txn.transactional_id().to_owned(),
        producer_id: txn.producer_id(),
        epoch: txn.epoch(),
        state: txn.state().name().to_owned(),
        groups: txn.groups().cloned().collect(),
        timeout_ms: i64::try_from(txn.timeout_ms()).unwrap_or(i64::MAX),
        started_ms: txn.start_ms(),
        record: txn.encode(),
    }
}

/// The coordinator's record in `row`.
fn decoded(row: &TransactionRow) -> Result<Transaction, ClusterError> {
    Transaction::decode(&row.record).map_err(|error| ClusterError::Record {
        transactional_id: row.transactional_id.clone(),
        reason: error.to_string(),
    })
}

/// The database's failure, as the coordinator's: nothing changed, and the client asks again.
fn shared(error: tokio_postgres::Error) -> CoordinatorError {
    CoordinatorError::Shared(error.to_string())
}

/// A refused write, as the coordinator's refusal.
fn refusal(error: TransactionWriteError) -> CoordinatorError {
    match error {
        TransactionWriteError::NotCoordinator => CoordinatorError::NotCoordinator,
        TransactionWriteError::Changed
        | TransactionWriteError::NotMember
        | TransactionWriteError::NotInTransaction
        | TransactionWriteError::Fenced => CoordinatorError::Changed,
        TransactionWriteError::Postgres(error) => shared(error),
    }
}
