//! Membership on a real PostgreSQL: a registered broker is listed until its lease runs out or
//! it leaves; a second run with a live broker's node id is refused, and takes the id once the
//! lease has run out, after which the first run's renewal learns it lost it. A heartbeat keeps
//! a broker listed while it runs, with the groups it coordinates; stopped, it drops out within a
//! lease, and one that leaves frees its groups at once.

mod support;

use minibroker_cluster::coordinators::claim;
use minibroker_cluster::{
    Heartbeat, KeyType, Leases, Member, MembershipError, Registration, connect, live_members,
    migrate,
};
use std::sync::Arc;
use std::time::Duration;
use support::Postgres;

fn broker(node_id: i32, kafka_port: u16) -> Registration {
    Registration::new(Member {
        node_id,
        kafka_host: "127.0.0.1".to_owned(),
        kafka_port,
    })
}

#[tokio::test]
async fn a_lease_lists_a_broker_until_it_runs_out_and_then_its_node_id_is_free() {
    let postgres = Postgres::start();
    let mut client = connect(&postgres.url).await.unwrap();
    migrate(&mut client).await.unwrap();
    let long = Duration::from_secs(60);
    let short = Duration::from_millis(300);

    let first = broker(1, 9001);
    first.register(&client, short).await.unwrap();
    broker(2, 9002).register(&client, long).await.unwrap();
    let members = live_members(&client).await.unwrap();
    assert_eq!(
        members.iter().map(|m| m.node_id).collect::<Vec<_>>(),
        [1, 2]
    );

    // Node id 1 is live: another run of it is refused, naming the holder.
    let second = broker(1, 9101);
    let refused = second.register(&client, long).await.unwrap_err();
    assert!(
        matches!(
            refused,
            MembershipError::NodeIdTaken {
                node_id: 1,
                kafka_port: 9001,
                ..
            }
        ),
        "{refused}"
    );
    assert!(refused.to_string().contains("127.0.0.1:9001"), "{refused}");
    // Its own run renews it.
    first.register(&client, short).await.unwrap();
    first.renew(&client, short).await.unwrap();

    // Unrenewed, it drops out, and the node id is free for the second run.
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    let members = live_members(&client).await.unwrap();
    assert_eq!(members.iter().map(|m| m.node_id).collect::<Vec<_>>(), [2]);
    second.register(&client, long).await.unwrap();
    let members = live_members(&client).await.unwrap();
    assert_eq!(members[0].kafka_port, 9101);
    let lost = first.renew(&client, short).await.unwrap_err();
    assert!(
        matches!(lost, MembershipError::LeaseLost { node_id: 1 }),
        "{lost}"
    );

    // Leaving takes a broker out at once.
    second.leave(&client).await.unwrap();
    let members = live_members(&client).await.unwrap();
    assert_eq!(members.iter().map(|m| m.node_id).collect::<Vec<_>>(), [2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_keeps_a_broker_listed_until_it_stops() {
    let postgres = Postgres::start();
    let mut client = connect(&postgres.url).await.unwrap();
    migrate(&mut client).await.unwrap();
    let lease = Duration::from_millis(600);
    let listed = || async {
        live_members(&client)
            .await
            .unwrap()
            .iter()
            .map(|m| m.node_id)
            .collect::<Vec<_>>()
    };

    let leases = Arc::new(Leases::default());
    let killed = Heartbeat::start(&postgres.url, broker(1, 9001), lease, Arc::default())
        .await
        .unwrap();
    let left = Heartbeat::start(&postgres.url, broker(2, 9002), lease, Arc::clone(&leases))
        .await
        .unwrap();
    // The second coordinates a group: its heartbeat renews that lease too.
    let epoch = claim(
        &client,
        &leases,
        left.registration(),
        (KeyType::Group, "g"),
        lease,
    )
    .await
    .unwrap()
    .unwrap();
    // Three leases later both are still members: their heartbeats renewed them.
    tokio::time::sleep(lease * 3).await;
    assert_eq!(listed().await, [1, 2]);
    assert!(leases.holds(KeyType::Group, "g", epoch));
    let other = broker(3, 9003);
    let other_leases = Leases::default();
    let refused = claim(&client, &other_leases, &other, (KeyType::Group, "g"), lease);
    assert_eq!(refused.await.unwrap(), None);

    // A broker that stops renewing (as a SIGKILL stops it) drops out within a lease.
    drop(killed);
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    assert_eq!(listed().await, [2]);
    // One that leaves is out at once, and its groups are free for another.
    left.leave().await.unwrap();
    assert!(listed().await.is_empty());
    let taken = claim(&client, &other_leases, &other, (KeyType::Group, "g"), lease);
    assert!(taken.await.unwrap().is_some());
}
