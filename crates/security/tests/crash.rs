//! The security files through crashes of the simulated disk: whatever point a crash cuts, a
//! restart finds every producer id's owner whose record was answered, the last users and ACLs
//! saved, and never anything else. Failed syncs (EIO) are mixed in: what they return as an error
//! may or may not survive, but it never damages what was there before.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use minibroker_security::{Acls, ProducerOwners, ScramCredential, ScramMechanism, Users};
use minibroker_storage::sim::{SimStorage, Xorshift};

const DAY_MS: i64 = 86_400_000;
const NOW: i64 = 1_796_190_000_000;
const PRINCIPALS: [&str; 3] = ["User:alice", "User:Jane Doe", "User:bob"];

#[test]
fn every_answered_owner_survives_a_crash_at_any_point() {
    let path = Path::new("/data/producer-owners");
    for seed in 1..=300_u64 {
        let mut random = Xorshift::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
        let storage = SimStorage::new();
        let owners = ProducerOwners::open_on(
            Arc::new(storage.clone()),
            Some(path.into()),
            1000,
            DAY_MS,
            NOW,
        )
        .unwrap();
        // Per id: the owner of its last answered record, and an owner whose record failed
        // after it (which may or may not have reached the disk).
        let mut answered: [Option<&str>; 20] = [None; 20];
        let mut attempted: [Option<&str>; 20] = [None; 20];
        let steps = random.below(400);
        for step in 0..steps {
            let id = random.below(20) as usize;
            let principal = PRINCIPALS[random.below(3) as usize];
            let failing = random.below(25) == 0;
            storage
                .faults
                .failing_sync
                .store(failing, Ordering::Relaxed);
            let at = NOW + i64::try_from(step).unwrap();
            match owners.record(i64::try_from(id).unwrap(), principal, at) {
                Ok(()) => {
                    answered[id] = Some(principal);
                    attempted[id] = None;
                }
                Err(_) => attempted[id] = Some(principal),
            }
        }
        storage.faults.failing_sync.store(false, Ordering::Relaxed);
        let crashed = storage.crash(seed);
        let reopened =
            ProducerOwners::open_on(Arc::new(crashed), Some(path.into()), 1000, DAY_MS, NOW)
                .unwrap_or_else(|error| panic!("seed {seed}: {error}"));
        for id in 0..20 {
            let found = reopened.owner(i64::try_from(id).unwrap());
            let allowed = [answered[id], attempted[id].or(answered[id])];
            assert!(
                allowed.contains(&found.as_deref()),
                "seed {seed}, id {id}: {found:?}, answered {:?}, attempted {:?}",
                answered[id],
                attempted[id]
            );
        }
    }
}

fn credentials() -> Vec<ScramCredential> {
    (0..3_u8)
        .map(|n| ScramCredential::generate(ScramMechanism::Sha256, &[n], 4096).unwrap())
        .collect()
}

#[test]
fn the_last_users_and_acls_saved_survive_a_crash_at_any_point() {
    let users_path = Path::new("/secrets/users");
    let acls_path = Path::new("/secrets/acls");
    let credentials = credentials();
    for seed in 1..=200_u64 {
        let mut random = Xorshift::new(seed.wrapping_add(1_000_003));
        let storage = SimStorage::new();
        let mut users = Users::default();
        let mut acls = Acls::default();
        let (mut saved_users, mut saved_acls) = (Users::default(), Acls::default());
        for _ in 0..random.below(30) {
            let n = random.below(5);
            let credential = credentials[random.below(3) as usize].clone();
            users.set(&format!("user-{n}"), ScramMechanism::Sha256, credential);
            let line = format!(
                "User:user-{n} ALLOW WRITE TOPIC LITERAL topic-{} *",
                random.below(4)
            );
            let parsed = Acls::parse(&line, Path::new("test")).unwrap();
            acls.add(parsed.iter().next().unwrap().clone());
            if random.below(4) == 0 {
                acls.remove_where(|acl| acl.principal == format!("User:user-{n}"));
            }
            let failing = random.below(5) == 0;
            storage
                .faults
                .failing_sync
                .store(failing, Ordering::Relaxed);
            if users.save_to(&storage, users_path).is_ok() {
                saved_users = users.clone();
            }
            if acls.save_to(&storage, acls_path).is_ok() {
                saved_acls = acls.clone();
            }
        }
        let crashed = storage.crash(seed);
        assert_eq!(
            Users::load_from(&crashed, users_path).unwrap(),
            saved_users,
            "seed {seed}"
        );
        assert_eq!(
            Acls::load_from(&crashed, acls_path).unwrap(),
            saved_acls,
            "seed {seed}"
        );
    }
}

#[test]
fn an_older_plain_text_users_file_is_read_and_a_damaged_one_refused_by_name() {
    let storage = SimStorage::new();
    let path = Path::new("/secrets/users");
    let credential = credentials().remove(0);
    let line = format!("alice SCRAM-SHA-256 {}", credential.to_kafka_string());
    // What older brokers wrote, and what an operator may write by hand: text.
    storage.set_contents(path, format!("# written by hand\n\n{line}\n").into_bytes());
    let users = Users::load_from(&storage, path).unwrap();
    assert_eq!(
        users.credential("alice", ScramMechanism::Sha256),
        Some(&credential)
    );
    // Saved again, it is the checksummed records: one flipped byte is refused, naming the file.
    users.save_to(&storage, path).unwrap();
    let mut bytes = storage.contents(path).unwrap();
    assert_eq!(&bytes[4..8], b"\0MBU");
    let at = bytes.len() - 10;
    bytes[at] ^= 0x01;
    storage.set_contents(path, bytes);
    let error = Users::load_from(&storage, path).unwrap_err().to_string();
    assert!(
        error.contains("/secrets/users") && error.contains("checksum"),
        "{error}"
    );
}
