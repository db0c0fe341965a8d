//! Consumer groups across a cluster of `minibroker serve --cluster` processes on a real
//! PostgreSQL: confluent-kafka consumers in one group (`tests/kafka/cluster.py group-consume`)
//! go on through the SIGKILL of their group's coordinator and of one of them, resuming from the
//! offsets they committed; and a coordinator stopped (SIGSTOP) past its lease and resumed can
//! commit nothing for the group another broker took over.

mod cluster_support;
#[path = "../../cluster/tests/support/mod.rs"]
mod postgres;
mod support;

use cluster_support::{Cluster, LEASE_MS, call, coordinator, signal, triples};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, JoinGroupRequest, JoinGroupResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{ServeProcess, StartedScript, free_addr, kafka_script, start_script, summary_of};

const NOT_COORDINATOR: i16 = 16;

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

/// The node id FindCoordinator names for `group` through the broker at `addr`.
fn coordinator_of(addr: &str, group: &str) -> i32 {
    coordinator(addr, group, 0)
}

/// Joins `group` at its coordinator `addr` as its only member, and syncs: (generation, member
/// id).
fn join_alone(addr: &str, group: &str) -> (i32, String) {
    let mut member_id = String::new();
    loop {
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(text(&member_id))
            .with_protocol_type(text("consumer"))
            .with_protocols(vec![
                kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol::default()
                    .with_name(text("range"))
                    .with_metadata(bytes::Bytes::from_static(b"m")),
            ]);
        let joined: JoinGroupResponse = call(addr, ApiKey::JoinGroup, 5, &request);
        if joined.error_code == 79 {
            // MEMBER_ID_REQUIRED: join again with the id given.
            member_id = joined.member_id.to_string();
            continue;
        }
        assert_eq!(joined.error_code, 0, "{joined:?}");
        let member_id = joined.member_id.to_string();
        let sync = SyncGroupRequest::default()
            .with_group_id(GroupId(text(group)))
            .with_generation_id(joined.generation_id)
            .with_member_id(text(&member_id))
            .with_assignments(vec![
                SyncGroupRequestAssignment::default()
                    .with_member_id(text(&member_id))
                    .with_assignment(bytes::Bytes::from_static(b"a")),
            ]);
        let synced: SyncGroupResponse = call(addr, ApiKey::SyncGroup, 3, &sync);
        assert_eq!(synced.error_code, 0, "{synced:?}");
        return (joined.generation_id, member_id);
    }
}

/// Commits `offset` for partition 0 of `topic` as `member` of `group` at `addr`; the error code.
fn commit(
    addr: &str,
    group: &str,
    (generation, member): (i32, &str),
    topic: &str,
    offset: i64,
) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(text(member))
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(text(topic)))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset),
                ]),
        ]);
    let answer: OffsetCommitResponse = call(addr, ApiKey::OffsetCommit, 7, &request);
    answer.topics[0].partitions[0].error_code
}

/// `group`'s committed offsets of partitions 0 to `partitions - 1` of `topic`, through the
/// broker at `addr` (-1 where none).
fn committed(addr: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(text(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(text(topic)))
                .with_partition_indexes((0..partitions).collect()),
        ]));
    let answer: OffsetFetchResponse = call(addr, ApiKey::OffsetFetch, 7, &request);
    assert_eq!(answer.error_code, 0, "{answer:?}");
    answer.topics[0]
        .partitions
        .iter()
        .map(|p| p.committed_offset)
        .collect()
}

/// The records the consumers wrote to `files`: (partition, offset, value) lines.
fn consumed(files: &[std::path::PathBuf]) -> Vec<(u64, u64, String)> {
    files
        .iter()
        .flat_map(|file| {
            std::fs::read_to_string(file)
                .unwrap_or_default()
                .lines()
                .filter_map(|line| {
                    let mut fields = line.splitn(3, ' ');
                    Some((
                        fields.next()?.parse().ok()?,
                        fields.next()?.parse().ok()?,
                        fields.next()?.to_owned(),
                    ))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits until the consumers wrote at least `count` records.
fn wait_for_consumed(files: &[std::path::PathBuf], count: usize) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while consumed(files).len() < count {
        assert!(Instant::now() < deadline, "the consumers stalled");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_groups_coordinator_killed_its_consumers_rejoin_on_another_and_resume_from_their_commits() {
    const PARTITIONS: i32 = 6;
    const RECORDS: usize = 3000;
    let cluster = Cluster::start();
    let kafka: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let mut brokers: Vec<Option<ServeProcess>> = (0..3)
        .map(|i| Some(cluster.broker(i as i32 + 1, &kafka[i])))
        .collect();
    let bootstrap = kafka.join(",");
    let args = ["produce", &bootstrap, "feed", "6", &RECORDS.to_string()];
    let output = kafka_script("cluster.py", &args).output().unwrap();
    let acked = triples(&summary_of(&output, "cluster.py produce"), "acked");
    assert_eq!(acked.len(), RECORDS);

    let scratch = tempfile::tempdir().unwrap();
    let stop = scratch.path().join("stop");
    let files: Vec<_> = (0..3)
        .map(|i| scratch.path().join(format!("consumer-{i}")))
        .collect();
    let consumer = |i: usize| -> StartedScript {
        let out = files[i].to_str().unwrap();
        let args = ["group-consume", &bootstrap, "feed", "readers", out];
        let started = start_script(
            "cluster.py",
            &[&args[..], &[stop.to_str().unwrap()]].concat(),
        );
        assert_eq!(started.first_line.trim(), "started");
        started
    };
    let mut first = Some(consumer(0));
    let second = consumer(1);

    // The group's coordinator is killed while the two consume.
    wait_for_consumed(&files, 400);
    let coordinator = coordinator_of(&kafka[0], "readers");
    brokers[usize::try_from(coordinator - 1).unwrap()]
        .take()
        .unwrap()
        .kill();
    let live = |exclude: i32| {
        (1..=3)
            .find(|&node| node != exclude)
            .map(|node| kafka[usize::try_from(node - 1).unwrap()].clone())
            .unwrap()
    };
    let survivor = live(coordinator);

    // Another broker takes the group once the lease runs out, and the consumers go on there.
    let deadline = Instant::now() + Duration::from_millis(LEASE_MS * 5);
    loop {
        let now_coordinating = coordinator_of(&survivor, "readers");
        if now_coordinating != coordinator {
            break;
        }
        assert!(Instant::now() < deadline, "nobody took the group over");
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = consumed(&files).len();
    wait_for_consumed(&files, before + 400);

    // One consumer process is killed and another started: it resumes from the commits too.
    first.take().unwrap().child.kill().unwrap();
    let third = consumer(2);

    // Every partition's commits reach its end, as any broker reports them.
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|p| {
            acked
                .iter()
                .filter(|(partition, _, _)| *partition == u64::try_from(p).unwrap())
                .count() as i64
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while committed(&survivor, "readers", "feed", PARTITIONS) != ends {
        assert!(
            Instant::now() < deadline,
            "the commits stopped at {:?} (ends {ends:?})",
            committed(&survivor, "readers", "feed", PARTITIONS)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // Every live broker describes the group alike: its two members, each partition owned,
    // committed to its end.
    for addr in kafka
        .iter()
        .filter(|addr| **addr != kafka[usize::try_from(coordinator - 1).unwrap()])
    {
        let listed = run_cli(&["groups", "--kafka", addr, "--json"]);
        assert!(listed.contains("\"readers\""), "{listed}");
        let described: serde_json::Value = serde_json::from_str(&run_cli(&[
            "groups",
            "--kafka",
            addr,
            "--describe",
            "readers",
            "--json",
        ]))
        .unwrap();
        assert_eq!(described["state"], "Stable", "{described}");
        assert_eq!(
            described["members"].as_array().unwrap().len(),
            2,
            "{described}"
        );
        let partitions = described["partitions"].as_array().unwrap();
        assert_eq!(partitions.len(), 6, "{described}");
        for partition in partitions {
            assert_eq!(partition["lag"], 0, "{described}");
            assert!(partition["member_id"].is_string(), "{described}");
        }
    }
    std::fs::write(&stop, "").unwrap();
    let refused = [second.summary(), third.summary()];

    // Every record was consumed, none skipped; what was read twice is what was consumed
    // after the last commit that held.
    let read = consumed(&files);
    let by_record: BTreeSet<(u64, u64, String)> = read.iter().cloned().collect();
    for record in &acked {
        assert!(by_record.contains(record), "{record:?} was never consumed");
    }
    assert_eq!(by_record.len(), RECORDS, "nothing but the records stored");
    eprintln!(
        "consumed {} records for {RECORDS} ({} again after the kills); commits refused: {refused:?}",
        read.len(),
        read.len() - RECORDS
    );
}

/// What `minibroker ARGS` printed, asserting it succeeded.
fn run_cli(args: &[&str]) -> String {
    let output = Command::new(support::BIN).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "minibroker {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn a_coordinator_stopped_past_its_lease_and_resumed_commits_nothing() {
    let cluster = Cluster::start();
    let kafka: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let brokers: Vec<ServeProcess> = (0..3)
        .map(|i| cluster.broker(i as i32 + 1, &kafka[i]))
        .collect();
    let args = ["produce", &kafka[0], "zombie", "1", "10"];
    let output = kafka_script("cluster.py", &args).output().unwrap();
    summary_of(&output, "cluster.py produce");

    let coordinator = coordinator_of(&kafka[0], "held");
    let at = usize::try_from(coordinator - 1).unwrap();
    let (generation, member) = join_alone(&kafka[at], "held");
    assert_eq!(
        commit(&kafka[at], "held", (generation, &member), "zombie", 3),
        0
    );

    // Stopped past its lease, the coordinator loses the group to another broker, where a new
    // member joins at a later generation and commits.
    signal(brokers[at].pid(), "STOP");
    std::thread::sleep(Duration::from_millis(LEASE_MS * 2));
    let other = (at + 1) % 3;
    let taken = coordinator_of(&kafka[other], "held");
    assert_ne!(taken, coordinator);
    let taken_at = usize::try_from(taken - 1).unwrap();
    let (new_generation, new_member) = join_alone(&kafka[taken_at], "held");
    assert!(
        new_generation > generation,
        "{new_generation} after {generation}"
    );
    assert_eq!(
        commit(
            &kafka[taken_at],
            "held",
            (new_generation, &new_member),
            "zombie",
            7
        ),
        0
    );

    // Resumed, the old coordinator takes its old member's commit, and refuses it.
    signal(brokers[at].pid(), "CONT");
    let refused = commit(&kafka[at], "held", (generation, &member), "zombie", 9);
    assert_eq!(refused, NOT_COORDINATOR);
    // It now names the new coordinator, and every broker shows the new member's commit only.
    assert_eq!(coordinator_of(&kafka[at], "held"), taken);
    for addr in &kafka {
        assert_eq!(committed(addr, "held", "zombie", 1), [7]);
    }
    let rows = cluster_support::block_on(async {
        let client = minibroker_cluster::connect(&cluster.postgres.url)
            .await
            .unwrap();
        client
            .query(
                "SELECT committed_offset FROM minibroker.group_offsets WHERE group_id = 'held'",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, i64>(0))
            .collect::<Vec<_>>()
    });
    assert_eq!(rows, [7]);
}
