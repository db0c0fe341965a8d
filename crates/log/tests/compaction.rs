//! Log compaction in both logs, against a model of what was appended: after a pass, every
//! record left is at its original offset with its original key and value; in what was mapped,
//! only the newest record of each key stays, and a tombstone stays for `delete.retention.ms`
//! from the pass that first saw it (its batch stamped with that delete horizon, every record's
//! timestamp kept), whatever its own timestamp, and goes at the first pass after; the newest record of
//! every key is still there; what may not be cleaned (the active segment, the chunk being
//! filled, batches newer than the lag) is untouched; a reopen reads the same log; and a durable
//! pass stopped at any step of its swap (a temporary file left, the `.log` still beside its
//! compacted replacement, an index lost) opens as the same valid log.

use bytes::Bytes;
use minibroker_log::{
    CleanRules, CleanStats, DurableLog, MemoryLog, PartitionLog, ReadLimits, SegmentConfig,
};
use minibroker_records::{NewRecord, Writer, encode, for_each_record, inspect};
use minibroker_storage::FsStorage;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

const SMALL: SegmentConfig = SegmentConfig {
    segment_bytes: 4096,
    segment_ms: i64::MAX,
    write_back_bytes: None,
};

/// What a record was: (key, value) by offset.
type Model = BTreeMap<i64, (String, Option<String>, i64)>;

/// Appends `batches` batches of one to three records over 20 keys, every seventh record a
/// tombstone, record timestamps 1 ms apart from 1,000; returns the model.
fn fill(log: &mut PartitionLog, batches: usize) -> Model {
    let mut model = Model::new();
    let mut offset = 0i64;
    for i in 0..batches {
        let count = 1 + i % 3;
        let records: Vec<(String, Option<String>, i64)> = (0..count)
            .map(|j| {
                let at = offset + j as i64;
                let key = format!("k{}", (at * 7) % 20);
                let value = (at % 7 != 6).then(|| format!("value of {key} at {at}"));
                (key, value, 1_000 + at)
            })
            .collect();
        let writer = Writer {
            producer_id: 1 + (i % 2) as i64,
            epoch: 0,
            base_sequence: offset as i32,
        };
        let new: Vec<NewRecord> = records
            .iter()
            .map(|(key, value, timestamp)| NewRecord {
                key: Some(Bytes::from(key.clone())),
                value: value.clone().map(Bytes::from),
                headers: Vec::new(),
                timestamp: Some(*timestamp),
            })
            .collect();
        let batch = encode(writer, &new, 0).unwrap();
        let appended = log
            .append(&batch, inspect(&batch).unwrap().record_count, 0)
            .unwrap();
        assert_eq!(appended.base_offset, offset);
        log.write_pending().unwrap();
        for (j, record) in records.into_iter().enumerate() {
            model.insert(offset + j as i64, record);
        }
        offset += count as i64;
    }
    model
}

/// Every record the log holds, by offset.
fn held(log: &mut PartitionLog) -> Model {
    let mut found = Model::new();
    let mut at = log.start_offset();
    while at < log.next_offset() {
        let batches = log.read(at, ReadLimits::bytes(1 << 20, 0)).unwrap();
        for batch in &batches {
            for_each_record(batch, |r| {
                let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
                // Values are checked through the model: only the offset, key and kind here.
                found.insert(
                    r.offset,
                    (key, (!r.tombstone).then(String::new), r.timestamp),
                );
            })
            .unwrap();
            at = minibroker_records::end_offset(batch);
        }
    }
    found
}

/// One pass by `rules`; returns its figures.
fn clean(log: &mut PartitionLog, cutoff_ms: i64, rules: &CleanRules) -> CleanStats {
    let mut stats = CleanStats::default();
    let plan = log
        .clean_plan(cutoff_ms, rules.sweep)
        .expect("something is dirty");
    let cleaned = plan.run(1 << 20, rules, None, &mut stats).unwrap().unwrap();
    if let (_, Some(cleaned_up)) = log.commit_clean(cleaned) {
        cleaned_up.finish().unwrap();
    }
    stats
}

/// Checks `found` against `model` after passes that mapped everything below `mapped`.
fn assert_compacted(model: &Model, found: &Model, mapped: i64, tombstones_before: i64) {
    let newest: BTreeMap<&str, i64> = model
        .iter()
        .map(|(offset, (key, ..))| (key.as_str(), *offset))
        .collect();
    let newest_mapped: BTreeMap<&str, i64> = model
        .range(..mapped)
        .map(|(offset, (key, ..))| (key.as_str(), *offset))
        .collect();
    for (offset, (key, value, timestamp)) in found {
        let (want_key, want_value, want_timestamp) = &model[offset];
        assert_eq!(
            (key, timestamp),
            (want_key, want_timestamp),
            "offset {offset}"
        );
        assert_eq!(value.is_none(), want_value.is_none(), "offset {offset}");
        if *offset < mapped {
            assert_eq!(
                newest_mapped[key.as_str()],
                *offset,
                "{offset} is superseded"
            );
            assert!(
                value.is_some() || *timestamp >= tombstones_before,
                "an old tombstone at {offset}"
            );
        }
    }
    for (key, offset) in newest.iter().chain(&newest_mapped) {
        let (_, value, timestamp) = &model[offset];
        let gone = value.is_none() && *offset < mapped && *timestamp < tombstones_before;
        assert_eq!(
            found.contains_key(offset),
            !gone,
            "the newest record of {key}: {offset} {value:?} {timestamp} (mapped {mapped})"
        );
    }
}

/// A pass at `now_ms`, tombstones kept `delete_retention_ms` from the pass that first sees them;
/// a `sweep` runs with nothing dirty.
fn rules(now_ms: i64, delete_retention_ms: i64, sweep: bool) -> CleanRules {
    CleanRules {
        now_ms,
        delete_retention_ms,
        sweep,
        kept_batches: HashSet::new(),
        ..CleanRules::default()
    }
}

#[test]
fn a_durable_pass_keeps_the_newest_record_per_key_at_its_offset_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let open = |dir: &Path| {
        PartitionLog::Durable(
            DurableLog::open(Arc::new(FsStorage), dir, SMALL)
                .unwrap()
                .log,
        )
    };
    let mut log = open(dir.path());
    let model = fill(&mut log, 600);
    let active_base = names_in(dir.path())
        .iter()
        .filter_map(|name| name.strip_suffix(".log")?.parse::<i64>().ok())
        .max()
        .unwrap();
    assert!(
        active_base > 1000,
        "many segments: {:?}",
        names_in(dir.path())
    );
    let bytes_before = log.stored_bytes();
    let before_copy = tempfile::tempdir().unwrap();
    copy(dir.path(), before_copy.path());
    // Long after the records' own timestamps (1,000 on): the first pass keeps every tombstone
    // it sees, and stamps its batch with a delete horizon a minute on.
    let first_pass = 2_000_000;
    let horizon = first_pass + 60_000;
    let stats = clean(&mut log, i64::MAX, &rules(first_pass, 60_000, false));
    assert!(stats.batches_dropped > 0, "{stats:?}");
    assert_eq!(stats.earliest_horizon, Some(horizon));
    assert!(
        log.stored_bytes() < bytes_before / 2,
        "{} of {bytes_before}",
        log.stored_bytes()
    );
    let (dirty, all) = log.cleanable_bytes(i64::MAX);
    assert_eq!(dirty, 0, "all mapped ({all} bytes cleanable)");
    // Everything sealed was mapped: the active segment's base is where mapping ended.
    let stamped = held(&mut log);
    assert_compacted(&model, &stamped, active_base, i64::MIN);
    assert!(
        stamped.values().any(|(_, value, _)| value.is_none()),
        "tombstones kept"
    );
    // Still before the horizon: a pass over nothing dirty keeps them.
    clean(&mut log, i64::MAX, &rules(horizon - 1, 60_000, true));
    assert_eq!(held(&mut log), stamped);
    assert_eq!(
        held(&mut open(dir.path())),
        stamped,
        "the horizon is on disk"
    );
    // At the horizon they go.
    let stats = clean(&mut log, i64::MAX, &rules(horizon, 60_000, true));
    assert_eq!(stats.earliest_horizon, None);
    let found = held(&mut log);
    assert_compacted(&model, &found, active_base, i64::MAX);
    assert_eq!(log.start_offset(), 0, "compaction never moves the start");
    drop(log);
    assert_eq!(
        held(&mut open(dir.path())),
        found,
        "a reopen reads the same log"
    );
    let names = names_in(dir.path());
    assert!(names.iter().any(|n| n.ends_with(".compacted")), "{names:?}");
    assert!(names.iter().any(|n| n == "cleaner-offset"), "{names:?}");

    // A crash after the renames, before the `.log` files went: the compacted ones win.
    let both = tempfile::tempdir().unwrap();
    copy(before_copy.path(), both.path());
    for name in names.iter().filter(|n| n.ends_with(".compacted")) {
        std::fs::copy(dir.path().join(name), both.path().join(name)).unwrap();
    }
    // check-data sees the swap the start finishes: notes, not damage.
    let checked = minibroker_log::dir_check::check_partition_dir(
        &(Arc::new(FsStorage) as Arc<dyn minibroker_storage::Storage>),
        both.path(),
    )
    .unwrap();
    assert!(!checked.is_damaged(), "{:?}", checked.findings);
    assert!(
        checked
            .findings
            .iter()
            .any(|f| f.what.contains("compaction's swap a stop interrupted")),
        "{:?}",
        checked.findings
    );
    assert_eq!(held(&mut open(both.path())), found);
    assert!(
        !names_in(both.path())
            .iter()
            .any(|n| { n.ends_with(".log") && names.contains(&n.replace(".log", ".compacted")) })
    );
    // A crash before the renames: the temporary files go, the log is as it was.
    let temporary = tempfile::tempdir().unwrap();
    copy(before_copy.path(), temporary.path());
    for name in names.iter().filter(|n| n.ends_with(".compacted")) {
        std::fs::copy(
            dir.path().join(name),
            temporary.path().join(format!("{name}.tmp")),
        )
        .unwrap();
    }
    let mut reopened = open(temporary.path());
    assert_eq!(held(&mut reopened).len(), model.len());
    assert!(
        !names_in(temporary.path())
            .iter()
            .any(|n| n.ends_with(".tmp"))
    );
    // Compacted segments whose indexes are lost are scanned, gaps and all.
    for name in names_in(dir.path())
        .iter()
        .filter(|n| n.ends_with(".index"))
    {
        std::fs::remove_file(dir.path().join(name)).unwrap();
    }
    assert_eq!(held(&mut open(dir.path())), found);
}

#[test]
fn a_memory_pass_keeps_the_newest_record_per_key_and_never_the_chunk_being_filled() {
    let mut log = PartitionLog::Memory(MemoryLog::new());
    // Batches of 100 kB make chunks of about ten batches.
    let mut model = fill(&mut log, 400);
    let padding = vec![b'p'; 100_000];
    let writer = Writer {
        producer_id: 9,
        epoch: 0,
        base_sequence: 0,
    };
    for i in 0..30i64 {
        let offset = log.next_offset();
        let record = NewRecord {
            key: Some(Bytes::from(format!("k{}", i % 3))),
            value: Some(Bytes::from(padding.clone())),
            headers: Vec::new(),
            timestamp: Some(5_000 + i),
        };
        let batch = encode(
            Writer {
                base_sequence: i as i32,
                ..writer
            },
            &[record],
            0,
        )
        .unwrap();
        log.append(&batch, 1, 0).unwrap();
        model.insert(
            offset,
            (format!("k{}", i % 3), Some(String::new()), 5_000 + i),
        );
    }
    let before = log.stored_bytes();
    clean(&mut log, i64::MAX, &rules(0, 0, false));
    let found = held(&mut log);
    assert!(log.stored_bytes() < before / 2);
    // The newest three padded records stay; the chunk being filled is whole.
    let end = log.next_offset();
    for offset in end - 3..end {
        assert!(found.contains_key(&offset));
    }
    let (dirty, _) = log.cleanable_bytes(i64::MAX);
    assert_eq!(dirty, 0);
    assert_eq!(log.start_offset(), 0);
    assert!(
        log.clean_plan(i64::MAX, false).is_none(),
        "nothing left dirty"
    );
}

#[test]
fn segments_newer_than_the_lag_are_not_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::Durable(
        DurableLog::open(Arc::new(FsStorage), dir.path(), SMALL)
            .unwrap()
            .log,
    );
    let model = fill(&mut log, 300);
    // Only records up to timestamp 1,100 are old enough: later segments are kept whole.
    clean(&mut log, 1_100, &rules(0, 0, false));
    let found = held(&mut log);
    for (offset, record) in &model {
        if record.2 > 1_200 {
            assert!(
                found.contains_key(offset),
                "offset {offset} is too new to clean"
            );
        }
    }
    assert!(found.len() < model.len());
}

fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn copy(from: &Path, to: &Path) {
    for name in names_in(from) {
        std::fs::copy(from.join(&name), to.join(&name)).unwrap();
    }
}
