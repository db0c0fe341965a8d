//! An offline check of one partition's directory, for `minibroker check-data`: every segment
//! read whole with each batch's CRC-32C checked, every index compared with its segment, the
//! chain of base offsets followed, and the snapshot files listed for the caller to decode
//! (their format belongs to the state crate).
//!
//! Nothing is written: what recovery would cut or scan again is reported instead.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::names::{
    COMPACTED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX, file_name, parse_name,
};
use crate::offset_files::OFFSET_FILES;
use crate::recovery::SegmentFiles;
use crate::segment::{Damage, Segment};
use crate::storage::{Storage, TEMPORARY_SUFFIX, read_whole};

/// What the check found in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it, or what the broker will do about it.
    pub what: String,
    /// Whether it is damage (data that is wrong or gone); otherwise a note (an index of an older
    /// format, a write that never finished).
    pub damage: bool,
}

/// What one partition directory holds, as checked.
#[derive(Debug, Default)]
pub struct Checked {
    /// Files read.
    pub files: usize,
    /// Batches whose checksum was checked.
    pub batches: u64,
    /// What was found.
    pub findings: Vec<Finding>,
    /// The snapshot files, for the caller to decode.
    pub snapshots: Vec<PathBuf>,
}

impl Checked {
    /// Records damage found in the file at `path`.
    pub fn add_damage(&mut self, path: PathBuf, what: impl Into<String>) {
        self.add(path, what.into(), true);
    }

    /// Records a note on the file at `path`.
    pub fn add_note(&mut self, path: PathBuf, what: impl Into<String>) {
        self.add(path, what.into(), false);
    }

    fn add(&mut self, path: PathBuf, what: String, damage: bool) {
        self.findings.push(Finding { path, what, damage });
    }

    /// Whether anything is damaged (notes aside).
    #[must_use]
    pub fn is_damaged(&self) -> bool {
        self.findings.iter().any(|finding| finding.damage)
    }

    /// Adds what `other` found.
    pub fn merge(&mut self, other: Self) {
        self.files += other.files;
        self.batches += other.batches;
        self.findings.extend(other.findings);
        self.snapshots.extend(other.snapshots);
    }
}

/// Checks the partition directory `dir`.
///
/// # Errors
/// When the directory cannot be listed or a file cannot be read at all.
pub fn check_partition_dir(storage: &Arc<dyn Storage>, dir: &Path) -> io::Result<Checked> {
    let mut checked = Checked::default();
    let names = storage.list(dir)?;
    let SegmentFiles {
        bases,
        unfinished_swaps,
    } = SegmentFiles::of(&names);
    for base in unfinished_swaps {
        checked.add_note(
            dir.join(file_name(base, LOG_SUFFIX)),
            format!(
                "replaced by {}: a compaction's swap a stop interrupted (the next start deletes this file)",
                file_name(base, COMPACTED_SUFFIX)
            ),
        );
    }
    for name in names {
        let path = dir.join(&name);
        if name.ends_with(TEMPORARY_SUFFIX) {
            checked.add_note(
                path,
                "a write that never finished (removed at the next start)",
            );
        } else if parse_name(&name, LOG_SUFFIX).is_some()
            || parse_name(&name, COMPACTED_SUFFIX).is_some()
        {
            // Segments: read below, in the order of their base offsets.
        } else if parse_name(&name, SNAPSHOT_SUFFIX).is_some() {
            checked.snapshots.push(path);
        } else if let Some(file) = OFFSET_FILES.iter().find(|file| file.name == name) {
            checked.files += 1;
            if let Err(reason) = file.decode(&read_whole(&**storage, &path)?) {
                checked.add_damage(
                    path,
                    format!("{reason}: the broker refuses to open the partition"),
                );
            }
        } else if parse_name(&name, INDEX_SUFFIX).is_none() {
            checked.add_note(path, "not a file of the log (left alone)");
        }
    }
    let mut expected: Option<i64> = None;
    let last = bases.last().map(|(base, _)| *base);
    for (base, compacted) in bases {
        let suffix = if compacted {
            COMPACTED_SUFFIX
        } else {
            LOG_SUFFIX
        };
        let path = dir.join(file_name(base, suffix));
        let file = storage.open(&path)?;
        checked.files += 1;
        let (segment, damage) = Segment::scan(base, Arc::clone(&file), true, compacted)?;
        checked.batches += segment.batches;
        let damaged = damage.is_some();
        if let Some(Damage { dropped, reason }) = damage {
            let what = if Some(base) == last {
                format!(
                    "{dropped} bytes after offset {} are not whole, valid batches ({reason}); the next start cuts them (a crash leaves a torn tail; anything else is lost data)",
                    segment.next_offset
                )
            } else {
                format!(
                    "a sealed segment: {dropped} bytes after offset {} are not whole, valid batches ({reason}); a fetch of them answers a storage error and makes the partition read-only",
                    segment.next_offset
                )
            };
            checked.add_damage(path.clone(), what);
        }
        if let Some(next) = expected
            && next != base
        {
            checked.add_damage(
                path.clone(),
                format!("the segment before it ends at offset {next}: a segment is missing"),
            );
        }
        let sealed = Some(base) != last;
        expected = Some(if damaged && sealed {
            // Where the segment ends, by its index if that is sound: the damage is reported
            // once, not again as a gap before the next segment.
            indexed_end(storage, dir, base, &file).unwrap_or(segment.next_offset)
        } else {
            segment.next_offset
        });
        if sealed && !damaged {
            check_index(storage, dir, &segment, file, &mut checked);
        }
    }
    Ok(checked)
}

/// Where the sealed segment at `base` ends, as its index file says, if the index is sound.
fn indexed_end(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    base: i64,
    file: &Arc<dyn crate::storage::StorageFile>,
) -> Option<i64> {
    let index = read_whole(&**storage, &dir.join(file_name(base, INDEX_SUFFIX))).ok()?;
    Segment::from_index(base, Arc::clone(file), &index).map(|indexed| indexed.next_offset)
}

/// Compares a sealed segment's index file with the segment as scanned.
fn check_index(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    scanned: &Segment,
    file: Arc<dyn crate::storage::StorageFile>,
    checked: &mut Checked,
) {
    let path = dir.join(file_name(scanned.base_offset, INDEX_SUFFIX));
    let Ok(index) = read_whole(&**storage, &path) else {
        checked.add_note(path, "missing (the segment is scanned at start)");
        return;
    };
    checked.files += 1;
    if index.starts_with(crate::segment::OLDER_INDEX_MAGIC) {
        checked.add_note(
            path,
            "an older index format (the segment is scanned at start)",
        );
        return;
    }
    match Segment::from_index(scanned.base_offset, file, &index) {
        Some(indexed) if indexed.summary() == scanned.summary() => {}
        Some(_) => checked.add_damage(path, "does not describe its segment"),
        // What a start repairs itself: it scans the segment and writes the index again.
        None => checked.add_note(
            path,
            "does not read (a bad checksum, or an index of the segment a compaction replaced): the segment is scanned at start and its index written again",
        ),
    }
}
