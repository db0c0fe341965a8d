//! Lookups by timestamp (Kafka's ListOffsets by time): both logs answer what a walk of every
//! record answers, and a durable lookup reads about one index interval, not the partition.

use bytes::Bytes;
use minibroker_log::{DurableLog, MemoryLog, ReadLimits, SegmentConfig};
use minibroker_records::{NewRecord, Writer, decode, encode, inspect};
use minibroker_storage::sim::SimStorage;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One large segment, so a lookup cannot be bounded by skipping whole segments.
const ONE_SEGMENT: SegmentConfig = SegmentConfig {
    segment_bytes: 1 << 30,
    segment_ms: i64::MAX,
    write_back_bytes: None,
};

/// A batch of `records` records of `value_len` bytes, stamped `timestamp`, `timestamp + 1`, ...
fn batch(sequence: i32, records: usize, value_len: usize, timestamp: i64) -> Bytes {
    let records: Vec<NewRecord> = (0..records)
        .map(|i| NewRecord {
            timestamp: Some(timestamp + i as i64),
            ..NewRecord::value(vec![b'v'; value_len])
        })
        .collect();
    let writer = Writer {
        producer_id: 7,
        epoch: 0,
        base_sequence: sequence,
    };
    encode(writer, &records, 1_000).expect("the batch encodes")
}

fn count(batch: &Bytes) -> u32 {
    inspect(batch).expect("a valid batch").record_count
}

/// Timestamps that wander forward with jumps back, as producers' clocks do.
fn timestamp_of(sequence: usize) -> i64 {
    let back = if sequence % 7 == 3 { 5_000 } else { 0 };
    1_000_000 + 10 * sequence as i64 - back
}

/// The answer a walk of every record gives: the first record, in offset order, at or after
/// `timestamp` (records within a batch are stamped in increasing order here, so this is the
/// first record at or after it in the first batch whose largest timestamp reaches it).
fn walked(records: &[(i64, i64)], timestamp: i64) -> Option<(i64, i64)> {
    records.iter().copied().find(|(_, t)| *t >= timestamp)
}

/// Every record's offset and timestamp, in offset order.
fn records_of(batches: &[Bytes]) -> Vec<(i64, i64)> {
    batches
        .iter()
        .flat_map(|batch| decode(batch).expect("decodes").records)
        .map(|record| (record.offset, record.timestamp))
        .collect()
}

fn read_all(mut read: impl FnMut(i64) -> Vec<Bytes>, end: i64) -> Vec<Bytes> {
    let mut batches = Vec::new();
    let mut at = 0;
    while at < end {
        let more = read(at);
        at = minibroker_records::end_offset(more.last().expect("a batch"));
        batches.extend(more);
    }
    batches
}

fn lookups(batches: usize) -> Vec<i64> {
    let mut wanted: Vec<i64> = (0..batches)
        .step_by(97)
        .flat_map(|s| [timestamp_of(s) - 1, timestamp_of(s), timestamp_of(s) + 2])
        .collect();
    wanted.extend([i64::MIN, 0, i64::MAX]);
    wanted
}

#[test]
fn a_memory_log_of_many_chunks_answers_as_a_walk_of_every_record() {
    let mut log = MemoryLog::new();
    let batches = 400;
    for sequence in 0..batches {
        // About 12 KiB each: some 80 batches per 1 MiB chunk, five chunks.
        let b = batch(sequence as i32, 3, 4_000, timestamp_of(sequence));
        log.append(&b, count(&b)).expect("appends");
    }
    let limits = ReadLimits::bytes(1 << 20, 0);
    let end = log.next_offset();
    let batches_stored = read_all(|at| log.read(at, limits).expect("reads"), end);
    let stored = records_of(&batches_stored);
    for timestamp in lookups(batches) {
        assert_eq!(
            log.offset_for_timestamp(timestamp),
            walked(&stored, timestamp),
            "timestamp {timestamp}"
        );
    }
    let newest = batches_stored
        .iter()
        .map(|b| minibroker_records::max_timestamp(b))
        .max();
    assert_eq!(
        log.offset_of_max_timestamp(),
        walked(&stored, newest.expect("batches"))
    );
}

#[test]
fn a_durable_lookup_reads_one_index_interval_not_the_segment() {
    let storage = SimStorage::new();
    let open = || {
        DurableLog::open(Arc::new(storage.clone()), Path::new("/p-0"), ONE_SEGMENT)
            .expect("the log opens")
            .log
    };
    let mut log = open();
    // 20,000 small batches: 2 MB in one segment.
    let batches = 20_000;
    for sequence in 0..batches {
        let b = batch(sequence as i32, 1, 40, timestamp_of(sequence));
        log.append(&b, count(&b), 0).expect("appends");
    }
    let end = log.next_offset();
    let limits = ReadLimits::bytes(1 << 20, 0);
    let stored = records_of(&read_all(|at| log.read(at, limits).expect("reads"), end));
    assert_eq!(log.segment_count(), 1);
    let check = |log: &mut DurableLog| {
        let mut most = 0;
        for timestamp in lookups(batches) {
            let before = storage.faults.bytes_read.load(Ordering::Relaxed);
            assert_eq!(
                log.offset_for_timestamp(timestamp).expect("reads"),
                walked(&stored, timestamp),
                "timestamp {timestamp}"
            );
            most = most.max(storage.faults.bytes_read.load(Ordering::Relaxed) - before);
        }
        // A walk from the segment's start read up to 2 MB; the index bounds it to a few
        // intervals of 4 KiB.
        assert!(most <= 64 << 10, "one lookup read {most} bytes");
    };
    check(&mut log);
    drop(log);
    // Reopened, the active segment's index (timestamps too) is rebuilt by the recovery scan.
    check(&mut open());
}
