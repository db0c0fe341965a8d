//! The log start offset a DeleteRecords request set: `log-start-offset` in the partition's
//! directory, sealed (magic `MBLS`, version 1, body the offset as 8 big-endian bytes).
//!
//! Kafka keeps every partition's start offset in one checkpoint file per log directory; one
//! small file per partition keeps a partition's directory whole (deleting the topic deletes it,
//! the data checker reads it beside the segments). It is written, synced and renamed into place
//! before any segment below it is deleted, so a crash between the two leaves the file ahead of
//! the segments, and the next open deletes the rest.

use std::io;
use std::path::Path;

use crate::LogError;
use crate::sealed::{seal, unseal};
use crate::storage::{Storage, read_whole, write_atomically};

/// The file's name in the partition's directory.
pub(crate) const START_OFFSET_FILE: &str = "log-start-offset";
const MAGIC: &[u8; 4] = b"MBLS";
const VERSION: u8 = 1;

/// The file's bytes for `offset`.
fn encode(offset: i64) -> Vec<u8> {
    seal(MAGIC, VERSION, &offset.to_be_bytes())
}

/// The offset `data` holds, or why it cannot be read.
pub(crate) fn decode(data: &[u8]) -> Result<i64, String> {
    let body = unseal(MAGIC, VERSION, data).map_err(|error| error.to_string())?;
    let bytes: [u8; 8] = body
        .try_into()
        .map_err(|_| format!("a body of {} bytes, not 8", body.len()))?;
    let offset = i64::from_be_bytes(bytes);
    if offset < 0 {
        return Err(format!("a negative offset ({offset})"));
    }
    Ok(offset)
}

/// The start offset saved in `dir`, if one was.
///
/// # Errors
/// [`LogError::Damaged`] naming the file when it does not decode (serving the log from its
/// oldest segment would serve deleted records again); [`LogError::Storage`] when it cannot be
/// read.
pub(crate) fn read(storage: &dyn Storage, dir: &Path) -> Result<Option<i64>, LogError> {
    let path = dir.join(START_OFFSET_FILE);
    let data = match read_whole(storage, &path) {
        Ok(data) => data,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(LogError::storage(
                format!("reading {START_OFFSET_FILE}"),
                dir,
                error,
            ));
        }
    };
    decode(&data)
        .map(Some)
        .map_err(|reason| LogError::Damaged(format!("{}: {reason}", path.display())))
}

/// Saves `offset` as the start offset of the log in `dir` (synced before it returns).
///
/// # Errors
/// As the file system reports; the old file stays then.
pub(crate) fn write(storage: &dyn Storage, dir: &Path, offset: i64) -> io::Result<()> {
    write_atomically(storage, &dir.join(START_OFFSET_FILE), &encode(offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_round_trips_and_a_damaged_or_negative_one_is_refused() {
        assert_eq!(decode(&encode(42)), Ok(42));
        let mut damaged = encode(42);
        damaged[6] ^= 1;
        assert!(decode(&damaged).unwrap_err().contains("checksum"));
        assert!(decode(&encode(-1)).unwrap_err().contains("negative"));
        assert!(decode(&seal(MAGIC, VERSION, b"short")).is_err());
        assert!(decode(&seal(MAGIC, 2, &7i64.to_be_bytes())).is_err());
    }
}
