//! Label values a client chose cannot change the exposition's structure: a group id that tries to
//! close its sample, add a series and end the exposition early stays one label value.

use minibroker_broker::Unacknowledged;
use minibroker_host::Config;
use minibroker_host::Host;

#[tokio::test]
async fn a_group_id_cannot_inject_series_or_end_the_exposition() {
    let host = Host::start(&Config::default()).expect("a broker");
    let broker = host.broker();
    let batch = minibroker_records::encode(
        minibroker_records::Writer {
            producer_id: 1,
            epoch: 0,
            base_sequence: 0,
        },
        &[minibroker_records::NewRecord::value("v")],
        0,
    )
    .expect("encodes");
    let mut unacknowledged = Unacknowledged::default();
    broker
        .produce(&mut unacknowledged, "t", 0, &batch)
        .expect("produces");
    unacknowledged.commit().await.expect("stores");
    let hostile = "g\"} 1\nminibroker_injected_total 42\n# EOF\n\\";
    host.node()
        .groups()
        .commit(hostile, -1, "", vec![("t".into(), 0, 0, None)])
        .await
        .expect("commits");
    let text = minibroker_metrics::render(host.node()).expect("renders");
    assert!(
        !text
            .lines()
            .any(|line| line.starts_with("minibroker_injected")),
        "{text}"
    );
    let ends: Vec<usize> = (text.lines().enumerate())
        .filter(|(_, line)| *line == "# EOF")
        .map(|(at, _)| at)
        .collect();
    assert_eq!(ends, [text.lines().count() - 1], "{text}");
    let lag = text
        .lines()
        .find(|line| line.starts_with("minibroker_group_lag{"))
        .expect("the group's lag");
    assert!(
        lag.contains(r#"group="g\"} 1\nminibroker_injected_total 42\n# EOF\n\\""#),
        "{lag}"
    );
}
