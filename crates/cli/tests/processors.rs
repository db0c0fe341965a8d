//! Consume-transform-produce processors on real clients (`tests/kafka/processors.py`, one on
//! confluent-kafka, one on aiokafka) that keep running while a durable `minibroker serve` is
//! SIGKILLed and restarted under them, three times: each keeps its one member id and its one
//! assignment (a restart of the broker alone never answers UNKNOWN_MEMBER_ID or rebalances the
//! group), and its output is exactly once.
//!
//! Before groups kept their members, each restart cost the confluent-kafka processor its
//! membership (UNKNOWN_MEMBER_ID twice, three assignments, two member ids in one run) and the
//! aiokafka one three UNKNOWN_MEMBER_IDs and four assignments.

mod support;

use std::time::Duration;
use support::{
    ServeProcess, durable_command, fill_source, free_addr, kafka_script, start_script, summary_of,
};

const RECORDS: usize = 300;

fn through_three_broker_kills(client: &str) {
    let dir = tempfile::tempdir().unwrap();
    let addrs = (free_addr(), free_addr());
    let mut broker = ServeProcess::spawn(&mut durable_command(&addrs, dir.path()));
    let kafka = broker.kafka_addr.clone();
    let (source, sink, group) = (
        format!("{client}-in"),
        format!("{client}-out"),
        format!("{client}-processor"),
    );
    fill_source(&kafka, &source, RECORDS);
    // 30 transactions of 10, 300 ms apart: about 9 s, through the kills at 2, 4 and 6 s.
    let processor = start_script(
        "processors.py",
        &[
            "run",
            client,
            &kafka,
            &source,
            &sink,
            &format!("{client}-txn"),
            &group,
            "300",
        ],
    );
    assert!(
        processor.first_line.contains("started"),
        "{}",
        processor.first_line
    );
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(2));
        broker.kill(); // SIGKILL
        broker = ServeProcess::spawn(&mut durable_command(&addrs, dir.path()));
    }
    let summary = processor.summary();
    assert_eq!(summary["unknown_member_id"], 0, "{summary}");
    assert_eq!(summary["members"], 1, "{summary}");
    assert_eq!(summary["assignments"], 1, "{summary}");
    let args = [
        "check-output",
        &kafka,
        &source,
        &sink,
        &RECORDS.to_string(),
        &group,
    ];
    let output = kafka_script("transactions.py", &args).output().unwrap();
    let output = summary_of(&output, "check-output");
    assert_eq!(output["duplicates"], 0, "{output}");
    assert_eq!(output["read"], RECORDS, "{output}");
}

#[test]
fn a_confluent_kafka_processor_keeps_its_membership_and_exactly_once_through_broker_kills() {
    through_three_broker_kills("confluent");
}

#[test]
fn an_aiokafka_processor_keeps_its_membership_and_exactly_once_through_broker_kills() {
    through_three_broker_kills("aiokafka");
}
