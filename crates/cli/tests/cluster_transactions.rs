//! Transactions across a cluster of `minibroker serve --cluster` processes on a real
//! PostgreSQL, driven by real clients (`tests/kafka/transactions.py`): confluent-kafka,
//! kafka-python and aiokafka commit and abort through the cluster; a consume-transform-produce
//! pipeline stays exactly-once through SIGKILLs of its processor and of its transaction
//! coordinator's broker; a transaction whose coordinator died is aborted past its timeout by
//! another broker. (The transactional checker on three brokers is `cluster.rs`'s.)

mod cluster_support;
#[path = "../../cluster/tests/support/mod.rs"]
mod postgres;
mod support;

use cluster_support::{Cluster, call, coordinator, signal};
use std::time::{Duration, Instant};
use support::{ServeProcess, fill_source, free_addr, kafka_script, start_script, summary_of};

fn script(args: &[&str]) -> serde_json::Value {
    let output = kafka_script("transactions.py", args).output().unwrap();
    summary_of(&output, &format!("transactions.py {args:?}"))
}

/// Three brokers of a new cluster, and their bootstrap list.
fn three_brokers(cluster: &Cluster) -> (Vec<Option<ServeProcess>>, Vec<String>) {
    let kafka: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let brokers = (0..3)
        .map(|i| Some(cluster.broker(i as i32 + 1, &kafka[i])))
        .collect();
    (brokers, kafka)
}

#[test]
fn three_clients_commit_and_abort_through_the_cluster() {
    let cluster = Cluster::start();
    let (_brokers, kafka) = three_brokers(&cluster);
    let bootstrap = kafka.join(",");
    for (client, topic) in [
        ("confluent", "basics-c"),
        ("kafka-python", "basics-kp"),
        ("aiokafka", "basics-aio"),
    ] {
        let summary = script(&["basics", client, &bootstrap, topic]);
        assert_eq!(summary["read_committed"], 12, "{client}: {summary}");
        assert_eq!(
            summary["after_commit"]["read_committed"], 15,
            "{client}: {summary}"
        );
    }
}

/// The node id FindCoordinator names for transactional id `id` through `addr`.
fn transaction_coordinator(addr: &str, id: &str) -> i32 {
    coordinator(addr, id, 1)
}

/// The pipeline's processor (transactional id "processor") through `bootstrap`, stopped in the
/// middle of a transaction once it produced `die_after` records, waiting to be killed.
fn processor_stuck(bootstrap: &str, die_after: &str) -> std::process::Child {
    let args = [
        "process",
        bootstrap,
        "pipe-in",
        "pipe-out",
        "processor",
        die_after,
    ];
    let stuck = start_script("transactions.py", &args);
    assert!(
        stuck.first_line.contains("mid_transaction"),
        "{}",
        stuck.first_line
    );
    stuck.child
}

/// SIGKILLs the broker coordinating transactional id `id` (asked through `kafka[0]`); returns
/// its place in `brokers`.
fn kill_coordinator(brokers: &mut [Option<ServeProcess>], kafka: &[String], id: &str) -> usize {
    let at = usize::try_from(transaction_coordinator(&kafka[0], id) - 1).unwrap();
    brokers[at].take().expect("a live coordinator").kill();
    at
}

#[test]
fn a_pipeline_is_exactly_once_through_killed_processors_and_a_killed_coordinator() {
    let cluster = Cluster::start();
    let (mut brokers, kafka) = three_brokers(&cluster);
    let bootstrap = kafka.join(",");
    fill_source(&bootstrap, "pipe-in", 300);
    let started = Instant::now();

    // The processor is killed mid-transaction, twice.
    for die_after in ["25", "40"] {
        let mut stuck = processor_stuck(&bootstrap, die_after);
        stuck.kill().unwrap();
        stuck.wait().unwrap();
    }

    // A processor stuck with a transaction open, and its coordinator's broker killed.
    let mut child = processor_stuck(&bootstrap, "30");
    let back = kill_coordinator(&mut brokers, &kafka, "processor");
    child.kill().unwrap();
    child.wait().unwrap();
    // The killed broker comes back (its node id free once its lease ran out).
    let node_id = i32::try_from(back + 1).unwrap();
    brokers[back] = Some(cluster.broker(node_id, &kafka[back]));

    // A processor whose EndTxn the test holds in the database (it holds the group's committed
    // offsets, which the end moves); the coordinator's broker is killed meanwhile.
    let mut ending = None;
    let killed = kill_coordinator_mid_end(
        (&cluster, &mut brokers, &kafka),
        "processor",
        "SELECT 1 FROM minibroker.group_offsets WHERE group_id = 'processor' FOR UPDATE",
        || {
            let processor = kafka_script(
                "transactions.py",
                &["process", &bootstrap, "pipe-in", "pipe-out", "processor"],
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
            ending = Some(processor);
        },
    );
    let mut ending = ending.unwrap();
    ending.kill().unwrap();
    ending.wait().unwrap();
    let live: Vec<&str> = (0..3)
        .filter(|at| *at != killed)
        .map(|at| kafka[at].as_str())
        .collect();
    let live = live.join(",");

    // A last processor on the live brokers goes on from what the ends left: whatever the end
    // held in flight did, it did whole.
    let rest = script(&["process", &live, "pipe-in", "pipe-out", "processor"]);
    assert!(rest["produced"].as_u64().unwrap() < 300, "{rest}");
    let output = script(&["check-output", &live, "pipe-in", "pipe-out", "300"]);
    assert_eq!(output["duplicates"], 0, "{output}");
    assert_eq!(output["read"], 300, "{output}");
    assert_eq!(output["remaining"], 0, "{output}");
    assert_eq!(output["in_order"], true, "{output}");
    eprintln!("pipeline done in {:?}: {output}", started.elapsed());
}

#[test]
fn a_coordinator_killed_between_an_end_and_its_answer_leaves_the_transaction_whole() {
    const PARTITIONS: usize = 60;
    let cluster = Cluster::start();
    let (mut brokers, kafka) = three_brokers(&cluster);
    let bootstrap = kafka.join(",");
    let scratch = tempfile::tempdir().unwrap();
    let go = scratch.path().join("go");
    // One record in each of 60 partitions; the commit waits for the file `go`.
    let ending = start_script(
        "transactions.py",
        &[
            "produce-wide",
            &bootstrap,
            "wide",
            "wide-txn",
            &PARTITIONS.to_string(),
            "commit",
            go.to_str().unwrap(),
        ],
    );
    assert!(
        ending.first_line.contains("ending"),
        "{}",
        ending.first_line
    );
    // The test holds partition 59's row: the end, once sent, waits there, with its request
    // taken and its answer not yet given, while the coordinator's broker is killed.
    let killed = kill_coordinator_mid_end(
        (&cluster, &mut brokers, &kafka),
        "wide-txn",
        "SELECT 1 FROM minibroker.partitions p JOIN minibroker.topics t USING (topic_id)
         WHERE t.name = 'wide' AND p.partition = 59 FOR UPDATE OF p",
        || std::fs::write(&go, "").unwrap(),
    );
    let mut child = ending.child;
    let _ = child.wait();
    let live = kafka[(killed + 1) % 3].clone();
    // A new instance of the transactional id fences the old one: its transaction is then
    // either committed whole or aborted whole, never in part, and no LSO stays behind.
    let fenced = script(&[
        "produce-open",
        &live,
        "wide-next",
        "wide-txn",
        "1",
        "commit",
    ]);
    assert_eq!(fenced["written"], 1, "{fenced}");
    let read = script(&[
        "read",
        &live,
        "wide",
        &PARTITIONS.to_string(),
        "read_committed",
    ]);
    let values = read["values"].as_array().unwrap().len();
    assert!(
        values == 0 || values == PARTITIONS,
        "a torn transaction: {read}"
    );
    let stable = read["stable_offsets"].as_array().unwrap();
    assert!(
        stable.iter().all(|offset| offset.as_i64().unwrap() == 2),
        "every partition holds the record and one marker: {read}"
    );
    eprintln!("the end killed in flight left {values} of {PARTITIONS} records committed");
}

/// Holds the rows `lock` selects (FOR UPDATE, in a transaction of the test's), runs `start`,
/// which sends transactional id `id`'s EndTxn, and once that end waits for the rows in the
/// database, between its request and its answer, SIGKILLs the id's coordinator and lets the
/// rows go. Returns the killed broker's place.
fn kill_coordinator_mid_end(
    (cluster, brokers, kafka): (&Cluster, &mut [Option<ServeProcess>], &[String]),
    id: &str,
    lock: &str,
    start: impl FnOnce(),
) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let holder = runtime
        .block_on(minibroker_cluster::connect(&cluster.postgres.url))
        .unwrap();
    runtime.block_on(async {
        holder.batch_execute("BEGIN").await.unwrap();
        holder.execute(lock, &[]).await.unwrap();
    });
    start();
    let watcher = runtime
        .block_on(minibroker_cluster::connect(&cluster.postgres.url))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while runtime.block_on(ends_waiting(&watcher)) == 0 {
        assert!(
            Instant::now() < deadline,
            "the end never reached the database"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = kill_coordinator(brokers, kafka, id);
    runtime.block_on(holder.batch_execute("ROLLBACK")).unwrap();
    killed
}

/// How many ends of a transaction wait for a lock in the database.
async fn ends_waiting(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND query LIKE '%end_transaction%'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[test]
fn a_transaction_whose_coordinator_died_is_aborted_at_its_timeout_by_another_broker() {
    let cluster = Cluster::start();
    let (mut brokers, kafka) = three_brokers(&cluster);
    let bootstrap = kafka.join(",");
    // A transaction of 5 records left open, with a timeout of 3 s.
    let open = start_script(
        "transactions.py",
        &[
            "produce-open",
            &bootstrap,
            "orphan",
            "orphan-txn",
            "5",
            "open",
            "3000",
        ],
    );
    let killed = kill_coordinator(&mut brokers, &kafka, "orphan-txn");
    let mut child = open.child;
    child.kill().unwrap();
    child.wait().unwrap();
    let live = kafka[(killed + 1) % 3].clone();
    // The LSO moves on: nothing of the transaction is read_committed, and the partitions'
    // stable offsets pass its abort.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let read = script(&["read", &live, "orphan", "3", "read_committed"]);
        let stable: Vec<i64> = read["stable_offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|offset| offset.as_i64().unwrap())
            .collect();
        let values = read["values"].as_array().unwrap().len();
        if stable.iter().sum::<i64>() > 5 {
            assert_eq!(values, 0, "{read}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the orphaned transaction holds the LSO back: {read}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_coordinator_stopped_past_its_lease_and_resumed_ends_no_transaction() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, EndTxnRequest,
        EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest,
        ProduceResponse, TopicName, TransactionalId,
    };
    use kafka_protocol::protocol::StrBytes;
    let text = |value: &str| StrBytes::from_string(value.to_owned());
    let cluster = Cluster::start();
    let (brokers, kafka) = three_brokers(&cluster);
    fill_source(&kafka[0], "held-out", 1);
    let id = TransactionalId(text("held-txn"));

    // A transaction begun at its coordinator: one batch written, then the coordinator stops.
    let coordinator = transaction_coordinator(&kafka[0], "held-txn");
    let at = usize::try_from(coordinator - 1).unwrap();
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(id.clone()))
        .with_transaction_timeout_ms(60_000);
    let init: InitProducerIdResponse = call(&kafka[at], ApiKey::InitProducerId, 3, &init);
    assert_eq!(init.error_code, 0, "{init:?}");
    let (producer_id, epoch) = (init.producer_id, init.producer_epoch);
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(id.clone())
        .with_v3_and_below_producer_id(producer_id)
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(text("held-out")))
                .with_partitions(vec![0]),
        ]);
    let added: AddPartitionsToTxnResponse = call(&kafka[at], ApiKey::AddPartitionsToTxn, 3, &add);
    let code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
    assert_eq!(code, 0, "{added:?}");
    let writer = minibroker_records::Writer {
        producer_id: producer_id.0,
        epoch,
        base_sequence: 0,
    };
    let batch = minibroker_records::encode_transactional(
        writer,
        &[minibroker_records::NewRecord::value("zombie")],
        0,
    )
    .unwrap();
    let produce = ProduceRequest::default()
        .with_transactional_id(Some(id.clone()))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(text("held-out")))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch)),
                ]),
        ]);
    let other = (at + 1) % 3;
    let produced: ProduceResponse = call(&kafka[other], ApiKey::Produce, 9, &produce);
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    signal(brokers[at].as_ref().unwrap().pid(), "STOP");
    std::thread::sleep(Duration::from_millis(cluster_support::LEASE_MS * 2));

    // Another broker takes the id over; resumed, the old coordinator is asked to commit.
    let taken = transaction_coordinator(&kafka[other], "held-txn");
    assert_ne!(taken, coordinator);
    signal(brokers[at].as_ref().unwrap().pid(), "CONT");
    let end = EndTxnRequest::default()
        .with_transactional_id(id)
        .with_producer_id(producer_id)
        .with_producer_epoch(epoch)
        .with_committed(true);
    let ended: EndTxnResponse = call(&kafka[at], ApiKey::EndTxn, 3, &end);
    assert_eq!(ended.error_code, 16, "NOT_COORDINATOR: {ended:?}");
    // Nothing of it is committed: a read_committed consumer sees no record past the one the
    // topic was filled with, and the transaction is still open at the new coordinator.
    let read = script(&["read", &kafka[other], "held-out", "3", "read_committed"]);
    assert_eq!(read["values"].as_array().unwrap().len(), 1, "{read}");
    let described = std::process::Command::new(support::BIN)
        .args([
            "transactions",
            "--kafka",
            &kafka[other],
            "describe",
            "held-txn",
        ])
        .output()
        .unwrap();
    let described = String::from_utf8_lossy(&described.stdout).to_string();
    assert!(described.contains("Ongoing"), "{described}");

    // An operator, through the broker that was stopped (not the id's coordinator now): the
    // open transaction is listed, its producer seen holding the partition back, and aborted.
    let operator = |args: &[&str]| {
        let output = std::process::Command::new(support::BIN)
            .args(["transactions", "--kafka", &kafka[at], "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let listed = operator(&["list", "--state", "Ongoing"]);
    assert!(listed.contains("held-txn"), "{listed}");
    let producers = operator(&["producers", "--topic", "held-out"]);
    assert!(
        producers.contains(&format!("\"producer_id\":{}", producer_id.0)),
        "{producers}"
    );
    // The topic was filled in a transaction of its own: a record and its marker, then this one.
    assert!(
        producers.contains("\"open_transaction_from\":2"),
        "{producers}"
    );
    let aborted = operator(&["abort", "held-txn"]);
    assert!(aborted.contains("\"was\":\"Ongoing\""), "{aborted}");
    let read = script(&["read", &kafka[at], "held-out", "3", "read_committed"]);
    assert_eq!(read["values"].as_array().unwrap().len(), 1, "{read}");
    assert_eq!(
        read["stable_offsets"][0], 4,
        "past the record and the abort: {read}"
    );
}

#[test]
fn bench_transactional_measures_transactions_through_the_cluster_in_one_run() {
    let cluster = Cluster::start();
    let output = std::process::Command::new(support::BIN)
        .args([
            "bench",
            "--cluster",
            &cluster.postgres.url,
            "--transactional",
        ])
        .args([
            "--duration",
            "0.3",
            "--connections",
            "2",
            "--pairs",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        report["transactional_over_idempotent"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(
        report["read_committed_over_read_uncommitted"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{report}"
    );
}

#[test]
fn read_committed_below_a_copy_and_on_a_broker_joining_late_sees_exactly_what_committed() {
    // Each broker keeps one piece (1 MiB) of a partition in memory. Through the first go 5 MB
    // of transactions (one in three aborted), one more left open, and 2.5 MB of plain records
    // behind it.
    let cluster = Cluster::start_with("cluster_cache_bytes = 1\n");
    let first = cluster.broker(1, &free_addr());
    let second = cluster.broker(2, &free_addr());
    let writer = start_script(
        "transactions.py",
        &[
            "produce-many",
            &first.kafka_addr,
            "many",
            "8000",
            "600",
            "12000",
        ],
    );
    let summary: serde_json::Value = serde_json::from_str(writer.first_line.trim()).unwrap();
    let values_of = |key: &str| -> Vec<String> {
        summary[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|value| value.as_str().unwrap().to_owned())
            .collect()
    };
    let mut committed = values_of("committed");
    committed.sort();
    let mut after_abort = [committed.clone(), values_of("behind")].concat();
    after_abort.sort();
    let read_sorted = |addr: &str| {
        let read = script(&["read", addr, "many", "1", "read_committed"]);
        let mut values: Vec<String> = read["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|value| value.as_str().unwrap().to_owned())
            .collect();
        values.sort();
        (values, read["stable_offsets"][0].as_i64().unwrap())
    };
    // Read through the second broker, mostly from the database: what committed, and nothing
    // from the open transaction on.
    let (values, stable) = read_sorted(&second.kafka_addr);
    assert_eq!(values.len(), committed.len());
    assert!(
        values == committed,
        "read_committed read other values than committed"
    );
    // A broker joining now copies only the newest batches, all behind the open transaction:
    // its copy holds the last stable offset back for it all the same.
    let joined = cluster.broker(3, &free_addr());
    let (joined_values, joined_stable) = read_sorted(&joined.kafka_addr);
    assert!(
        joined
            .logged()
            .contains("the copy starts at the newest batches it keeps"),
        "{}",
        joined.logged()
    );
    assert_eq!(
        joined_stable, stable,
        "the open transaction holds the LSO back"
    );
    assert!(joined_values == committed);
    // Its writer killed, the open transaction is aborted at its timeout (while readers wait
    // at the LSO), and the LSO moves past the records behind it.
    let mut child = writer.child;
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while read_sorted(&joined.kafka_addr).1 <= stable {
        assert!(Instant::now() < deadline, "the LSO stays at {stable}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let (values, _) = read_sorted(&joined.kafka_addr);
    assert_eq!(values.len(), after_abort.len());
    assert!(
        values == after_abort,
        "what committed and the records behind"
    );
}
