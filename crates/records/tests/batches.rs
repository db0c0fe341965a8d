//! Property tests of the stored format: batches round-trip through encode and decode with their
//! keys, headers and timestamps; stamping the base offset keeps them valid; any single
//! changed byte of a stored batch is detected by the check recovery uses; and the header check
//! agrees with `kafka-protocol`'s own header decoder on damaged batches.

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use minibroker_records::{
    HEADER_LEN, NewRecord, RecordsError, Writer, decode, encode, inspect, inspect_stored,
    set_base_offset, set_base_sequence,
};
use proptest::prelude::*;

fn bytes() -> impl Strategy<Value = Option<Bytes>> {
    prop::option::of(prop::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from))
}

fn record() -> impl Strategy<Value = NewRecord> {
    (
        bytes(),
        bytes(),
        prop::collection::vec(("[a-z]{1,6}", bytes()), 0..3),
        prop::option::of(0i64..4_000_000_000_000),
    )
        .prop_map(|(key, value, headers, timestamp)| {
            // Header names are unique in the format's map, so keep the first of each name.
            let mut seen = std::collections::HashSet::new();
            let headers = headers
                .into_iter()
                .filter(|(name, _)| seen.insert(name.clone()))
                .collect();
            NewRecord {
                key,
                value,
                headers,
                timestamp,
            }
        })
}

fn writer() -> impl Strategy<Value = Writer> {
    (0i64..i64::MAX, 0i16..i16::MAX, 0i32..i32::MAX).prop_map(
        |(producer_id, epoch, base_sequence)| Writer {
            producer_id,
            epoch,
            base_sequence,
        },
    )
}

proptest! {
    #[test]
    fn batches_round_trip_with_keys_headers_and_timestamps(
        writer in writer(),
        records in prop::collection::vec(record(), 1..8),
        now in 0i64..4_000_000_000_000,
        base_offset in 0i64..i64::MAX / 2,
    ) {
        let encoded = encode(writer, &records, now).unwrap();
        let info = inspect(&encoded).unwrap();
        let mut batch = encoded.to_vec();
        prop_assert_eq!(info.producer_id, writer.producer_id);
        prop_assert_eq!(info.epoch, writer.epoch);
        prop_assert_eq!(info.base_sequence, writer.base_sequence);
        prop_assert_eq!(info.record_count as usize, records.len());
        set_base_offset(&mut batch, base_offset);
        let decoded = decode(&Bytes::from(batch)).unwrap();
        prop_assert_eq!(decoded.base_offset, base_offset);
        for (i, (sent, got)) in records.iter().zip(&decoded.records).enumerate() {
            prop_assert_eq!(got.offset, base_offset + i as i64);
            prop_assert_eq!(got.sequence, writer.base_sequence.wrapping_add(i as i32));
            prop_assert_eq!(&got.key, &sent.key);
            prop_assert_eq!(&got.value, &sent.value);
            prop_assert_eq!(&got.headers, &sent.headers);
            prop_assert_eq!(got.timestamp, sent.timestamp.unwrap_or(now));
        }
    }

    #[test]
    fn stamping_the_base_offset_keeps_the_crc_valid(
        writer in writer(),
        records in prop::collection::vec(record(), 1..4),
        base_offset in any::<i64>(),
    ) {
        let mut batch = encode(writer, &records, 0).unwrap().to_vec();
        set_base_offset(&mut batch, base_offset);
        let batch = Bytes::from(batch);
        prop_assert!(inspect(&batch).is_ok());
        prop_assert!(inspect_stored(&batch, base_offset).is_ok());
    }

    #[test]
    fn any_single_changed_byte_of_a_stored_batch_is_detected(
        writer in writer(),
        records in prop::collection::vec(record(), 1..4),
        position in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let mut batch = encode(writer, &records, 0).unwrap().to_vec();
        set_base_offset(&mut batch, 1000);
        let at = position.index(batch.len());
        batch[at] ^= flip;
        let length = batch.len();
        prop_assert!(
            inspect_stored(&Bytes::from(batch), 1000).is_err(),
            "a change at byte {} of {} went unnoticed", at, length
        );
    }

    #[test]
    fn a_new_base_sequence_keeps_the_batch_valid(
        writer in writer(),
        records in prop::collection::vec(record(), 1..4),
        sequence in 0i32..i32::MAX,
    ) {
        let mut batch = encode(writer, &records, 0).unwrap().to_vec();
        set_base_sequence(&mut batch, sequence);
        prop_assert_eq!(inspect(&Bytes::from(batch)).unwrap().base_sequence, sequence);
    }
}

#[test]
fn bad_batches_are_refused_with_the_right_error() {
    let writer = Writer {
        producer_id: 1,
        epoch: 0,
        base_sequence: 0,
    };
    let batch = encode(writer, &[NewRecord::value("v")], 0).unwrap();
    let check = |bytes: Vec<u8>| inspect(&Bytes::from(bytes));
    assert!(matches!(
        check(batch[..HEADER_LEN - 1].to_vec()),
        Err(RecordsError::Corrupt(_))
    ));
    assert!(matches!(
        check(batch[..batch.len() - 1].to_vec()),
        Err(RecordsError::Corrupt(_))
    ));
    let mut magic = batch.to_vec();
    magic[16] = 1;
    assert!(matches!(
        check(magic),
        Err(RecordsError::UnsupportedMagic(1))
    ));
    let mut crc = batch.to_vec();
    let last = crc.len() - 1;
    crc[last] ^= 1;
    assert!(matches!(check(crc), Err(RecordsError::Corrupt(_))));
    assert!(matches!(
        encode(writer, &[], 0),
        Err(RecordsError::Invalid(_))
    ));
    // A record count that disagrees with the offsets, with a CRC to match.
    let mut count = batch.to_vec();
    count[57..61].copy_from_slice(&2i32.to_be_bytes());
    set_base_sequence(&mut count, 0); // recomputes the CRC
    assert!(matches!(check(count), Err(RecordsError::Invalid(_))));
}

#[test]
fn a_record_claiming_more_headers_than_bytes_is_refused_before_decoding() {
    let writer = Writer {
        producer_id: 1,
        epoch: 0,
        base_sequence: 0,
    };
    let batch = encode(writer, &[NewRecord::value("v")], 0).unwrap();
    let mut hostile = batch.to_vec();
    // The record's last byte is its header count (0): make it a huge zig-zag varint by
    // rewriting the tail, then fix the lengths and the CRC.
    let last = hostile.len() - 1;
    assert_eq!(hostile[last], 0);
    hostile.truncate(last);
    hostile.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]); // 2^31 - 1 headers
    let record_length_at = HEADER_LEN;
    hostile[record_length_at] += 8; // the record grew by 4 bytes (zig-zag: +8)
    let batch_length = (hostile.len() - 12) as i32;
    hostile[8..12].copy_from_slice(&batch_length.to_be_bytes());
    set_base_sequence(&mut hostile, 0); // recomputes the CRC
    assert!(matches!(
        decode(&Bytes::from(hostile)),
        Err(RecordsError::Corrupt(_))
    ));
}

#[test]
fn compressed_batches_from_kafka_clients_decode() {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = (0..3)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: 9,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: 1000 + i,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("value-{i}").repeat(20))),
            headers: Default::default(),
        })
        .collect();
    for compression in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut batch = bytes::BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut batch, &records, &options).unwrap();
        let batch = batch.freeze();
        let info = inspect(&batch).unwrap();
        assert!(info.compressed, "{compression:?}");
        let decoded = decode(&batch).unwrap();
        let values: Vec<_> = decoded.records.iter().map(|r| r.value.clone()).collect();
        let sent: Vec<_> = records.iter().map(|r| r.value.clone()).collect();
        assert_eq!(values, sent, "{compression:?}");
    }
}

proptest! {
    // Most damaged batches fail the CRC; enough cases reach every header rule with the CRC fixed.
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// `inspect` reads the header in place; `kafka-protocol`'s decoder is the reference. Whatever
    /// bytes are changed (with the CRC fixed up or not), `inspect` accepts a batch only if the
    /// decoder reads exactly one batch from it, and then reports the decoder's fields.
    #[test]
    fn the_header_check_agrees_with_the_kafka_protocol_decoder(
        writer in writer(),
        records in prop::collection::vec(record(), 1..4),
        changes in prop::collection::vec((0usize..HEADER_LEN + 8, prop_oneof![any::<u8>(), 0u8..8]), 0..4),
        fix_crc in any::<bool>(),
    ) {
        let mut batch = encode(writer, &records, 0).unwrap().to_vec();
        for (at, value) in changes {
            if at < batch.len() {
                batch[at] = value;
            }
        }
        if fix_crc && batch.len() >= HEADER_LEN {
            // Rewrites the base sequence it already has, which recomputes the CRC.
            let sequence = i32::from_be_bytes(batch[53..57].try_into().unwrap());
            set_base_sequence(&mut batch, sequence);
        }
        let batch = Bytes::from(batch);
        let reference = RecordBatchDecoder::decode_batch_info(&mut batch.clone());
        match inspect(&batch) {
            Ok(info) => {
                let headers = reference.expect("the decoder accepts what inspect accepts");
                prop_assert_eq!(headers.len(), 1);
                let header = &headers[0];
                prop_assert_eq!(info.producer_id, header.producer_id);
                prop_assert_eq!(info.epoch, header.producer_epoch);
                prop_assert_eq!(info.base_sequence, header.base_sequence);
                prop_assert_eq!(i64::from(info.record_count), i64::from(header.record_count));
                prop_assert_eq!(info.transactional, header.transactional);
                prop_assert_eq!(info.control, header.control);
                prop_assert_eq!(info.compressed, header.compression != Compression::None);
            }
            Err(_) => {
                // Refused: the decoder refuses it too, or it breaks a rule beyond the header's
                // (no records, a count that disagrees with the offsets or the length, another
                // magic).
                if let Ok(headers) = reference
                    && headers.len() == 1
                {
                    let count = headers[0].record_count;
                    let delta = i32::from_be_bytes(batch[23..27].try_into().unwrap());
                    let length = i32::from_be_bytes(batch[8..12].try_into().unwrap());
                    prop_assert!(
                        count == 0
                            || i64::from(delta) != i64::from(count) - 1
                            || usize::try_from(length).ok() != Some(batch.len() - 12)
                            || count as usize > (batch.len() - HEADER_LEN) / 7,
                        "inspect refused a batch the decoder reads: {:?}", headers[0]
                    );
                }
            }
        }
    }
}

#[test]
fn a_damaged_base_offset_near_the_end_of_i64_gives_an_end_offset_not_an_overflow() {
    // Found by the decoders' fuzzing: a segment file with this header stopped a starting broker
    // with an arithmetic overflow.
    let mut batch = encode(
        Writer {
            producer_id: 1,
            epoch: 0,
            base_sequence: 0,
        },
        &[NewRecord::value("a"), NewRecord::value("b")],
        0,
    )
    .expect("encodes")
    .to_vec();
    set_base_offset(&mut batch, i64::MAX - 1);
    assert_eq!(minibroker_records::end_offset(&batch), i64::MAX);
}
