//! Sealed records appended to a file one after another, each a u32 big-endian length and then
//! the record: the transaction log and the groups' files. Appending costs what the record
//! holds, never what the file holds.
//!
//! Reading follows the segments' torn-tail rule (and Kafka's log recovery): bytes at the end
//! that are not a whole record are what a crash in the middle of an append leaves — an append
//! never synced, so never answered — and are cut. A whole record that does not read is damage,
//! wherever it is; so is a length that looks like a torn tail while whole records follow it,
//! since cutting there would drop records that were answered.

/// Bytes of a record's length prefix.
pub const LENGTH_LEN: usize = 4;

/// Bytes at the end of a file of framed records that are not a whole record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Where they begin.
    pub at: usize,
    /// How many bytes.
    pub bytes: usize,
}

impl std::fmt::Display for TornTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes at byte {} are not a whole record; the next start cuts them (a crash leaves a torn tail; anything else is lost data)",
            self.bytes, self.at
        )
    }
}

/// Why a file of framed records was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramedError<E> {
    /// Where the record that did not read begins.
    pub at: usize,
    /// Why it did not: `None` for a damaged length with whole records after it.
    pub source: Option<E>,
}

/// `record` with its length prefix.
#[must_use]
pub fn frame(record: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(LENGTH_LEN + record.len());
    framed.extend_from_slice(
        &u32::try_from(record.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(record);
    framed
}

/// The framed record at `at` (its length prefix included), if the bytes hold all of it.
fn frame_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let length = bytes.get(at..at.checked_add(LENGTH_LEN)?)?;
    let length = u32::from_be_bytes(length.try_into().ok()?) as usize;
    bytes.get(at..at.checked_add(LENGTH_LEN)?.checked_add(length)?)
}

/// Reads every whole record of `bytes` in order with `read` (given where it starts and the
/// sealed record), and returns the torn tail left, if any. `magics` are the magics a record of
/// the file may start with, for telling a torn tail from a damaged length.
///
/// # Errors
/// The first record `read` refuses, or a damaged length with whole records after it.
pub fn read_framed<E>(
    bytes: &[u8],
    magics: &[&[u8; 4]],
    mut read: impl FnMut(usize, &[u8]) -> Result<(), E>,
    reads_whole: impl Fn(&[u8]) -> bool,
) -> Result<Option<TornTail>, FramedError<E>> {
    let mut at = 0;
    while let Some(framed) = frame_at(bytes, at) {
        read(at, &framed[LENGTH_LEN..]).map_err(|source| FramedError {
            at,
            source: Some(source),
        })?;
        at += framed.len();
    }
    if at == bytes.len() {
        return Ok(None);
    }
    let rest_is_whole = bytes.get(at + LENGTH_LEN..).is_some_and(&reads_whole);
    let whole_after = (at + 1..bytes.len())
        .filter(|&start| {
            start >= LENGTH_LEN
                && magics
                    .iter()
                    .any(|magic| bytes[start..].starts_with(*magic))
        })
        .any(|start| {
            frame_at(bytes, start - LENGTH_LEN)
                .is_some_and(|framed| reads_whole(&framed[LENGTH_LEN..]))
        });
    if rest_is_whole || whole_after {
        return Err(FramedError { at, source: None });
    }
    Ok(Some(TornTail {
        at,
        bytes: bytes.len() - at,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(text: &str) -> Vec<u8> {
        crate::seal(b"TEST", 1, text.as_bytes())
    }

    fn reads(record: &[u8]) -> bool {
        crate::unseal(b"TEST", 1, record).is_ok()
    }

    fn read_all(bytes: &[u8]) -> Result<(Vec<String>, Option<TornTail>), FramedError<()>> {
        let mut texts = Vec::new();
        let torn = read_framed(
            bytes,
            &[b"TEST"],
            |_, record| {
                let body = crate::unseal(b"TEST", 1, record).map_err(|_| ())?;
                texts.push(String::from_utf8(body.to_vec()).map_err(|_| ())?);
                Ok(())
            },
            reads,
        )?;
        Ok((texts, torn))
    }

    #[test]
    fn whole_records_read_a_torn_tail_is_left_and_a_damaged_length_is_refused() {
        let mut bytes = frame(&record("one"));
        bytes.extend(frame(&record("two")));
        let whole = bytes.len();
        assert_eq!(
            read_all(&bytes),
            Ok((vec!["one".into(), "two".into()], None))
        );
        let third = frame(&record("three"));
        for cut in 1..third.len() {
            let mut torn = bytes.clone();
            torn.extend_from_slice(&third[..cut]);
            let (texts, tail) = read_all(&torn).unwrap();
            assert_eq!(texts.len(), 2);
            assert_eq!(
                tail,
                Some(TornTail {
                    at: whole,
                    bytes: cut
                })
            );
        }
        // The first record's length made too long: whole records follow, so it is damage.
        let mut damaged = bytes.clone();
        damaged[3] += 40;
        assert_eq!(
            read_all(&damaged),
            Err(FramedError {
                at: 0,
                source: None
            })
        );
        // A whole record that does not read is damage too.
        let mut flipped = bytes;
        flipped[6] ^= 1;
        assert_eq!(
            read_all(&flipped),
            Err(FramedError {
                at: 0,
                source: Some(())
            })
        );
    }
}
