//! What `validate` lets into a log: every batch a producer builds, with any compression; never a
//! batch that a consumer cannot read back. Damaged records under a valid CRC, a payload that is not
//! what its codec says, offset deltas out of order, bytes after the last record, a header key that
//! is not UTF-8 and a decompression bomb are each refused as corrupt.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
};
use minibroker_records::{
    HEADER_LEN, MAX_DECOMPRESSED_BYTES, NewRecord, RecordsError, Writer, decode, encode, validate,
};
use proptest::prelude::*;

const WRITER: Writer = Writer {
    producer_id: 7,
    epoch: 0,
    base_sequence: 0,
};

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Fixes a batch's length field and CRC after its bytes were changed.
fn reseal(batch: &mut [u8]) {
    let length = (batch.len() - 12) as i32;
    batch[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// The records of an uncompressed batch, re-encoded with `compression`.
fn recompressed(batch: &Bytes, compression: Compression) -> Bytes {
    let records: Vec<Record> = RecordBatchDecoder::decode(&mut batch.clone())
        .expect("decodes")
        .records;
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).expect("encodes");
    out.freeze()
}

fn batch_of(records: &[NewRecord], compression: Compression) -> Bytes {
    recompressed(
        &encode(WRITER, records, 1_000).expect("encodes"),
        compression,
    )
}

fn values(count: usize, len: usize) -> Vec<NewRecord> {
    (0..count)
        .map(|i| NewRecord::value(vec![b'a' + (i % 26) as u8; len]).with_header("h", "v"))
        .collect()
}

fn refusal(batch: &[u8]) -> String {
    match validate(batch) {
        Err(error @ RecordsError::Corrupt(_)) => error.to_string(),
        other => panic!("expected a corrupt batch, got {other:?}"),
    }
}

#[test]
fn every_codec_validates_what_producers_build() {
    for compression in CODECS {
        for records in [values(1, 0), values(3, 100), values(500, 7)] {
            let batch = batch_of(&records, compression);
            let info = validate(&batch).unwrap_or_else(|e| panic!("{compression:?}: {e}"));
            assert_eq!(info.record_count as usize, records.len());
        }
    }
}

#[test]
fn garbage_records_under_a_valid_crc_are_corrupt() {
    let mut batch = encode(WRITER, &values(2, 20), 0).expect("encodes").to_vec();
    for byte in &mut batch[HEADER_LEN..] {
        *byte = 0xff;
    }
    reseal(&mut batch);
    refusal(&batch);
}

#[test]
fn a_payload_that_is_not_its_codec_is_corrupt() {
    for codec in 1..=4u8 {
        let mut batch = encode(WRITER, &values(1, 40), 0).expect("encodes").to_vec();
        batch[HEADER_LEN..].fill(b'p');
        batch[22] |= codec;
        reseal(&mut batch);
        let why = refusal(&batch);
        assert!(
            why.contains("decompress") || why.contains("record"),
            "{why}"
        );
    }
}

#[test]
fn offset_deltas_must_count_up_from_zero() {
    let batch = encode(WRITER, &values(2, 5), 0).expect("encodes").to_vec();
    // The second record's offset delta (zig-zag 1 = 2) becomes 0: two records at one offset.
    // It follows the record's length, attributes and timestamp delta, a byte each.
    let second = HEADER_LEN + 1 + usize::from(batch[HEADER_LEN]) / 2;
    assert_eq!(batch[second + 3], 2, "the layout this test expects");
    let mut bad = batch.clone();
    bad[second + 3] = 0;
    reseal(&mut bad);
    assert!(refusal(&bad).contains("offset delta"));
}

#[test]
fn bytes_after_the_last_record_are_corrupt() {
    for compression in CODECS {
        let mut batch = batch_of(&values(1, 5), compression).to_vec();
        if compression == Compression::None {
            batch.push(0);
        } else {
            // One record more than the header counts.
            batch = batch_of(&values(2, 5), compression).to_vec();
            batch[57..61].copy_from_slice(&1i32.to_be_bytes());
            batch[23..27].copy_from_slice(&0i32.to_be_bytes());
        }
        reseal(&mut batch);
        assert!(refusal(&batch).contains("follow"), "{compression:?}");
    }
}

#[test]
fn a_header_key_that_is_not_utf8_is_corrupt() {
    let record = NewRecord::value("v").with_header("k", "v");
    let mut batch = encode(WRITER, &[record], 0).expect("encodes").to_vec();
    let key = batch
        .iter()
        .rposition(|b| *b == b'k')
        .expect("the header key");
    batch[key] = 0xff;
    reseal(&mut batch);
    assert!(refusal(&batch).contains("UTF-8"));
}

#[test]
fn a_decompression_bomb_is_refused() {
    // 129 records of 1 MiB of one byte: kilobytes compressed, past the bound decompressed.
    let count = (MAX_DECOMPRESSED_BYTES >> 20) as usize + 1;
    let records: Vec<NewRecord> = (0..count)
        .map(|_| NewRecord::value(vec![0u8; 1 << 20]))
        .collect();
    let batch = batch_of(&records, Compression::Zstd);
    assert!(batch.len() < 1 << 20, "{} bytes", batch.len());
    assert!(refusal(&batch).contains("more than"));
}

fn record() -> impl Strategy<Value = NewRecord> {
    let bytes =
        || prop::option::of(prop::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from));
    (
        bytes(),
        bytes(),
        prop::collection::vec(("[a-z]{1,4}", bytes()), 0..3),
    )
        .prop_map(|(key, value, headers)| {
            let mut seen = std::collections::HashSet::new();
            NewRecord {
                key,
                value,
                headers: headers
                    .into_iter()
                    .filter(|(name, _)| seen.insert(name.clone()))
                    .collect(),
                timestamp: None,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever bytes hide behind a valid CRC, a batch `validate` accepts decodes.
    #[test]
    fn an_accepted_batch_always_decodes(
        records in prop::collection::vec(record(), 1..6),
        codec in 0usize..5,
        changes in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut batch = batch_of(&records, CODECS[codec]).to_vec();
        prop_assert!(validate(&batch).is_ok());
        let body = batch.len() - HEADER_LEN;
        for (at, value) in changes {
            batch[HEADER_LEN + at.index(body)] = value;
        }
        reseal(&mut batch);
        if validate(&batch).is_ok() {
            let decoded = decode(&Bytes::from(batch));
            prop_assert!(decoded.is_ok(), "accepted but not decodable: {:?}", decoded.err());
        }
    }
}
