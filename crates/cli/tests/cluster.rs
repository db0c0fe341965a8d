//! A cluster of `minibroker serve --cluster` processes on a real PostgreSQL (started by
//! `scripts/postgres`), driven by confluent-kafka (`tests/kafka/cluster.py`): an idempotent
//! producer runs while a broker is SIGKILLed, or while the database is stopped, and every
//! acknowledged record must then be stored exactly once, in order per partition, read back
//! through a broker that was not broken.

mod cluster_support;
#[path = "../../cluster/tests/support/mod.rs"]
mod postgres;
mod support;

use cluster_support::{Cluster, LEASE_MS, triples};
use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::{Duration, Instant};
use support::{
    BIN, CHECK_FAULTS, ServeProcess, free_addr, kafka_script, start_proxy, start_script, summary_of,
};

/// Every acknowledged record is read back once, at the offset its acknowledgement gave, nothing
/// is read twice, and each partition holds the producer's values in the order it sent them.
fn judge(acked: &[(u64, u64, String)], read: &[(u64, u64, String)]) {
    let mut seen = HashMap::new();
    for (partition, offset, value) in read {
        assert!(
            seen.insert(value.clone(), (*partition, *offset)).is_none(),
            "{value} stored twice"
        );
    }
    for (partition, offset, value) in acked {
        assert_eq!(
            seen.get(value),
            Some(&(*partition, *offset)),
            "{value}: acknowledged at {partition}/{offset}"
        );
    }
    let mut by_partition: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for (partition, offset, value) in read {
        let index: u64 = value
            .trim_start_matches("v-")
            .trim_end_matches('.')
            .parse()
            .unwrap();
        by_partition
            .entry(*partition)
            .or_default()
            .push((*offset, index));
    }
    for (partition, mut records) in by_partition {
        records.sort_unstable();
        assert!(
            records.windows(2).all(|pair| pair[0].1 < pair[1].1),
            "partition {partition} holds the values out of the order they were sent"
        );
    }
}

fn read_back(bootstrap: &str, topic: &str, partitions: u32) -> Vec<(u64, u64, String)> {
    let args = ["read", bootstrap, topic, &partitions.to_string()];
    let output = kafka_script("cluster.py", &args).output().unwrap();
    triples(&summary_of(&output, "cluster.py read"), "records")
}

fn listed_brokers(bootstrap: &str) -> Vec<u64> {
    let output = kafka_script("cluster.py", &["brokers", bootstrap])
        .output()
        .unwrap();
    let summary = summary_of(&output, "cluster.py brokers");
    summary["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap())
        .collect()
}

#[test]
fn three_brokers_one_killed_mid_run_every_acknowledged_record_once_in_order() {
    let cluster = Cluster::start();
    let kafka: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let mut brokers: Vec<Option<ServeProcess>> = (0..3)
        .map(|i| Some(cluster.broker(i as i32 + 1, &kafka[i])))
        .collect();
    let bootstrap = kafka.join(",");
    assert_eq!(listed_brokers(&kafka[0]), vec![1, 2, 3]);

    let producer = start_script(
        "cluster.py",
        &["produce", &bootstrap, "orders", "6", "30000"],
    );
    assert_eq!(producer.first_line.trim(), "half");
    brokers[1].take().unwrap().kill();
    // Out of Metadata within the lease (checked through a broker that is up).
    let deadline = Instant::now() + Duration::from_millis(LEASE_MS * 3);
    while listed_brokers(&kafka[0]) != vec![1, 3] {
        assert!(
            Instant::now() < deadline,
            "the killed broker is still listed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    brokers[1] = Some(cluster.broker(2, &kafka[1]));
    let summary = producer.summary();
    let acked = triples(&summary, "acked");
    assert_eq!(acked.len(), 30_000);
    // Read back through a broker that was never killed.
    judge(&acked, &read_back(&kafka[2], "orders", 6));
    assert_eq!(listed_brokers(&kafka[2]), vec![1, 2, 3]);
}

#[test]
fn what_one_broker_changes_another_serves_settings_deleted_records_and_retention() {
    // Retention runs every second, so records older than a topic's retention.ms go soon.
    let cluster = Cluster::start_with("maintenance_interval_ms = 1000\n");
    let brokers = cluster.brokers(2);
    let output = kafka_script(
        "cluster.py",
        &[
            "shared",
            &brokers[0].kafka_addr,
            &brokers[1].kafka_addr,
            "shared",
        ],
    )
    .output()
    .unwrap();
    let summary = summary_of(&output, "cluster.py shared");
    assert_eq!(summary["ok"], true, "{summary}");
    let compacted = summary["compacted"][1].as_str().unwrap();
    assert!(
        compacted.contains("not served by a broker of a cluster"),
        "{compacted}"
    );
}

#[test]
fn a_broker_reads_what_its_copy_no_longer_holds_from_the_database() {
    // Each broker keeps one piece (1 MiB) of a partition in memory; the 5 MB written through
    // one are read back from offset 0 through the other, mostly from the database.
    let cluster = Cluster::start_with("cluster_cache_bytes = 1\n");
    let brokers = cluster.brokers(2);
    let producer = start_script(
        "cluster.py",
        &[
            "produce",
            &brokers[0].kafka_addr,
            "cached",
            "1",
            "8000",
            "600",
        ],
    );
    let acked = triples(&producer.summary(), "acked");
    assert_eq!(acked.len(), 8_000);
    judge(&acked, &read_back(&brokers[1].kafka_addr, "cached", 1));
    judge(&acked, &read_back(&brokers[0].kafka_addr, "cached", 1));
    // A broker joining now copies only the newest batches, and reads the rest from the
    // database too.
    let joined = cluster.broker(3, &free_addr());
    judge(&acked, &read_back(&joined.kafka_addr, "cached", 1));
    assert!(
        joined
            .logged()
            .contains("the copy starts at the newest batches it keeps"),
        "{}",
        joined.logged()
    );
    // The earliest offset and the lookups by time are the cluster's, not the copy's.
    let output = kafka_script("cluster.py", &["offsets", &brokers[1].kafka_addr, "cached"])
        .output()
        .unwrap();
    let offsets = summary_of(&output, "cluster.py offsets");
    assert_eq!(offsets["earliest"], 0, "{offsets}");
    assert_eq!(offsets["latest"], 8_000, "{offsets}");
    assert_eq!(offsets["at_time_0"], 0, "{offsets}");
    // So is the record with the largest timestamp, asked of a broker whose copy never held it
    // (it joined after, and holds only the newest batch; the others stop, so that it leads the
    // partition the question goes to).
    let output = kafka_script("cluster.py", &["dated", &brokers[0].kafka_addr, "dated"])
        .output()
        .unwrap();
    let dated = summary_of(&output, "cluster.py dated");
    let late = cluster.broker(4, &free_addr());
    for broker in brokers.into_iter().chain([joined]) {
        broker.terminate();
    }
    let output = kafka_script("cluster.py", &["newest", &late.kafka_addr, "dated"])
        .output()
        .unwrap();
    let newest = summary_of(&output, "cluster.py newest");
    assert_eq!(newest["offset"], 0, "{newest}");
    assert_eq!(newest["timestamp"], dated["ahead"], "{newest}");
}

#[test]
fn a_producer_id_issued_by_one_broker_is_its_owners_on_every_broker() {
    // Authorisation on (alice a super user, so only the producer ids' owners are checked):
    // the producer gets its id from one broker and writes to partitions led by all three.
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    support::add_user(&users, "alice", "alice-pw");
    let acls = dir.path().join("acls");
    std::fs::write(&acls, "").unwrap();
    let cluster = Cluster::start_with(&format!(
        "kafka_security_protocol = \"SASL_PLAINTEXT\"\nsasl_enabled_mechanisms = [\"PLAIN\"]\nusers_file = {:?}\nacls_file = {:?}\nsuper_users = [\"User:alice\"]\n",
        users.display().to_string(),
        acls.display().to_string(),
    ));
    let brokers = cluster.brokers(3);
    let bootstrap: Vec<&str> = brokers
        .iter()
        .map(|broker| broker.kafka_addr.as_str())
        .collect();
    let producer = start_script(
        "cluster.py",
        &[
            "produce-as",
            &bootstrap.join(","),
            "owned",
            "6",
            "3000",
            "alice",
            "alice-pw",
        ],
    );
    let summary = producer.summary();
    assert_eq!(triples(&summary, "acked").len(), 3_000, "{summary}");
}

#[test]
fn postgres_stopped_under_load_the_producer_finishes_with_nothing_lost_or_stored_twice() {
    let cluster = Cluster::start();
    let kafka: Vec<String> = (0..2).map(|_| free_addr()).collect();
    let first = cluster.broker(1, &kafka[0]);
    let second = cluster.broker(2, &kafka[1]);
    let producer = start_script(
        "cluster.py",
        &["produce", &kafka[0], "payments", "3", "20000"],
    );
    assert_eq!(producer.first_line.trim(), "half");
    cluster.postgres.stop();
    std::thread::sleep(Duration::from_secs(3));
    cluster.postgres.restart();
    let acked = triples(&producer.summary(), "acked");
    assert_eq!(acked.len(), 20_000);
    judge(&acked, &read_back(&kafka[1], "payments", 3));
    // Neither broker crashed: both answered retriable errors and went on by themselves.
    for broker in [&first, &second] {
        assert!(!broker.logged().contains("panicked"), "{}", broker.logged());
    }
    assert!(
        first.logged().contains("a cluster window was not stored"),
        "the stop was not met: {}",
        first.logged()
    );
}

#[test]
fn an_answer_lost_on_one_broker_is_retried_on_another_and_answered_with_the_original_offset() {
    let cluster = Cluster::start();
    let (a_addr, b_addr) = (free_addr(), free_addr());
    let a = cluster.broker(1, &a_addr);
    // The first Produce's answer is lost on its way back from broker A: the batch is stored.
    let faults = ["--kafka", "--api", "produce", "--drop-response-at", "1"];
    let (mut proxy, proxy_addr, _) = start_proxy("127.0.0.1:0", &a_addr, &faults);
    let bootstrap = format!("{proxy_addr},{b_addr}");
    let producer = start_script("cluster.py", &["one-by-one", &bootstrap, "retried", "10"]);
    assert_eq!(producer.first_line.trim(), "first");
    std::thread::sleep(Duration::from_millis(1500));
    // A goes before the client's retry could reach it; B is the cluster now.
    a.kill();
    let killed = std::time::SystemTime::now();
    let b = cluster.broker(2, &b_addr);
    let summary = producer.summary();
    let acked = triples(&summary, "acked");
    let first_acked = std::time::UNIX_EPOCH
        + Duration::from_secs_f64(summary["first_acked_at"][0].as_f64().unwrap());
    assert!(
        first_acked > killed,
        "v-0 was acknowledged before A was killed: its answer was not lost"
    );
    let _ = proxy.kill();
    let read = read_back(&b.kafka_addr, "retried", 1);
    assert_eq!(read.len(), 10, "{read:?}");
    judge(&acked, &read);
    // v-0 was stored by A before its answer was lost, and the retry B took was a duplicate.
    assert_eq!(acked[0], (0, 0, "v-0".to_owned()));
}

/// One Produce of `batch` to partition 0 of `topic`: (error code, base offset).
async fn produce_once(addr: &str, topic: &str, batch: bytes::Bytes) -> (i16, i64) {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut connection = minibroker_kafka_client::KafkaConnection::connect(addr)
        .await
        .unwrap();
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch)),
                ]),
        ]);
    let answer: ProduceResponse = connection.call(ApiKey::Produce, 9, &request).await.unwrap();
    let partition = &answer.responses[0].partition_responses[0];
    (partition.error_code, partition.base_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_batch_sent_to_two_brokers_at_once_is_stored_once() {
    let cluster = Cluster::start();
    let brokers = cluster.brokers(2);
    let (first, second) = (&brokers[0].kafka_addr, &brokers[1].kafka_addr);
    const ROUNDS: i32 = 30;
    for sequence in 0..ROUNDS {
        let writer = minibroker_records::Writer {
            producer_id: 7,
            epoch: 0,
            base_sequence: sequence,
        };
        let value =
            minibroker_records::NewRecord::value(bytes::Bytes::from(format!("r-{sequence}")));
        let batch = minibroker_records::encode(writer, &[value], 0).unwrap();
        let (one, other) = tokio::join!(
            produce_once(first, "race", batch.clone()),
            produce_once(second, "race", batch)
        );
        // Both answered with the one offset it is stored at: one ACCEPTED, one DUPLICATE.
        assert_eq!(one, (0, i64::from(sequence)), "round {sequence}");
        assert_eq!(other, one, "round {sequence}");
    }
    let client = minibroker_cluster::connect(&cluster.postgres.url)
        .await
        .unwrap();
    assert_eq!(postgres::stored_batches(&client).await, i64::from(ROUNDS));
}

/// `check --kafka` on three brokers of a new cluster with `args` (and the lost requests and
/// answers of `CHECK_FAULTS`): what it said, asserting it passed.
fn check_on_three_brokers(args: &[&str]) -> String {
    check_on_three_brokers_with(args, |_| Vec::new())
}

/// [`check_on_three_brokers`], with the flags `more` makes from the brokers too.
fn check_on_three_brokers_with(
    args: &[&str],
    more: impl FnOnce(&[ServeProcess]) -> Vec<String>,
) -> String {
    let cluster = Cluster::start();
    let brokers = cluster.brokers(3);
    let bootstrap: Vec<&str> = brokers.iter().map(|b| b.kafka_addr.as_str()).collect();
    let output = Command::new(BIN)
        .args(["check", "--kafka", &bootstrap.join(",")])
        .args(args)
        .args(more(&brokers))
        .args(CHECK_FAULTS)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    said
}

#[test]
fn the_checker_holds_on_three_brokers() {
    let said =
        check_on_three_brokers(&["--producers", "3", "--records", "300", "--partitions", "3"]);
    assert!(
        said.contains("verdict: EXACTLY-ONCE HELD - all 900 acknowledged records"),
        "{said}"
    );
}

#[test]
fn the_transactional_checker_holds_on_three_brokers() {
    let said = check_on_three_brokers(&[
        "--transactional",
        "--producers",
        "2",
        "--records",
        "200",
        "--partitions",
        "2",
    ]);
    assert!(
        said.contains("verdict: EXACTLY-ONCE HELD - all 400 acknowledged records"),
        "{said}"
    );
    // 2 producers x 200 records in batches of 5, 10 batches per transaction, every fourth
    // transaction aborted and written again.
    assert!(
        said.contains("transactions                8   committed; 2 aborted"),
        "{said}"
    );
}

/// A broker SIGKILLed by `--during` halfway through: the checker's producers ask the cluster
/// for the new leaders of its partitions and finish, every record acknowledged once.
#[test]
fn the_checker_holds_on_three_brokers_with_one_killed_during_the_run() {
    for mode in [&[][..], &["--transactional"][..]] {
        let said = check_on_three_brokers_with(
            &[
                mode,
                &["--producers", "2", "--records", "200", "--partitions", "3"],
            ]
            .concat(),
            |brokers| {
                // Not the first: the checker's bootstrap broker is the first that answers.
                let victim = brokers[2].pid();
                vec!["--during".into(), format!("kill -9 {victim}")]
            },
        );
        assert!(
            said.contains("verdict: EXACTLY-ONCE HELD - all 400 acknowledged records"),
            "{mode:?}: {said}"
        );
        assert!(said.contains("and ended with exit status: 0"), "{said}");
    }
}
