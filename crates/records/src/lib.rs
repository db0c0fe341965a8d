//! Kafka v2 record batches: the one stored format of minibroker, whichever protocol wrote them.
//!
//! A batch is a 61-byte header (base offset, length, leader epoch, magic, CRC-32C, attributes,
//! last offset delta, timestamps, producer id, epoch, base sequence, record count) followed by its
//! records, each with a key, a value, headers and a timestamp. This crate wraps the
//! `kafka-protocol` crate's record module, so the format itself is never written by hand here:
//!
//! - [`encode`] builds a batch from records and the producer metadata the exactly-once rule reads;
//! - [`inspect`] checks a batch received from a client (magic 2, exact length, CRC, a record count
//!   that matches its offsets) and returns what the rule needs, without decompressing;
//! - [`set_base_offset`] stamps a batch with its place in the log when it is appended: the base
//!   offset and the partition leader epoch lie outside the CRC (Kafka's broker sets both too), so
//!   the batch stays valid and is otherwise stored verbatim;
//! - [`inspect_stored`] is what recovery checks of a stored batch: [`inspect`], plus the offset
//!   it must have and the leader epoch the log stamps, so a change to any byte is detected;
//! - [`decode`] turns a stored batch back into records, for whoever needs them.
//!
//!
//! # Example
//! ```
//! use minibroker_records::{NewRecord, Writer, decode, encode, inspect, set_base_offset};
//!
//! let writer = Writer { producer_id: 7, epoch: 0, base_sequence: 0 };
//! let records = [NewRecord::value("hello").with_key("k").with_header("h", "v")];
//! let batch = encode(writer, &records, 1_700_000_000_000)?;
//! let info = inspect(&batch)?;
//! let mut batch = batch.to_vec();
//! assert_eq!((info.producer_id, info.base_sequence, info.record_count), (7, 0, 1));
//! set_base_offset(&mut batch, 42);
//! let decoded = decode(&batch.into())?;
//! assert_eq!(decoded.records[0].offset, 42);
//! assert_eq!(decoded.records[0].key.as_deref(), Some(&b"k"[..]));
//! # Ok::<(), minibroker_records::RecordsError>(())
//! ```

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, NO_PARTITION_LEADER_EPOCH, Record, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use thiserror::Error;

pub use kafka_protocol::records::NO_PRODUCER_ID;

mod compact;
mod marker;
mod quick_walk;
mod validate;
pub mod varint;
pub use compact::{
    KeyedRecord, Retained, delete_horizon, for_each_record, has_keyless_record, is_control,
    is_transactional, retain_records,
};
pub use marker::{Marker, encode_marker, marker};
pub use validate::{Inspected, MAX_DECOMPRESSED_BYTES, validate};

/// Bytes of a v2 batch header, before its records.
pub const HEADER_LEN: usize = 61;

/// Where the header fields this crate reads or patches directly begin (Kafka's
/// `DefaultRecordBatch` layout).
mod layout {
    pub const BASE_OFFSET: usize = 0;
    pub const LENGTH: usize = 8;
    /// The batch length counts the bytes after the length field.
    pub const LENGTH_END: usize = 12;
    pub const LEADER_EPOCH: usize = 12;
    pub const MAGIC: usize = 16;
    pub const CRC: usize = 17;
    /// The CRC covers everything from the attributes to the end.
    pub const CRC_START: usize = 21;
    pub const ATTRIBUTES: usize = 21;
    pub const LAST_OFFSET_DELTA: usize = 23;
    pub const FIRST_TIMESTAMP: usize = 27;
    pub const MAX_TIMESTAMP: usize = 35;
    pub const PRODUCER_ID: usize = 43;
    pub const PRODUCER_EPOCH: usize = 51;
    pub const BASE_SEQUENCE: usize = 53;
    pub const RECORD_COUNT: usize = 57;
}

/// The partition leader epoch the log stamps on every batch it stores: this single broker is the
/// leader of every partition, always in epoch 0.
pub const LEADER_EPOCH: i32 = 0;

/// Smallest encoding of one uncompressed record (length, attributes, timestamp delta, offset
/// delta, key length, value length, header count: one byte each).
const MIN_RECORD_LEN: usize = 7;

/// Most records a compressed batch may claim: its count cannot be checked against its bytes
/// without decompressing, and a decoder allocates for it.
pub const MAX_COMPRESSED_RECORDS: u32 = 1 << 20;

/// Why a batch was refused.
#[derive(Debug, Error)]
pub enum RecordsError {
    /// Shorter than a header, or its length field disagrees with its size.
    #[error("corrupt record batch: {0}")]
    Corrupt(String),
    /// The CRC or an encoding inside the batch is wrong (reported by the decoder).
    #[error("corrupt record batch: {0}")]
    Decode(#[source] BoxError),
    /// Not a v2 batch.
    #[error("record batch magic {0} is not supported (only magic 2)")]
    UnsupportedMagic(i8),
    /// A well-formed batch whose contents are not acceptable (no records, a count that does not
    /// match its offsets).
    #[error("invalid record batch: {0}")]
    Invalid(String),
    /// A batch could not be built (a record or header too large).
    #[error("cannot encode the record batch: {0}")]
    Encode(#[source] BoxError),
}

/// The decoder's and encoder's own errors, kept as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Who writes a batch, and the sequence of its first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Writer {
    /// The producer id, or [`NO_PRODUCER_ID`] for a producer that is not idempotent.
    pub producer_id: i64,
    /// The producer's epoch.
    pub epoch: i16,
    /// The first record's sequence; record `i` has `base_sequence + i` (wrapping after
    /// `i32::MAX`, as Kafka does).
    pub base_sequence: i32,
}

/// A record to write: an optional key, a value, headers and a timestamp (milliseconds since the
/// epoch; `None` takes the batch's timestamp).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewRecord {
    /// The key.
    pub key: Option<Bytes>,
    /// The value (`None` is a null value, as a Kafka tombstone).
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// When the record was created; `None` for the time given to [`encode`].
    pub timestamp: Option<i64>,
}

impl NewRecord {
    /// A record with just a value.
    pub fn value(value: impl Into<Bytes>) -> Self {
        Self {
            value: Some(value.into()),
            ..Self::default()
        }
    }

    /// The same record with `key`.
    #[must_use]
    pub fn with_key(self, key: impl Into<Bytes>) -> Self {
        Self {
            key: Some(key.into()),
            ..self
        }
    }

    /// The same record with one more header.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((name.into(), Some(value.into())));
        self
    }
}

impl From<Bytes> for NewRecord {
    fn from(value: Bytes) -> Self {
        Self::value(value)
    }
}

impl From<&'static str> for NewRecord {
    fn from(value: &'static str) -> Self {
        Self::value(value)
    }
}

impl From<String> for NewRecord {
    fn from(value: String) -> Self {
        Self::value(value)
    }
}

/// Milliseconds since the Unix epoch now: the timestamp [`encode`] gives records without one.
#[must_use]
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

/// What [`inspect`] read from a batch's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchInfo {
    /// The producer id ([`NO_PRODUCER_ID`] when the producer is not idempotent).
    pub producer_id: i64,
    /// The producer's epoch.
    pub epoch: i16,
    /// The sequence of the first record.
    pub base_sequence: i32,
    /// How many records the batch holds: at least one as a producer sends it, and then also how
    /// many offsets and sequences it takes; fewer (even none) once compaction removed some.
    pub record_count: u32,
    /// How many offsets and sequences it takes (its last offset delta + 1): the record count as
    /// sent, and still the same after compaction removed records.
    pub offset_count: u32,
    /// Part of a transaction.
    pub transactional: bool,
    /// A control batch (transaction markers).
    pub control: bool,
    /// Whether its records are compressed.
    pub compressed: bool,
    /// The batch's size in bytes.
    pub len: usize,
}

/// Builds one batch of `records` from `writer`, at base offset 0 (the log patches the real one),
/// with `now` as the timestamp of records that have none.
///
/// # Errors
/// [`RecordsError::Invalid`] for no records; [`RecordsError::Encode`] for a record the format
/// cannot hold.
pub fn encode(writer: Writer, records: &[NewRecord], now: i64) -> Result<Bytes, RecordsError> {
    encode_batch(writer, records, now, false)
}

/// [`encode`], for a batch of the writer's ongoing transaction (its transactional flag set).
///
/// # Errors
/// As [`encode`].
pub fn encode_transactional(
    writer: Writer,
    records: &[NewRecord],
    now: i64,
) -> Result<Bytes, RecordsError> {
    encode_batch(writer, records, now, true)
}

fn encode_batch(
    writer: Writer,
    records: &[NewRecord],
    now: i64,
    transactional: bool,
) -> Result<Bytes, RecordsError> {
    if records.is_empty() {
        return Err(RecordsError::Invalid(
            "a batch needs at least one record".into(),
        ));
    }
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, record)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: writer.producer_id,
            producer_epoch: writer.epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // Wrapping in i32 keeps (offset - sequence) equal across the batch, which is how the
            // encoder tells that the records belong in one batch.
            sequence: writer.base_sequence.wrapping_add(i as i32),
            timestamp: record.timestamp.unwrap_or(now),
            key: record.key.clone(),
            value: record.value.clone(),
            headers: record
                .headers
                .iter()
                .map(|(name, value)| (StrBytes::from_string(name.clone()), value.clone()))
                .collect::<IndexMap<_, _>>(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options)
        .map_err(|error| RecordsError::Encode(error.into()))?;
    Ok(out.freeze())
}

/// Checks a batch a client sent and reads what the exactly-once rule needs from its header: magic
/// 2, a length field matching its size exactly, a valid CRC-32C, at least one record, and a
/// record count that matches its last offset delta (and, uncompressed, fits its bytes). Records
/// are not decompressed.
///
/// # Errors
/// [`RecordsError::Corrupt`] or [`RecordsError::Decode`] for damaged bytes,
/// [`RecordsError::UnsupportedMagic`] for an older format, [`RecordsError::Invalid`] for a
/// well-formed batch that cannot be accepted.
pub fn inspect(batch: &[u8]) -> Result<BatchInfo, RecordsError> {
    inspect_as(batch, false)
}

/// [`inspect`] for a batch the log stores: compaction may have removed some of its records (even
/// all of them), keeping its offsets and sequences, so it holds from none to its offset count.
///
/// # Errors
/// As [`inspect`], but fewer records than offsets is not refused.
pub fn inspect_kept(batch: &[u8]) -> Result<BatchInfo, RecordsError> {
    inspect_as(batch, true)
}

fn inspect_as(batch: &[u8], compacted: bool) -> Result<BatchInfo, RecordsError> {
    if batch.len() < HEADER_LEN {
        return Err(RecordsError::Corrupt(format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            batch.len()
        )));
    }
    let magic = batch[layout::MAGIC] as i8;
    if magic != 2 {
        return Err(RecordsError::UnsupportedMagic(magic));
    }
    let length = i32_at(batch, layout::LENGTH);
    if usize::try_from(length).ok() != Some(batch.len() - layout::LENGTH_END) {
        return Err(RecordsError::Corrupt(format!(
            "its length field says {length} bytes follow it, but {} do",
            batch.len() - layout::LENGTH_END
        )));
    }
    let header = Header::read(batch)?;
    let last_offset_delta = i32_at(batch, layout::LAST_OFFSET_DELTA);
    let offset_count = u32::try_from(i64::from(last_offset_delta) + 1)
        .ok()
        .filter(|count| *count > 0)
        .ok_or_else(|| {
            RecordsError::Invalid(format!("a last offset delta of {last_offset_delta}"))
        })?;
    let record_count = u32::try_from(header.record_count).unwrap_or(0);
    if compacted {
        if record_count > offset_count {
            return Err(RecordsError::Invalid(format!(
                "{record_count} records but a last offset delta of {last_offset_delta}"
            )));
        }
    } else if record_count == 0 {
        return Err(RecordsError::Invalid(
            "a batch needs at least one record".into(),
        ));
    } else if record_count != offset_count {
        return Err(RecordsError::Invalid(format!(
            "{record_count} records but a last offset delta of {last_offset_delta}"
        )));
    }
    let compressed = header.compression != 0;
    let most = if compressed {
        MAX_COMPRESSED_RECORDS as usize
    } else {
        (batch.len() - HEADER_LEN) / MIN_RECORD_LEN
    };
    if record_count as usize > most {
        return Err(RecordsError::Invalid(format!(
            "{record_count} records cannot fit {} bytes",
            batch.len()
        )));
    }
    Ok(BatchInfo {
        producer_id: header.producer_id,
        epoch: header.producer_epoch,
        base_sequence: header.base_sequence,
        record_count,
        offset_count,
        transactional: header.attributes & attributes::TRANSACTIONAL != 0,
        control: header.attributes & attributes::CONTROL != 0,
        compressed,
        len: batch.len(),
    })
}

/// The fields of a v2 batch header that [`inspect`] needs, read in place.
///
/// `kafka-protocol`'s `RecordBatchDecoder::decode_batch_info` reads the same header, but it
/// returns a `Vec` and slices the buffer four times to do so: an allocation and eight reference
/// count updates for each produce request, which were about 7% of the broker's cycles on small
/// requests. The header has a fixed layout, so it is read here from the slice, and a differential
/// test (`tests/batches.rs`) holds it to the decoder's answers, damaged batches included.
struct Header {
    attributes: i16,
    compression: i16,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    record_count: i32,
}

mod attributes {
    pub const COMPRESSION: i16 = 0x7;
    pub const TRANSACTIONAL: i16 = 1 << 4;
    pub const CONTROL: i16 = 1 << 5;
    /// KIP-534: the first-timestamp field holds the batch's delete horizon (see
    /// [`crate::delete_horizon`]), and the records' timestamp deltas count from it.
    pub const DELETE_HORIZON: i16 = 1 << 6;
}

impl Header {
    /// Reads and checks the header of `batch`, which is at least [`HEADER_LEN`] bytes with magic 2:
    /// its CRC-32C over everything after the CRC field, a known compression codec, and a record
    /// count that is not negative.
    fn read(batch: &[u8]) -> Result<Self, RecordsError> {
        let supplied = u32::from_be_bytes(
            batch[layout::CRC..layout::CRC + 4]
                .try_into()
                .expect("4 bytes"),
        );
        let actual = crc32c::crc32c(&batch[layout::CRC_START..]);
        if supplied != actual {
            return Err(RecordsError::Corrupt(format!(
                "the CRC says {supplied:#010x} but the bytes give {actual:#010x}"
            )));
        }
        let attributes = i16_at(batch, layout::ATTRIBUTES);
        let compression = attributes & attributes::COMPRESSION;
        if compression > 4 {
            return Err(RecordsError::Corrupt(format!(
                "unknown compression codec {compression}"
            )));
        }
        let record_count = i32_at(batch, layout::RECORD_COUNT);
        if record_count < 0 {
            return Err(RecordsError::Corrupt(format!(
                "a negative record count ({record_count})"
            )));
        }
        Ok(Self {
            attributes,
            compression,
            producer_id: i64_at(batch, layout::PRODUCER_ID),
            producer_epoch: i16_at(batch, layout::PRODUCER_EPOCH),
            base_sequence: i32_at(batch, layout::BASE_SEQUENCE),
            record_count,
        })
    }
}

/// The offset of a batch's first record.
///
/// # Panics
/// If `batch` is shorter than 8 bytes (every stored batch has a full header).
#[must_use]
pub fn base_offset(batch: &[u8]) -> i64 {
    i64_at(batch, layout::BASE_OFFSET)
}

/// A stored batch's producer id, from its header ([`NO_PRODUCER_ID`] for a producer that is
/// not idempotent).
///
/// # Panics
/// If `batch` is shorter than a header.
#[must_use]
pub fn producer_id(batch: &[u8]) -> i64 {
    i64_at(batch, layout::PRODUCER_ID)
}

/// The largest timestamp of a batch's records, from its header (milliseconds since the epoch).
///
/// # Panics
/// If `batch` is shorter than a header.
#[must_use]
pub fn max_timestamp(batch: &[u8]) -> i64 {
    i64_at(batch, layout::MAX_TIMESTAMP)
}

/// The whole length of the batch that `header` begins (its length field plus the 12 bytes
/// before it), or `None` if the field says less than a header. Reads the first 12 bytes.
///
/// # Panics
/// If `header` is shorter than 12 bytes.
#[must_use]
pub fn batch_len(header: &[u8]) -> Option<usize> {
    let length = usize::try_from(i32_at(header, layout::LENGTH)).ok()?;
    let whole = length.checked_add(layout::LENGTH_END)?;
    (whole >= HEADER_LEN).then_some(whole)
}

/// One past the offset of a stored batch's last record, from its header. The sum saturates: a
/// damaged header (a base offset near `i64::MAX`) gives an offset no log holds, never an
/// overflow.
///
/// # Panics
/// If `batch` is shorter than a header.
#[must_use]
pub fn end_offset(batch: &[u8]) -> i64 {
    base_offset(batch)
        .saturating_add(i64::from(i32_at(batch, layout::LAST_OFFSET_DELTA)))
        .saturating_add(1)
}

/// Stamps a batch with its place in the log: the offset of its first record, and
/// [`LEADER_EPOCH`]. Both lie outside the CRC, so the batch stays valid.
///
/// # Panics
/// If `batch` is shorter than a header.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[layout::BASE_OFFSET..layout::BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    batch[layout::LEADER_EPOCH..layout::LEADER_EPOCH + 4]
        .copy_from_slice(&LEADER_EPOCH.to_be_bytes());
}

/// Checks a batch read back from storage, expected at `base_offset`: everything
/// [`inspect_kept`] checks, plus the two fields outside the CRC that the log stamped
/// ([`set_base_offset`]). A change to any single byte of a stored batch fails one of these
/// checks.
///
/// # Errors
/// As [`inspect_kept`], and [`RecordsError::Corrupt`] for a base offset or leader epoch other
/// than the log's.
pub fn inspect_stored(batch: &[u8], base_offset: i64) -> Result<BatchInfo, RecordsError> {
    let info = inspect_kept(batch)?;
    let found = self::base_offset(batch);
    if found != base_offset {
        return Err(RecordsError::Corrupt(format!(
            "stored at offset {base_offset} but says {found}"
        )));
    }
    let epoch = i32_at(batch, layout::LEADER_EPOCH);
    if epoch != LEADER_EPOCH {
        return Err(RecordsError::Corrupt(format!(
            "leader epoch {epoch}, but the log stamps {LEADER_EPOCH}"
        )));
    }
    Ok(info)
}

/// Sets a batch's base sequence and recomputes its CRC: a producer resending the same records
/// under the next sequences (the benchmark does) need not encode them again.
///
/// # Panics
/// If `batch` is shorter than a header.
pub fn set_base_sequence(batch: &mut [u8], base_sequence: i32) {
    batch[layout::BASE_SEQUENCE..layout::BASE_SEQUENCE + 4]
        .copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&batch[layout::CRC_START..]);
    batch[layout::CRC..layout::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

fn i32_at(batch: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(batch[at..at + 4].try_into().expect("4 bytes"))
}

fn i64_at(batch: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(batch[at..at + 8].try_into().expect("8 bytes"))
}

fn i16_at(batch: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(batch[at..at + 2].try_into().expect("2 bytes"))
}

/// The records of a batch, decompressed by `kafka-protocol`'s own decompressors.
fn decompress(records: &mut Bytes, compression: Compression) -> Result<Bytes, anyhow::Error> {
    use bytes::Buf;
    use kafka_protocol::compression::{Decompressor, Gzip, Lz4, Snappy, Zstd};
    let take = |buf: &mut Bytes| Ok(buf.copy_to_bytes(buf.remaining()));
    match compression {
        Compression::None => Ok(std::mem::take(records)),
        Compression::Gzip => Gzip::decompress(records, take),
        Compression::Snappy => Snappy::decompress(records, take),
        Compression::Lz4 => Lz4::decompress(records, take),
        Compression::Zstd => Zstd::decompress(records, take),
    }
}

/// One record read back, with the producer metadata of its batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// Its offset in the partition.
    pub offset: i64,
    /// Its timestamp (milliseconds since the epoch).
    pub timestamp: i64,
    /// Its key.
    pub key: Option<Bytes>,
    /// Its value.
    pub value: Option<Bytes>,
    /// Its headers, in order.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Its sequence number.
    pub sequence: i32,
}

/// A stored batch read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBatch {
    /// Where its first record is.
    pub base_offset: i64,
    /// What its header says.
    pub info: BatchInfo,
    /// Its records, in offset order.
    pub records: Vec<ConsumedRecord>,
}

/// Decodes a whole batch (decompressing it if needed), sharing `batch`'s memory for keys and
/// values.
///
/// # Errors
/// As [`inspect`], and [`RecordsError::Decode`] for records that do not decode.
pub fn decode(batch: &Bytes) -> Result<DecodedBatch, RecordsError> {
    let info = inspect_kept(batch)?;
    let mut bytes = batch.clone();
    // The decoder reserves room for each record's headers from their count before reading them,
    // so the records are walked first (as a produce walks them), after decompression (the
    // decoder hands them over here).
    let set = RecordBatchDecoder::decode_with_custom_compression(
        &mut bytes,
        Some(|records: &mut Bytes, compression: Compression| {
            let records = decompress(records, compression)?;
            validate::walk_records(&records, &info)?;
            Ok(records)
        }),
    )
    .map_err(|error| match error.downcast::<RecordsError>() {
        Ok(refused) => refused,
        Err(other) => RecordsError::Decode(other.into()),
    })?;
    let records = set
        .records
        .into_iter()
        .map(|record| ConsumedRecord {
            offset: record.offset,
            timestamp: record.timestamp,
            key: record.key,
            value: record.value,
            headers: record
                .headers
                .into_iter()
                .map(|(name, value)| (name.as_str().to_owned(), value))
                .collect(),
            sequence: record.sequence,
        })
        .collect();
    Ok(DecodedBatch {
        base_offset: base_offset(batch),
        info,
        records,
    })
}
