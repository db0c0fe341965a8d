//! The transaction log on a storage that crashes: every appended change survives, a torn
//! append is cut, a damaged record refuses the open, tombstones and old records are compacted.

use minibroker_storage::sim::SimStorage;
use minibroker_transactions::{
    COMPACT_BYTES, EndEpoch, FILE_NAME, Transaction, TransactionLog, TransactionLogError, TxnState,
};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

const DIR: &str = "/data";

fn open(storage: &SimStorage) -> Result<(TransactionLog, Vec<Transaction>), TransactionLogError> {
    TransactionLog::open(Arc::new(storage.clone()), Path::new(DIR))
}

fn path() -> std::path::PathBuf {
    Path::new(DIR).join(FILE_NAME)
}

/// `id` with one partition added: Ongoing.
fn ongoing(id: &str, producer_id: i64) -> Transaction {
    let mut txn = Transaction::new(id, producer_id, 60_000, 0);
    txn.add_partitions(producer_id, 0, [("out".to_owned(), 0)], 10)
        .unwrap();
    txn
}

fn by_id(states: &[Transaction], id: &str) -> Option<Transaction> {
    states
        .iter()
        .find(|txn| txn.transactional_id() == id)
        .cloned()
}

/// A log on `storage` holding ids a and b, Ongoing; returns its bytes.
fn a_and_b(storage: &SimStorage) -> Vec<u8> {
    let (mut log, _) = open(storage).unwrap();
    log.append(&ongoing("a", 1000)).unwrap();
    log.append(&ongoing("b", 1001)).unwrap();
    drop(log);
    storage.contents(&path()).unwrap()
}

#[test]
fn the_last_record_of_each_id_is_its_state_after_a_crash() {
    for seed in 0..50 {
        let storage = SimStorage::new();
        let (mut log, states) = open(&storage).unwrap();
        assert!(states.is_empty());
        let mut a = ongoing("a", 1000);
        let b = Transaction::new("b", 1001, 60_000, 0);
        log.append(&a).unwrap();
        log.append(&b).unwrap();
        a.end((1000, 0), true, EndEpoch::Kept, 20).unwrap();
        log.append(&a).unwrap();
        // Each append was synced before it returned: a crash keeps them all.
        let (_, states) = open(&storage.crash(seed)).unwrap();
        assert_eq!(states.len(), 2, "seed {seed}");
        assert_eq!(by_id(&states, "a"), Some(a.clone()));
        assert_eq!(
            by_id(&states, "a").unwrap().state(),
            TxnState::PrepareCommit
        );
        assert_eq!(by_id(&states, "b"), Some(b));
    }
}

#[test]
fn a_forgotten_id_is_gone_and_the_log_keeps_one_record_per_live_id() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage).unwrap();
    let mut a = Transaction::new("a", 1000, 60_000, 0);
    for now in 0..100 {
        a.init(None, 60_000, None, now).unwrap();
        log.append(&a).unwrap();
    }
    let b = ongoing("b", 1001);
    log.append(&b).unwrap();
    a.forget(200).unwrap();
    log.append(&a).unwrap();
    let before = log.size();
    drop(log);
    let (log, states) = open(&storage).unwrap();
    assert_eq!(states, std::slice::from_ref(&b));
    assert_eq!(
        log.size(),
        b.encode().len() as u64 + 4,
        "compacted from {before}"
    );
}

#[test]
fn a_torn_append_is_cut_and_what_came_before_is_kept() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage).unwrap();
    let a = ongoing("a", 1000);
    log.append(&a).unwrap();
    drop(log);
    let whole = storage.contents(&path()).unwrap();
    let next = ongoing("b", 1001).encode();
    for torn in [1, 3, 4, 10, next.len() + 3] {
        let mut bytes = whole.clone();
        bytes.extend_from_slice(&(next.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&next);
        bytes.truncate(whole.len() + torn);
        storage.set_contents(&path(), bytes);
        // check-data reports the tail as damage, as it reports a segment's torn tail: it
        // cannot tell an append a crash interrupted from a record that lost its last bytes.
        let (named, problem) = TransactionLog::check(&storage, Path::new("/data")).unwrap();
        assert_eq!(named, path());
        let problem = problem.expect("a torn tail is reported");
        assert!(
            problem.contains(&format!("{torn} bytes at byte {}", whole.len()))
                && problem.contains("the next start cuts them"),
            "{problem}"
        );
        let (log, states) = open(&storage).unwrap();
        assert_eq!(states, std::slice::from_ref(&a), "torn after {torn} bytes");
        assert_eq!(log.size(), whole.len() as u64, "the torn bytes are cut");
        drop(log);
        assert_eq!(
            TransactionLog::check(&storage, Path::new("/data")),
            Some((path(), None)),
            "cut at the start"
        );
    }
}

#[test]
fn the_last_record_cut_short_is_reported_by_check_data_and_cut_at_the_start() {
    let storage = SimStorage::new();
    let whole = a_and_b(&storage);
    // Three bytes cut from the last, acknowledged record.
    storage.set_contents(&path(), whole[..whole.len() - 3].to_vec());
    let (_, problem) = TransactionLog::check(&storage, Path::new("/data")).unwrap();
    assert!(problem.is_some_and(|p| p.contains("lost data")));
    let (_, states) = open(&storage).unwrap();
    assert_eq!(states, [ongoing("a", 1000)]);
}

#[test]
fn a_damaged_record_refuses_the_open_and_names_the_file() {
    let storage = SimStorage::new();
    let whole = a_and_b(&storage);
    for at in [6, whole.len() - 1] {
        let mut bytes = whole.clone();
        bytes[at] ^= 0x04;
        storage.set_contents(&path(), bytes);
        let error = open(&storage).unwrap_err();
        assert!(
            matches!(error, TransactionLogError::Damaged { .. }),
            "byte {at}: {error}"
        );
        assert!(error.to_string().contains(FILE_NAME), "{error}");
    }
}

#[test]
fn a_damaged_length_is_damage_not_a_torn_tail() {
    let storage = SimStorage::new();
    let whole = a_and_b(&storage);
    let second = u32::from_be_bytes(whole[..4].try_into().unwrap()) as usize + 4;
    // Every bit of both records' lengths: a length grown past the file would look torn.
    for at in (0..4).chain(second..second + 4) {
        for bit in 0..8 {
            let mut bytes = whole.clone();
            bytes[at] ^= 1 << bit;
            storage.set_contents(&path(), bytes);
            let opened = open(&storage);
            assert!(
                matches!(opened, Err(TransactionLogError::Damaged { .. })),
                "byte {at} bit {bit}: {:?}",
                opened.map(|(_, states)| states)
            );
        }
    }
}

#[test]
fn a_log_that_grows_past_the_threshold_is_compacted_as_it_goes() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage).unwrap();
    let mut a = Transaction::new("a", 1000, 60_000, 0);
    let record = a.encode().len() as u64 + 4;
    let appends = 2 * COMPACT_BYTES / record;
    for now in 0..appends {
        a.init(None, 60_000, Some(2000), now as i64).unwrap();
        log.append(&a).unwrap();
        assert!(log.size() <= COMPACT_BYTES + record, "{}", log.size());
    }
    let (_, states) = open(&storage.crash(7)).unwrap();
    assert_eq!(states, [a]);
}

#[test]
fn an_add_to_an_open_transaction_writes_what_it_added_not_the_whole_record_again() {
    // Every change wrote the id's whole record: 250 AddOffsetsToTxn of 30 KB group ids, 7.6 MiB
    // in all, wrote 1,434 MiB.
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage).unwrap();
    let mut a = ongoing("a", 1000);
    log.append(&a).unwrap();
    let written_before = storage.faults.bytes_written.load(Ordering::Relaxed);
    let mut added = 0;
    for n in 0..250 {
        let group = format!("{n:03}{}", "g".repeat(30 * 1024));
        added += group.len() as u64;
        a.add_group(1000, 0, &group, 20 + n).unwrap();
        log.append(&a).unwrap();
    }
    let written = storage.faults.bytes_written.load(Ordering::Relaxed) - written_before;
    assert!(
        written < added + added / 10,
        "{written} bytes written for {added} added"
    );
    // The additions replay onto the whole record before them, through a crash.
    let (_, states) = open(&storage.crash(3)).unwrap();
    assert_eq!(states, [a]);
}

#[test]
fn an_addition_with_no_open_transaction_before_it_is_damage() {
    let storage = SimStorage::new();
    let (mut log, _) = open(&storage).unwrap();
    let mut a = ongoing("a", 1000);
    log.append(&a).unwrap();
    a.add_partitions(1000, 0, [("out".to_owned(), 1)], 20)
        .unwrap();
    log.append(&a).unwrap();
    drop(log);
    // Drop the whole record the addition applies to: what it adds to cannot be known.
    let bytes = storage.contents(&path()).unwrap();
    let first = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize + 4;
    storage.set_contents(&path(), bytes[first..].to_vec());
    let Err(TransactionLogError::Damaged { at, source, .. }) = open(&storage) else {
        panic!("an addition to nothing must refuse the open");
    };
    assert_eq!(at, 0);
    assert!(source.to_string().contains("unknown id"), "{source}");
}
