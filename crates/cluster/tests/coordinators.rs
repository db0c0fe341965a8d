//! Coordinators' leases and groups on a real PostgreSQL: a key's lease is one run's at a time;
//! another takes it only once it has run out, at a new epoch, and the group's generation moves
//! on with it. A run that lost its lease (paused past it) can write nothing for the group: not
//! offsets, not a membership, not a removal. A member's commit is checked against the saved
//! generation and members in the same transaction.

mod support;

use minibroker_cluster::coordinators::{self, KeyType, Leases};
use minibroker_cluster::groups::{self, GroupRow, GroupWriteError, StoredOffset, Tenure};
use minibroker_cluster::{Member, Registration, connect, migrate};
use std::time::Duration;
use support::Postgres;

fn run(node_id: i32) -> Registration {
    Registration::new(Member {
        node_id,
        kafka_host: "127.0.0.1".to_owned(),
        kafka_port: 9000 + u16::try_from(node_id).unwrap(),
    })
}

fn offset(topic: &str, partition: i32, offset: i64) -> StoredOffset {
    StoredOffset {
        topic: topic.to_owned(),
        partition,
        offset,
        metadata: Some("m".to_owned()),
        commit_ms: 1_000,
    }
}

fn row(group_id: &str, generation: i32, members: &[&str]) -> GroupRow {
    GroupRow {
        group_id: group_id.to_owned(),
        generation,
        members: members.iter().map(|m| (*m).to_owned()).collect(),
        state: "Stable".to_owned(),
        protocol_type: "consumer".to_owned(),
        membership: Some(vec![1, 2, 3]),
    }
}

#[tokio::test]
async fn a_lease_is_one_runs_until_it_runs_out_and_the_zombie_then_writes_nothing() {
    let postgres = Postgres::start();
    let mut client = connect(&postgres.url).await.unwrap();
    migrate(&mut client).await.unwrap();
    let short = Duration::from_millis(400);
    let (first, second) = (run(1), run(2));
    let (first_leases, second_leases) = (Leases::default(), Leases::default());

    let (epoch, generation) = coordinators::claim_group(&client, &first_leases, &first, "g", short)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(generation, 0, "a group the cluster never had");
    assert!(first_leases.holds(KeyType::Group, "g", epoch));
    let zombie = Tenure {
        run_id: &first.run_id,
        epoch,
    };
    groups::save_group(&client, zombie, &row("g", 1, &["m1"]))
        .await
        .unwrap();
    groups::commit_offsets(&client, zombie, "g", Some((1, "m1")), &[offset("t", 0, 5)])
        .await
        .unwrap();
    // A member or generation the group does not have is refused, in the database.
    for (generation, member) in [(0, "m1"), (1, "m2")] {
        let refused = groups::commit_offsets(
            &client,
            zombie,
            "g",
            Some((generation, member)),
            &[offset("t", 0, 99)],
        )
        .await
        .unwrap_err();
        assert!(matches!(refused, GroupWriteError::NotMember), "{refused}");
    }

    // While the first run's lease is live, the second cannot take it; FindCoordinator's
    // answer is the holder.
    assert_eq!(
        coordinators::claim_group(&client, &second_leases, &second, "g", short)
            .await
            .unwrap(),
        None
    );
    let found = coordinators::coordinator(&client, (KeyType::Group, "g")).await;
    assert_eq!(found.unwrap(), None, "no broker is a live member yet");
    first
        .register(&client, Duration::from_secs(60))
        .await
        .unwrap();
    second
        .register(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let found = coordinators::coordinator(&client, (KeyType::Group, "g")).await;
    assert_eq!(found.unwrap().unwrap().node_id, 1);

    // Unrenewed, it runs out; the second run takes it at a new epoch and a new generation.
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    assert!(!first_leases.holds(KeyType::Group, "g", epoch));
    let (taken, generation) =
        coordinators::claim_group(&client, &second_leases, &second, "g", short)
            .await
            .unwrap()
            .unwrap();
    assert!(taken > epoch);
    assert_eq!(generation, 2, "one past the last saved generation");
    let found = coordinators::coordinator(&client, (KeyType::Group, "g")).await;
    assert_eq!(found.unwrap().unwrap().node_id, 2);

    // The first run, back, can write nothing for the group.
    let refusals = [
        groups::commit_offsets(&client, zombie, "g", Some((1, "m1")), &[offset("t", 0, 7)]).await,
        groups::commit_offsets(&client, zombie, "g", None, &[offset("t", 0, 7)]).await,
        groups::save_group(&client, zombie, &row("g", 3, &["m1"])).await,
        groups::delete_offsets(&client, zombie, "g", &[("t".to_owned(), 0)]).await,
        groups::remove_group(&client, zombie, "g").await,
    ];
    for refused in refusals {
        assert!(
            matches!(refused, Err(GroupWriteError::NotCoordinator)),
            "{refused:?}"
        );
    }
    assert_eq!(
        groups::group_offsets(&client, "g").await.unwrap(),
        [offset("t", 0, 5)]
    );
    let saved = groups::find_group(&client, "g").await.unwrap().unwrap();
    assert_eq!((saved.generation, saved.members.len()), (2, 0));
    assert_eq!(saved.state, "Empty");
    // Nor can it take the lease back while the second run's is live.
    assert_eq!(
        coordinators::claim_group(&client, &first_leases, &first, "g", short)
            .await
            .unwrap(),
        None
    );

    // The holder writes; its renewal keeps the lease past its first term.
    let holder = Tenure {
        run_id: &second.run_id,
        epoch: taken,
    };
    groups::commit_offsets(&client, holder, "g", None, &[offset("t", 0, 8)])
        .await
        .unwrap();
    for _ in 0..3 {
        tokio::time::sleep(short / 3).await;
        second_leases
            .renew(&client, &second.run_id, short)
            .await
            .unwrap();
    }
    assert!(second_leases.holds(KeyType::Group, "g", taken));
    let (again, generation) =
        coordinators::claim_group(&client, &second_leases, &second, "g", short)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(
        (again, generation),
        (taken, 2),
        "an unbroken tenure keeps its epoch and generation"
    );
    assert_eq!(
        groups::group_offsets(&client, "g").await.unwrap(),
        [offset("t", 0, 8)]
    );
    groups::remove_group(&client, holder, "g").await.unwrap();
    assert_eq!(groups::find_group(&client, "g").await.unwrap(), None);
    assert!(
        groups::group_offsets(&client, "g")
            .await
            .unwrap()
            .is_empty()
    );

    // A clean shutdown hands its leases over at once.
    coordinators::release_all(&client, &second.run_id)
        .await
        .unwrap();
    assert!(
        coordinators::claim_group(&client, &first_leases, &first, "g", short)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_free_key_goes_to_the_live_broker_it_hashes_to_the_same_on_every_broker() {
    let postgres = Postgres::start();
    let mut client = connect(&postgres.url).await.unwrap();
    migrate(&mut client).await.unwrap();
    for node_id in 1..=3 {
        run(node_id)
            .register(&client, Duration::from_secs(60))
            .await
            .unwrap();
    }
    let mut chosen = std::collections::BTreeSet::new();
    for n in 0..30 {
        let key = format!("group-{n}");
        let first = coordinators::coordinator(&client, (KeyType::Group, &key)).await;
        let again = coordinators::coordinator(&client, (KeyType::Group, &key)).await;
        let first = first.unwrap().unwrap();
        assert_eq!(Some(first.clone()), again.unwrap(), "stable");
        chosen.insert(first.node_id);
    }
    assert_eq!(chosen.len(), 3, "30 keys spread over the three brokers");
}

#[tokio::test]
async fn retention_forgets_only_groups_idle_with_no_members_and_nothing_pending() {
    let postgres = Postgres::start();
    let mut client = connect(&postgres.url).await.unwrap();
    migrate(&mut client).await.unwrap();
    let (broker, leases) = (run(1), Leases::default());
    let lease = Duration::from_secs(60);
    let mut tenures = Vec::new();
    for group in ["idle", "recent", "joined"] {
        let (epoch, _) = coordinators::claim_group(&client, &leases, &broker, group, lease)
            .await
            .unwrap()
            .unwrap();
        tenures.push(epoch);
    }
    let tenure = |at: usize| Tenure {
        run_id: &broker.run_id,
        epoch: tenures[at],
    };
    // Committed a long time ago (the commit's own timestamp): idle.
    groups::commit_offsets(&client, tenure(0), "idle", None, &[offset("t", 0, 5)])
        .await
        .unwrap();
    let now = minibroker_records::now_millis();
    let recent = StoredOffset {
        commit_ms: now,
        ..offset("t", 0, 6)
    };
    groups::commit_offsets(&client, tenure(1), "recent", None, &[recent])
        .await
        .unwrap();
    // Idle too, but with a member.
    groups::commit_offsets(&client, tenure(2), "joined", None, &[offset("t", 0, 7)])
        .await
        .unwrap();
    groups::save_group(&client, tenure(2), &row("joined", 1, &["m1"]))
        .await
        .unwrap();
    client
        .execute(
            "UPDATE minibroker.groups SET last_active_ms = 1000 WHERE group_id = 'joined'",
            &[],
        )
        .await
        .unwrap();

    assert_eq!(
        groups::expire_idle_groups(&client, 60_000).await.unwrap(),
        1
    );
    assert_eq!(groups::find_group(&client, "idle").await.unwrap(), None);
    assert!(
        groups::group_offsets(&client, "idle")
            .await
            .unwrap()
            .is_empty()
    );
    for kept in ["recent", "joined"] {
        assert!(
            groups::find_group(&client, kept).await.unwrap().is_some(),
            "{kept}"
        );
        assert_eq!(groups::group_offsets(&client, kept).await.unwrap().len(), 1);
    }
    // A commit to a forgotten group starts it again.
    groups::commit_offsets(&client, tenure(0), "idle", None, &[offset("t", 0, 8)])
        .await
        .unwrap();
    assert_eq!(
        groups::group_offsets(&client, "idle").await.unwrap(),
        [offset("t", 0, 8)]
    );
}
