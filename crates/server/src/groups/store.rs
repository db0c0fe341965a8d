//! Committed offsets on disk: one checksummed file holding every group's offsets, replaced
//! atomically (written aside, synced, renamed) on each commit, before the commit is answered.
//!
//! A whole-file rewrite keeps recovery trivial (read one file; a damaged one is an error, never
//! half-loaded) and costs one write of all offsets per commit, which suits the commit rates of
//! consumers (one commit per consumer every few seconds) and groups of thousands of partitions.
//!
//! In the envelope every small file of the data directory shares ([`minibroker_log::sealed`]):
//! ```text
//! "MBGO" version:u8 groups:u32
//! groups × { id:str offsets:u32  offsets × { topic:str partition:i32 offset:i64
//!                                            has_metadata:u8 metadata:str commit_ms:i64 } }
//! crc32c:u32
//! ```
//! (`str` is a u32 length and UTF-8 bytes; integers big-endian.)

use std::sync::Arc;

use super::{Committed, GroupError, OffsetsSnapshot};
use crate::ServerError;
use crate::data_dir::DataDir;

const FILE: &str = "group-offsets";
const MAGIC: &[u8; 4] = b"MBGO";
const VERSION: u8 = 1;

/// Every group's committed offsets, as saved.
type Snapshot = OffsetsSnapshot;

/// Where a durable broker keeps committed offsets.
#[derive(Debug)]
pub(super) struct OffsetStore {
    data: Arc<DataDir>,
    /// Held while a commit is applied and written, so writes happen in commit order.
    pub(super) writer: tokio::sync::Mutex<()>,
}

impl OffsetStore {
    pub(super) fn new(data: Arc<DataDir>) -> Self {
        Self {
            data,
            writer: tokio::sync::Mutex::new(()),
        }
    }

    /// The saved offsets (none if nothing was ever saved).
    pub(super) fn load(&self) -> Result<Snapshot, ServerError> {
        let damaged = |reason: String| ServerError::DataDir {
            path: self.data.root().join(FILE),
            reason,
        };
        match self.data.read_file(FILE) {
            Ok(None) => Ok(Vec::new()),
            Ok(Some(bytes)) => {
                decode(&bytes).ok_or_else(|| damaged("damaged (bad checksum or layout)".into()))
            }
            Err(error) => Err(damaged(error.to_string())),
        }
    }

    /// Writes `snapshot` on a blocking thread.
    pub(super) async fn save(&self, snapshot: Snapshot) -> Result<(), GroupError> {
        let data = Arc::clone(&self.data);
        tokio::task::spawn_blocking(move || data.write_file(FILE, &encode(&snapshot)))
            .await
            .map_err(|error| GroupError::Storage(error.to_string()))?
            .map_err(|error| GroupError::Storage(format!("saving committed offsets: {error}")))
    }
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_be_bytes());
    out.extend_from_slice(text.as_bytes());
}

fn encode(snapshot: &Snapshot) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(snapshot.len() as u32).to_be_bytes());
    for (group, offsets) in snapshot {
        put_str(&mut out, group);
        out.extend_from_slice(&(offsets.len() as u32).to_be_bytes());
        for ((topic, partition), committed) in offsets {
            put_str(&mut out, topic);
            out.extend_from_slice(&partition.to_be_bytes());
            out.extend_from_slice(&committed.offset.to_be_bytes());
            out.push(u8::from(committed.metadata.is_some()));
            put_str(&mut out, committed.metadata.as_deref().unwrap_or(""));
            out.extend_from_slice(&committed.commit_ms.to_be_bytes());
        }
    }
    minibroker_log::sealed::seal(MAGIC, VERSION, &out)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }

    fn string(&mut self) -> Option<String> {
        let len = self.u32()? as usize;
        if self.0.len() < len {
            return None;
        }
        let (text, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8(text.to_vec()).ok()
    }
}

fn decode(bytes: &[u8]) -> Option<Snapshot> {
    let mut r = Reader(minibroker_log::sealed::unseal(MAGIC, VERSION, bytes).ok()?);
    let groups = r.u32()?;
    let mut snapshot = Vec::new();
    for _ in 0..groups {
        let group = r.string()?;
        let count = r.u32()?;
        let mut offsets = Vec::new();
        for _ in 0..count {
            let topic = r.string()?;
            let partition = i32::from_be_bytes(r.take()?);
            let offset = r.i64()?;
            let [has_metadata] = r.take()?;
            let metadata = r.string()?;
            let commit_ms = r.i64()?;
            offsets.push((
                (topic, partition),
                Committed {
                    offset,
                    metadata: (has_metadata == 1).then_some(metadata),
                    commit_ms,
                },
            ));
        }
        snapshot.push((group, offsets));
    }
    r.0.is_empty().then_some(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip_and_damage_is_detected() {
        let snapshot: Snapshot = vec![(
            "g".into(),
            vec![
                (
                    ("t".into(), 0),
                    Committed {
                        offset: 42,
                        metadata: Some("m".into()),
                        commit_ms: 7,
                    },
                ),
                (
                    ("t".into(), 1),
                    Committed {
                        offset: 0,
                        metadata: None,
                        commit_ms: 8,
                    },
                ),
            ],
        )];
        let bytes = encode(&snapshot);
        assert_eq!(decode(&bytes), Some(snapshot));
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1;
            assert_eq!(decode(&damaged), None, "byte {at}");
        }
    }
}
