//! A group's members and generation across a crash of a durable broker, as Kafka keeps them
//! across a coordinator's restart: running members go on without UNKNOWN_MEMBER_ID, a
//! generation is never opened twice, and a member id is never handed out twice.
//!
//! Each crash keeps only what was synced (`SimStorage::crash`), so what these tests find after
//! it was on disk before the request that made it was answered.

use bytes::Bytes;
use minibroker_groups::{GroupCoordinator, GroupError, GroupState, Joined};
use minibroker_storage::sim::SimStorage;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

mod support;
use support::{Durable, durable_broker, join_new, request};

const SESSION_MS: u64 = 30_000;

/// Two members in generation 2, `first` the leader, each with its share: `first` joined alone
/// (generation 1), `second` joined after it and `first` joined again when its heartbeat told it
/// of the rebalance.
async fn two_members(groups: &Arc<GroupCoordinator>) -> (Joined, Joined) {
    let first = join_new(groups, SESSION_MS).await;
    groups
        .sync("g", 1, &first.member_id, Vec::new())
        .await
        .unwrap();
    let second = {
        let groups = Arc::clone(groups);
        tokio::spawn(async move { join_new(&groups, SESSION_MS).await })
    };
    while groups.heartbeat("g", 1, &first.member_id) != Err(GroupError::RebalanceInProgress) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let first = groups
        .join(request(&first.member_id, SESSION_MS))
        .await
        .unwrap();
    let second = second.await.unwrap();
    assert_eq!((first.generation, second.generation), (2, 2));
    let (leader, follower) = if first.leader == first.member_id {
        (first, second)
    } else {
        (second, first)
    };
    let assignments = vec![
        (leader.member_id.clone(), Bytes::from_static(b"leader's")),
        (
            follower.member_id.clone(),
            Bytes::from_static(b"follower's"),
        ),
    ];
    let follower_sync = {
        let groups = Arc::clone(groups);
        let id = follower.member_id.clone();
        tokio::spawn(async move { groups.sync("g", 2, &id, Vec::new()).await })
    };
    let mine = groups
        .sync("g", 2, &leader.member_id, assignments)
        .await
        .unwrap();
    assert_eq!(mine, Bytes::from_static(b"leader's"));
    let theirs = follower_sync.await.unwrap().unwrap();
    assert_eq!(theirs, Bytes::from_static(b"follower's"));
    (leader, follower)
}

/// The broker's coordinator, shared with the tasks a test spawns.
fn shared(broker: Durable) -> (Arc<GroupCoordinator>, Durable) {
    (broker.shared(), broker)
}

#[tokio::test]
async fn running_members_keep_their_ids_generation_and_assignments_through_a_crash() {
    let storage = SimStorage::new();
    let (groups, broker) = shared(durable_broker(&storage));
    let (leader, follower) = two_members(&groups).await;
    drop((groups, broker));

    let (groups, _broker) = shared(durable_broker(&storage.crash(3)));
    // Before, every member got UNKNOWN_MEMBER_ID here and the generation began again at 1.
    groups.heartbeat("g", 2, &leader.member_id).unwrap();
    groups.heartbeat("g", 2, &follower.member_id).unwrap();
    let described = groups.describe("g");
    assert_eq!(described.state, GroupState::Stable);
    let assignments: Vec<(String, Bytes)> = described
        .members
        .iter()
        .map(|m| (m.member_id.clone(), m.assignment.clone()))
        .collect();
    let mut expected = vec![
        (leader.member_id.clone(), Bytes::from_static(b"leader's")),
        (
            follower.member_id.clone(),
            Bytes::from_static(b"follower's"),
        ),
    ];
    expected.sort();
    assert_eq!(assignments, expected);
    let offsets = vec![("t".to_owned(), 0, 5, None)];
    groups
        .commit("g", 2, &follower.member_id, offsets)
        .await
        .unwrap();
    // A sync the crash cut off is answered from what was saved.
    let again = groups
        .sync("g", 2, &follower.member_id, Vec::new())
        .await
        .unwrap();
    assert_eq!(again, Bytes::from_static(b"follower's"));

    // A newcomer opens generation 3: generation 2 is never opened a second time.
    let newcomer = {
        let groups = Arc::clone(&groups);
        tokio::spawn(async move { join_new(&groups, SESSION_MS).await })
    };
    while groups.heartbeat("g", 2, &leader.member_id) != Err(GroupError::RebalanceInProgress) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for member in [&leader, &follower] {
        let groups = Arc::clone(&groups);
        let id = member.member_id.clone();
        tokio::spawn(async move { groups.join(request(&id, SESSION_MS)).await });
    }
    let newcomer = newcomer.await.unwrap();
    assert_eq!(newcomer.generation, 3);
    assert_eq!(
        groups.commit("g", 2, &leader.member_id, Vec::new()).await,
        Err(GroupError::IllegalGeneration),
        "generation 2's members are fenced by generation 3"
    );
}

#[tokio::test]
async fn a_generation_opened_before_a_crash_is_joined_again_not_forgotten() {
    let storage = SimStorage::new();
    let (groups, broker) = shared(durable_broker(&storage));
    // Joined, not yet synced: the generation was on disk before the join was answered.
    let joined = join_new(&groups, SESSION_MS).await;
    assert_eq!(joined.generation, 1);
    drop((groups, broker));

    let (groups, _broker) = shared(durable_broker(&storage.crash(4)));
    assert_eq!(
        groups.heartbeat("g", 1, &joined.member_id),
        Err(GroupError::RebalanceInProgress),
        "an assignment the crash cut off is made again, by the same members"
    );
    let rejoined = groups
        .join(request(&joined.member_id, SESSION_MS))
        .await
        .unwrap();
    assert_eq!(rejoined.member_id, joined.member_id);
    assert_eq!(rejoined.generation, 2, "generation 1 is not opened twice");
}

#[tokio::test]
async fn member_ids_never_repeat_across_restarts() {
    let storage = SimStorage::new();
    let mut ids = HashSet::new();
    for restart in 0..3 {
        let (groups, _broker) = shared(durable_broker(&storage.crash(restart)));
        for _ in 0..3 {
            let Err(GroupError::MemberIdRequired(id)) = groups.join(request("", SESSION_MS)).await
            else {
                panic!("a first join is asked for its member id");
            };
            let uuid = id
                .strip_prefix("test-")
                .expect("the client id, then a dash");
            assert_eq!(uuid.len(), 36, "a UUID: {id}");
            assert!(ids.insert(id.clone()), "{id} handed out twice");
        }
    }
}

#[tokio::test]
async fn a_group_its_last_member_leaves_keeps_its_generation_with_its_offsets() {
    let storage = SimStorage::new();
    let (groups, broker) = shared(durable_broker(&storage));
    let joined = join_new(&groups, SESSION_MS).await;
    groups
        .sync("g", 1, &joined.member_id, Vec::new())
        .await
        .unwrap();
    let offsets = vec![("t".to_owned(), 0, 5, None)];
    groups
        .commit("g", 1, &joined.member_id, offsets)
        .await
        .unwrap();
    assert_eq!(
        groups.leave("g", std::slice::from_ref(&joined.member_id)),
        vec![Ok(())]
    );
    groups.save_changes().await;
    drop((groups, broker));

    let (groups, _broker) = shared(durable_broker(&storage.crash(5)));
    assert_eq!(groups.describe("g").state, GroupState::Empty);
    let next = join_new(&groups, SESSION_MS).await;
    assert_eq!(
        next.generation, 3,
        "1 was the member's, 2 the empty group's"
    );
}

#[tokio::test]
async fn a_group_with_no_offsets_goes_with_its_file_when_its_last_member_leaves() {
    let storage = SimStorage::new();
    let (groups, broker) = shared(durable_broker(&storage));
    let joined = join_new(&groups, SESSION_MS).await;
    assert_eq!(
        groups.leave("g", std::slice::from_ref(&joined.member_id)),
        vec![Ok(())]
    );
    groups.save_changes().await;
    assert!(groups.list().is_empty());
    drop((groups, broker));

    let (groups, _broker) = shared(durable_broker(&storage.crash(6)));
    assert!(groups.list().is_empty(), "its file went with it");
}
