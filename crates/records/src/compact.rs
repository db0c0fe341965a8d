//! A stored batch as log compaction sees it: its records' offsets, timestamps, keys and whether
//! each is a tombstone ([`for_each_record`]), and the same batch with only some records kept
//! ([`retain_records`]).
//!
//! `kafka-protocol` decodes and encodes batches, but its encoder takes a batch's base offset and
//! last offset delta from the records it is given, and a compacted batch must keep both as they
//! were (Kafka's cleaner does too, `MemoryRecordsBuilder::overrideLastOffset`): its offsets,
//! and the sequences the exactly-once rule counts from its header, never change. So the kept
//! records are copied here byte for byte (their offset and timestamp deltas are relative to the
//! unchanged header), behind the same header with the record count, length and CRC-32C set
//! again; a compressed batch's records are decompressed and compressed again with its own codec
//! by `kafka-protocol`'s compressors.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
use kafka_protocol::records::Compression;

use crate::validate::{RecordPlace, record_places};
use crate::varint::put_zigzag;
use crate::{HEADER_LEN, RecordsError, attributes, i16_at, i64_at, inspect_kept, layout};

/// One record of a stored batch, as compaction reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedRecord<'a> {
    /// Its offset in the partition.
    pub offset: i64,
    /// Its timestamp (milliseconds since the epoch).
    pub timestamp: i64,
    /// Its key (`None`: a record without one, which compaction always keeps).
    pub key: Option<&'a [u8]>,
    /// Whether its value is null: a tombstone, which deletes its key.
    pub tombstone: bool,
}

/// The records of a stored batch, uncompressed (borrowed when it is not compressed), and where
/// each one lies in them.
struct Records<'a> {
    bytes: std::borrow::Cow<'a, [u8]>,
    places: Vec<RecordPlace>,
    compression: Compression,
    info: crate::BatchInfo,
}

fn compression_of(batch: &[u8]) -> Compression {
    match i16_at(batch, layout::ATTRIBUTES) & attributes::COMPRESSION {
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        _ => Compression::None,
    }
}

fn records_of(batch: &[u8]) -> Result<Records<'_>, RecordsError> {
    let info = inspect_kept(batch)?;
    let compression = compression_of(batch);
    let bytes = match compression {
        Compression::None => std::borrow::Cow::Borrowed(&batch[HEADER_LEN..]),
        codec => {
            let mut payload = Bytes::copy_from_slice(&batch[HEADER_LEN..]);
            let plain = crate::decompress(&mut payload, codec).map_err(|error| {
                RecordsError::Corrupt(format!("its records do not decompress: {error}"))
            })?;
            std::borrow::Cow::Owned(plain.to_vec())
        }
    };
    let places = record_places(&bytes)?;
    Ok(Records {
        bytes,
        places,
        compression,
        info,
    })
}

impl Records<'_> {
    fn keyed<'a>(&'a self, batch: &[u8], place: &RecordPlace) -> KeyedRecord<'a> {
        KeyedRecord {
            offset: crate::base_offset(batch).saturating_add(place.offset_delta),
            timestamp: i64_at(batch, layout::FIRST_TIMESTAMP).saturating_add(place.timestamp_delta),
            key: place.key.clone().map(|key| &self.bytes[key]),
            tombstone: place.null_value,
        }
    }
}

/// Calls `each` with every record of the stored `batch`, in order (decompressing it if needed);
/// returns what [`inspect_kept`] reads of its header.
///
/// # Errors
/// As [`inspect_kept`], and [`RecordsError::Corrupt`] for records that do not decompress or
/// parse.
pub fn for_each_record(
    batch: &[u8],
    mut each: impl FnMut(KeyedRecord<'_>),
) -> Result<crate::BatchInfo, RecordsError> {
    let records = records_of(batch)?;
    for place in &records.places {
        each(records.keyed(batch, place));
    }
    Ok(records.info)
}

/// Whether a record of `batch` has no key (a compacted topic refuses it, as Kafka does:
/// compaction keeps records by key).
///
/// # Errors
/// As [`for_each_record`].
pub fn has_keyless_record(batch: &[u8]) -> Result<bool, RecordsError> {
    Ok(records_of(batch)?
        .places
        .iter()
        .any(|place| place.key.is_none()))
}

/// Whether `batch` is a control batch (a transaction's marker).
///
/// # Panics
/// If `batch` is shorter than a header.
#[must_use]
pub fn is_control(batch: &[u8]) -> bool {
    i16_at(batch, layout::ATTRIBUTES) & attributes::CONTROL != 0
}

/// Whether `batch` was written in a transaction (its records, or its marker).
///
/// # Panics
/// If `batch` is shorter than a header.
#[must_use]
pub fn is_transactional(batch: &[u8]) -> bool {
    i16_at(batch, layout::ATTRIBUTES) & attributes::TRANSACTIONAL != 0
}

/// The batch's delete horizon (KIP-534), when a compaction pass set one: the time from which a
/// pass may remove its tombstones. The first pass that sees a tombstone sets it to that pass's
/// time plus `delete.retention.ms`, so a consumer has that long to read the delete whatever
/// timestamp the client gave it.
///
/// # Panics
/// If `batch` is shorter than a header.
#[must_use]
pub fn delete_horizon(batch: &[u8]) -> Option<i64> {
    (i16_at(batch, layout::ATTRIBUTES) & attributes::DELETE_HORIZON != 0)
        .then(|| i64_at(batch, layout::FIRST_TIMESTAMP))
}

/// What [`retain_records`] made of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retained {
    /// Every record stays: the batch as it was.
    Whole,
    /// Some records stay (perhaps none: the count): the batch rewritten with only those.
    Rewritten(Bytes, u32),
}

/// The stored `batch` with only the records `keep` says, behind the same header: the same base
/// offset, last offset delta, timestamps, attributes and producer fields, with the record count,
/// length and CRC set again (and compressed again with its codec). A batch left with no records
/// keeps its header, so the offsets and sequences it took stay recorded.
///
/// `horizon`, asked once `keep` has seen every record, may give the batch a delete horizon
/// (KIP-534): the first-timestamp field then holds it, with the delete-horizon attribute, and
/// each record's timestamp delta counts from it, so every record keeps its own timestamp.
///
/// # Errors
/// As [`for_each_record`]; [`RecordsError::Encode`] if compressing again fails.
pub fn retain_records(
    batch: &[u8],
    mut keep: impl FnMut(KeyedRecord<'_>) -> bool,
    horizon: impl FnOnce() -> Option<i64>,
) -> Result<Retained, RecordsError> {
    let records = records_of(batch)?;
    let kept: Vec<&RecordPlace> = records
        .places
        .iter()
        .filter(|place| keep(records.keyed(batch, place)))
        .collect();
    let horizon = horizon();
    if kept.len() == records.places.len() && horizon.is_none() {
        return Ok(Retained::Whole);
    }
    let first_timestamp = i64_at(batch, layout::FIRST_TIMESTAMP);
    let mut plain = BytesMut::with_capacity(records.bytes.len());
    for place in &kept {
        match horizon {
            None => plain.put_slice(&records.bytes[place.bytes.clone()]),
            Some(horizon) => {
                let timestamp = first_timestamp.saturating_add(place.timestamp_delta);
                put_rebased(&mut plain, &records.bytes, place, timestamp - horizon);
            }
        }
    }
    let mut out = BytesMut::with_capacity(HEADER_LEN + plain.len());
    out.put_slice(&batch[..HEADER_LEN]);
    if let Some(horizon) = horizon {
        let attributes = i16_at(batch, layout::ATTRIBUTES) | attributes::DELETE_HORIZON;
        out[layout::ATTRIBUTES..layout::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
        out[layout::FIRST_TIMESTAMP..layout::FIRST_TIMESTAMP + 8]
            .copy_from_slice(&horizon.to_be_bytes());
    }
    let copy = |buf: &mut BytesMut| {
        buf.put_slice(&plain);
        Ok(())
    };
    let compressed = match records.compression {
        Compression::None => copy(&mut out),
        Compression::Gzip => Gzip::compress(&mut out, copy),
        Compression::Snappy => Snappy::compress(&mut out, copy),
        Compression::Lz4 => Lz4::compress(&mut out, copy),
        Compression::Zstd => Zstd::compress(&mut out, copy),
    };
    compressed.map_err(|error| RecordsError::Encode(error.into()))?;
    let length = i32::try_from(out.len() - layout::LENGTH_END)
        .map_err(|_| RecordsError::Invalid("a rewritten batch past 2 GiB".into()))?;
    out[layout::LENGTH..layout::LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    // At most the batch's own count, which fit an i32.
    let count = kept.len() as i32;
    out[layout::RECORD_COUNT..layout::RECORD_COUNT + 4].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&out[layout::CRC_START..]);
    out[layout::CRC..layout::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(Retained::Rewritten(out.freeze(), count as u32))
}

/// Writes the record at `place` of `records` again with `timestamp_delta` (its length prefix
/// set again to fit): its attributes, offset delta, key, value and headers as they were.
fn put_rebased(out: &mut BytesMut, records: &[u8], place: &RecordPlace, timestamp_delta: i64) {
    let mut body = Vec::with_capacity(place.bytes.end - place.body + 8);
    body.push(records[place.body]);
    put_zigzag(&mut body, timestamp_delta);
    put_zigzag(&mut body, place.offset_delta);
    body.extend_from_slice(&records[place.rest..place.bytes.end]);
    let mut prefix = Vec::with_capacity(5);
    put_zigzag(&mut prefix, body.len() as i64);
    out.put_slice(&prefix);
    out.put_slice(&body);
}
