//! The offsets a partition's directory keeps beside its segments, each in a small sealed file
//! (version 1, body the offset as 8 big-endian bytes):
//!
//! - [`START_OFFSET`], `log-start-offset` (`MBLS`): where DeleteRecords moved the start. It is
//!   written, synced and renamed into place before any segment below it is deleted, so a crash
//!   between the two leaves the file ahead of the segments, and the next open deletes the rest.
//! - [`CLEANED_THROUGH`], `cleaner-offset` (`MBCO`): how far compaction has mapped the log, so
//!   a restarted broker knows what is still dirty. Written after each pass; without it (or
//!   behind the start) the whole log counts as dirty, which costs a pass and loses nothing.
//!
//! Kafka keeps these for all partitions in checkpoint files per log directory; one small file
//! per partition keeps a partition's directory whole (deleting the topic deletes them, the data
//! checker reads them beside the segments).

use std::io;
use std::path::Path;

use crate::LogError;
use crate::sealed::{seal, unseal};
use crate::storage::{Storage, read_whole, write_atomically};

/// One kind of offset file: its name in the partition's directory and its magic.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OffsetFile {
    pub(crate) name: &'static str,
    magic: &'static [u8; 4],
}

/// Where DeleteRecords moved the start.
pub(crate) const START_OFFSET: OffsetFile = OffsetFile {
    name: "log-start-offset",
    magic: b"MBLS",
};

/// How far compaction has mapped the log.
pub(crate) const CLEANED_THROUGH: OffsetFile = OffsetFile {
    name: "cleaner-offset",
    magic: b"MBCO",
};

/// Every kind, for the data checker.
pub(crate) const OFFSET_FILES: [OffsetFile; 2] = [START_OFFSET, CLEANED_THROUGH];

const VERSION: u8 = 1;

impl OffsetFile {
    /// The file's bytes for `offset`.
    fn encode(self, offset: i64) -> Vec<u8> {
        seal(self.magic, VERSION, &offset.to_be_bytes())
    }

    /// The offset `data` holds, or why it cannot be read.
    pub(crate) fn decode(self, data: &[u8]) -> Result<i64, OffsetFileError> {
        decode_body(unseal(self.magic, VERSION, data)?)
    }

    /// The offset saved in `dir`, if one was.
    ///
    /// # Errors
    /// [`LogError::Damaged`] naming the file when it does not decode; [`LogError::Storage`]
    /// when it cannot be read.
    pub(crate) fn read(self, storage: &dyn Storage, dir: &Path) -> Result<Option<i64>, LogError> {
        let path = dir.join(self.name);
        let data = match read_whole(storage, &path) {
            Ok(data) => data,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(LogError::storage(
                    format!("reading {}", self.name),
                    dir,
                    error,
                ));
            }
        };
        self.decode(&data)
            .map(Some)
            .map_err(|reason| LogError::Damaged(format!("{}: {reason}", path.display())))
    }

    /// Saves `offset` in `dir` (synced before it returns).
    ///
    /// # Errors
    /// As the file system reports; the old file stays then.
    pub(crate) fn write(self, storage: &dyn Storage, dir: &Path, offset: i64) -> io::Result<()> {
        write_atomically(storage, &dir.join(self.name), &self.encode(offset))
    }
}

/// Why an offset file was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OffsetFileError {
    /// Not a whole sealed file of its kind and version.
    #[error(transparent)]
    Sealed(#[from] minibroker_envelope::SealError),
    /// The body is not one offset.
    #[error("a body of {0} bytes, not 8")]
    BodyLength(usize),
    /// An offset no log has.
    #[error("a negative offset ({0})")]
    Negative(i64),
}

fn decode_body(body: &[u8]) -> Result<i64, OffsetFileError> {
    let bytes: [u8; 8] = body
        .try_into()
        .map_err(|_| OffsetFileError::BodyLength(body.len()))?;
    let offset = i64::from_be_bytes(bytes);
    if offset < 0 {
        return Err(OffsetFileError::Negative(offset));
    }
    Ok(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_round_trips_and_a_damaged_or_negative_one_is_refused() {
        for file in OFFSET_FILES {
            assert_eq!(file.decode(&file.encode(42)), Ok(42));
            let mut damaged = file.encode(42);
            damaged[6] ^= 1;
            assert!(matches!(
                file.decode(&damaged),
                Err(OffsetFileError::Sealed(_))
            ));
            assert!(
                file.decode(&damaged)
                    .unwrap_err()
                    .to_string()
                    .contains("checksum")
            );
            assert_eq!(
                file.decode(&file.encode(-1)),
                Err(OffsetFileError::Negative(-1))
            );
            assert_eq!(
                file.decode(&seal(file.magic, VERSION, b"short")),
                Err(OffsetFileError::BodyLength(5))
            );
            assert!(
                file.decode(&seal(file.magic, 2, &7i64.to_be_bytes()))
                    .is_err()
            );
        }
        assert!(START_OFFSET.decode(&CLEANED_THROUGH.encode(1)).is_err());
    }
}
