//! The names of a partition's files: `<base offset, 20 digits><suffix>`, so that listing a
//! directory sorts them by offset. Shared by the log, its recovery and the data checker.

/// A segment's records.
pub(crate) const LOG_SUFFIX: &str = ".log";
/// A sealed segment compaction wrote (its batches rise with gaps).
pub(crate) const COMPACTED_SUFFIX: &str = ".compacted";
/// A sealed segment's offset index.
pub(crate) const INDEX_SUFFIX: &str = ".index";
/// A producer-state snapshot.
pub(crate) const SNAPSHOT_SUFFIX: &str = ".snapshot";

/// `00000000000000000042.log` and the like.
pub(crate) fn file_name(offset: i64, suffix: &str) -> String {
    format!("{offset:020}{suffix}")
}

/// The offset a file named by [`file_name`] with `suffix` stands for.
pub(crate) fn parse_name(name: &str, suffix: &str) -> Option<i64> {
    let digits = name.strip_suffix(suffix)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}
