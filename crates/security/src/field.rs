//! One way to write any string as one field of the line-based files that store names a client
//! chose (principals from certificates and logins, ACL resource names): fields are separated by
//! spaces and records by newlines, but a certificate's common name may hold both (`CN=Jane Doe`),
//! and a name that does not come back as written would refuse the file or, worse, name someone
//! else.
//!
//! `%`, white space and control characters are written as `%XX`, one per UTF-8 byte; everything
//! else stays as it is, so ordinary names read as they always did. Reading decodes each `%XX`
//! and keeps any other `%` as it is (a file written by hand, or before this encoding), so every
//! string round-trips: a written `%` is always `%25`.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` as one field: no space, no newline, no control character.
#[must_use]
pub fn encode(text: &str) -> Cow<'_, str> {
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut field = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            let mut bytes = [0; 4];
            for byte in c.encode_utf8(&mut bytes).bytes() {
                let _ = write!(field, "%{byte:02X}");
            }
        } else {
            field.push(c);
        }
    }
    Cow::Owned(field)
}

/// The text a field written by [`encode`] holds.
///
/// # Errors
/// [`NotUtf8`] when the decoded bytes are not UTF-8.
pub fn decode(field: &str) -> Result<Cow<'_, str>, NotUtf8> {
    if !field.contains('%') {
        return Ok(Cow::Borrowed(field));
    }
    let bytes = field.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                at += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(decoded)
        .map(Cow::Owned)
        .map_err(|_| NotUtf8 {
            field: field.to_owned(),
        })
}

/// A field whose %-escapes decode to bytes that are not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field:?} does not decode to UTF-8")]
pub struct NotUtf8 {
    /// The field as written.
    pub field: String,
}

fn escaped(c: char) -> bool {
    c == '%' || c.is_whitespace() || c.is_control()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordinary_names_are_written_as_they_are() {
        for name in ["User:alice", "User:CN=x,O=y", "payments-app.v2", "*"] {
            assert!(matches!(encode(name), Cow::Borrowed(_)), "{name}");
        }
        assert_eq!(encode("User:Jane Doe"), "User:Jane%20Doe");
        assert_eq!(encode("50%\n"), "50%25%0A");
        // Written by hand, or before the encoding: a lone % is itself.
        assert_eq!(decode("100%").unwrap(), "100%");
        assert_eq!(decode("%zz%4").unwrap(), "%zz%4");
        assert!(decode("%FF").is_err());
    }

    proptest! {
        #[test]
        fn every_string_round_trips_as_one_field(text in any::<String>()) {
            let field = encode(&text);
            prop_assert!(!field.contains(char::is_whitespace), "{field:?}");
            prop_assert!(!field.contains(char::is_control), "{field:?}");
            prop_assert_eq!(decode(&field).unwrap(), text.as_str());
        }
    }
}
