//! [`validate`]: a batch's records walked before it is stored, as Kafka's `LogValidator` does.
//!
//! [`crate::inspect`] checks the header and the CRC, and the CRC only proves that the bytes are
//! the ones the producer sent. A producer can still send a batch whose records do not parse, or a
//! "gzip" batch whose payload is not gzip: stored, it is acknowledged once and then stops every
//! consumer of the partition at it, for good. So every record is walked once on the way in: its
//! length, its fields' lengths, its offset delta (`0..count`, in order), and the count itself, with
//! nothing left over.
//!
//! A compressed batch is decompressed as a stream and walked as it comes, so memory stays a few
//! buffers whatever the payload claims; [`MAX_DECOMPRESSED_BYTES`] bounds the work one batch can
//! ask for. The decompressors are the ones `kafka-protocol` itself uses (flate2, snap, lz4, zstd),
//! read through their streaming interfaces, because the crate's own decompress into one buffer
//! without a bound.

use std::io::{self, BufRead, BufReader, Read};

use crate::{BatchInfo, HEADER_LEN, RecordsError, inspect, layout};

/// Most bytes a compressed batch's records may decompress to; a batch that claims more is
/// refused as corrupt. Its records are walked as they are decompressed, so this bounds the
/// broker's work for one batch, not its memory.
pub const MAX_DECOMPRESSED_BYTES: u64 = 128 << 20;

/// Checks a batch a client sent, as [`inspect`] does, and walks its records (decompressing them
/// if needed): each must parse, with offset deltas `0, 1, ...` in order, exactly as many as the
/// header counts, and nothing after the last.
///
/// # Errors
/// As [`inspect`]; [`RecordsError::Corrupt`] for records that do not parse, do not match the
/// header, or do not decompress (or decompress to more than [`MAX_DECOMPRESSED_BYTES`]).
pub fn validate(batch: &[u8]) -> Result<BatchInfo, RecordsError> {
    let inspected = Inspected::new(batch)?;
    inspected.walk()?;
    Ok(*inspected.info())
}

/// A batch whose header and checksum [`inspect`] has read: the produce path reads them once, in
/// the front end (which needs the producer id and the transactional flag before the core takes
/// the batch), and hands this to the core, which walks the records ([`Self::walk`]) without
/// reading the header again. Only [`Self::new`] makes one, so its info is always the batch's.
#[derive(Debug, Clone, Copy)]
pub struct Inspected<'a> {
    bytes: &'a [u8],
    info: BatchInfo,
}

impl<'a> Inspected<'a> {
    /// Reads `batch`'s header and checks its checksum, as [`inspect`].
    ///
    /// # Errors
    /// As [`inspect`].
    pub fn new(batch: &'a [u8]) -> Result<Self, RecordsError> {
        Ok(Self {
            bytes: batch,
            info: inspect(batch)?,
        })
    }

    /// The batch.
    #[must_use]
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// What its header says.
    #[must_use]
    pub fn info(&self) -> &BatchInfo {
        &self.info
    }

    /// The rest of [`validate`]: every record walked, a compressed batch decompressed as a capped
    /// stream.
    ///
    /// # Errors
    /// As [`validate`].
    pub fn walk(&self) -> Result<(), RecordsError> {
        let records = &self.bytes[HEADER_LEN..];
        let codec = crate::i16_at(self.bytes, layout::ATTRIBUTES) & crate::attributes::COMPRESSION;
        match codec {
            0 => walk_records(records, &self.info),
            codec => walk_compressed(codec, records, &self.info)
                .map_err(|why| RecordsError::Corrupt(why.0)),
        }
    }
}

/// Walks the uncompressed records of a batch `info` describes, as [`validate`] does (and
/// [`crate::decode`], before its decoder reserves room for what the records claim).
pub(crate) fn walk_records(records: &[u8], info: &BatchInfo) -> Result<(), RecordsError> {
    if crate::quick_walk::well_formed(records, info) {
        return Ok(());
    }
    walk(&mut SliceSource::new(records), info).map_err(|why| RecordsError::Corrupt(why.0))
}

/// Where one record lies in uncompressed records, and what compaction reads of it.
#[derive(Debug, Clone)]
pub(crate) struct RecordPlace {
    /// Its bytes, length prefix included.
    pub(crate) bytes: std::ops::Range<usize>,
    /// Where its body (its attributes byte) begins, after the length prefix.
    pub(crate) body: usize,
    /// Where its key begins, after its timestamp and offset deltas.
    pub(crate) rest: usize,
    pub(crate) offset_delta: i64,
    pub(crate) timestamp_delta: i64,
    /// Its key's bytes; `None` for a null key.
    pub(crate) key: Option<std::ops::Range<usize>>,
    /// Whether its value is null (a tombstone).
    pub(crate) null_value: bool,
}

/// Every record in `records` (uncompressed, already walked when the batch was stored), in order.
pub(crate) fn record_places(records: &[u8]) -> Result<Vec<RecordPlace>, RecordsError> {
    let corrupt = |why: Refused| RecordsError::Corrupt(why.0);
    let mut source = SliceSource::new(records);
    let mut places = Vec::new();
    while source.at < records.len() {
        let start = source.at;
        let length = varint(&mut source).map_err(corrupt)?;
        let body = source.at;
        let end = usize::try_from(length)
            .ok()
            .and_then(|length| body.checked_add(length))
            .filter(|end| *end <= records.len())
            .ok_or_else(|| RecordsError::Corrupt(format!("a record of length {length}")))?;
        source.skip(1).map_err(corrupt)?; // attributes
        let timestamp_delta = varlong(&mut source).map_err(corrupt)?;
        let offset_delta = varint(&mut source).map_err(corrupt)?;
        let rest = source.at;
        let key = field(&mut source).map_err(corrupt)?;
        let null_value = field(&mut source).map_err(corrupt)?.is_none();
        source.at = end;
        places.push(RecordPlace {
            bytes: start..end,
            body,
            rest,
            offset_delta,
            timestamp_delta,
            key,
            null_value,
        });
    }
    Ok(places)
}

/// A key or value in place: its bytes, or `None` when null.
fn field(source: &mut SliceSource<'_>) -> Result<Option<std::ops::Range<usize>>, Refused> {
    Ok(skip_field(source)?.map(|length| source.at - length..source.at))
}

/// Why the records were refused.
#[derive(Debug)]
struct Refused(String);

impl From<io::Error> for Refused {
    fn from(error: io::Error) -> Self {
        Self(format!("its records do not decompress: {error}"))
    }
}

#[cold]
fn refused<T>(why: impl Into<String>) -> Result<T, Refused> {
    Err(Refused(why.into()))
}

fn walk_compressed(codec: i16, records: &[u8], info: &BatchInfo) -> Result<(), Refused> {
    let stream: Box<dyn Read + '_> = match codec {
        1 => Box::new(flate2::read::GzDecoder::new(records)),
        2 => Box::new(snappy::Stream::new(records)?),
        3 => Box::new(lz4::Decoder::new(records)?),
        4 => Box::new(zstd::stream::read::Decoder::with_buffer(records)?),
        // `inspect` refused every other codec.
        other => return refused(format!("unknown compression codec {other}")),
    };
    walk(&mut StreamSource::new(stream), info)
}

/// Where a walk reads records from: a slice, or a stream being decompressed.
trait Source {
    /// The next byte; an error at the end.
    fn byte(&mut self) -> Result<u8, Refused>;
    /// Passes over `len` bytes; an error if there are fewer.
    fn skip(&mut self, len: usize) -> Result<(), Refused>;
    /// Passes over `len` bytes and says whether they are UTF-8.
    fn skip_utf8(&mut self, len: usize) -> Result<bool, Refused>;
    /// Bytes read so far.
    fn position(&self) -> u64;
    /// Whether every byte has been read.
    fn at_end(&mut self) -> Result<bool, Refused>;
    /// A zig-zag varint of at most `max_bytes` bytes.
    fn zigzag(&mut self, max_bytes: u32) -> Result<i64, Refused>
    where
        Self: Sized,
    {
        zigzag_bytewise(self, max_bytes)
    }
}

/// Walks the records `info` counts from `source`, and checks nothing follows them. Their offset
/// deltas rise and stay below the offsets the batch spans: `0, 1, ...` exactly as a producer
/// sends them, with gaps only where compaction removed records.
fn walk(source: &mut impl Source, info: &BatchInfo) -> Result<(), Refused> {
    let count = info.record_count;
    let mut previous = -1;
    for expected in 0..count {
        let length = varint(source)?;
        let Ok(length) = u64::try_from(length) else {
            return refused(format!(
                "record {expected} has a negative length ({length})"
            ));
        };
        let start = source.position();
        source.skip(1)?; // attributes
        varlong(source)?; // timestamp delta
        let offset_delta = varint(source)?;
        if offset_delta <= previous || offset_delta >= i64::from(info.offset_count) {
            return refused(format!("record {expected} has offset delta {offset_delta}"));
        }
        previous = offset_delta;
        skip_field(source)?; // key
        skip_field(source)?; // value
        let headers = varint(source)?;
        // Each header takes two bytes at least (its two lengths).
        let left = length.saturating_sub(source.position() - start);
        if headers < 0 || headers as u64 > left / 2 {
            return refused(format!(
                "record {expected} claims {headers} headers in {left} bytes"
            ));
        }
        for _ in 0..headers {
            let key = varint(source)?;
            if key < 0 {
                return refused(format!(
                    "record {expected} has a header key of length {key}"
                ));
            }
            // Consumers read header keys as strings (kafka-python and this broker's decoder
            // refuse the batch otherwise).
            if !source.skip_utf8(key as usize)? {
                return refused(format!(
                    "record {expected} has a header key that is not UTF-8"
                ));
            }
            skip_field(source)?;
        }
        let read = source.position() - start;
        if read != length {
            return refused(format!(
                "record {expected} says it is {length} bytes, but its fields take {read}"
            ));
        }
    }
    if !source.at_end()? {
        return refused(format!("bytes follow its {count} records"));
    }
    Ok(())
}

/// Skips a key, value or header value: its length, then that many bytes (none for -1: null);
/// returns the length, `None` for null.
#[inline(always)]
fn skip_field(source: &mut impl Source) -> Result<Option<usize>, Refused> {
    match varint(source)? {
        -1 => Ok(None),
        length => match usize::try_from(length) {
            Ok(length) => source.skip(length).map(|()| Some(length)),
            Err(_) => refused(format!("a record field has length {length}")),
        },
    }
}

/// A zig-zag varint of at most `max_bytes` bytes.
#[inline(always)]
fn zigzag(source: &mut impl Source, max_bytes: u32) -> Result<i64, Refused> {
    source.zigzag(max_bytes)
}

/// A zig-zag varint read a byte at a time (the stream's way).
fn zigzag_bytewise(source: &mut impl Source, max_bytes: u32) -> Result<i64, Refused> {
    match crate::varint::unsigned_bytewise(|| source.byte(), max_bytes)? {
        Some(value) => Ok(crate::varint::unzigzag(value)),
        None => varint_without_end(),
    }
}

#[cold]
fn varint_without_end<T>() -> Result<T, Refused> {
    refused("a record holds a varint that does not end")
}

/// A 32-bit field (Kafka's varint).
#[inline(always)]
fn varint(source: &mut impl Source) -> Result<i64, Refused> {
    let value = zigzag(source, 5)?;
    if i32::try_from(value).is_err() {
        return refused(format!("a record holds a varint out of range ({value})"));
    }
    Ok(value)
}

/// A 64-bit field (Kafka's varlong).
#[inline(always)]
fn varlong(source: &mut impl Source) -> Result<i64, Refused> {
    zigzag(source, 10)
}

#[cold]
fn past_the_end<T>() -> Result<T, Refused> {
    refused("a record runs past the end of the batch")
}

/// Records in place, in an uncompressed batch: the produce path's usual case, kept to a few
/// comparisons per field.
struct SliceSource<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> SliceSource<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }
}

impl Source for SliceSource<'_> {
    #[inline(always)]
    fn byte(&mut self) -> Result<u8, Refused> {
        let Some(&byte) = self.bytes.get(self.at) else {
            return past_the_end();
        };
        self.at += 1;
        Ok(byte)
    }

    #[inline(always)]
    fn skip(&mut self, len: usize) -> Result<(), Refused> {
        if len > self.bytes.len() - self.at {
            return past_the_end();
        }
        self.at += len;
        Ok(())
    }

    fn skip_utf8(&mut self, len: usize) -> Result<bool, Refused> {
        let start = self.at;
        self.skip(len)?;
        Ok(std::str::from_utf8(&self.bytes[start..self.at]).is_ok())
    }

    fn position(&self) -> u64 {
        self.at as u64
    }

    fn at_end(&mut self) -> Result<bool, Refused> {
        Ok(self.at == self.bytes.len())
    }

    /// In place, by the produce path's reader ([`crate::varint::zigzag`]); when it finds
    /// no varint, the bytes left say whether the record ran out or the varint does not end.
    #[inline(always)]
    fn zigzag(&mut self, max_bytes: u32) -> Result<i64, Refused> {
        match crate::varint::zigzag(self.bytes, &mut self.at, max_bytes as usize) {
            Some(value) => Ok(value),
            None if self.bytes.len() - self.at < max_bytes as usize => past_the_end(),
            None => varint_without_end(),
        }
    }
}

/// Records as a decompressor hands them out, counted against [`MAX_DECOMPRESSED_BYTES`].
struct StreamSource<R> {
    reader: BufReader<R>,
    at: u64,
}

impl<R: Read> StreamSource<R> {
    fn new(reader: R) -> Self {
        Self {
            reader: BufReader::with_capacity(64 << 10, reader),
            at: 0,
        }
    }

    fn advance(&mut self, len: u64) -> Result<(), Refused> {
        self.at += len;
        if self.at > MAX_DECOMPRESSED_BYTES {
            return refused(format!(
                "its records decompress to more than {MAX_DECOMPRESSED_BYTES} bytes"
            ));
        }
        Ok(())
    }
}

impl<R: Read> Source for StreamSource<R> {
    fn byte(&mut self) -> Result<u8, Refused> {
        let Some(&byte) = self.reader.fill_buf()?.first() else {
            return past_the_end();
        };
        self.reader.consume(1);
        self.advance(1)?;
        Ok(byte)
    }

    fn skip(&mut self, len: usize) -> Result<(), Refused> {
        let mut left = len as u64;
        // Checked first: a field that claims more than the bound is refused unread.
        if self.at + left > MAX_DECOMPRESSED_BYTES {
            return self.advance(left);
        }
        while left > 0 {
            let available = self.reader.fill_buf()?.len() as u64;
            if available == 0 {
                return past_the_end();
            }
            let step = available.min(left);
            self.reader.consume(step as usize);
            left -= step;
        }
        self.advance(len as u64)
    }

    fn skip_utf8(&mut self, len: usize) -> Result<bool, Refused> {
        self.advance(len as u64)?;
        let mut key = vec![0; len];
        match self.reader.read_exact(&mut key) {
            Ok(()) => Ok(std::str::from_utf8(&key).is_ok()),
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => past_the_end(),
            Err(error) => Err(error.into()),
        }
    }

    fn position(&self) -> u64 {
        self.at
    }

    fn at_end(&mut self) -> Result<bool, Refused> {
        Ok(self.reader.fill_buf()?.is_empty())
    }
}

/// Kafka's snappy: raw snappy, or snappy-java's framing (a magic header, then blocks each with
/// its length), as `kafka-protocol` reads it, one block at a time.
mod snappy {
    use std::io::{self, Read};

    use super::{MAX_DECOMPRESSED_BYTES, Refused, refused};

    const MAGIC_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";

    /// The decompressed bytes of a snappy payload, a block at a time.
    pub(super) struct Stream<'a> {
        /// Blocks not yet decompressed (empty for raw snappy, decompressed whole at the start).
        blocks: &'a [u8],
        block: Vec<u8>,
        at: usize,
        decoder: snap::raw::Decoder,
    }

    impl<'a> Stream<'a> {
        pub(super) fn new(payload: &'a [u8]) -> Result<Self, Refused> {
            let mut stream = Self {
                blocks: &[],
                block: Vec::new(),
                at: 0,
                decoder: snap::raw::Decoder::new(),
            };
            match payload.strip_prefix(MAGIC_HEADER) {
                Some(blocks) => stream.blocks = blocks,
                None => stream.decompress(payload)?,
            }
            Ok(stream)
        }

        fn decompress(&mut self, compressed: &[u8]) -> Result<(), Refused> {
            let len = snap::raw::decompress_len(compressed).map_err(|error| {
                Refused(format!("its snappy records do not decompress: {error}"))
            })?;
            if len as u64 > MAX_DECOMPRESSED_BYTES {
                return refused(format!(
                    "its records decompress to more than {MAX_DECOMPRESSED_BYTES} bytes"
                ));
            }
            self.block.resize(len, 0);
            self.decoder
                .decompress(compressed, &mut self.block)
                .map_err(|error| {
                    Refused(format!("its snappy records do not decompress: {error}"))
                })?;
            self.at = 0;
            Ok(())
        }

        /// Decompresses the next framed block once the current one is read.
        fn next_block(&mut self) -> io::Result<()> {
            let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
            let Some((length, rest)) = self.blocks.split_first_chunk::<4>() else {
                return Err(invalid("a snappy block length is cut short".into()));
            };
            let length = u32::from_be_bytes(*length) as usize;
            if length > rest.len() {
                return Err(invalid("a snappy block runs past the batch".into()));
            }
            let (block, rest) = rest.split_at(length);
            self.blocks = rest;
            self.decompress(block).map_err(|why| invalid(why.0))
        }
    }

    impl Read for Stream<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            while self.at == self.block.len() {
                if self.blocks.is_empty() {
                    return Ok(0);
                }
                self.next_block()?;
            }
            let n = out.len().min(self.block.len() - self.at);
            out[..n].copy_from_slice(&self.block[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SliceSource, Source, walk, zigzag_bytewise};
    use crate::{HEADER_LEN, NewRecord, Writer, encode, inspect, quick_walk};
    use bytes::Bytes;
    use proptest::prelude::*;

    fn new_record() -> impl Strategy<Value = NewRecord> {
        let bytes = || prop::option::of(prop::collection::vec(any::<u8>(), 0..20));
        let header = ("[a-z\u{e9}]{0,4}", bytes());
        (
            bytes(),
            bytes(),
            prop::collection::vec(header, 0..3),
            prop::option::of(1_600_000_000_000i64..1_800_000_000_000),
        )
            .prop_map(|(key, value, headers, timestamp)| NewRecord {
                key: key.map(Bytes::from),
                value: value.map(Bytes::from),
                headers: headers
                    .into_iter()
                    .map(|(key, value)| (key, value.map(Bytes::from)))
                    .collect(),
                timestamp,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The produce path's quick walk accepts exactly the records the full walk accepts:
        /// records as a client builds them, then with bytes flipped, cut short or added, and
        /// counted differently by the header.
        #[test]
        fn quick_and_full_walks_agree(
            records in prop::collection::vec(new_record(), 1..6),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
            cut in prop::option::of(any::<prop::sample::Index>()),
            extra in prop::collection::vec(any::<u8>(), 0..3),
            count_change in -1i64..=1,
            offsets_change in -1i64..=1,
        ) {
            let writer = Writer { producer_id: 7, epoch: 0, base_sequence: 0 };
            let batch = encode(writer, &records, 1_700_000_000_000).expect("encodes");
            let mut info = inspect(&batch).expect("a batch as encoded");
            let mut bytes = batch[HEADER_LEN..].to_vec();
            for (at, byte) in flips {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len()));
            }
            bytes.extend(extra);
            info.record_count = (i64::from(info.record_count) + count_change).max(0) as u32;
            info.offset_count = (i64::from(info.offset_count) + offsets_change).max(0) as u32;
            let full = walk(&mut SliceSource::new(&bytes), &info).is_ok();
            prop_assert_eq!(quick_walk::well_formed(&bytes, &info), full);
        }
        /// The in-place varint reads what the byte-wise one reads, stops where it stops, and
        /// refuses what it refuses (a refusal ends the walk, so where it stopped then does not
        /// matter): at every length, ending or not, cut short or not.
        #[test]
        fn the_in_place_varint_reads_as_the_bytewise_one(
            bytes in prop::collection::vec(any::<u8>(), 0..12),
            max_bytes in prop_oneof![Just(5u32), Just(10u32)],
        ) {
            let mut in_place = SliceSource::new(&bytes);
            let mut bytewise = SliceSource::new(&bytes);
            let read = in_place.zigzag(max_bytes).map_err(|why| why.0);
            let expected = zigzag_bytewise(&mut bytewise, max_bytes).map_err(|why| why.0);
            if read.is_ok() {
                prop_assert_eq!(in_place.at, bytewise.at);
            }
            prop_assert_eq!(read, expected);
        }
    }

    #[test]
    fn varints_of_every_width_read_back() {
        for value in [
            0i64,
            -1,
            1,
            63,
            -64,
            64,
            8191,
            -8192,
            i64::from(i32::MAX),
            i64::MIN,
            i64::MAX,
        ] {
            let mut bytes = Vec::new();
            crate::varint::put_zigzag(&mut bytes, value);
            let mut source = SliceSource::new(&bytes);
            assert_eq!(source.zigzag(10).map_err(|why| why.0), Ok(value));
            assert_eq!(source.at, bytes.len());
        }
    }
}
