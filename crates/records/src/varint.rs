//! Varints, read in one place for the whole house: the unsigned base-128 varints of Kafka's
//! flexible message versions (lengths, counts, tag sizes) and, zig-zag encoded, the record
//! format's varints and varlongs.
//!
//! [`unsigned`] reads a slice in place, with fast paths for one and two bytes (a record's
//! length and a 100 B value's take two, most other fields one): the produce path reads every
//! field of every record with it. [`unsigned_bytewise`] reads the same encoding a byte at a
//! time, from a stream being decompressed.

/// An unsigned varint of at most `max_bytes` bytes at `at`, moving `at` past it; `None`, with
/// `at` where it was, when the bytes end first or the varint does not end within `max_bytes`.
/// Bits past the 64th are dropped, as a fixed-width reader drops them.
#[inline(always)]
#[must_use]
pub fn unsigned(bytes: &[u8], at: &mut usize, max_bytes: usize) -> Option<u64> {
    read(bytes, at, max_bytes, |value| value)
}

/// A zig-zag varint (the record format's) of at most `max_bytes` bytes at `at`, as
/// [`unsigned`] reads it.
#[inline(always)]
#[must_use]
pub fn zigzag(bytes: &[u8], at: &mut usize, max_bytes: usize) -> Option<i64> {
    read(bytes, at, max_bytes, unzigzag)
}

/// The one reader of [`unsigned`] and [`zigzag`], `finish` applied on each way out rather than
/// to its `Option`: the record walks read every field of every record through it, and mapping
/// the `Option` cost them 7% more instructions per 100-record batch (callgrind).
#[inline(always)]
fn read<T>(bytes: &[u8], at: &mut usize, max_bytes: usize, finish: impl Fn(u64) -> T) -> Option<T> {
    let rest = bytes.get(*at..)?;
    let first = *rest.first()?;
    if first < 0x80 {
        *at += 1;
        return Some(finish(u64::from(first)));
    }
    if let Some(&second) = rest.get(1)
        && second < 0x80
        && max_bytes >= 2
    {
        *at += 2;
        return Some(finish(u64::from(first & 0x7f) | u64::from(second) << 7));
    }
    let mut value = 0u64;
    for (i, &byte) in rest.iter().take(max_bytes.min(10)).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            *at += i + 1;
            return Some(finish(value));
        }
    }
    None
}

/// What a zig-zag encoded `value` stands for.
#[inline(always)]
#[must_use]
pub fn unzigzag(value: u64) -> i64 {
    (value >> 1) as i64 ^ -((value & 1) as i64)
}

/// An unsigned varint of at most `max_bytes` bytes, a byte at a time from `next`; `Ok(None)`
/// when it does not end within `max_bytes`, and `next`'s error when the bytes end first.
///
/// # Errors
/// The first error of `next`.
#[inline(always)]
pub fn unsigned_bytewise<E>(
    mut next: impl FnMut() -> Result<u8, E>,
    max_bytes: u32,
) -> Result<Option<u64>, E> {
    let mut value = 0u64;
    for i in 0..max_bytes.min(10) {
        let byte = next()?;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

/// Appends `value` zig-zag encoded, as the record format writes both its varints and varlongs
/// (a value that fits an i32 encodes the same either way).
pub fn put_zigzag(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push(zigzag as u8 | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reader_reads_what_the_writer_wrote() {
        for value in [
            0,
            1,
            -1,
            63,
            -64,
            64,
            8191,
            -8192,
            8192,
            i64::from(i32::MAX),
            i64::MIN,
            i64::MAX,
        ] {
            let mut bytes = Vec::new();
            put_zigzag(&mut bytes, value);
            let mut at = 0;
            assert_eq!(zigzag(&bytes, &mut at, 10), Some(value), "{value}");
            assert_eq!(at, bytes.len());
            let mut stream = bytes.iter().copied();
            let read = unsigned_bytewise(|| stream.next().ok_or(()), 10).unwrap();
            assert_eq!(read.map(unzigzag), Some(value), "{value}");
        }
    }

    #[test]
    fn a_varint_cut_short_or_too_long_is_not_read_and_leaves_the_position() {
        let mut at = 1;
        assert_eq!(
            unsigned(&[0x00, 0x80, 0x80], &mut at, 10),
            None,
            "cut short"
        );
        assert_eq!(at, 1);
        let mut at = 0;
        assert_eq!(
            unsigned(&[0x80, 0x80, 0x01], &mut at, 2),
            None,
            "longer than asked"
        );
        assert_eq!(
            unsigned(&[0x80, 0x01], &mut at, 1),
            None,
            "two bytes where one is allowed"
        );
        let mut stream = [0x80u8, 0x80, 0x01].into_iter();
        assert_eq!(unsigned_bytewise(|| stream.next().ok_or(()), 2), Ok(None));
        let mut stream = [0x80u8].into_iter();
        assert_eq!(unsigned_bytewise(|| stream.next().ok_or(()), 5), Err(()));
    }

    #[test]
    fn a_five_byte_varint_keeps_its_high_bits_for_the_caller_to_judge() {
        let mut at = 0;
        let value = unsigned(&[0xff, 0xff, 0xff, 0xff, 0x7f], &mut at, 5).unwrap();
        assert_eq!(value, (1 << 35) - 1);
        assert_eq!(value as u32, u32::MAX, "a u32 field keeps the low 32 bits");
    }
}
