//! `minibroker check-data`: an offline check of a whole data directory, for an operator who
//! suspects a disk. Every file the broker would read at start or serve later is read whole and
//! checked: the topic list, the topics' settings and the producer-id reservation (their
//! checksummed envelope), and every partition's segments (each batch's CRC-32C), indexes,
//! producer-state snapshots and start offset. Nothing is written; the directory's lock is taken,
//! so a running broker is never read mid-write. Files that other crates keep in the directory
//! (the group coordinator's offsets files, the transaction log, the producer owners) are checked
//! by the checks the caller passes in.

use minibroker_log::dir_check::Checked;
use std::path::Path;
use std::sync::Arc;

use crate::ServerError;
use crate::data_dir::DataDir;

/// What a check of a data directory found: files read, batches checked, and damage and notes
/// file by file.
pub type Report = Checked;

/// Records the check of a small file: `Err` is its damage, named in the error.
fn small_file<T>(
    report: &mut Report,
    name: &str,
    root: &Path,
    read: Result<T, ServerError>,
) -> Option<T> {
    report.files += 1;
    match read {
        Ok(value) => Some(value),
        Err(ServerError::DataDir { path, problem }) => {
            report.add_damage(path, problem.to_string());
            None
        }
        Err(error) => {
            report.add_damage(root.join(name), error.to_string());
            None
        }
    }
}

/// One file another crate keeps in the data directory, checked: its path and its damage, if any.
pub type CheckedFile = (std::path::PathBuf, Option<String>);

/// Checks the data directory at `root`: the broker's own files, and those `check_others`
/// checks (given the opened directory).
///
/// # Errors
/// [`ServerError::DataDir`] when it does not exist, cannot be listed, or a broker holds it.
pub fn check_data_dir(
    root: &Path,
    check_others: impl FnOnce(&DataDir) -> Vec<CheckedFile>,
) -> Result<Report, ServerError> {
    if !root.is_dir() {
        return Err(ServerError::data_dir(root, "no such directory"));
    }
    let storage: Arc<dyn minibroker_storage::Storage> = Arc::new(minibroker_storage::FsStorage);
    let data = DataDir::open(
        root,
        Arc::clone(&storage),
        minibroker_log::SegmentConfig::default(),
        true,
        (1, None),
    )?;
    let mut report = Report::default();
    let topics = small_file(&mut report, "topics", root, data.topics()).unwrap_or_default();
    small_file(
        &mut report,
        "producer-ids",
        root,
        data.reserved_producer_ids(),
    );
    if root.join("topic-configs").exists() {
        small_file(&mut report, "topic-configs", root, data.topic_settings());
    }
    for (path, torn) in data.torn_small_files() {
        report.add_damage(path, torn.to_string());
    }
    for (path, reason) in check_others(&data) {
        report.files += 1;
        if let Some(reason) = reason {
            report.add_damage(path, reason);
        }
    }
    let logs = root.join("logs");
    let listed = |dir: &Path| {
        storage
            .list(dir)
            .map_err(|error| ServerError::data_dir_io(dir, "listing it", error))
    };
    for topic in listed(&logs)? {
        let topic_dir = logs.join(&topic);
        let Some(&(_, partitions)) = topics.iter().find(|(name, _)| *name == topic) else {
            report.add_note(
                topic_dir,
                "names no topic of the topic list (set aside at the next start)",
            );
            continue;
        };
        for partition in listed(&topic_dir)? {
            let dir = topic_dir.join(&partition);
            if !partition
                .parse::<u32>()
                .is_ok_and(|index| index < partitions)
            {
                report.add_note(dir, "not a partition of the topic (left alone)");
                continue;
            }
            let checked = minibroker_log::dir_check::check_partition_dir(&storage, &dir)
                .map_err(|error| ServerError::data_dir_io(dir.clone(), "checking it", error))?;
            report.merge(checked);
        }
    }
    decode_snapshots(&mut report, &storage);
    Ok(report)
}

/// Decodes every snapshot file the partitions' checks listed.
fn decode_snapshots(report: &mut Report, storage: &Arc<dyn minibroker_storage::Storage>) {
    for path in std::mem::take(&mut report.snapshots) {
        report.files += 1;
        let decoded = minibroker_storage::read_whole(&**storage, &path)
            .map_err(|error| error.to_string())
            .and_then(|data| {
                minibroker_state::decode_snapshot(&data)
                    .map(|_| ())
                    .map_err(|error| error.to_string())
            });
        if let Err(reason) = decoded {
            // Recovery falls back to the snapshot before it, or to a scan.
            report.add_damage(path, format!("a damaged producer-state snapshot: {reason}"));
        }
    }
}
