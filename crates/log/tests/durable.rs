//! What the durable, segment-file partition log promises, checked from outside the crate.
//!
//! - Batches round trip byte for byte across segment rolls and reopens, from the index files or,
//!   with them deleted, from a scan; reads return the batch holding the offset first and respect
//!   their byte limit; a segment rolls before its offsets pass what its u32 index can hold.
//! - A torn, garbage-ended or corrupted active segment is cut to exactly its valid prefix, the cut
//!   is reported with its size, and appends go on from there.
//! - A segment missing between two others, or a damaged sealed one, is refused, not served.
//! - Retention deletes whole oldest segments only, never the active one, and its new start
//!   survives a reopen.
//! - DeleteRecords moves the start into a segment, saved before the segments below go: a reopen
//!   or a crash between the two keeps it, and a damaged start file is refused by name.
//! - Appends wait in memory until written (by the caller, a read, a sync or the size limit); a
//!   crash loses only unwritten ones, and a failed write forgets them.
//! - A failed write or sync leaves the log read-only with nothing partial readable.
//! - After a simulated crash (thousands of seeds), every synced batch survives and the log is a
//!   prefix of what was appended.
//! - Look-ups by timestamp agree with the memory log; the snapshot store keeps the newest two.

use bytes::Bytes;
use minibroker_log::{
    Appended, DurableLog, LogError, MAX_PENDING_BYTES, MemoryLog, Opened, ReadLimits, Retention,
    SegmentConfig, SnapshotStore,
};
use minibroker_records::{NewRecord, Writer, encode, inspect, inspect_stored, set_base_offset};
use minibroker_storage::FsStorage;
use minibroker_storage::sim::SimStorage;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tempfile::TempDir;

/// Small segments, rolled by size only, so a few hundred batches make many of them.
const SMALL: SegmentConfig = SegmentConfig {
    segment_bytes: 4096,
    segment_ms: i64::MAX,
    write_back_bytes: None,
};

/// Where logs on [`SimStorage`] live.
const SIM_DIR: &str = "/partition-0";

/// SplitMix64: a small deterministic random number generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A batch of 1 to 4 records of up to 199 bytes each, from producer 7 at `sequence`. With a
/// `timestamp`, the records get `timestamp`, `timestamp + 1`, ...; without, the batch's time.
fn random_batch(rng: &mut Rng, sequence: i32, timestamp: Option<i64>) -> Bytes {
    let records: Vec<NewRecord> = (0..1 + rng.below(4))
        .map(|i| NewRecord {
            timestamp: timestamp.map(|t| t + i as i64),
            ..NewRecord::value(vec![b'a' + i as u8; rng.below(200)])
        })
        .collect();
    let writer = Writer {
        producer_id: 7,
        epoch: 0,
        base_sequence: sequence,
    };
    encode(writer, &records, 1_000).expect("the batch encodes")
}

fn record_count(batch: &Bytes) -> u32 {
    inspect(batch).expect("a valid batch").record_count
}

/// One batch as the log should store it.
#[derive(Debug, Clone)]
struct Stored {
    base: i64,
    end: i64,
    /// The producer's bytes stamped with `base`.
    bytes: Bytes,
}

/// Everything appended to a log, in order: what it must hold.
#[derive(Debug, Clone, Default)]
struct Model {
    batches: Vec<Stored>,
}

impl Model {
    fn next_offset(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.end)
    }

    /// Appends `batch` to `log` and writes it, as a broker does before answering, and adds it
    /// to the model, checking where it landed.
    fn append(&mut self, log: &mut DurableLog, batch: &Bytes, now_ms: i64) -> Appended {
        let appended = self.append_unwritten(log, batch, now_ms);
        log.write_pending().expect("the write succeeds");
        appended
    }

    /// As [`Self::append`], leaving the batch in memory until something writes it.
    fn append_unwritten(&mut self, log: &mut DurableLog, batch: &Bytes, now_ms: i64) -> Appended {
        let count = record_count(batch);
        let appended = log
            .append(batch, count, now_ms)
            .expect("the append succeeds");
        assert_eq!(
            appended.base_offset,
            self.next_offset(),
            "base offset of an append"
        );
        let mut stamped = batch.to_vec();
        set_base_offset(&mut stamped, appended.base_offset);
        self.batches.push(Stored {
            base: appended.base_offset,
            end: appended.base_offset + i64::from(count),
            bytes: stamped.into(),
        });
        appended
    }

    /// Appends a [`random_batch`] whose sequence is its offset.
    fn append_random(
        &mut self,
        log: &mut DurableLog,
        rng: &mut Rng,
        timestamp: Option<i64>,
    ) -> Appended {
        let batch = random_batch(rng, self.next_offset() as i32, timestamp);
        self.append(log, &batch, 0)
    }

    /// The index of the batch holding `offset`.
    fn holding(&self, offset: i64) -> usize {
        self.batches.partition_point(|b| b.end <= offset)
    }

    /// The batches from the first at or after `offset` on.
    fn since(&self, offset: i64) -> &[Stored] {
        &self.batches[self.holding(offset)..]
    }

    /// The batches of each segment, given the segments' base offsets in order.
    fn segments(&self, bases: &[i64]) -> Vec<&[Stored]> {
        let starts: Vec<usize> = bases.iter().map(|&base| self.holding(base)).collect();
        let ends = starts.iter().skip(1).copied().chain([self.batches.len()]);
        starts
            .iter()
            .zip(ends)
            .map(|(&start, end)| &self.batches[start..end])
            .collect()
    }
}

fn open_fs(dir: &Path) -> Opened {
    DurableLog::open(Arc::new(FsStorage), dir, SMALL).expect("the log opens")
}

fn open_sim(storage: &SimStorage, config: SegmentConfig) -> Opened {
    DurableLog::open(Arc::new(storage.clone()), Path::new(SIM_DIR), config).expect("the log opens")
}

fn segment_file(dir: &Path, base: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base:020}{suffix}"))
}

/// The base offsets of the `.log` files among `names`, in order.
fn log_bases(names: impl IntoIterator<Item = String>) -> Vec<i64> {
    let mut bases: Vec<i64> = names
        .into_iter()
        .filter_map(|name| name.strip_suffix(".log")?.parse().ok())
        .collect();
    bases.sort_unstable();
    bases
}

fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("the directory lists")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

fn fs_bases(dir: &Path) -> Vec<i64> {
    log_bases(names_in(dir))
}

fn sim_bases(storage: &SimStorage) -> Vec<i64> {
    log_bases(
        storage
            .paths()
            .iter()
            .filter_map(|path| Some(path.file_name()?.to_string_lossy().into_owned())),
    )
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("the file exists").len()
}

/// Every batch `log` holds, in order, through [`DurableLog::for_each_batch`].
fn all_batches(log: &mut DurableLog) -> Vec<Bytes> {
    let mut batches = Vec::new();
    log.for_each_batch(0, |batch| {
        batches.push(batch.clone());
        true
    })
    .expect("the log reads");
    batches
}

/// Checks that `log` holds exactly `expected`, byte for byte, each batch valid at its offset,
/// and that its counters and offsets agree.
fn assert_holds(log: &mut DurableLog, expected: &[Stored]) {
    let held = all_batches(log);
    assert_eq!(held.len(), expected.len(), "batches held");
    for (i, (held, want)) in held.iter().zip(expected).enumerate() {
        assert!(
            *held == want.bytes,
            "batch {i} (offset {}) differs",
            want.base
        );
        if let Err(error) = inspect_stored(held, want.base) {
            panic!("batch {i} (offset {}) is not valid: {error}", want.base);
        }
    }
    let bytes: u64 = expected.iter().map(|b| b.bytes.len() as u64).sum();
    assert_eq!(log.batch_count(), expected.len() as u64, "batch count");
    assert_eq!(log.stored_bytes(), bytes, "stored bytes");
    match (expected.first(), expected.last()) {
        (Some(first), Some(last)) => {
            assert_eq!(log.start_offset(), first.base, "start offset");
            assert_eq!(log.next_offset(), last.end, "next offset");
        }
        _ => assert_eq!(log.start_offset(), log.next_offset(), "an empty log"),
    }
}

fn limits(max_bytes: usize, batch_overhead: usize) -> ReadLimits {
    ReadLimits::bytes(max_bytes, batch_overhead)
}

/// What a read from `from` must return, per [`DurableLog::read`]'s contract: the batch holding
/// `from`, then the following batches of the same segment while their cost fits `limits`, none
/// beginning at or after `limits.before_offset`.
fn expected_read(
    model: &Model,
    segment_bases: &[i64],
    from: i64,
    limits: ReadLimits,
) -> Vec<Bytes> {
    let segment_end = segment_bases
        .iter()
        .copied()
        .find(|&base| base > from)
        .unwrap_or(i64::MAX);
    let mut cost = 0;
    let mut read = Vec::new();
    for batch in model
        .since(from)
        .iter()
        .take_while(|b| b.base < segment_end && b.base < limits.before_offset)
    {
        cost += batch.bytes.len() + limits.batch_overhead;
        if !read.is_empty() && cost > limits.max_bytes {
            break;
        }
        read.push(batch.bytes.clone());
    }
    read
}

fn base_offsets(batches: &[Bytes]) -> Vec<i64> {
    batches
        .iter()
        .map(|b| minibroker_records::base_offset(b))
        .collect()
}

/// Reads from every offset under several limits and checks each answer against the model.
fn assert_reads(log: &mut DurableLog, model: &Model, segment_bases: &[i64]) {
    let first = model.batches[0].bytes.len();
    let second = model.batches[1].bytes.len();
    let all_limits = [
        ReadLimits::default(),
        limits(1, 0),
        limits(first, 0),
        limits(first + second, 0),
        limits(first + second + 19, 10),
        limits(first + second + 20, 10),
        limits(1500, 0),
        // A read_committed reader's bound, at each of the first batches' starts.
        ReadLimits {
            before_offset: model.batches[1].base,
            ..ReadLimits::default()
        },
        ReadLimits {
            before_offset: model.batches[2].base,
            ..limits(1500, 0)
        },
    ];
    for from in log.start_offset()..log.next_offset() {
        for limits in all_limits {
            let read = log.read(from, limits).expect("the read succeeds");
            let want = expected_read(model, segment_bases, from, limits);
            assert!(
                read == want,
                "read({from}, {limits:?}) returned batches at {:?}, not {:?}",
                base_offsets(&read),
                base_offsets(&want)
            );
        }
    }
    // Whatever the limit, a read returns a batch.
    assert_eq!(
        log.read(log.start_offset(), limits(0, 0))
            .expect("reads")
            .len(),
        1
    );
    let end = log.next_offset();
    assert!(
        log.read(end, ReadLimits::default())
            .expect("reads")
            .is_empty()
    );
    assert!(matches!(
        log.read(end + 1, ReadLimits::default()),
        Err(LogError::OffsetOutOfRange { requested, end: e, .. }) if requested == end + 1 && e == end
    ));
}

/// A log of at least `batches` random batches in a new directory, closed; the last segment
/// holds at least `last_segment` batches.
fn closed_fs_log(seed: u64, batches: usize, last_segment: usize) -> (TempDir, Model) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut log = open_fs(dir.path()).log;
    let mut model = Model::default();
    let mut rng = Rng(seed);
    let mut in_last = 0;
    while model.batches.len() < batches || in_last < last_segment {
        let appended = model.append_random(&mut log, &mut rng, None);
        in_last = if appended.rolled { 1 } else { in_last + 1 };
    }
    (dir, model)
}

#[test]
fn batches_round_trip_across_rolls_reopens_and_lost_indexes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut log = open_fs(dir.path()).log;
    let mut model = Model::default();
    let mut rng = Rng(1);
    let mut rolls = 0;
    for _ in 0..300 {
        rolls += usize::from(model.append_random(&mut log, &mut rng, None).rolled);
    }
    assert!(
        log.segment_count() >= 8,
        "only {} segments",
        log.segment_count()
    );
    assert_eq!(log.segment_count(), rolls + 1);
    let bases = fs_bases(dir.path());
    assert_eq!(bases.len(), log.segment_count());
    for (base, segment) in bases.iter().zip(model.segments(&bases)) {
        assert_eq!(
            segment[0].base, *base,
            "a segment is named by its first offset"
        );
        let size: u64 = segment.iter().map(|b| b.bytes.len() as u64).sum();
        assert_eq!(file_len(&segment_file(dir.path(), *base, ".log")), size);
        assert!(
            size <= SMALL.segment_bytes,
            "segment {base} is {size} bytes"
        );
    }
    // Sealed segments have their index written beside them; the active one does not yet.
    let (active, sealed) = bases.split_last().expect("segments");
    for base in sealed {
        assert!(
            segment_file(dir.path(), *base, ".index").exists(),
            "no index for {base}"
        );
    }
    assert!(!segment_file(dir.path(), *active, ".index").exists());
    assert_holds(&mut log, &model.batches);
    assert_reads(&mut log, &model, &bases);
    drop(log);

    let mut reopened = open_fs(dir.path());
    assert!(reopened.truncated.is_none());
    assert_eq!(reopened.log.segment_count(), bases.len());
    assert_holds(&mut reopened.log, &model.batches);
    assert_reads(&mut reopened.log, &model, &bases);
    drop(reopened);

    // Without the index files, sealed segments are walked instead, with the same result.
    for base in sealed {
        std::fs::remove_file(segment_file(dir.path(), *base, ".index")).expect("removes");
    }
    let mut rescanned = open_fs(dir.path());
    assert!(rescanned.truncated.is_none());
    assert_holds(&mut rescanned.log, &model.batches);
    assert_reads(&mut rescanned.log, &model, &bases);

    // And the log goes on from where it was.
    for _ in 0..20 {
        model.append_random(&mut rescanned.log, &mut rng, None);
    }
    drop(rescanned);
    assert_holds(&mut open_fs(dir.path()).log, &model.batches);
}

#[test]
fn a_segment_rolls_once_its_first_batch_is_old_enough() {
    let config = SegmentConfig {
        segment_bytes: u64::MAX,
        segment_ms: 100,
        write_back_bytes: None,
    };
    let storage = SimStorage::new();
    let mut log = open_sim(&storage, config).log;
    let mut model = Model::default();
    let mut rng = Rng(15);
    for (now_ms, rolls) in [
        (1000, false),
        (1099, false),
        (1100, true),
        (1199, false),
        (1200, true),
    ] {
        let batch = random_batch(&mut rng, 0, None);
        assert_eq!(
            model.append(&mut log, &batch, now_ms).rolled,
            rolls,
            "append at {now_ms}"
        );
    }
    assert_eq!(log.segment_count(), 3);
    drop(log);
    assert_holds(&mut open_sim(&storage, config).log, &model.batches);
}

/// A closed log's files, and what they hold, to damage copies of.
struct Pristine {
    files: Vec<(String, Vec<u8>)>,
    model: Model,
    last_base: i64,
}

impl Pristine {
    fn new(seed: u64) -> Self {
        let (dir, model) = closed_fs_log(seed, 60, 4);
        let files = names_in(dir.path())
            .into_iter()
            .map(|name| {
                let data = std::fs::read(dir.path().join(&name)).expect("reads");
                (name, data)
            })
            .collect();
        let last_base = *fs_bases(dir.path()).last().expect("segments");
        assert!(last_base > 0, "the log must have sealed segments");
        Self {
            files,
            model,
            last_base,
        }
    }

    fn last_name(&self) -> String {
        format!("{:020}.log", self.last_base)
    }

    fn last_segment(&self) -> &[u8] {
        let name = self.last_name();
        let (_, data) = self
            .files
            .iter()
            .find(|(n, _)| *n == name)
            .expect("the last segment");
        data
    }

    /// Where each batch of the last segment ends in its file.
    fn batch_ends(&self) -> Vec<u64> {
        self.model
            .since(self.last_base)
            .iter()
            .scan(0, |end, batch| {
                *end += batch.bytes.len() as u64;
                Some(*end)
            })
            .collect()
    }

    /// A copy of the log whose last segment holds `last` instead; reopens it and checks that it
    /// holds exactly the batches wholly within the first `valid` bytes of `last`, reports the rest
    /// as cut, and goes on appending after them.
    fn check_recovery(&self, last: Vec<u8>, valid: u64) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let last_name = self.last_name();
        for (name, data) in &self.files {
            let data = if *name == last_name { &last } else { data };
            std::fs::write(dir.path().join(name), data).expect("writes");
        }
        let kept = self.model.holding(self.last_base)
            + self
                .batch_ends()
                .iter()
                .filter(|end| **end <= valid)
                .count();
        let mut model = Model {
            batches: self.model.batches[..kept].to_vec(),
        };
        let Opened { mut log, truncated } = open_fs(dir.path());
        let dropped = last.len() as u64 - valid;
        match &truncated {
            None => assert_eq!(dropped, 0, "{dropped} damaged bytes went unreported"),
            Some((bytes, reason)) => {
                assert!(dropped > 0, "a sound tail was cut: {reason}");
                assert_eq!(*bytes, dropped, "bytes cut ({reason})");
            }
        }
        let last_path = dir.path().join(&last_name);
        assert_eq!(
            file_len(&last_path),
            valid,
            "the file is cut to its valid prefix"
        );
        assert_holds(&mut log, &model.batches);
        let mut rng = Rng(valid);
        for _ in 0..3 {
            model.append_random(&mut log, &mut rng, None);
        }
        drop(log);
        let mut again = open_fs(dir.path());
        assert!(again.truncated.is_none(), "{:?}", again.truncated);
        assert_holds(&mut again.log, &model.batches);
    }
}

#[test]
fn an_undamaged_log_reopens_without_a_cut() {
    let pristine = Pristine::new(2);
    let last = pristine.last_segment().to_vec();
    let len = last.len() as u64;
    pristine.check_recovery(last, len);
}

#[test]
fn a_torn_tail_is_cut_at_the_last_whole_batch() {
    for seed in 0..6 {
        let pristine = Pristine::new(seed);
        let ends = pristine.batch_ends();
        let mut rng = Rng(seed);
        let (last_start, len) = (ends[ends.len() - 2], ends[ends.len() - 1]);
        // Cut one byte short, into the last batch's header, and anywhere.
        let cuts = [
            len - 1,
            last_start + 1 + rng.below(60) as u64,
            rng.below(len as usize) as u64,
        ];
        for cut in cuts {
            let mut last = pristine.last_segment().to_vec();
            last.truncate(cut as usize);
            let valid = ends
                .iter()
                .copied()
                .filter(|end| *end <= cut)
                .max()
                .unwrap_or(0);
            pristine.check_recovery(last, valid);
        }
    }
}

#[test]
fn garbage_after_the_last_batch_is_cut() {
    let pristine = Pristine::new(3);
    let valid = pristine.last_segment().len() as u64;
    let mut rng = Rng(3);
    for garbage_len in [1, 12, 60, 61, 62, 200, 5000] {
        let mut last = pristine.last_segment().to_vec();
        last.extend((0..garbage_len).map(|_| rng.next() as u8));
        pristine.check_recovery(last, valid);
    }
    // Zeros, as a file system extending a file after a crash leaves them.
    let mut last = pristine.last_segment().to_vec();
    last.resize(last.len() + 4096, 0);
    pristine.check_recovery(last, valid);
}

#[test]
fn any_changed_byte_in_the_last_batch_drops_that_batch() {
    let pristine = Pristine::new(4);
    let ends = pristine.batch_ends();
    let last_start = ends[ends.len() - 2];
    let mut rng = Rng(4);
    for position in last_start..ends[ends.len() - 1] {
        let mut last = pristine.last_segment().to_vec();
        last[position as usize] ^= 1 + rng.below(255) as u8;
        pristine.check_recovery(last, last_start);
    }
}

#[test]
fn a_segment_missing_in_the_middle_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut log = open_fs(dir.path()).log;
    let mut rng = Rng(5);
    let mut model = Model::default();
    while log.segment_count() < 3 {
        model.append_random(&mut log, &mut rng, None);
    }
    drop(log);
    let bases = fs_bases(dir.path());
    assert_eq!(bases.len(), 3);
    let missing = format!("{:020}.log", bases[1]);
    std::fs::remove_file(dir.path().join(&missing)).expect("removes");
    match DurableLog::open(Arc::new(FsStorage), dir.path(), SMALL) {
        Err(LogError::Damaged(message)) => {
            assert!(
                message.contains(&missing),
                "{message:?} does not name {missing}"
            );
        }
        other => panic!("a log with a hole opened: {other:?}"),
    }
}

#[test]
fn a_damaged_sealed_segment_is_refused_and_left_alone() {
    let (dir, _) = closed_fs_log(6, 40, 1);
    let first = segment_file(dir.path(), 0, ".log");
    let len = file_len(&first);
    // Its index no longer matches, so it is walked, and its last batch is torn.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .and_then(|file| file.set_len(len - 1))
        .expect("truncates");
    match DurableLog::open(Arc::new(FsStorage), dir.path(), SMALL) {
        Err(LogError::Damaged(message)) => {
            assert!(message.contains(&format!("{:020}.log", 0)), "{message:?}");
        }
        other => panic!("a damaged sealed segment was served: {other:?}"),
    }
    assert_eq!(
        file_len(&first),
        len - 1,
        "a sealed segment is never truncated"
    );
}

/// A closed log whose batches carry record timestamps 10 ms apart from 1,000,000 on.
fn timestamped_fs_log() -> (TempDir, Model) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut log = open_fs(dir.path()).log;
    let mut model = Model::default();
    let mut rng = Rng(7);
    for i in 0..80 {
        model.append_random(&mut log, &mut rng, Some(1_000_000 + 10 * i));
    }
    assert!(log.segment_count() >= 5);
    (dir, model)
}

/// Applies `retention` at `now_ms`, expecting it to delete the oldest `deleted` segments.
fn assert_retention(dir: &Path, model: &Model, retention: Retention, now_ms: i64, deleted: usize) {
    let bases = fs_bases(dir);
    let mut log = open_fs(dir).log;
    let stored = log.stored_bytes();
    let removed = log
        .apply_retention(retention, now_ms)
        .expect("retention applies");
    assert_eq!(
        removed.bytes,
        stored - log.stored_bytes(),
        "bytes released by {retention:?}"
    );
    let start = bases[deleted];
    assert_eq!(
        fs_bases(dir),
        bases[deleted..],
        "the oldest segment files are deleted"
    );
    for base in &bases[..deleted] {
        assert!(
            !segment_file(dir, *base, ".index").exists(),
            "index {base} is left"
        );
    }
    assert_eq!(log.segment_count(), bases.len() - deleted);
    assert_holds(&mut log, model.since(start));
    let read = log.read(start, ReadLimits::default()).expect("reads");
    assert_eq!(minibroker_records::base_offset(&read[0]), start);
    if start > 0 {
        let refused = log.read(start - 1, ReadLimits::default());
        assert!(
            matches!(
                refused,
                Err(LogError::OffsetOutOfRange { requested, start: s, end })
                    if requested == start - 1 && s == start && end == model.next_offset()
            ),
            "{refused:?}"
        );
    }
    drop(log);
    let mut reopened = open_fs(dir).log;
    assert_eq!(reopened.start_offset(), start);
    assert_holds(&mut reopened, model.since(start));
}

#[test]
fn retention_by_bytes_deletes_whole_oldest_segments_but_never_the_active_one() {
    let (dir, model) = timestamped_fs_log();
    let bases = fs_bases(dir.path());
    let sizes: Vec<u64> = model
        .segments(&bases)
        .iter()
        .map(|segment| segment.iter().map(|b| b.bytes.len() as u64).sum())
        .collect();
    let total: u64 = sizes.iter().sum();
    // Keeping `total - sizes[0] - sizes[1]` bytes allows deleting the two oldest, and no more.
    let by_bytes = |bytes| Retention {
        bytes: Some(bytes),
        ms: None,
    };
    let without_two = by_bytes(total - sizes[0] - sizes[1]);
    assert_retention(dir.path(), &model, without_two, 0, 2);
    // Asked again, it finds nothing more to delete.
    assert_retention(dir.path(), &model, without_two, 0, 0);
    // Keeping nothing deletes every sealed segment, and the active one stays.
    assert_retention(dir.path(), &model, by_bytes(0), 0, bases.len() - 3);
}

#[test]
fn retention_by_time_deletes_segments_whose_newest_record_is_too_old() {
    let (dir, model) = timestamped_fs_log();
    let bases = fs_bases(dir.path());
    let newest: Vec<i64> = model
        .segments(&bases)
        .iter()
        .map(|segment| {
            let last = segment.last().expect("a batch");
            minibroker_records::max_timestamp(&last.bytes)
        })
        .collect();
    let by_time = Retention {
        bytes: None,
        ms: Some(1000),
    };
    // Everything up to the second segment's newest record is older than a second, by 1 ms.
    assert_retention(dir.path(), &model, by_time, newest[1] + 1 + 1000, 2);
    assert_retention(dir.path(), &model, by_time, newest[1] + 1000, 0);
    // However old everything is, the active segment stays.
    assert_retention(dir.path(), &model, by_time, i64::MAX, bases.len() - 3);
}

/// A log on `storage` holding a few batches, and the model of them.
/// Appends `batch` to `log` and writes it, as a broker does before answering.
fn append_written(log: &mut DurableLog, batch: &Bytes) -> Result<Appended, LogError> {
    let appended = log.append(batch, record_count(batch), 0)?;
    log.write_pending()?;
    Ok(appended)
}

fn sim_log(storage: &SimStorage, rng: &mut Rng) -> (DurableLog, Model) {
    let mut log = open_sim(storage, SMALL).log;
    let mut model = Model::default();
    for _ in 0..5 {
        model.append_random(&mut log, rng, None);
    }
    (log, model)
}

/// A batch larger than a segment: the active segment rolls before it.
fn big_batch() -> Bytes {
    let writer = Writer {
        producer_id: 8,
        epoch: 0,
        base_sequence: 0,
    };
    encode(writer, &[NewRecord::value(vec![b'x'; 5000])], 0).expect("encodes")
}

/// Checks that `log` refuses appends and syncs after a failure, and that it and a reopened log
/// on `storage` hold exactly `model`, reopening writable.
fn assert_read_only(mut log: DurableLog, storage: &SimStorage, model: &Model) {
    assert!(log.failure().is_some());
    let batch = random_batch(&mut Rng(0), 0, None);
    assert!(matches!(
        log.append(&batch, record_count(&batch), 0),
        Err(LogError::ReadOnly(_))
    ));
    assert!(matches!(log.sync(), Err(LogError::ReadOnly(_))));
    assert_holds(&mut log, &model.batches);
    drop(log);
    let Opened { mut log, truncated } = open_sim(storage, SMALL);
    assert!(truncated.is_none(), "{truncated:?}");
    assert!(
        storage
            .paths()
            .iter()
            .all(|path| !path.to_string_lossy().ends_with(".tmp")),
        "an unfinished index is left: {:?}",
        storage.paths()
    );
    assert_holds(&mut log, &model.batches);
    let mut model = model.clone();
    model.append(&mut log, &batch, 0);
    assert_holds(&mut log, &model.batches);
}

#[test]
fn a_full_disk_fails_the_append_and_leaves_the_log_read_only() {
    let storage = SimStorage::new();
    let (mut log, model) = sim_log(&storage, &mut Rng(8));
    let active = *sim_bases(&storage).last().expect("a segment");
    let active = segment_file(Path::new(SIM_DIR), active, ".log");
    let before = storage.contents(&active);
    storage.faults.full.store(true, Ordering::Relaxed);
    let batch = random_batch(&mut Rng(9), 5, None);
    assert!(matches!(
        append_written(&mut log, &batch),
        Err(LogError::Storage(_))
    ));
    storage.faults.full.store(false, Ordering::Relaxed);
    assert_eq!(
        storage.contents(&active),
        before,
        "nothing of the batch is written"
    );
    assert_read_only(log, &storage, &model);
}

#[test]
fn a_full_disk_during_a_roll_leaves_the_log_read_only() {
    let storage = SimStorage::new();
    let (mut log, model) = sim_log(&storage, &mut Rng(10));
    let segments = log.segment_count();
    storage.faults.full.store(true, Ordering::Relaxed);
    assert!(matches!(
        log.append(&big_batch(), 1, 0),
        Err(LogError::Storage(_))
    ));
    storage.faults.full.store(false, Ordering::Relaxed);
    assert_eq!(log.segment_count(), segments, "no segment was started");
    assert_read_only(log, &storage, &model);
}

#[test]
fn a_failed_sync_leaves_the_log_read_only() {
    let storage = SimStorage::new();
    let (mut log, model) = sim_log(&storage, &mut Rng(11));
    log.sync().expect("syncs");
    storage.faults.failing_sync.store(true, Ordering::Relaxed);
    assert!(matches!(log.sync(), Err(LogError::Storage(_))));
    storage.faults.failing_sync.store(false, Ordering::Relaxed);
    assert_read_only(log, &storage, &model);
}

#[test]
fn a_failed_sync_during_a_roll_fails_the_append() {
    let storage = SimStorage::new();
    let (mut log, model) = sim_log(&storage, &mut Rng(12));
    storage.faults.failing_sync.store(true, Ordering::Relaxed);
    assert!(matches!(
        log.append(&big_batch(), 1, 0),
        Err(LogError::Storage(_))
    ));
    storage.faults.failing_sync.store(false, Ordering::Relaxed);
    assert_read_only(log, &storage, &model);
}

#[test]
fn a_crash_keeps_every_synced_batch_and_a_prefix_of_the_rest() {
    let config = SegmentConfig {
        segment_bytes: 1024,
        segment_ms: i64::MAX,
        write_back_bytes: None,
    };
    let mut pool_rng = Rng(13);
    let pool: Vec<Bytes> = (0..16)
        .map(|i| random_batch(&mut pool_rng, 8 * i, None))
        .collect();
    let mut cut_tails = 0;
    for seed in 0..2000 {
        let mut rng = Rng(seed);
        let storage = SimStorage::new();
        let mut log = open_sim(&storage, config).log;
        let mut model = Model::default();
        // Batches a sync or a roll made durable.
        let mut durable = 0;
        let fault_at = (seed % 10 == 0).then(|| rng.below(40));
        for step in 0..rng.below(40) {
            let batch = &pool[rng.below(pool.len())];
            if fault_at == Some(step) {
                // A full disk: the append fails, and so does everything after it.
                storage.faults.full.store(true, Ordering::Relaxed);
                assert!(append_written(&mut log, batch).is_err());
                break;
            }
            if model.append(&mut log, batch, 0).rolled {
                durable = model.batches.len() - 1;
            }
            if rng.below(5) == 0 {
                log.sync().expect("syncs");
                durable = model.batches.len();
            }
        }
        let crashed = storage.crash(seed);
        let last = segment_file(
            Path::new(SIM_DIR),
            *sim_bases(&crashed).last().expect("a segment"),
            ".log",
        );
        let found = crashed.contents(&last).expect("the active segment").len() as u64;

        let Opened { mut log, truncated } = open_sim(&crashed, config);
        let held = log.batch_count() as usize;
        assert!(
            held >= durable,
            "seed {seed}: {held} batches recovered, {durable} were synced"
        );
        assert!(
            held <= model.batches.len(),
            "seed {seed}: more recovered than appended"
        );
        let mut recovered = Model {
            batches: model.batches[..held].to_vec(),
        };
        assert_holds(&mut log, &recovered.batches);
        let kept = crashed.contents(&last).expect("the active segment").len() as u64;
        assert_eq!(
            truncated.map(|(bytes, _)| bytes),
            (found > kept).then_some(found - kept),
            "seed {seed}"
        );
        cut_tails += usize::from(found > kept);

        recovered.append(&mut log, &pool[0], 0);
        log.sync().expect("syncs");
        drop(log);
        let mut again = open_sim(&crashed, config);
        assert!(again.truncated.is_none(), "seed {seed}");
        assert_holds(&mut again.log, &recovered.batches);
    }
    assert!(cut_tails > 100, "only {cut_tails} crashes tore a tail");
}

#[test]
fn offsets_by_timestamp_agree_with_the_memory_log() {
    let storage = SimStorage::new();
    let mut durable = open_sim(&storage, SMALL).log;
    let mut memory = MemoryLog::new();
    let mut rng = Rng(14);
    let mut timestamps = vec![i64::MIN, -1, 0];
    for sequence in 0..120 {
        // Out of order, and often repeated, as producers' clocks are.
        let timestamp = 1000 * rng.below(50) as i64;
        let batch = random_batch(&mut rng, sequence, Some(timestamp));
        durable
            .append(&batch, record_count(&batch), 0)
            .expect("appends");
        memory
            .append(&batch, record_count(&batch))
            .expect("appends");
        timestamps.extend([timestamp - 1, timestamp, timestamp + 1, timestamp + 3]);
    }
    timestamps.push(i64::MAX);
    assert!(durable.segment_count() >= 5);
    let assert_agrees = |durable: &mut DurableLog| {
        for &timestamp in &timestamps {
            assert_eq!(
                durable.offset_for_timestamp(timestamp).expect("reads"),
                memory.offset_for_timestamp(timestamp),
                "offset for timestamp {timestamp}"
            );
        }
        let newest = durable.offset_of_max_timestamp().expect("reads");
        assert_eq!(newest, memory.offset_of_max_timestamp());
        assert!(newest.is_some());
    };
    assert_agrees(&mut durable);
    drop(durable);
    // Reopened, the sealed segments' largest timestamps come from their index files.
    assert_agrees(&mut open_sim(&storage, SMALL).log);
}

#[test]
fn the_snapshot_store_keeps_the_newest_two() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = open_fs(dir.path()).log;
    let snapshots = log.snapshots();
    let data = |offset: i64| format!("state up to {offset}").into_bytes();
    for offset in [10, 20, 30, 40] {
        snapshots.write(offset, &data(offset)).expect("writes");
    }
    let mut names: Vec<String> = names_in(dir.path())
        .into_iter()
        .filter(|name| name.contains(".snapshot"))
        .collect();
    names.sort();
    let kept: Vec<String> = [30, 40]
        .iter()
        .map(|o| format!("{o:020}.snapshot"))
        .collect();
    assert_eq!(names, kept);
    assert_eq!(kept.len(), SnapshotStore::KEPT);
    assert_eq!(
        snapshots.newest_first(i64::MAX).expect("lists"),
        vec![(40, data(40)), (30, data(30))]
    );
    assert_eq!(
        snapshots.newest_first(39).expect("lists"),
        vec![(30, data(30))]
    );
    assert!(snapshots.newest_first(29).expect("lists").is_empty());
    // The log's own recovery leaves them alone.
    drop(log);
    let reopened = open_fs(dir.path()).log;
    assert_eq!(
        reopened.snapshots().newest_first(40).expect("lists").len(),
        2
    );
}

/// Background syncs: one is asked for every `write_back_bytes` (never two at once), what it
/// synced survives a crash, and a failed one makes the next append fail.
#[test]
fn background_syncs_are_due_every_write_back_bytes_and_a_failed_one_stops_appends() {
    use std::sync::atomic::Ordering;
    let storage = SimStorage::new();
    let config = SegmentConfig {
        segment_bytes: u64::MAX,
        segment_ms: i64::MAX,
        write_back_bytes: Some(2_000),
    };
    let mut log = open_sim(&storage, config).log;
    let mut rng = Rng(5);
    let mut appended = 0u64;
    let mut due = Vec::new();
    for sequence in 0..60 {
        let batch = random_batch(&mut rng, sequence * 4, None);
        appended += batch.len() as u64;
        let result = log.append(&batch, record_count(&batch), 0).unwrap();
        if let Some(write_back) = result.write_back {
            due.push((appended, write_back));
        }
    }
    // The first is not run yet, so no second one is asked for while it "runs".
    assert!(appended > 4_000);
    assert_eq!(due.len(), 1, "background syncs for {appended} bytes");
    assert!((2_000..4_000).contains(&due[0].0));
    let synced_through = due[0].0;
    let (_, first) = due.remove(0);
    let syncs = storage.faults.syncs.load(Ordering::Relaxed);
    first.run();
    assert_eq!(storage.faults.syncs.load(Ordering::Relaxed), syncs + 1);
    // Whatever the crash keeps of the rest, the synced bytes survive.
    let crashed = storage.crash(3);
    let reopened = open_sim(&crashed, config).log;
    assert!(reopened.stored_bytes() >= synced_through);

    // With the first done, the next one is asked for again; this one fails.
    let mut next = None;
    for sequence in 60..200 {
        let batch = random_batch(&mut rng, sequence * 4, None);
        if let Some(write_back) = log
            .append(&batch, record_count(&batch), 0)
            .unwrap()
            .write_back
        {
            next = Some(write_back);
            break;
        }
    }
    storage.faults.failing_sync.store(true, Ordering::Relaxed);
    next.expect("another background sync is due").run();
    storage.faults.failing_sync.store(false, Ordering::Relaxed);
    let batch = random_batch(&mut rng, 1_000, None);
    assert!(matches!(
        log.append(&batch, record_count(&batch), 0),
        Err(LogError::ReadOnly(_))
    ));
    assert!(
        log.failure()
            .is_some_and(|failure| failure.to_string().contains("background sync"))
    );
}

/// Appends gather in memory: a crash before they are written loses exactly them, and a read, a
/// sync or reaching [`MAX_PENDING_BYTES`] writes them.
#[test]
fn unwritten_batches_are_lost_by_a_crash_and_written_by_reads_syncs_and_the_size_limit() {
    let config = SegmentConfig {
        segment_bytes: u64::MAX,
        ..SMALL
    };
    let storage = SimStorage::new();
    let mut log = open_sim(&storage, config).log;
    let mut model = Model::default();
    let mut rng = Rng(21);
    for _ in 0..3 {
        model.append_random(&mut log, &mut rng, None);
    }
    log.sync().expect("syncs");
    let active = segment_file(Path::new(SIM_DIR), 0, ".log");
    let written = storage.contents(&active).expect("the segment");

    let mut unwritten = model.clone();
    for _ in 0..2 {
        let batch = random_batch(&mut rng, unwritten.next_offset() as i32, None);
        unwritten.append_unwritten(&mut log, &batch, 0);
    }
    assert!(log.has_pending());
    assert_eq!(log.next_offset(), unwritten.next_offset());
    assert_eq!(storage.contents(&active), Some(written.clone()));
    let mut crashed = open_sim(&storage.crash(1), config).log;
    assert_holds(&mut crashed, &model.batches);

    // A read writes them first, so it sees every batch appended.
    let read = log
        .read(model.next_offset(), ReadLimits::default())
        .expect("reads");
    let appended: Vec<Bytes> = unwritten
        .since(model.next_offset())
        .iter()
        .map(|b| b.bytes.clone())
        .collect();
    assert_eq!(read, appended);
    assert!(!log.has_pending());
    assert!(storage.contents(&active).expect("the segment").len() > written.len());

    // A sync writes them first, so it covers every batch appended.
    let batch = random_batch(&mut rng, unwritten.next_offset() as i32, None);
    unwritten.append_unwritten(&mut log, &batch, 0);
    log.sync().expect("syncs");
    assert_holds(
        &mut open_sim(&storage.crash(2), config).log,
        &unwritten.batches,
    );

    // Nobody asks: past the limit the log writes them itself.
    let mut appended = 0;
    while appended <= 2 * MAX_PENDING_BYTES {
        let batch = random_batch(&mut rng, unwritten.next_offset() as i32, None);
        appended += batch.len();
        unwritten.append_unwritten(&mut log, &batch, 0);
    }
    let file = storage.contents(&active).expect("the segment").len() as u64;
    assert!(
        file + MAX_PENDING_BYTES as u64 >= log.stored_bytes(),
        "{file} bytes in the file of {} appended",
        log.stored_bytes()
    );
    assert_holds(&mut log, &unwritten.batches);
}

/// A failed write forgets the batches it held: the log end, counts and reads are as before
/// them, the file is unchanged, and the log is read-only.
#[test]
fn a_failed_write_forgets_the_unwritten_batches_and_leaves_the_log_read_only() {
    let storage = SimStorage::new();
    let (mut log, model) = sim_log(&storage, &mut Rng(22));
    let (end, batches, bytes) = (log.next_offset(), log.batch_count(), log.stored_bytes());
    let mut rng = Rng(23);
    for sequence in 0..3 {
        let batch = random_batch(&mut rng, 100 + sequence, None);
        log.append(&batch, record_count(&batch), 0)
            .expect("appends");
    }
    assert!(log.next_offset() > end);
    storage.faults.full.store(true, Ordering::Relaxed);
    assert!(matches!(log.write_pending(), Err(LogError::Storage(_))));
    storage.faults.full.store(false, Ordering::Relaxed);
    assert!(!log.has_pending());
    assert_eq!(
        (log.next_offset(), log.batch_count(), log.stored_bytes()),
        (end, batches, bytes)
    );
    assert!(matches!(
        log.read(end + 1, ReadLimits::default()),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_read_only(log, &storage, &model);
}

/// On Linux the active segment reserves disk space ahead of its appends while its length stays
/// that of its batches, and a segment that rolls gives back the space it did not use.
#[cfg(target_os = "linux")]
#[test]
fn the_active_segment_reserves_space_ahead_and_a_sealed_one_gives_it_back() {
    use minibroker_log::PREALLOCATE_BYTES;
    use minibroker_storage::Storage;
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let probe = FsStorage
        .create(&dir.path().join("probe"))
        .expect("creates");
    if let Err(error) = probe.preallocate(4096) {
        eprintln!("this file system cannot preallocate ({error}); nothing to check");
        return;
    }
    // Rolled by age, well before it is full.
    let config = SegmentConfig {
        segment_bytes: 64 << 20,
        segment_ms: 100,
        write_back_bytes: None,
    };
    let data = dir.path().join("partition");
    let mut log = DurableLog::open(Arc::new(FsStorage), &data, config)
        .expect("opens")
        .log;
    let mut model = Model::default();
    let mut rng = Rng(31);
    for _ in 0..3 {
        let batch = random_batch(&mut rng, model.next_offset() as i32, None);
        model.append(&mut log, &batch, 0);
    }
    let first = segment_file(&data, 0, ".log");
    let reserved = std::fs::metadata(&first).expect("the segment");
    assert_eq!(reserved.len(), log.stored_bytes());
    assert!(
        reserved.blocks() * 512 >= PREALLOCATE_BYTES,
        "{} bytes reserved",
        reserved.blocks() * 512
    );
    let batch = random_batch(&mut rng, model.next_offset() as i32, None);
    assert!(model.append(&mut log, &batch, 1_000).rolled);
    let sealed = std::fs::metadata(&first).expect("the sealed segment");
    assert!(
        sealed.blocks() * 512 < sealed.len() + (64 << 10),
        "a sealed segment of {} bytes still holds {} on disk",
        sealed.len(),
        sealed.blocks() * 512
    );
    assert_holds(&mut log, &model.batches);
}

/// A one-record batch rewritten to claim `records` records, as a compressed batch may (the
/// broker checks such a claim only by decompressing; this log trusts its caller): the smallest
/// bytes that take the most offsets.
fn claiming(records: u32, sequence: i32) -> Bytes {
    let writer = Writer {
        producer_id: 9,
        epoch: 0,
        base_sequence: sequence,
    };
    let mut batch = encode(writer, &[NewRecord::value("v")], 0)
        .expect("encodes")
        .to_vec();
    batch[22] |= 1; // gzip, in the attributes' low byte
    batch[23..27].copy_from_slice(&(records as i32 - 1).to_be_bytes()); // last offset delta
    batch[57..61].copy_from_slice(&(records as i32).to_be_bytes()); // record count
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(batch)
}

#[test]
fn a_segment_rolls_before_its_relative_offsets_would_pass_u32() {
    // 4,200 batches of 2^20 offsets each span 4.4 billion offsets: more than a u32 index entry
    // can say relative to one segment's base.
    const BATCHES: usize = 4_200;
    let dir = TempDir::new().expect("a temporary directory");
    let config = SegmentConfig::default();
    let mut log = DurableLog::open(Arc::new(FsStorage), dir.path(), config)
        .expect("the log opens")
        .log;
    let mut model = Model::default();
    for i in 0..BATCHES {
        model.append_unwritten(&mut log, &claiming(1 << 20, i as i32), 0);
    }
    log.write_pending().expect("the write succeeds");
    assert_eq!(log.segment_count(), 2, "one roll, at the u32 boundary");
    let check = |log: &mut DurableLog| {
        for stored in &model.batches {
            let read = log.read(stored.base, limits(1, 0)).expect("the log reads");
            assert_eq!(
                base_offsets(&read),
                vec![stored.base],
                "the batch holding offset {}",
                stored.base
            );
            assert!(read[0] == stored.bytes, "batch at {} differs", stored.base);
        }
    };
    check(&mut log);
    drop(log);
    // Sealed from its index file, and again from a scan.
    let mut reopened = open_fs_with(dir.path(), config);
    check(&mut reopened);
    drop(reopened);
    std::fs::remove_file(segment_file(dir.path(), 0, ".index")).expect("the index exists");
    check(&mut open_fs_with(dir.path(), config));
}

fn open_fs_with(dir: &Path, config: SegmentConfig) -> DurableLog {
    DurableLog::open(Arc::new(FsStorage), dir, config)
        .expect("the log opens")
        .log
}

/// Flips one bit at `position` of the file at `path`.
fn flip_bit(path: &Path, position: u64) {
    let mut bytes = std::fs::read(path).expect("the file reads");
    bytes[position as usize] ^= 0x10;
    std::fs::write(path, bytes).expect("the file writes");
}

#[test]
fn a_stored_batch_that_no_longer_matches_its_crc_is_never_served() {
    // A sealed segment opened from its index is not scanned: a flipped bit in record data was
    // served as it was (`VALUE1003` for `VALUE0003`). Every byte of a batch, in every position,
    // must now fail the read of that batch and leave the log read-only.
    let (dir, model) = closed_fs_log(8, 40, 1);
    let first = segment_file(dir.path(), 0, ".log");
    let sealed = model
        .batches
        .iter()
        .take_while(|b| b.end <= fs_bases(dir.path())[1])
        .count();
    let target = &model.batches[sealed / 2];
    let start: u64 = model.batches[..sealed / 2]
        .iter()
        .map(|b| b.bytes.len() as u64)
        .sum();
    for at in 0..target.bytes.len() as u64 {
        flip_bit(&first, start + at);
        let mut log = open_fs(dir.path()).log;
        match log.read(target.base, limits(1 << 20, 0)) {
            Err(LogError::Damaged(message)) => {
                assert!(message.contains(&format!("{:020}.log", 0)), "{message}");
                assert!(message.contains("offset"), "{message}");
            }
            Ok(read) if at < 8 => {
                // A changed base offset misplaces the batch: it must not be served at all.
                assert!(read.iter().all(|b| *b != target.bytes), "byte {at}");
                panic!("byte {at}: a misplaced batch was read without an error");
            }
            other => panic!("byte {at}: a damaged batch was served: {other:?}"),
        }
        assert!(log.failure().is_some(), "byte {at}: the log is read-only");
        let batch = random_batch(&mut Rng(1), 0, None);
        assert!(matches!(
            log.append(&batch, record_count(&batch), 0),
            Err(LogError::ReadOnly(_))
        ));
        flip_bit(&first, start + at);
    }
    // Mended, it reads again.
    assert_holds(&mut open_fs(dir.path()).log, &model.batches);
}

#[test]
fn an_index_of_the_older_format_is_not_misread_and_its_segment_is_scanned() {
    let (dir, model) = closed_fs_log(21, 60, 1);
    let bases = fs_bases(dir.path());
    assert!(bases.len() >= 3, "{bases:?}");
    // Every sealed segment's index replaced by the older layout: "MBX1", the summary, 8-byte
    // entries (offset delta, position) and a CRC-32C, without a version byte or timestamps.
    for &base in &bases[..bases.len() - 1] {
        let mut older = b"MBX1".to_vec();
        for field in [base, base + 1, 0, 0, 0] {
            older.extend_from_slice(&field.to_be_bytes());
        }
        older.extend_from_slice(&[0; 8]);
        let crc = crc32c::crc32c(&older);
        older.extend_from_slice(&crc.to_be_bytes());
        std::fs::write(segment_file(dir.path(), base, ".index"), older).expect("writes");
    }
    let mut reopened = open_fs(dir.path()).log;
    assert_holds(&mut reopened, &model.batches);
    // Each scanned segment's index is written again in the current format, so the next start
    // reads it instead of scanning.
    for &base in &bases[..bases.len() - 1] {
        let index = std::fs::read(segment_file(dir.path(), base, ".index")).expect("reads");
        assert!(index.starts_with(b"\0MBX"), "segment {base}");
    }
    drop(reopened);
    assert_holds(&mut open_fs(dir.path()).log, &model.batches);
}

/// Copies every file of `from` into `to`.
fn copy_dir(from: &Path, to: &Path) {
    for name in names_in(from) {
        std::fs::copy(from.join(&name), to.join(&name)).expect("the file copies");
    }
}

/// Checks that `log` starts at `start`, refuses the offset before it, and serves the batch
/// holding `start` and every later one.
fn assert_starts_at(log: &mut DurableLog, model: &Model, start: i64) {
    assert_eq!(log.start_offset(), start);
    assert!(matches!(
        log.read(start - 1, ReadLimits::default()),
        Err(LogError::OffsetOutOfRange { start: s, .. }) if s == start
    ));
    let read = log.read(start, ReadLimits::default()).expect("reads");
    assert_eq!(
        minibroker_records::base_offset(&read[0]),
        model.since(start)[0].base
    );
    let mut held = Vec::new();
    log.for_each_batch(0, |batch| {
        held.push(minibroker_records::base_offset(batch));
        true
    })
    .expect("the log reads");
    let want: Vec<i64> = model.since(start).iter().map(|b| b.base).collect();
    assert_eq!(held, want, "the batches from the one holding the start");
}

#[test]
fn delete_records_moves_the_start_into_a_segment_and_a_reopen_or_a_crash_keeps_it() {
    let (dir, model) = closed_fs_log(11, 200, 3);
    let bases = fs_bases(dir.path());
    assert!(bases.len() >= 4, "{bases:?}");
    let before_deletion = tempfile::tempdir().expect("a temporary directory");
    copy_dir(dir.path(), before_deletion.path());

    // One offset past the third segment's base, inside a multi-record batch or not.
    let start = bases[2] + 1;
    let mut log = open_fs(dir.path()).log;
    let stored = log.stored_bytes();
    let released = log.delete_records(start).expect("records are deleted");
    assert_eq!(
        fs_bases(dir.path()),
        bases[2..],
        "the segments wholly below go"
    );
    assert_eq!(released.bytes, stored - log.stored_bytes());
    assert_starts_at(&mut log, &model, start);
    // Lower offsets change nothing; one past the end is taken as the end.
    assert_eq!(log.delete_records(start - 1).expect("a no-op").bytes, 0);
    assert_eq!(log.start_offset(), start);
    drop(log);
    assert_starts_at(&mut open_fs(dir.path()).log, &model, start);

    // A crash after the start was saved and before any segment was deleted: the open finishes.
    std::fs::copy(
        dir.path().join("log-start-offset"),
        before_deletion.path().join("log-start-offset"),
    )
    .expect("the start copies");
    let mut recovered = open_fs(before_deletion.path()).log;
    assert_eq!(fs_bases(before_deletion.path()), bases[2..]);
    assert_starts_at(&mut recovered, &model, start);

    // Everything deleted: the log is empty at its end, and appends go on from there.
    let end = model.next_offset();
    recovered
        .delete_records(end + 100)
        .expect("records are deleted");
    assert_eq!(recovered.start_offset(), end);
    assert_eq!(fs_bases(before_deletion.path()), [*bases.last().unwrap()]);
    assert!(
        recovered
            .read(end, ReadLimits::default())
            .expect("reads at the end")
            .is_empty()
    );
}

#[test]
fn a_damaged_start_offset_file_is_refused_naming_it() {
    let (dir, _model) = closed_fs_log(12, 50, 1);
    open_fs(dir.path())
        .log
        .delete_records(3)
        .expect("records are deleted");
    let path = dir.path().join("log-start-offset");
    let mut bytes = std::fs::read(&path).expect("the start was saved");
    bytes[7] ^= 0x10;
    std::fs::write(&path, bytes).expect("the file is damaged");
    let refused = DurableLog::open(Arc::new(FsStorage), dir.path(), SMALL).map(|_| ());
    match refused {
        Err(LogError::Damaged(reason)) => assert!(reason.contains("log-start-offset"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
