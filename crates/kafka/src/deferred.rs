//! A broker of a cluster's Produce whose answer waits for the cluster's commit of its batches
//! (`handlers::shared`): what the connection keeps until it sends its answers.

use bytes::Bytes;
use minibroker_cluster::Pending;
use minibroker_records::BatchInfo;

use crate::produce_wire::PartitionAnswer;

/// A Produce whose answer waits for the cluster's commit of its batches.
pub(crate) struct DeferredProduce {
    /// Where its answer goes in the connection's buffered answers.
    pub(crate) at: usize,
    /// The request, read again to write the answer.
    pub(crate) frame: Bytes,
    pub(crate) version: i16,
    /// Each partition's answer: the refused ones final, the others placeholders.
    pub(crate) answers: Vec<PartitionAnswer>,
    /// The partitions submitted to the cluster, by place in the request, with what their
    /// batch's header said (read once, when it was submitted).
    pub(crate) pending: Vec<(usize, Pending, BatchInfo)>,
}
