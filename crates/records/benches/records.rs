//! What a Kafka v2 batch costs to build (the producer's side) and to check (the broker's side,
//! on every produce request), for one record of 100 B and for 100 of them: the figures behind
//! the choice that clients build batches and the broker only checks them. `validate` is what the
//! broker runs on a produce (the header check plus a walk of the records), `validate_zstd` the
//! same for the records compressed. `inspect_stored` is the check of every batch a fetch reads
//! from a segment file (header and CRC-32C), against `copy`, what reading the batch's bytes
//! costs at the least.
//!
//! Run with `cargo bench -p minibroker-records`. Figures are printed, never asserted.

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use minibroker_records::{
    NewRecord, Writer, encode, inspect, inspect_stored, set_base_offset, set_base_sequence,
    validate,
};
use std::hint::black_box;

const WRITER: Writer = Writer {
    producer_id: 1000,
    epoch: 0,
    base_sequence: 0,
};

fn records(n: usize) -> Vec<NewRecord> {
    (0..n)
        .map(|_| NewRecord::value(Bytes::from(vec![b'x'; 100])))
        .collect()
}

fn bench(c: &mut Criterion) {
    for n in [1usize, 100, 1000] {
        let records = records(n);
        let batch = encode(WRITER, &records, 0).expect("encodes");
        let mut group = c.benchmark_group(format!("{n}x100B"));
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function("encode", |b| {
            b.iter(|| encode(WRITER, black_box(&records), 0).expect("encodes"));
        });
        group.bench_function("inspect", |b| {
            b.iter(|| inspect(black_box(&batch)).expect("valid"));
        });
        group.bench_function("validate", |b| {
            b.iter(|| validate(black_box(&batch)).expect("valid"));
        });
        // As the log stores it: stamped with its base offset and leader epoch.
        let mut stored = batch.to_vec();
        set_base_offset(&mut stored, 0);
        group.bench_function("inspect_stored", |b| {
            b.iter(|| inspect_stored(black_box(&stored), 0).expect("valid"));
        });
        group.bench_function("copy", |b| {
            b.iter(|| Bytes::copy_from_slice(black_box(&batch)));
        });
        let zstd = zstd_batch(&batch);
        group.bench_function("validate_zstd", |b| {
            b.iter(|| validate(black_box(&zstd)).expect("valid"));
        });
        let mut template = batch.to_vec();
        let mut sequence = 0;
        group.bench_function("restamp_sequence", |b| {
            b.iter(|| {
                sequence = (sequence + n as i32) & i32::MAX;
                set_base_sequence(black_box(&mut template), sequence);
            });
        });
        group.finish();
    }
}

/// The same records, compressed with zstd by `kafka-protocol`'s encoder.
fn zstd_batch(batch: &Bytes) -> Bytes {
    use kafka_protocol::records::{
        Compression, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    };
    let records = RecordBatchDecoder::decode(&mut batch.clone())
        .expect("decodes")
        .records;
    let mut out = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::Zstd,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).expect("encodes");
    out.freeze()
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
