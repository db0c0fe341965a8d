//! The fields of a sealed body, one after another: big-endian integers, and strings as a u32
//! byte length then UTF-8. Every small file's format writes with [`FieldWriter`] and reads with
//! [`Fields`], so the byte layout each format's doc comment gives is read one way everywhere.

/// Writes a body's fields in order.
#[derive(Debug, Default)]
pub struct FieldWriter(Vec<u8>);

impl FieldWriter {
    /// An empty body with room for `capacity` bytes.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        Self(Vec::with_capacity(capacity))
    }

    /// Appends one byte.
    pub fn u8(&mut self, value: u8) {
        self.0.push(value);
    }

    /// Appends `value`, big-endian (the same for every integer type).
    pub fn int<const N: usize>(&mut self, value: [u8; N]) {
        self.0.extend_from_slice(&value);
    }

    /// Appends a u32 count (of entries, or a string's bytes); it saturates past `u32::MAX`, and
    /// no small file holds that many.
    pub fn count(&mut self, count: usize) {
        self.int(u32::try_from(count).unwrap_or(u32::MAX).to_be_bytes());
    }

    /// Appends `text` as its byte length, then its bytes.
    pub fn string(&mut self, text: &str) {
        self.bytes(text.as_bytes());
    }

    /// Appends opaque `bytes` as their length, then themselves (a string's layout).
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.0.extend_from_slice(bytes);
    }

    /// The body written.
    #[must_use]
    pub fn into_body(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a body's fields in order; each read is `None` once the body runs out (or, for a
/// string, is not UTF-8).
#[derive(Debug)]
pub struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    /// The fields of `body`.
    #[must_use]
    pub fn new(body: &'a [u8]) -> Self {
        Self(body)
    }

    /// The next `N` bytes (an integer: read it with `from_be_bytes`).
    pub fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[byte]| byte)
    }

    /// A u32 count.
    pub fn count(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }

    /// A string: its byte length, then its bytes.
    pub fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }

    /// Opaque bytes: their length, then themselves.
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.count()? as usize;
        if self.0.len() < len {
            return None;
        }
        let (bytes, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(bytes)
    }

    /// How many bytes are left unread.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_in_order_and_a_short_body_reads_none() {
        let mut out = FieldWriter::default();
        out.u8(7);
        out.int((-2i16).to_be_bytes());
        out.string("héllo");
        out.int(9i64.to_be_bytes());
        out.bytes(&[0xff, 0]);
        let body = out.into_body();
        let mut fields = Fields::new(&body);
        assert_eq!(fields.u8(), Some(7));
        assert_eq!(fields.take().map(i16::from_be_bytes), Some(-2));
        assert_eq!(fields.string().as_deref(), Some("héllo"));
        assert_eq!(fields.take().map(i64::from_be_bytes), Some(9));
        assert_eq!(
            fields.bytes(),
            Some(&[0xff, 0][..]),
            "bytes need not be UTF-8"
        );
        assert_eq!(fields.remaining(), 0);
        assert_eq!(fields.u8(), None);
        let mut short = Fields::new(&body[..5]);
        short.u8();
        short.take::<2>();
        assert_eq!(short.string(), None, "a string longer than what is left");
    }
}
