//! Transaction markers: built here, read back by `kafka-protocol`'s own decoder as Kafka's
//! consumers read them, and recognised (or refused) when stored.

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::records::{
    Compression, NO_PARTITION_LEADER_EPOCH, Record, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use minibroker_records::{Marker, NewRecord, RecordsError, Writer, encode, encode_marker, marker};

#[test]
fn a_marker_is_a_transactional_control_batch_of_one_record() {
    let commit = Marker {
        commit: true,
        coordinator_epoch: 7,
    };
    let batch = encode_marker(1042, 3, commit, 1_700_000_000_000).unwrap();
    let info = minibroker_records::inspect(&batch).unwrap();
    assert!(info.control && info.transactional);
    assert_eq!(
        (
            info.producer_id,
            info.epoch,
            info.base_sequence,
            info.record_count
        ),
        (1042, 3, -1, 1)
    );
    // As a Kafka consumer's decoder sees it.
    let mut bytes = batch.clone();
    let decoded = RecordBatchDecoder::decode(&mut bytes).unwrap();
    let [record] = decoded.records.as_slice() else {
        panic!("{decoded:?}");
    };
    assert!(record.control && record.transactional);
    assert_eq!(record.key.as_deref(), Some(&[0u8, 0, 0, 1][..]));
    assert_eq!(record.value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 7][..]));
}

#[test]
fn a_stored_marker_reads_back_and_a_batch_of_records_is_no_marker() {
    for commit in [true, false] {
        let written = Marker {
            commit,
            coordinator_epoch: -1,
        };
        let batch = encode_marker(5, 0, written, 0).unwrap();
        assert_eq!(marker(&batch).unwrap(), Some(written));
    }
    let writer = Writer {
        producer_id: 5,
        epoch: 0,
        base_sequence: 0,
    };
    let records = encode(writer, &[NewRecord::value("v")], 0).unwrap();
    assert_eq!(marker(&records).unwrap(), None);
}

#[test]
fn a_control_batch_that_is_not_a_marker_is_refused() {
    let control = |key: &'static [u8]| {
        let record = Record {
            transactional: true,
            control: true,
            delete_horizon: false,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: 5,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: 0,
            key: Some(Bytes::from_static(key)),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            headers: IndexMap::new(),
        };
        let mut out = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut out, [&record], &options).unwrap();
        out.freeze()
    };
    assert!(marker(&control(&[0, 0, 0, 1])).unwrap().is_some());
    for key in [&[0u8, 0, 0, 2][..], &[0, 1, 0, 0], &[0, 0, 0]] {
        assert!(
            matches!(marker(&control(key)), Err(RecordsError::Invalid(_))),
            "key {key:?}"
        );
    }
}
