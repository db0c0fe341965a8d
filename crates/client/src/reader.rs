//! [`PartitionReader`]: every record of a partition from an offset to its end, a batch at a time —
//! the one fetch loop behind `consume`, `verify` and anything else that reads a partition back.

use minibroker_records::DecodedBatch;

use crate::{Client, ClientError};

/// Bytes asked for per fetch.
const FETCH_BYTES: u32 = 1 << 20;

/// Reads one partition from an offset up to the end it had when the reader got there.
pub struct PartitionReader<'a> {
    client: &'a Client,
    topic: String,
    partition: u32,
    /// The next offset to hand out.
    next_offset: i64,
    /// Batches fetched and not handed out yet, in order.
    pending: std::collections::VecDeque<bytes::Bytes>,
    /// The high watermark of the last fetch; reading ends there.
    end: Option<i64>,
    /// Where the last fetch started, to notice an answer that makes no progress.
    fetched_at: Option<i64>,
}

impl<'a> PartitionReader<'a> {
    /// A reader of `topic`/`partition` starting at offset `from`.
    #[must_use]
    pub fn new(client: &'a Client, topic: &str, partition: u32, from: i64) -> Self {
        Self {
            client,
            topic: topic.to_owned(),
            partition,
            next_offset: from,
            pending: std::collections::VecDeque::new(),
            end: None,
            fetched_at: None,
        }
    }

    /// The next stored batch, decoded, holding only records at or after the offset reached
    /// (a fetch starting mid-batch returns the whole batch); `None` at the end.
    ///
    /// # Errors
    /// Transport failures, broker errors, and batches that do not decode.
    pub async fn next_batch(&mut self) -> Result<Option<DecodedBatch>, ClientError> {
        loop {
            if let Some(bytes) = self.pending.pop_front() {
                let mut batch = minibroker_records::decode(&bytes)?;
                batch
                    .records
                    .retain(|record| record.offset >= self.next_offset);
                let Some(last) = batch.records.last() else {
                    continue;
                };
                self.next_offset = last.offset + 1;
                return Ok(Some(batch));
            }
            if self.end.is_some_and(|end| self.next_offset >= end) {
                return Ok(None);
            }
            if self.fetched_at == Some(self.next_offset) {
                return Err(ClientError::UnexpectedResponse {
                    expected: "batches past the offset asked for",
                    got: format!("none after offset {}", self.next_offset),
                });
            }
            self.fetched_at = Some(self.next_offset);
            let fetched = self
                .client
                .fetch(&self.topic, self.partition, self.next_offset, FETCH_BYTES)
                .await?;
            self.end = Some(fetched.high_watermark);
            if fetched.batches.is_empty() {
                return Ok(None);
            }
            self.pending.extend(fetched.batches);
        }
    }
}
