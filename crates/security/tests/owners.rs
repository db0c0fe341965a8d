//! The producer-id owners file: what is recorded is read back after a restart; a torn last
//! record is dropped, a damaged or foreign one refused with the file and line; ids are forgotten
//! past their expiration and beyond the cap; the file is compacted.

use minibroker_security::{ProducerOwners, Use};

const DAY_MS: i64 = 86_400_000;
const NOW: i64 = 1_796_190_000_000;

#[test]
fn recorded_owners_are_read_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("producer-owners");
    let owners = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap();
    owners.record(1000, "User:alice", NOW).unwrap();
    owners.record(1001, "User:bob", NOW).unwrap();
    // A transactional id taken over by another principal: the id changes hands.
    owners.record(1001, "User:carol", NOW + 1).unwrap();
    assert_eq!(owners.owner(1000).as_deref(), Some("User:alice"));
    drop(owners);
    let reopened = ProducerOwners::open(Some(path), 100, DAY_MS, NOW + 2).unwrap();
    assert_eq!(reopened.owner(1000).as_deref(), Some("User:alice"));
    assert_eq!(reopened.owner(1001).as_deref(), Some("User:carol"));
    assert_eq!(reopened.owner(1002), None);
    assert_eq!(reopened.len(), 2);
}

#[test]
fn a_torn_last_record_is_dropped_and_a_damaged_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("producer-owners");
    let owners = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap();
    owners.record(1000, "User:alice", NOW).unwrap();
    owners.record(1001, "User:bob", NOW).unwrap();
    drop(owners);
    let bytes = std::fs::read(&path).unwrap();
    // A crash mid-append: the last record is cut short.
    std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
    // check-data reports it, as a segment's torn tail: the next start drops it.
    let reported = ProducerOwners::check(&path).unwrap_err().to_string();
    assert!(
        reported.contains("producer-owners") && reported.contains("not a whole record"),
        "{reported}"
    );
    let torn = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap();
    assert_eq!(torn.owner(1000).as_deref(), Some("User:alice"));
    assert_eq!(torn.owner(1001), None);
    drop(torn);
    // One flipped byte in a whole record: the owner would change, so the file is refused.
    let bytes = std::fs::read(&path).unwrap();
    let at = bytes.windows(10).position(|w| w == b"User:alice").unwrap();
    let mut flipped = bytes.clone();
    flipped[at + 9] ^= 0x07;
    std::fs::write(&path, flipped).unwrap();
    let error = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("producer-owners") && message.contains("checksum"),
        "{message}"
    );
    std::fs::write(&path, "something else\n").unwrap();
    let error = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap_err();
    assert!(error.to_string().contains("line 1"), "{error}");
    // An older broker's text file: its torn last line is dropped as well.
    let line = |id: i64| {
        let content = format!("{id} {NOW} User:alice");
        format!("{content} {:08x}\n", crc32c::crc32c(content.as_bytes()))
    };
    let text = format!("minibroker producer-owners 2\n{}{}", line(1000), line(1001));
    std::fs::write(&path, &text[..text.len() - 5]).unwrap();
    let reported = ProducerOwners::check(&path).unwrap_err().to_string();
    assert!(reported.contains("not a whole record"), "{reported}");
    let torn = ProducerOwners::open(Some(path), 100, DAY_MS, NOW).unwrap();
    assert_eq!(torn.owner(1000).as_deref(), Some("User:alice"));
    assert_eq!(torn.owner(1001), None);
}

#[test]
fn ids_are_forgotten_past_their_expiration_and_beyond_the_cap() {
    let owners = ProducerOwners::open(None, 2, DAY_MS, NOW).unwrap();
    owners.record(1, "User:a", NOW).unwrap();
    owners.record(2, "User:b", NOW + 1).unwrap();
    owners.record(3, "User:c", NOW + 2).unwrap();
    assert_eq!(owners.owner(1), None, "the oldest goes beyond the cap");
    assert_eq!(owners.len(), 2);
    owners.record(4, "User:d", NOW + DAY_MS + 2).unwrap();
    assert_eq!(owners.owner(2), None);
    assert_eq!(owners.owner(3).as_deref(), Some("User:c"));
    owners.record(5, "User:e", NOW + 3 * DAY_MS).unwrap();
    assert_eq!(owners.owner(3), None);
    assert_eq!(owners.owner(4), None);
    assert_eq!(owners.owner(5).as_deref(), Some("User:e"));
}

#[test]
fn the_file_is_compacted_when_it_has_grown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("producer-owners");
    let owners = ProducerOwners::open(Some(path.clone()), 10, DAY_MS, NOW).unwrap();
    for id in 0..1000 {
        owners.record(id, "User:alice", NOW + id).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let lines = bytes.windows(10).filter(|w| w == b"User:alice").count();
    assert!(lines <= 2 * 64 + 1, "{lines} lines for 10 owners");
    drop(owners);
    let reopened = ProducerOwners::open(Some(path), 10, DAY_MS, NOW + 1000).unwrap();
    assert_eq!(reopened.len(), 10);
    assert_eq!(reopened.owner(999).as_deref(), Some("User:alice"));
}

#[test]
fn only_the_owner_may_use_an_id_and_its_use_keeps_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("producer-owners");
    let owners = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap();
    owners.record(1000, "User:alice", NOW).unwrap();
    assert_eq!(
        owners.check_use(1000, "User:alice", NOW).unwrap(),
        Use::Owner
    );
    assert_eq!(
        owners.check_use(1000, "User:mallory", NOW).unwrap(),
        Use::Other("User:alice".into())
    );
    assert_eq!(
        owners.check_use(1001, "User:alice", NOW).unwrap(),
        Use::Nobody
    );
    // Alice writes on for a day and a half without a new InitProducerId: her use kept the
    // record, which a restart finds.
    for hour in 1..=36 {
        let at = NOW + hour * DAY_MS / 24;
        assert_eq!(
            owners.check_use(1000, "User:alice", at).unwrap(),
            Use::Owner
        );
    }
    drop(owners);
    let later = NOW + 36 * DAY_MS / 24;
    let reopened = ProducerOwners::open(Some(path), 100, DAY_MS, later).unwrap();
    assert_eq!(
        reopened.check_use(1000, "User:alice", later).unwrap(),
        Use::Owner
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Whatever a certificate's common name or a login holds, its producer ids read back as its.
    #[test]
    fn any_principal_round_trips_through_the_file(name in proptest::prelude::any::<String>()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("producer-owners");
        let principal = format!("User:{name}");
        let owners = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap();
        owners.record(1000, &principal, NOW).unwrap();
        owners.record(1001, "User:alice", NOW).unwrap();
        drop(owners);
        ProducerOwners::check(&path).unwrap();
        let reopened = ProducerOwners::open(Some(path), 100, DAY_MS, NOW).unwrap();
        proptest::prop_assert_eq!(reopened.owner(1000), Some(principal.clone()));
        proptest::prop_assert_eq!(reopened.check_use(1000, &principal, NOW).unwrap(), Use::Owner);
        proptest::prop_assert_eq!(reopened.owner(1001), Some("User:alice".to_owned()));
    }
}

#[test]
fn a_certificate_name_with_a_space_is_read_back_and_an_older_file_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("producer-owners");
    let owners = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap();
    owners.record(1000, "User:Jane Doe", NOW).unwrap();
    drop(owners);
    let reopened = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap();
    assert_eq!(reopened.owner(1000).as_deref(), Some("User:Jane Doe"));
    drop(reopened);
    // A version 1 file, as an older broker wrote it (the name as it was, space and all).
    let content = format!("1001 {NOW} User:John Roe");
    let checksum = crc32c::crc32c(content.as_bytes());
    std::fs::write(
        &path,
        format!("minibroker producer-owners 1\n{content} {checksum:08x}\n"),
    )
    .unwrap();
    assert_eq!(ProducerOwners::check(&path).unwrap(), 1);
    let upgraded = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap();
    assert_eq!(upgraded.owner(1001).as_deref(), Some("User:John Roe"));
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[4..8], b"\0MBO", "rewritten as records");
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("User:John%20Roe"), "{text}");
    // A version 2 file reads too; a version this broker does not know is refused by name.
    let content = format!("1002 {NOW} User:John%20Roe");
    let checksum = crc32c::crc32c(content.as_bytes());
    let v2 = format!("minibroker producer-owners 2\n{content} {checksum:08x}\n");
    std::fs::write(&path, v2).unwrap();
    let upgraded = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap();
    assert_eq!(upgraded.owner(1002).as_deref(), Some("User:John Roe"));
    drop(upgraded);
    std::fs::write(&path, "minibroker producer-owners 3\n").unwrap();
    let error = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap_err();
    assert!(
        error.to_string().contains("producer-owners, line 1"),
        "{error}"
    );
    // A whole list of a later version, checksum and all.
    let mut record = b"\0MBO\x021003 1 User:alice\n".to_vec();
    let crc = crc32c::crc32c(&record);
    record.extend_from_slice(&crc.to_be_bytes());
    let mut newer = u32::try_from(record.len()).unwrap().to_be_bytes().to_vec();
    newer.extend_from_slice(&record);
    std::fs::write(&path, newer).unwrap();
    let error = ProducerOwners::open(Some(path.clone()), 100, DAY_MS, NOW).unwrap_err();
    assert!(
        error.to_string().contains("producer-owners") && error.to_string().contains("version 2"),
        "{error}"
    );
}

#[test]
fn one_principal_taking_ids_by_the_thousand_forgets_its_own_not_anothers_in_use() {
    // Before, the oldest-issued ids went beyond the cap, whoever owned them: 1,000 InitProducerIds
    // of one principal made the broker forget another's id used moments before, and its next
    // batch was refused CLUSTER_AUTHORIZATION_FAILED, fatal to a Kafka producer.
    let owners = ProducerOwners::open(None, 100, DAY_MS, NOW).unwrap();
    owners.record(1, "User:alice", NOW).unwrap();
    owners.record(2, "User:bob", NOW).unwrap();
    for id in 3..1003 {
        let at = NOW + id;
        owners.record(id, "User:mallory", at).unwrap();
        // Alice writes all along; Bob has not written since he got his id.
        assert_eq!(owners.check_use(1, "User:alice", at).unwrap(), Use::Owner);
    }
    assert_eq!(owners.len(), 100);
    assert_eq!(owners.owner(1).as_deref(), Some("User:alice"));
    assert_eq!(
        owners.owner(2).as_deref(),
        Some("User:bob"),
        "one id: never the largest holder's"
    );
    assert_eq!(owners.owner(1002).as_deref(), Some("User:mallory"));
    // Mallory's least recently used went; her producer is told to ask again, not refused.
    assert_eq!(
        owners.check_use(3, "User:mallory", NOW + 2000).unwrap(),
        Use::Forgotten
    );
    assert_eq!(
        owners.check_use(5000, "User:mallory", NOW + 2000).unwrap(),
        Use::Nobody
    );
}
