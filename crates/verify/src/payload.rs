//! Payload ids: what a record's value says it is, so duplicates and losses are caught from the
//! data itself, whatever the batch metadata says (a producer that is not idempotent writes no
//! producer id; a broker could rewrite one).
//!
//! Our producers write record `i` of writer `w` with the value `p<w>-<i>` (`p<w>.<n>-<i>` for a
//! writer's `n`th later instance, e.g. a resumed producer's epoch), optionally followed by a
//! space and padding. A value in that form is an id the verifier trusts: stored twice is a
//! duplicate, and an acknowledged batch names its first id, so each of its records must be
//! stored. Values in any other form are not judged by content.

use serde::{Deserialize, Serialize};
use std::fmt;

/// `p<writer>-<index>` or `p<writer>.<instance>-<index>`: record `index` of `writer` (a
/// producer id, or any number a writer owns) in its `instance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PayloadId {
    /// Who wrote it.
    pub writer: u64,
    /// Which instance of the writer (0 for the first, left out of the text).
    pub instance: u64,
    /// Its place in the writer's stream, from 0.
    pub index: u64,
}

impl PayloadId {
    /// The id a record `value` carries, if it starts with one (followed by nothing or a space).
    #[must_use]
    pub fn parse(value: &[u8]) -> Option<Self> {
        let token = value.split(|&b| b == b' ').next()?;
        let rest = token.strip_prefix(b"p")?;
        let dash = rest.iter().position(|&b| b == b'-')?;
        let number = |digits: &[u8]| {
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            std::str::from_utf8(digits).ok()?.parse().ok()
        };
        let (writer, instance) = match rest[..dash].iter().position(|&b| b == b'.') {
            Some(dot) => (&rest[..dot], number(&rest[dot + 1..dash])?),
            None => (&rest[..dash], 0),
        };
        Some(Self {
            writer: number(writer)?,
            instance,
            index: number(&rest[dash + 1..])?,
        })
    }

    /// The id `n` records after this one, from the same writer.
    #[must_use]
    pub fn after(self, n: u64) -> Self {
        Self {
            index: self.index + n,
            ..self
        }
    }

    /// The first record of `writer`'s `instance`.
    #[must_use]
    pub fn first(writer: u64, instance: u64) -> Self {
        Self {
            writer,
            instance,
            index: 0,
        }
    }
}

impl fmt::Display for PayloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}", self.writer)?;
        if self.instance != 0 {
            write!(f, ".{}", self.instance)?;
        }
        write!(f, "-{}", self.index)
    }
}

impl TryFrom<String> for PayloadId {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(text.as_bytes())
            .filter(|id| id.to_string() == text)
            .ok_or_else(|| format!("{text:?} is not a payload id (p<writer>-<index>)"))
    }
}

impl From<PayloadId> for String {
    fn from(id: PayloadId) -> Self {
        id.to_string()
    }
}

/// A record with a payload id, where the log stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredPayload {
    /// The record's offset.
    pub offset: i64,
    /// Its id.
    pub id: PayloadId,
}

impl StoredPayload {
    /// The payload ids of `records` (those whose values carry one).
    pub fn of_records<'a>(
        records: impl IntoIterator<Item = &'a minibroker_records::ConsumedRecord>,
    ) -> impl Iterator<Item = Self> {
        records.into_iter().filter_map(|record| {
            let id = PayloadId::parse(record.value.as_deref()?)?;
            Some(Self {
                offset: record.offset,
                id,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_with_or_without_padding() {
        let id = PayloadId::first(7, 0).after(12);
        assert_eq!(PayloadId::parse(b"p7-12"), Some(id));
        assert_eq!(PayloadId::parse(b"p7-12 xxxxxxxx"), Some(id));
        assert_eq!(id.to_string(), "p7-12");
        assert_eq!(id.after(3).index, 15);
        let later = PayloadId::first(7, 2).after(12);
        assert_eq!(PayloadId::parse(b"p7.2-12"), Some(later));
        assert_eq!(later.to_string(), "p7.2-12");
        assert_ne!(later, id);
    }

    #[test]
    fn other_values_carry_no_id() {
        for value in [
            &b""[..],
            b"hello",
            b"p7",
            b"p-1",
            b"p7-",
            b"q7-1",
            b"p7-1x",
            b"p7.-1",
            b"p.1-1",
            b"p99999999999999999999-1",
        ] {
            assert_eq!(PayloadId::parse(value), None, "{value:?}");
        }
    }

    #[test]
    fn ids_are_json_strings() {
        let id = PayloadId::first(3, 0);
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"p3-0\"");
        assert_eq!(serde_json::from_str::<PayloadId>("\"p3-0\"").unwrap(), id);
        assert!(serde_json::from_str::<PayloadId>("\"p3-0 pad\"").is_err());
    }
}
