//! Descriptors: sealed segments' files are opened when read, a bounded number at a time, and a
//! passing shortage of descriptors never makes a log read-only.

use bytes::Bytes;
use minibroker_log::{DurableLog, LogError, OpenFiles, ReadLimits, Retention, SegmentConfig};
use minibroker_records::{NewRecord, Writer, encode, inspect};
use minibroker_storage::FsStorage;
use minibroker_storage::sim::SimStorage;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Segments of 4 KiB, so a few hundred batches make dozens of them.
const SMALL: SegmentConfig = SegmentConfig {
    segment_bytes: 4096,
    segment_ms: i64::MAX,
    write_back_bytes: None,
};

fn batch(sequence: i32) -> Bytes {
    let writer = Writer {
        producer_id: 3,
        epoch: 0,
        base_sequence: sequence,
    };
    encode(writer, &[NewRecord::value(vec![b'x'; 300])], 1_000).expect("encodes")
}

fn append(log: &mut DurableLog, sequence: i32) -> Result<i64, LogError> {
    let b = batch(sequence);
    let count = inspect(&b).expect("valid").record_count;
    log.append(&b, count, 0)
        .map(|appended| appended.base_offset)
}

fn read_all(log: &mut DurableLog) -> Vec<i64> {
    let limits = ReadLimits::bytes(1 << 20, 0);
    let mut offsets = Vec::new();
    let mut at = log.start_offset();
    while at < log.next_offset() {
        let batches = log.read(at, limits).expect("reads");
        at = minibroker_records::end_offset(batches.last().expect("a batch"));
        offsets.extend(batches.iter().map(|b| minibroker_records::base_offset(b)));
    }
    offsets
}

#[test]
fn sealed_segments_are_opened_when_read_a_bounded_number_at_a_time() {
    let dir = tempfile::tempdir().expect("a directory");
    let files = OpenFiles::new(Arc::new(FsStorage), 3);
    let open = || {
        DurableLog::open_with(
            Arc::new(FsStorage),
            dir.path(),
            SMALL,
            Some(Arc::clone(&files)),
        )
        .expect("opens")
        .log
    };
    let mut log = open();
    for sequence in 0..300 {
        append(&mut log, sequence).expect("appends");
    }
    assert!(log.segment_count() > 20);
    // Rolling closed every sealed file: none is open until read.
    assert_eq!(files.open_count(), 0);
    let expected: Vec<i64> = (0..300).collect();
    assert_eq!(read_all(&mut log), expected);
    assert!(files.open_count() <= 3, "{} open", files.open_count());
    drop(log);
    // Reopened from the index files, the same.
    let mut log = open();
    assert_eq!(files.open_count(), 0);
    assert_eq!(read_all(&mut log), expected);
    assert!(files.open_count() <= 3);
    // A segment retention drops is closed with it.
    let retention = Retention {
        bytes: Some(1),
        ms: None,
    };
    log.apply_retention(retention, 0).expect("applies");
    assert_eq!(files.open_count(), 0);
}

#[test]
fn running_out_of_descriptors_for_a_roll_leaves_the_log_writable() {
    let storage = SimStorage::new();
    let mut log = DurableLog::open(Arc::new(storage.clone()), Path::new("/p"), SMALL)
        .expect("opens")
        .log;
    // A roll under EMFILE made the partition read-only for good, even after descriptors were
    // freed.
    storage.faults.no_descriptors.store(true, Ordering::Relaxed);
    let mut refused = 0;
    for sequence in 0..40 {
        match append(&mut log, sequence - refused) {
            Ok(_) => {}
            Err(LogError::Storage(failure)) => {
                assert!(failure.what.contains("tried again"), "{failure}");
                refused += 1;
            }
            Err(error) => panic!("{error}"),
        }
    }
    assert!(refused > 0, "no roll was refused");
    assert!(log.failure().is_none(), "{:?}", log.failure());
    storage
        .faults
        .no_descriptors
        .store(false, Ordering::Relaxed);
    let before = log.segment_count();
    append(&mut log, 40 - refused).expect("appends once descriptors are back");
    assert_eq!(log.segment_count(), before + 1);
}
