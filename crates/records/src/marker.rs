//! Transaction markers: the control batches a transaction's end writes to every partition it
//! wrote to (KIP-98). A marker is a batch of one control record, transactional, from the
//! producer whose transaction it ends, with sequence -1; its key says COMMIT or ABORT (version
//! i16 0, then the type i16: 0 abort, 1 commit) and its value carries the coordinator's epoch
//! (version i16 0, then the epoch i32). Consumers read it to skip aborted records; no client
//! sees it as a record.

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::records::{
    Compression, NO_PARTITION_LEADER_EPOCH, Record, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType,
};

use crate::RecordsError;

/// What a marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// COMMIT (`true`) or ABORT.
    pub commit: bool,
    /// The coordinator epoch that wrote it.
    pub coordinator_epoch: i32,
}

/// The marker batch that ends producer `producer_id`'s transaction at `epoch`, stamped `now`
/// (the log patches its base offset).
///
/// # Errors
/// [`RecordsError::Encode`] if the encoder refuses it.
pub fn encode_marker(
    producer_id: i64,
    epoch: i16,
    marker: Marker,
    now: i64,
) -> Result<Bytes, RecordsError> {
    let mut key = BytesMut::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&i16::from(marker.commit).to_be_bytes());
    let mut value = BytesMut::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&marker.coordinator_epoch.to_be_bytes());
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        producer_id,
        producer_epoch: epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: now,
        key: Some(key.freeze()),
        value: Some(value.freeze()),
        headers: IndexMap::new(),
    };
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, [&record], &options)
        .map_err(|error| RecordsError::Encode(error.into()))?;
    Ok(out.freeze())
}

/// What the stored `batch` says, if it is a marker; `None` for a batch of records.
///
/// # Errors
/// As [`crate::decode`]; [`RecordsError::Invalid`] for a control batch whose record is not a
/// marker this broker knows.
pub fn marker(batch: &Bytes) -> Result<Option<Marker>, RecordsError> {
    let info = crate::inspect(batch)?;
    if !info.control {
        return Ok(None);
    }
    let decoded = crate::decode(batch)?;
    let invalid =
        || RecordsError::Invalid("a control batch that is not a transaction marker".into());
    let [record] = decoded.records.as_slice() else {
        return Err(invalid());
    };
    let key = record.key.as_deref().ok_or_else(invalid)?;
    let value = record.value.as_deref().ok_or_else(invalid)?;
    let (&[0, 0, 0, kind], &[0, 0, a, b, c, d]) = (
        <&[u8; 4]>::try_from(key).map_err(|_| invalid())?,
        <&[u8; 6]>::try_from(value).map_err(|_| invalid())?,
    ) else {
        return Err(invalid());
    };
    if kind > 1 {
        return Err(invalid());
    }
    Ok(Some(Marker {
        commit: kind == 1,
        coordinator_epoch: i32::from_be_bytes([a, b, c, d]),
    }))
}
