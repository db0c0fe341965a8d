//! The exactly-once verifier.
//!
//! Reads every partition of a topic back and checks, from the producer id, epoch and sequence the
//! log stores with each batch:
//! 1. no (producer id, epoch, sequence) is stored twice;
//! 2. each producer's sequences start at 0 and are contiguous within an epoch, in log order (a
//!    batch of `n` records spans `n` sequences);
//! 3. a producer's epochs never go backwards in a partition (nothing of a fenced instance lands
//!    after its successor wrote);
//! 4. given what producers report as acknowledged, every acknowledged batch is stored exactly
//!    once, with its record count, at the offset its acknowledgement named;
//! 5. records whose values carry a payload id (`p<writer>-<index>`, what our producers write)
//!    are each stored once, and every record of an acknowledged batch is stored: duplicates and
//!    losses judged by content, whatever the batch metadata says ([`PayloadId`]);
//! 6. for a transactional topic read over Kafka, a `read_committed` consumer sees exactly the
//!    committed and non-transactional batches below the last stable offset ([`isolation`]), and
//!    no record its producer sent in a transaction it aborted ([`check_aborted`]).
//!
//! Each violation is named as the anomaly it is ([`Violation::anomaly`]): a lost write, a
//! duplicate, an aborted read, and so on.
//!
//! [`check`] is the pure part (tested on hand-made logs); [`read_topic`] does the fetching over
//! the native protocol, [`read_topic_kafka`] over the Kafka protocol, so the same check runs
//! against any Kafka-compatible broker.

mod consumed;
mod invariants;
pub mod isolation;
mod kafka;
mod payload;
mod pipeline;
mod read;

pub use consumed::{ConsumedSummary, ConsumerLog, GroupRead, check_consumers};
pub use invariants::{
    AckedBatch, PartitionLog, Report, StoredBatch, Violation, check, check_aborted,
};
pub use isolation::{PartitionRead, PartitionReads, TransactionSummary};
pub use kafka::{KafkaReadError, read_committed_values, read_topic_isolated, read_topic_kafka};
pub use payload::{PayloadId, StoredPayload};
pub use pipeline::check_pipeline;
pub use read::{read_topic, read_topic_reporting, verify, verify_reporting};

/// Reads `topic` over the Kafka protocol from `addr` and checks it, against `acknowledged` if
/// given.
///
/// # Errors
/// As [`read_topic_kafka`].
pub async fn verify_kafka(
    addr: &str,
    topic: &str,
    acknowledged: Option<&[AckedBatch]>,
) -> Result<Report, KafkaReadError> {
    let logs = read_topic_kafka(addr, topic).await?;
    Ok(check(topic, &logs, acknowledged))
}

/// [`verify_kafka`], and the topic read `read_committed` too: it must show exactly the committed
/// data ([`isolation`]), and no record of `aborted`, batches sent in transactions their
/// producers aborted ([`check_aborted`]).
///
/// # Errors
/// As [`read_topic_kafka`].
pub async fn verify_kafka_read_committed(
    addr: &str,
    topic: &str,
    acknowledged: Option<&[AckedBatch]>,
    aborted: &[AckedBatch],
) -> Result<Report, KafkaReadError> {
    let reads = read_topic_isolated(addr, topic, true).await?;
    Ok(judge_reads(topic, &reads, acknowledged, aborted))
}

/// The checks of [`verify_kafka_read_committed`] over `reads`, a topic already read (the
/// `read_committed` view judged where it was read too).
#[must_use]
pub fn judge_reads(
    topic: &str,
    reads: &[PartitionReads],
    acknowledged: Option<&[AckedBatch]>,
    aborted: &[AckedBatch],
) -> Report {
    let logs: Vec<PartitionLog> = reads.iter().map(PartitionReads::data_log).collect();
    let mut report = check(topic, &logs, acknowledged);
    if reads.iter().any(|read| read.committed.is_some()) {
        isolation::check_isolation(reads, &mut report);
    }
    check_aborted(
        &logs,
        aborted,
        acknowledged.unwrap_or_default(),
        &mut report,
    );
    report
}

/// Where each partition of `reads` ends: the offset after its last batch or marker.
#[must_use]
pub fn partition_ends(reads: &[PartitionReads]) -> std::collections::BTreeMap<i32, i64> {
    reads
        .iter()
        .map(|read| {
            let end = read.all.last().map_or(0, |batch| {
                batch.base_offset + i64::from(batch.info.offset_count)
            });
            (i32::try_from(read.partition).unwrap_or(i32::MAX), end)
        })
        .collect()
}

/// Reads acknowledged batches, one JSON object per line (blank lines are skipped).
///
/// # Errors
/// [`BadAckLine`]: the number and reason of the first line that is not an [`AckedBatch`].
pub fn parse_acks(text: &str) -> Result<Vec<AckedBatch>, BadAckLine> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|source| BadAckLine {
                line: i + 1,
                source,
            })
        })
        .collect()
}

/// A line of an acknowledgements file that is not an [`AckedBatch`].
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {source}")]
pub struct BadAckLine {
    /// Its 1-based number.
    pub line: usize,
    /// What JSON made of it.
    pub source: serde_json::Error,
}
