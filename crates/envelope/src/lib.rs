//! The one envelope of every small file a broker writes beside its segments (the topic list, the
//! producer-id reservation, committed offsets, producer-state snapshots, segment indexes): a
//! 4-byte magic naming the file's kind, a version byte, the body, and a CRC-32C of everything
//! before it. A crate of its own so that every crate that writes such a file (the state engine's
//! snapshots, the log's indexes, the broker's metadata) shares one reader and one writer.
//!
//! ```text
//! magic:[u8; 4] version:u8 body:[u8] crc32c:u32 (big-endian, of magic, version and body)
//! ```
//!
//! A file that does not open is refused, never half-read: the caller stops with the file's name.

mod fields;
pub mod framed;

pub use fields::{FieldWriter, Fields};

use thiserror::Error;

/// Why a sealed file cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SealError {
    /// Shorter than an empty envelope.
    #[error("{0} bytes, too short to be a checksummed file")]
    TooShort(usize),
    /// The checksum does not match the bytes: the file is damaged.
    #[error("damaged: its checksum does not match its bytes")]
    Checksum,
    /// A whole file of another kind, or of a version this broker does not read.
    #[error("not a file of this kind and version (magic {magic:?}, version {version})")]
    Kind {
        /// The magic found.
        magic: [u8; 4],
        /// The version found.
        version: u8,
    },
}

const ENVELOPE: usize = 4 + 1 + 4;

/// `body` in the envelope of `magic` and `version`.
#[must_use]
pub fn seal(magic: &[u8; 4], version: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + ENVELOPE);
    out.extend_from_slice(magic);
    out.push(version);
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// The body of `data`, which must be a sealed file of `magic` at `version`.
///
/// # Errors
/// [`SealError`] for a file too short, damaged, or of another kind or version.
pub fn unseal<'a>(magic: &[u8; 4], version: u8, data: &'a [u8]) -> Result<&'a [u8], SealError> {
    unseal_versions(magic, version..=version, data).map(|(_, body)| body)
}

/// The version and body of `data`, a sealed file of `magic` at one of `versions` (a format that
/// grew reads its older versions too).
///
/// # Errors
/// [`SealError`] for a file too short, damaged, or of another kind or version.
pub fn unseal_versions<'a>(
    magic: &[u8; 4],
    versions: std::ops::RangeInclusive<u8>,
    data: &'a [u8],
) -> Result<(u8, &'a [u8]), SealError> {
    if data.len() < ENVELOPE {
        return Err(SealError::TooShort(data.len()));
    }
    let (sealed, crc) = data.split_at(data.len() - 4);
    if crc32c::crc32c(sealed).to_be_bytes() != crc {
        return Err(SealError::Checksum);
    }
    let found = [sealed[0], sealed[1], sealed[2], sealed[3]];
    if found != *magic || !versions.contains(&sealed[4]) {
        return Err(SealError::Kind {
            magic: found,
            version: sealed[4],
        });
    }
    Ok((sealed[4], &sealed[5..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_round_trips_and_any_changed_bit_is_refused() {
        let sealed = seal(b"TEST", 3, b"a body");
        assert_eq!(unseal(b"TEST", 3, &sealed), Ok(&b"a body"[..]));
        for at in 0..sealed.len() {
            for bit in 0..8 {
                let mut damaged = sealed.clone();
                damaged[at] ^= 1 << bit;
                assert!(unseal(b"TEST", 3, &damaged).is_err(), "byte {at} bit {bit}");
            }
        }
        assert!(matches!(
            unseal(b"TEST", 4, &sealed),
            Err(SealError::Kind { version: 3, .. })
        ));
        assert!(matches!(
            unseal(b"OTHR", 3, &sealed),
            Err(SealError::Kind { .. })
        ));
        assert_eq!(unseal(b"TEST", 3, b"abc"), Err(SealError::TooShort(3)));
    }
}
