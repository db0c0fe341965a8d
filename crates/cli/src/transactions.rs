//! `minibroker transactions`: a broker's transactions, over the Kafka protocol — the list, one
//! transactional id's state, the producers of a topic with where each one's open transaction
//! began (what holds a partition's last stable offset back), and the abort of a transaction an
//! application left open (as Kafka 4's `kafka-transactions.sh force-terminate` does: the id's
//! epoch is bumped, which fences its producer and aborts its open transaction).

use anyhow::{Result, bail};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use minibroker_kafka_client::KafkaConnection;
use serde_json::json;

/// Flags of `transactions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The broker's Kafka listener (host:port).
    #[arg(long, global = true, default_value = "127.0.0.1:9092")]
    kafka: String,
    /// JSON lines instead of text: one object per line (for a list, one line holding the list).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Subcommand,
}

#[derive(Debug, clap::Subcommand)]
enum Subcommand {
    /// Every transactional id: its producer id and state.
    List {
        /// Only these states (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
        /// CompleteAbort).
        #[arg(long = "state")]
        states: Vec<String>,
    },
    /// One transactional id: state, producer id and epoch, timeout, start, partitions.
    Describe {
        /// The transactional id.
        transactional_id: String,
    },
    /// The producers of every partition of a topic, with where each one's open transaction
    /// began.
    Producers {
        /// The topic.
        #[arg(long)]
        topic: String,
    },
    /// Aborts the id's open transaction by bumping its epoch: its producer is fenced (its next
    /// request fails), and a new instance starts clean.
    Abort {
        /// The transactional id.
        transactional_id: String,
    },
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

pub async fn run(args: Args) -> Result<()> {
    let mut conn = KafkaConnection::connect(args.kafka.as_str())
        .await?
        .with_client_id("minibroker-transactions");
    match args.command {
        Subcommand::List { states } => list(&mut conn, states, args.json).await,
        Subcommand::Describe { transactional_id } => {
            describe(&mut conn, &transactional_id, args.json).await
        }
        Subcommand::Producers { topic } => producers(&mut conn, &topic, args.json).await,
        Subcommand::Abort { transactional_id } => {
            abort(&mut conn, &transactional_id, args.json).await
        }
    }
}

async fn list(conn: &mut KafkaConnection, states: Vec<String>, json_out: bool) -> Result<()> {
    let request = ListTransactionsRequest::default()
        .with_state_filters(states.iter().map(|s| text(s)).collect());
    let answer: ListTransactionsResponse = conn.call(ApiKey::ListTransactions, 1, &request).await?;
    if !answer.unknown_state_filters.is_empty() {
        bail!(
            "unknown states: {} (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort)",
            answer
                .unknown_state_filters
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if json_out {
        let listed: Vec<_> = answer
            .transaction_states
            .iter()
            .map(|t| {
                json!({
                    "transactional_id": t.transactional_id.0.as_str(),
                    "producer_id": t.producer_id.0,
                    "state": t.transaction_state.as_str(),
                })
            })
            .collect();
        println!("{}", json!({ "transactions": listed }));
        return Ok(());
    }
    println!("{:<40} {:>12} STATE", "TRANSACTIONAL ID", "PRODUCER ID");
    for t in &answer.transaction_states {
        println!(
            "{:<40} {:>12} {}",
            t.transactional_id.0.as_str(),
            t.producer_id.0,
            t.transaction_state.as_str()
        );
    }
    Ok(())
}

async fn describe(conn: &mut KafkaConnection, id: &str, json_out: bool) -> Result<()> {
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![TransactionalId(text(id))]);
    let answer: DescribeTransactionsResponse =
        conn.call(ApiKey::DescribeTransactions, 0, &request).await?;
    let Some(state) = answer.transaction_states.first() else {
        bail!("the broker did not describe {id:?}");
    };
    if state.error_code == ResponseError::TransactionalIdNotFound.code() {
        bail!("no transactional id {id:?} on this broker");
    }
    if state.error_code != 0 {
        bail!(
            "DescribeTransactions answered {}",
            minibroker_kafka_client::error_name(state.error_code)
        );
    }
    let partitions: Vec<String> = state
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| format!("{}/{p}", t.topic.0.as_str()))
        })
        .collect();
    if json_out {
        println!(
            "{}",
            json!({
                "transactional_id": id,
                "state": state.transaction_state.as_str(),
                "producer_id": state.producer_id.0,
                "epoch": state.producer_epoch,
                "timeout_ms": state.transaction_timeout_ms,
                "start_ms": state.transaction_start_time_ms,
                "partitions": partitions,
            })
        );
        return Ok(());
    }
    println!(
        "transactional id {id}: {} (producer {} epoch {}, timeout {} ms)",
        state.transaction_state.as_str(),
        state.producer_id.0,
        state.producer_epoch,
        state.transaction_timeout_ms
    );
    if state.transaction_start_time_ms >= 0 {
        let age = minibroker_records::now_millis() - state.transaction_start_time_ms;
        println!("  open for {age} ms, on {}", partitions.join(" "));
    }
    Ok(())
}

async fn producers(conn: &mut KafkaConnection, topic: &str, json_out: bool) -> Result<()> {
    let partitions = partition_count(conn, topic).await?;
    let request = DescribeProducersRequest::default().with_topics(vec![
        TopicRequest::default()
            .with_name(TopicName(text(topic)))
            .with_partition_indexes((0..partitions).collect()),
    ]);
    let answer: DescribeProducersResponse =
        conn.call(ApiKey::DescribeProducers, 0, &request).await?;
    let mut rows = Vec::new();
    for partition in answer.topics.iter().flat_map(|t| &t.partitions) {
        if partition.error_code != 0 {
            bail!(
                "partition {}: {}",
                partition.partition_index,
                partition.error_message.as_ref().map_or("refused", |m| &**m)
            );
        }
        for p in &partition.active_producers {
            rows.push((partition.partition_index, p.clone()));
        }
    }
    if json_out {
        let producers: Vec<_> = rows
            .iter()
            .map(|(partition, p)| {
                json!({
                    "partition": partition,
                    "producer_id": p.producer_id.0,
                    "epoch": p.producer_epoch,
                    "last_sequence": p.last_sequence,
                    "last_timestamp": p.last_timestamp,
                    "open_transaction_from": (p.current_txn_start_offset >= 0).then_some(p.current_txn_start_offset),
                })
            })
            .collect();
        println!("{}", json!({ "topic": topic, "producers": producers }));
        return Ok(());
    }
    println!(
        "{:>9} {:>12} {:>6} {:>13} OPEN TRANSACTION FROM",
        "PARTITION", "PRODUCER ID", "EPOCH", "LAST SEQUENCE"
    );
    for (partition, p) in &rows {
        let open = if p.current_txn_start_offset >= 0 {
            p.current_txn_start_offset.to_string()
        } else {
            "-".to_owned()
        };
        println!(
            "{partition:>9} {:>12} {:>6} {:>13} {open}",
            p.producer_id.0, p.producer_epoch, p.last_sequence
        );
    }
    Ok(())
}

/// How many partitions `topic` has (Metadata, without creating it).
async fn partition_count(conn: &mut KafkaConnection, topic: &str) -> Result<i32> {
    use kafka_protocol::messages::MetadataResponse;
    let request = minibroker_kafka_client::metadata_request(topic, false);
    let answer: MetadataResponse = conn.call(ApiKey::Metadata, 9, &request).await?;
    match answer.topics.first() {
        Some(found) if found.error_code == 0 => Ok(found.partitions.len() as i32),
        _ => bail!("no topic {topic:?} on this broker"),
    }
}

/// How often an abort looks for the id's coordinator again while it moves (a cluster's broker
/// died and its lease has not run out yet).
const COORDINATOR_TRIES: usize = 20;

/// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS: ask again.
const MOVED: [i16; 3] = [16, 15, 14];

/// The address of transactional id `id`'s coordinator, as the broker of `conn` names it.
async fn coordinator_of(conn: &mut KafkaConnection, id: &str) -> Result<String> {
    match conn.find_coordinator(id, 1).await? {
        Ok(coordinator) => Ok(coordinator.addr),
        Err(code) => bail!(
            "no coordinator for {id:?}: {}; try again",
            minibroker_kafka_client::error_name(code)
        ),
    }
}

async fn abort(conn: &mut KafkaConnection, id: &str, json_out: bool) -> Result<()> {
    let described: DescribeTransactionsResponse = conn
        .call(
            ApiKey::DescribeTransactions,
            0,
            &DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(text(id))]),
        )
        .await?;
    let Some(before) = described
        .transaction_states
        .first()
        .filter(|s| s.error_code == 0)
    else {
        bail!("no transactional id {id:?} on this broker");
    };
    let was = before.transaction_state.to_string();
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(text(id))))
        .with_transaction_timeout_ms(before.transaction_timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    // The id's coordinator bumps the epoch: in a cluster, whichever broker holds its lease.
    let mut answer = InitProducerIdResponse::default();
    for _ in 0..COORDINATOR_TRIES {
        // A coordinator that does not answer (a cluster's broker that died) is looked for again.
        if let Ok(coordinator) =
            KafkaConnection::connect(coordinator_of(conn, id).await?.as_str()).await
        {
            answer = coordinator
                .with_client_id("minibroker-transactions")
                .call(ApiKey::InitProducerId, 4, &request)
                .await?;
            if !MOVED.contains(&answer.error_code) {
                break;
            }
        } else {
            answer = answer.with_error_code(MOVED[0]);
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    if answer.error_code != 0 {
        bail!(
            "the broker refused: {}; try again",
            minibroker_kafka_client::error_name(answer.error_code)
        );
    }
    if json_out {
        println!(
            "{}",
            json!({
                "transactional_id": id,
                "was": was,
                "producer_id": answer.producer_id.0,
                "epoch": answer.producer_epoch,
            })
        );
    } else if was == "Ongoing" {
        println!(
            "aborted the open transaction of {id}; producer {} is at epoch {} now, its older instance fenced",
            answer.producer_id.0, answer.producer_epoch
        );
    } else {
        println!(
            "{id} had no open transaction ({was}); producer {} is at epoch {} now, its older instance fenced",
            answer.producer_id.0, answer.producer_epoch
        );
    }
    Ok(())
}
