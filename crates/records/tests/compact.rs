//! Compaction's rewrite of a stored batch, held to `kafka-protocol`'s decoder: whichever records
//! are kept, with every codec, the rewritten batch keeps its base offset, last offset delta,
//! producer fields and timestamps, holds exactly the kept records with their offsets, keys and
//! values, passes the stored-batch check (and not the producer's: it has fewer records than
//! offsets), and a batch left with none keeps its header.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use minibroker_records::{
    KeyedRecord, Retained, decode, end_offset, for_each_record, has_keyless_record, inspect,
    inspect_kept, inspect_stored, retain_records, set_base_offset,
};
use proptest::prelude::*;

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// A stored batch at offset 100 of `count` records from producer 9: keys `k{i % 3}` (none for
/// every fifth), values that repeat (null for every fourth: tombstones).
fn stored_batch(count: i64, compression: Compression) -> Bytes {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: 9,
            producer_epoch: 2,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: 40 + i as i32,
            timestamp: 1000 + 10 * i,
            key: (i % 5 != 4).then(|| Bytes::from(format!("k{}", i % 3))),
            value: (i % 4 != 3).then(|| Bytes::from(format!("value-{i}-").repeat(8))),
            headers: Default::default(),
        })
        .collect();
    let mut batch = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut batch, &records, &options).unwrap();
    set_base_offset(&mut batch, 100);
    batch.freeze()
}

fn all_records(batch: &[u8]) -> Vec<(i64, i64, Option<Vec<u8>>, bool)> {
    let mut seen = Vec::new();
    for_each_record(batch, |r: KeyedRecord<'_>| {
        seen.push((
            r.offset,
            r.timestamp,
            r.key.map(<[u8]>::to_vec),
            r.tombstone,
        ));
    })
    .unwrap();
    seen
}

proptest! {
    #[test]
    fn a_rewritten_batch_holds_exactly_the_kept_records_at_their_offsets(
        count in 1i64..12,
        keep_mask in any::<u16>(),
        codec in 0usize..5,
    ) {
        let compression = CODECS[codec];
        let batch = stored_batch(count, compression);
        let before = all_records(&batch);
        prop_assert_eq!(before.len() as i64, count);
        let keeps = |offset: i64| keep_mask & (1 << (offset - 100)) != 0;
        let rewritten = match retain_records(&batch, |r| keeps(r.offset), || None).unwrap() {
            Retained::Whole => {
                prop_assert!((100..100 + count).all(keeps));
                return Ok(());
            }
            Retained::Rewritten(bytes, _) => bytes,
        };
        let kept: Vec<_> = before.iter().filter(|r| keeps(r.0)).cloned().collect();
        prop_assert_eq!(all_records(&rewritten), kept.clone());
        let info = inspect_stored(&rewritten, 100).unwrap();
        prop_assert_eq!(info.record_count as usize, kept.len());
        prop_assert_eq!(info.offset_count as i64, count);
        prop_assert_eq!((info.producer_id, info.epoch, info.base_sequence), (9, 2, 40));
        prop_assert_eq!(end_offset(&rewritten), end_offset(&batch));
        prop_assert_eq!(&rewritten[27..43], &batch[27..43], "timestamps");
        prop_assert!(inspect(&rewritten).is_err(), "fewer records than offsets");
        prop_assert_eq!(inspect_kept(&batch).unwrap().record_count as i64, count);
        // The reference decoder reads the same records, and so does this crate's decoder.
        let mut bytes = rewritten.clone();
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        let offsets: Vec<i64> = set.records.iter().map(|r| r.offset).collect();
        let want: Vec<i64> = kept.iter().map(|r| r.0).collect();
        prop_assert_eq!(&offsets, &want);
        prop_assert_eq!(set.compression, compression);
        let decoded = decode(&rewritten).unwrap();
        let values: Vec<_> = decoded.records.iter().map(|r| (r.offset, r.value.is_none())).collect();
        let expected: Vec<_> = kept.iter().map(|r| (r.0, r.3)).collect();
        prop_assert_eq!(values, expected);
    }
}

#[test]
fn keys_timestamps_and_tombstones_are_read_and_an_emptied_batch_keeps_its_header() {
    for compression in CODECS {
        let batch = stored_batch(6, compression);
        let seen = all_records(&batch);
        assert_eq!(seen[0], (100, 1000, Some(b"k0".to_vec()), false));
        assert_eq!(seen[3], (103, 1030, Some(b"k0".to_vec()), true));
        assert_eq!(seen[4].2, None, "a record without a key");
        assert!(has_keyless_record(&batch).unwrap());
        assert!(!has_keyless_record(&stored_batch(4, compression)).unwrap());
        let Retained::Rewritten(empty, 0) = retain_records(&batch, |_| false, || None).unwrap()
        else {
            panic!("nothing kept is a rewrite");
        };
        let info = inspect_stored(&empty, 100).unwrap();
        assert_eq!((info.record_count, info.offset_count), (0, 6));
        assert_eq!(end_offset(&empty), 106);
        assert!(decode(&empty).unwrap().records.is_empty());
        assert!(all_records(&empty).is_empty());
    }
}

#[test]
fn a_delete_horizon_is_set_in_the_header_and_every_record_keeps_its_timestamp() {
    for compression in CODECS {
        let batch = stored_batch(6, compression);
        assert_eq!(minibroker_records::delete_horizon(&batch), None);
        let horizon = 1_000_000;
        let Retained::Rewritten(stamped, 6) =
            retain_records(&batch, |_| true, || Some(horizon)).unwrap()
        else {
            panic!("{compression:?}: a new horizon is a rewrite");
        };
        assert_eq!(minibroker_records::delete_horizon(&stamped), Some(horizon));
        assert_eq!(
            all_records(&stamped),
            all_records(&batch),
            "{compression:?}"
        );
        assert_eq!(end_offset(&stamped), end_offset(&batch));
        // The max timestamp, base offset and producer fields are as they were.
        assert_eq!(stamped[35..43], batch[35..43]);
        assert_eq!(stamped[..8], batch[..8]);
        assert_eq!(stamped[43..57], batch[43..57]);
        inspect_stored(&stamped, 100).unwrap();
        // Kafka's decoder reads the horizon, and each record's timestamp, the same.
        let mut bytes = stamped.clone();
        let decoded = RecordBatchDecoder::decode(&mut bytes).unwrap();
        let ours: Vec<i64> = all_records(&batch).iter().map(|r| r.1).collect();
        let theirs: Vec<i64> = decoded.records.iter().map(|r| r.timestamp).collect();
        assert_eq!(theirs, ours, "{compression:?}");
        assert!(decoded.records.iter().all(|r| r.delete_horizon));
        // A later pass keeps it, and drops records, behind the same horizon.
        let Retained::Rewritten(fewer, 3) =
            retain_records(&stamped, |r| r.offset % 2 == 0, || None).unwrap()
        else {
            panic!("{compression:?}: fewer records");
        };
        assert_eq!(minibroker_records::delete_horizon(&fewer), Some(horizon));
        let kept: Vec<i64> = all_records(&fewer).iter().map(|r| r.1).collect();
        assert_eq!(kept, [1000, 1020, 1040]);
    }
}
