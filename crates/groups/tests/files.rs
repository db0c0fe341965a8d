//! A group's file on a crashing disk: each change is appended and synced before it is
//! answered, a crash mid-append leaves a torn tail that the start leaves out and `check-data`
//! reports, and the next write replaces the file whole.

use minibroker_broker::data_dir::DataDir;
use minibroker_groups::check_offsets_files;
use minibroker_log::SegmentConfig;
use minibroker_storage::sim::SimStorage;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod support;
use support::durable_broker;

fn offsets(partition: i32, offset: i64) -> Vec<(String, i32, i64, Option<String>)> {
    vec![("t".to_owned(), partition, offset, None)]
}

/// The only group file in `storage`, and what `check-data` says of it.
fn the_file(storage: &SimStorage) -> (PathBuf, Option<String>) {
    let data = DataDir::open(
        Path::new("/data"),
        Arc::new(storage.clone()),
        SegmentConfig::default(),
        false,
        (16, None),
    )
    .unwrap();
    let mut files = check_offsets_files(&data);
    assert_eq!(files.len(), 1, "{files:?}");
    files.pop().unwrap()
}

#[tokio::test]
async fn a_torn_append_is_left_out_reported_and_the_next_write_replaces_the_file() {
    let storage = SimStorage::new();
    let broker = durable_broker(&storage);
    for offset in 1..=5 {
        broker
            .groups()
            .commit("g", -1, "", offsets(0, offset))
            .await
            .unwrap();
    }
    drop(broker);
    let (path, problem) = the_file(&storage);
    assert_eq!(problem, None);
    // A crash in the middle of a sixth append: part of its record reached the disk.
    let mut bytes = storage.contents(&path).unwrap();
    let whole = bytes.len();
    bytes.extend_from_slice(&[0, 0, 0, 60, b'M', b'B', b'G', b'C', 1, 1]);
    storage.set_contents(&path, bytes);
    let (_, problem) = the_file(&storage);
    let problem = problem.expect("a torn tail is reported");
    assert!(
        problem.contains(&format!("10 bytes at byte {whole}")) && problem.contains("torn tail"),
        "{problem}"
    );

    let storage = storage.crash(1);
    let restarted = durable_broker(&storage);
    let committed = restarted.groups().committed("g", None);
    assert_eq!(committed.len(), 1);
    assert_eq!(committed[0].1.offset, 5, "every answered commit is kept");
    restarted
        .groups()
        .commit("g", -1, "", offsets(1, 7))
        .await
        .unwrap();
    drop(restarted);
    assert_eq!(the_file(&storage).1, None, "replaced whole, torn tail gone");
    let again = durable_broker(&storage.crash(2));
    assert_eq!(again.groups().committed("g", None).len(), 2);
}

#[tokio::test]
async fn every_change_survives_any_crash_and_the_file_stays_small() {
    for seed in 0..20 {
        let storage = SimStorage::new();
        let broker = durable_broker(&storage);
        let groups = broker.groups();
        for round in 0..200 {
            let partition = round % 7;
            groups
                .commit("g", -1, "", offsets(partition, i64::from(round)))
                .await
                .unwrap();
            groups
                .commit_in_transaction("g", 9, (-1, ""), offsets(100 + partition, 1))
                .await
                .unwrap();
            groups
                .end_transaction("g", 9, round % 2 == 0)
                .await
                .unwrap();
        }
        let expected = groups.committed("g", None);
        drop(broker);
        let (path, _) = the_file(&storage);
        let size = storage.contents(&path).unwrap().len();
        assert!(size < 64 << 10, "{size} bytes for 14 offsets");
        let restarted = durable_broker(&storage.crash(seed));
        assert_eq!(
            restarted.groups().committed("g", None),
            expected,
            "seed {seed}"
        );
    }
}
