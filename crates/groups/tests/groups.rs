//! The group coordinator on its own: the classic protocol's joins, syncs, heartbeats, leaves,
//! session expiry, commits and deletes, with every refusal it answers, and committed offsets
//! that survive a crash of a durable broker's disk.

use bytes::Bytes;
use minibroker_broker::{BrokerConfig, StorageBudget};
use minibroker_groups::{
    GroupConfig, GroupCoordinator, GroupError, GroupState, JoinRequest, MAX_MEMBER_METADATA_BYTES,
    MAX_OFFSET_METADATA_BYTES, MAX_PROTOCOLS_PER_MEMBER,
};
use minibroker_storage::sim::SimStorage;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

mod support;
use support::{Durable, config, coordinator, durable_broker, join_new, open, request};

#[tokio::test]
async fn a_lone_member_is_leader_of_generation_one_and_gets_its_own_assignment() {
    let groups = coordinator();
    let joined = join_new(&groups, 10_000).await;
    assert_eq!(joined.generation, 1);
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.protocol, "range");
    assert_eq!(joined.members.len(), 1);
    let mine = groups
        .sync(
            "g",
            1,
            &joined.member_id,
            vec![(joined.member_id.clone(), Bytes::from_static(b"all"))],
        )
        .await
        .unwrap();
    assert_eq!(mine, Bytes::from_static(b"all"));
    assert_eq!(groups.describe("g").state, GroupState::Stable);
    groups.heartbeat("g", 1, &joined.member_id).unwrap();
    assert_eq!(
        groups.heartbeat("g", 2, &joined.member_id),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        groups.heartbeat("g", 1, "stranger"),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        groups.join(request("never-issued", 10_000)).await,
        Err(GroupError::UnknownMemberId)
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_member_triggers_a_rebalance_and_the_leader_assigns_both() {
    let groups = coordinator();
    let first = join_new(&groups, 10_000).await;
    groups
        .sync("g", 1, &first.member_id, Vec::new())
        .await
        .unwrap();
    let Err(GroupError::MemberIdRequired(second_id)) = groups.join(request("", 10_000)).await
    else {
        panic!()
    };
    let joining = {
        let groups = Arc::clone(&groups);
        let id = second_id.clone();
        tokio::spawn(async move { groups.join(request(&id, 10_000)).await })
    };
    // The first member hears of the rebalance from its heartbeat and joins again.
    let mut told = false;
    for _ in 0..100 {
        if groups.heartbeat("g", 1, &first.member_id) == Err(GroupError::RebalanceInProgress) {
            told = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(told);
    let first_again = groups
        .join(request(&first.member_id, 10_000))
        .await
        .unwrap();
    let second = joining.await.unwrap().unwrap();
    assert_eq!((first_again.generation, second.generation), (2, 2));
    let (leader, follower) = if first_again.leader == first_again.member_id {
        (first_again, second)
    } else {
        (second, first_again)
    };
    assert_eq!(leader.members.len(), 2);
    assert!(follower.members.is_empty());
    // The follower's sync waits for the leader's assignment.
    let waiting = {
        let groups = Arc::clone(&groups);
        let id = follower.member_id.clone();
        tokio::spawn(async move { groups.sync("g", 2, &id, Vec::new()).await })
    };
    let plan = vec![
        (leader.member_id.clone(), Bytes::from_static(b"0,1,2")),
        (follower.member_id.clone(), Bytes::from_static(b"3,4,5")),
    ];
    let mine = groups.sync("g", 2, &leader.member_id, plan).await.unwrap();
    assert_eq!(mine, Bytes::from_static(b"0,1,2"));
    assert_eq!(
        waiting.await.unwrap().unwrap(),
        Bytes::from_static(b"3,4,5")
    );
    // The follower leaves; the leader is told to rejoin and is alone in generation 3.
    assert_eq!(
        groups.leave("g", std::slice::from_ref(&follower.member_id)),
        vec![Ok(())]
    );
    assert_eq!(
        groups.heartbeat("g", 2, &leader.member_id),
        Err(GroupError::RebalanceInProgress)
    );
    let alone = groups
        .join(request(&leader.member_id, 10_000))
        .await
        .unwrap();
    assert_eq!((alone.generation, alone.members.len()), (3, 1));
}

#[tokio::test(start_paused = true)]
async fn a_silent_member_is_removed_when_its_session_expires() {
    let groups = coordinator();
    let member = join_new(&groups, 10_000).await;
    groups
        .sync("g", 1, &member.member_id, Vec::new())
        .await
        .unwrap();
    // Within its session it stays; the clock is the runtime's, paused and advanced here.
    tokio::time::sleep(Duration::from_millis(9_900)).await;
    groups.tick();
    assert_eq!(groups.describe("g").members.len(), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    groups.tick();
    // With no member and no offsets left, the group is gone.
    let described = groups.describe("g");
    assert_eq!(described.state, GroupState::Dead);
    assert!(described.members.is_empty());
    assert_eq!(
        groups.heartbeat("g", 1, &member.member_id),
        Err(GroupError::UnknownMemberId)
    );
}

#[tokio::test]
async fn commits_are_checked_against_the_generation_and_the_member() {
    let groups = coordinator();
    let member = join_new(&groups, 10_000).await;
    let offsets = || vec![("t".to_owned(), 0, 42, Some("m".to_owned()))];
    // Before the sync the group is completing its rebalance.
    assert_eq!(
        groups.commit("g", 1, &member.member_id, offsets()).await,
        Err(GroupError::RebalanceInProgress)
    );
    groups
        .sync("g", 1, &member.member_id, Vec::new())
        .await
        .unwrap();
    assert_eq!(
        groups.commit("g", 7, &member.member_id, offsets()).await,
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        groups.commit("g", 1, "stranger", offsets()).await,
        Err(GroupError::UnknownMemberId)
    );
    // A consumer outside the generation may not commit while the group has members.
    assert_eq!(
        groups.commit("g", -1, "", offsets()).await,
        Err(GroupError::IllegalGeneration)
    );
    groups
        .commit("g", 1, &member.member_id, offsets())
        .await
        .unwrap();
    let committed = groups.committed("g", None);
    assert_eq!(committed.len(), 1);
    assert_eq!(committed[0].1.offset, 42);
    assert_eq!(committed[0].1.metadata.as_deref(), Some("m"));
    // Deleting needs an empty group.
    assert_eq!(groups.delete("g").await, Err(GroupError::NonEmptyGroup));
    groups.leave("g", std::slice::from_ref(&member.member_id));
    groups.commit("g", -1, "", offsets()).await.unwrap();
    groups.delete("g").await.unwrap();
    assert_eq!(groups.delete("g").await, Err(GroupError::GroupIdNotFound));
    assert!(groups.committed("g", None).is_empty());
}

#[tokio::test(start_paused = true)]
async fn groups_and_members_are_bounded() {
    let groups = coordinator();
    for _ in 0..3 {
        let Err(GroupError::MemberIdRequired(id)) = groups.join(request("", 10_000)).await else {
            panic!()
        };
        // Joins from new members wait for the others: do not wait here.
        let groups = Arc::clone(&groups);
        tokio::spawn(async move { groups.join(request(&id, 10_000)).await });
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A fourth is refused at once, before it is even given a member id.
    assert_eq!(
        groups.join(request("", 10_000)).await,
        Err(GroupError::GroupFull(3))
    );
    let few = GroupCoordinator::new(
        &GroupConfig {
            max_groups: 1,
            ..config()
        },
        None,
    )
    .unwrap();
    few.commit("one", -1, "", vec![("t".into(), 0, 1, None)])
        .await
        .unwrap();
    assert_eq!(
        few.commit("two", -1, "", vec![("t".into(), 0, 1, None)])
            .await,
        Err(GroupError::TooManyGroups(1))
    );
}

#[tokio::test]
async fn committed_offsets_survive_a_crash_of_a_durable_broker() {
    let storage = SimStorage::new();
    let config = BrokerConfig {
        data_dir: Some("/data".into()),
        ..BrokerConfig::default()
    };
    let broker = open(&config, storage.clone()).unwrap();
    broker
        .groups()
        .commit("g", -1, "", vec![("t".into(), 3, 99, Some("meta".into()))])
        .await
        .unwrap();
    drop(broker);
    // Only what was synced survives: the commit was on disk before it was answered.
    let restarted = open(&config, storage.crash(1)).unwrap();
    let committed = restarted
        .groups()
        .committed("g", Some(&[("t".to_owned(), 3)]));
    assert_eq!(committed.len(), 1);
    assert_eq!(committed[0].1.offset, 99);
    assert_eq!(committed[0].1.metadata.as_deref(), Some("meta"));
}

#[tokio::test]
async fn refused_requests_create_no_group_and_an_emptied_group_goes_at_once() {
    // Each MEMBER_ID_REQUIRED answer and each failed commit created a group that lived for
    // `offsets_retention_ms` (7 days): `max_groups` of them locked every new group out.
    let groups = GroupCoordinator::new(
        &GroupConfig {
            max_groups: 10,
            ..config()
        },
        None,
    )
    .unwrap();
    for i in 0..1000 {
        let probe = JoinRequest {
            group_id: format!("probe-{i}"),
            ..request("", 10_000)
        };
        assert!(matches!(
            groups.join(probe).await,
            Err(GroupError::MemberIdRequired(_))
        ));
        let offsets = vec![("t".to_owned(), 0, 1, None)];
        let group = format!("refused-{i}");
        assert!(groups.commit(&group, 3, "nobody", offsets).await.is_err());
    }
    assert!(groups.list().is_empty(), "{:?}", groups.list().len());
    // A real group still gets in, with the member id its first join was given.
    let joined = join_new(&groups, 10_000).await;
    assert_eq!(groups.list().len(), 1);
    groups.leave("g", std::slice::from_ref(&joined.member_id));
    groups.tick();
    assert!(
        groups.list().is_empty(),
        "an emptied group without offsets stays"
    );
}

#[tokio::test]
async fn a_join_is_capped_in_protocols_and_metadata_and_names_each_protocol_once() {
    let groups = coordinator();
    // A 634 KB join naming 50,000 protocols froze the coordinator for 9.2 s matching them.
    let many = JoinRequest {
        protocols: (0..50_000)
            .map(|i| (format!("p{i}"), Bytes::from_static(b"m")))
            .collect(),
        require_known_member: false,
        ..request("", 10_000)
    };
    assert!(matches!(
        groups.join(many).await,
        Err(GroupError::TooMuchMetadata(_))
    ));
    let heavy = JoinRequest {
        protocols: vec![("range".into(), Bytes::from(vec![0; 2 << 20]))],
        require_known_member: false,
        ..request("", 10_000)
    };
    assert!(matches!(
        groups.join(heavy).await,
        Err(GroupError::TooMuchMetadata(_))
    ));
    assert!(groups.list().is_empty(), "a refused join made a group");
    // The same name again and again counts once, with the metadata it came with first.
    let repeated = JoinRequest {
        protocols: (0..MAX_PROTOCOLS_PER_MEMBER)
            .map(|i| ("range".to_owned(), Bytes::from(format!("sub-{i}"))))
            .collect(),
        require_known_member: false,
        ..request("", 10_000)
    };
    let joined = groups.join(repeated).await.unwrap();
    assert_eq!(joined.protocol, "range");
    assert_eq!(joined.members[0].2, Bytes::from_static(b"sub-0"));
}

#[tokio::test]
async fn what_groups_hold_is_charged_to_the_storage_budget() {
    // JoinGroup and OffsetCommit metadata grew the broker by 375 MiB under 16 MiB.
    let budget = Arc::new(StorageBudget::new(16 << 20));
    let groups = GroupCoordinator::with_budget(&config(), None, Arc::clone(&budget)).unwrap();
    let metadata = Some("m".repeat(MAX_OFFSET_METADATA_BYTES));
    let mut commits = 0;
    let refused = loop {
        let offsets = (0..1000)
            .map(|p| ("topic".to_owned(), p, 1, metadata.clone()))
            .collect();
        match groups.commit(&format!("g{commits}"), -1, "", offsets).await {
            Ok(()) => commits += 1,
            Err(error) => break error,
        }
        assert!(commits < 10, "the budget never filled");
    };
    assert_eq!(refused, GroupError::StorageFull(16 << 20));
    assert!(commits >= 3, "only {commits} commits of 4 MB fit 16 MiB");
    assert!(budget.charged() <= 16 << 20, "{} charged", budget.charged());
    // Joins are charged too: a member's metadata counts against the same budget.
    let join = |group: &str| JoinRequest {
        group_id: group.into(),
        protocols: vec![(
            "range".into(),
            Bytes::from(vec![0; MAX_MEMBER_METADATA_BYTES]),
        )],
        require_known_member: false,
        ..request("", 10_000)
    };
    let mut joined = 0;
    while groups.join(join(&format!("j{joined}"))).await.is_ok() {
        joined += 1;
        assert!(joined < 16, "joins of 1 MiB never filled the budget");
    }
    // What a deleted group held is given back.
    let before = budget.charged();
    groups.delete("g0").await.unwrap();
    assert!(budget.charged() < before - (4 << 20));
    let offsets = vec![("topic".to_owned(), 0, 1, None)];
    groups.commit("after", -1, "", offsets).await.unwrap();
}

#[tokio::test]
async fn a_commit_writes_its_own_group_whatever_others_hold() {
    // Every commit rewrote every group's offsets: after one client inflated the file to
    // 125 MiB, an unrelated one-partition commit took 316 ms.
    let storage = SimStorage::new();
    let broker = durable_broker(&storage);
    let metadata = Some("m".repeat(MAX_OFFSET_METADATA_BYTES));
    for batch in 0..10 {
        let offsets = (0..1000)
            .map(|p| (format!("t{batch}"), p, 1, metadata.clone()))
            .collect();
        broker
            .groups()
            .commit("big", -1, "", offsets)
            .await
            .unwrap();
    }
    let written = || storage.faults.bytes_written.load(Ordering::Relaxed);
    // Each commit appends what it commits: 10 commits of 4 MB wrote 226 MB when each wrote the
    // group whole.
    assert!(
        (40_000_000..60_000_000).contains(&written()),
        "the big group's 10 commits of 4 MB wrote {} bytes",
        written()
    );
    let before = written();
    let offsets = vec![("t".to_owned(), 0, 1, None)];
    broker
        .groups()
        .commit("small", -1, "", offsets)
        .await
        .unwrap();
    let one_commit = written() - before;
    assert!(
        one_commit < 4096,
        "a one-partition commit wrote {one_commit} bytes"
    );
    drop(broker);
    let crashed = storage.crash(3);
    let restarted = durable_broker(&crashed);
    assert_eq!(restarted.groups().committed("big", None).len(), 10_000);
    assert_eq!(restarted.groups().committed("small", None).len(), 1);
    // A deleted group's file goes with it.
    restarted.groups().delete("big").await.unwrap();
    drop(restarted);
    let again = durable_broker(&crashed);
    assert!(again.groups().committed("big", None).is_empty());
    assert_eq!(again.groups().committed("small", None).len(), 1);
}

/// A group's committed offsets: (topic, partition, offset).
type GroupOffsets<'a> = (&'a str, &'a [(&'a str, i32, i64)]);

/// `group-offsets` as brokers before per-group files wrote it: every group in one sealed file.
fn legacy_group_offsets(groups: &[GroupOffsets<'_>]) -> Vec<u8> {
    let text = |out: &mut Vec<u8>, text: &str| {
        out.extend_from_slice(&(text.len() as u32).to_be_bytes());
        out.extend_from_slice(text.as_bytes());
    };
    let mut body = (groups.len() as u32).to_be_bytes().to_vec();
    for (group, offsets) in groups {
        text(&mut body, group);
        body.extend_from_slice(&(offsets.len() as u32).to_be_bytes());
        for (topic, partition, offset) in *offsets {
            text(&mut body, topic);
            body.extend_from_slice(&partition.to_be_bytes());
            body.extend_from_slice(&offset.to_be_bytes());
            body.push(0);
            text(&mut body, "");
            body.extend_from_slice(&1_000i64.to_be_bytes());
        }
    }
    minibroker_log::sealed::seal(b"MBGO", 1, &body)
}

#[tokio::test]
async fn an_older_single_offsets_file_is_split_into_a_file_per_group() {
    let storage = SimStorage::new();
    let legacy = std::path::Path::new("/data/group-offsets");
    storage.set_contents(
        legacy,
        legacy_group_offsets(&[("a", &[("t", 0, 5), ("t", 1, 6)]), ("b", &[("u", 0, 7)])]),
    );
    let broker = durable_broker(&storage);
    let offsets = |broker: &Durable, group: &str| -> Vec<(String, i32, i64)> {
        broker
            .groups()
            .committed(group, None)
            .into_iter()
            .map(|((topic, partition), c)| (topic, partition, c.offset))
            .collect()
    };
    assert_eq!(
        offsets(&broker, "a"),
        [("t".into(), 0, 5), ("t".into(), 1, 6)]
    );
    assert_eq!(offsets(&broker, "b"), [("u".into(), 0, 7)]);
    assert!(storage.contents(legacy).is_none(), "the older file stays");
    drop(broker);
    let restarted = durable_broker(&storage.crash(5));
    assert_eq!(offsets(&restarted, "b"), [("u".into(), 0, 7)]);
    // A damaged per-group file stops the broker, naming it.
    let file = storage
        .paths()
        .into_iter()
        .find(|path| path.starts_with("/data/groups"))
        .unwrap();
    let mut bytes = storage.contents(&file).unwrap();
    bytes[10] ^= 1;
    storage.set_contents(&file, bytes);
    let config = BrokerConfig {
        data_dir: Some("/data".into()),
        ..BrokerConfig::default()
    };
    let error = open(&config, storage.clone()).err().unwrap();
    assert!(
        error.to_string().contains(&*file.to_string_lossy()),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn groups_under_concurrent_joins_commits_leaves_and_deletes_keep_their_books() {
    // Each group has its own lock now; the registry adds and removes groups under its own.
    // Many tasks at once on groups that are made, emptied and made again: no accepted commit is
    // lost, and the budget is given back in full once every group is gone.
    let budget = Arc::new(StorageBudget::new(1 << 30));
    let groups =
        Arc::new(GroupCoordinator::with_budget(&config(), None, Arc::clone(&budget)).unwrap());
    let mut tasks = Vec::new();
    for task in 0..16u32 {
        let groups = Arc::clone(&groups);
        tasks.push(tokio::spawn(async move {
            let mut accepted = std::collections::HashMap::new();
            let mut joins = 0;
            for round in 0..400i64 {
                // A new group every few rounds, shared by four tasks.
                let group = format!("g{}-{}", task % 4, round / 8);
                match round % 4 {
                    // A commit outside any generation (refused while the group has members).
                    0 | 1 => {
                        let offsets = vec![(format!("t{task}"), 0, round, None)];
                        if groups.commit(&group, -1, "", offsets).await.is_ok() {
                            accepted.insert(group, round);
                        }
                    }
                    2 => {
                        let join = JoinRequest {
                            group_id: group.clone(),
                            require_known_member: false,
                            ..request("", 10_000)
                        };
                        // A join may wait for the others: leave at once either way.
                        let joined =
                            tokio::time::timeout(Duration::from_millis(5), groups.join(join)).await;
                        if let Ok(Ok(joined)) = joined {
                            joins += 1;
                            groups.leave(&group, &[joined.member_id]);
                        }
                    }
                    _ => {
                        groups.tick();
                        let _ = groups.describe(&group);
                    }
                }
            }
            (task, accepted, joins)
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    let commits: usize = results.iter().map(|(_, accepted, _)| accepted.len()).sum();
    let joins: usize = results.iter().map(|(_, _, joins)| joins).sum();
    assert!(
        commits > 100 && joins > 0,
        "commits {commits}, joins {joins}"
    );
    // Every task's last accepted commit to each group is what that group holds.
    for (task, accepted, _) in &results {
        for (group, offset) in accepted {
            let committed = groups.committed(group, Some(&[(format!("t{task}"), 0)]));
            assert_eq!(
                committed.first().map(|c| c.1.offset),
                Some(*offset),
                "{group}"
            );
        }
    }
    // Members whose join timed out are still in their groups: they leave, and every group goes.
    for (group, _, _) in groups.list() {
        for member in groups.describe(&group).members {
            groups.leave(&group, &[member.member_id]);
        }
        groups.delete(&group).await.unwrap();
    }
    assert!(groups.list().is_empty());
    assert_eq!(budget.charged(), 0, "the budget was not given back");
}

#[tokio::test]
async fn offsets_committed_in_a_transaction_show_only_once_it_commits_and_survive_a_crash() {
    let storage = SimStorage::new();
    let broker = durable_broker(&storage);
    let groups = broker.groups();
    let key = ("in".to_owned(), 0);
    groups
        .commit("g", -1, "", vec![("in".into(), 0, 5, None)])
        .await
        .unwrap();
    groups
        .commit_in_transaction("g", 4000, (-1, ""), vec![("in".into(), 0, 9, None)])
        .await
        .unwrap();
    assert_eq!(
        groups.committed("g", Some(std::slice::from_ref(&key)))[0]
            .1
            .offset,
        5
    );
    assert!(groups.has_pending("g", &key));
    assert!(!groups.has_pending("g", &("in".to_owned(), 1)));
    drop(broker);

    // The pending offset was on disk before the commit was answered.
    let storage = storage.crash(3);
    let restarted = durable_broker(&storage);
    let groups = restarted.groups();
    assert!(groups.has_pending("g", &key));
    groups.end_transaction("g", 4000, true).await.unwrap();
    assert_eq!(
        groups.committed("g", Some(std::slice::from_ref(&key)))[0]
            .1
            .offset,
        9
    );
    assert!(!groups.has_pending("g", &key));
    // An abort drops what the transaction committed; the group's own offsets stay.
    groups
        .commit_in_transaction("g", 4001, (-1, ""), vec![("in".into(), 0, 20, None)])
        .await
        .unwrap();
    groups.end_transaction("g", 4001, false).await.unwrap();
    drop(restarted);
    let again = durable_broker(&storage.crash(4));
    assert_eq!(
        again
            .groups()
            .committed("g", Some(std::slice::from_ref(&key)))[0]
            .1
            .offset,
        9
    );
    assert!(!again.groups().has_pending("g", &key));
}

#[tokio::test]
async fn a_group_an_abort_leaves_empty_goes_with_its_file() {
    let storage = SimStorage::new();
    let broker = durable_broker(&storage);
    broker
        .groups()
        .commit_in_transaction("only", 7, (-1, ""), vec![("in".into(), 0, 1, None)])
        .await
        .unwrap();
    assert_eq!(broker.groups().list().len(), 1);
    broker
        .groups()
        .end_transaction("only", 7, false)
        .await
        .unwrap();
    assert!(broker.groups().list().is_empty());
    drop(broker);
    let restarted = durable_broker(&storage.crash(5));
    assert!(restarted.groups().list().is_empty());
}

#[tokio::test]
async fn a_transactional_commit_with_a_member_is_checked_against_its_generation() {
    let groups = coordinator();
    let joined = join_new(&groups, 10_000).await;
    let stale = groups
        .commit_in_transaction(
            "g",
            7,
            (joined.generation + 1, &joined.member_id),
            vec![("in".into(), 0, 1, None)],
        )
        .await;
    assert!(matches!(stale, Err(GroupError::IllegalGeneration)));
    let stranger = groups
        .commit_in_transaction("g", 7, (joined.generation, "nobody"), vec![])
        .await;
    assert!(matches!(stranger, Err(GroupError::UnknownMemberId)));
    assert!(!groups.has_pending("g", &("in".to_owned(), 0)));
}
