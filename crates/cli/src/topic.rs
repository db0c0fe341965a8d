//! `minibroker topic create|list|describe|delete`: topics by hand, over the native protocol.

use anyhow::Result;
use minibroker_client::Client;
use serde_json::json;

use crate::target::TopicArgs;

/// What to do with topics.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a topic.
    Create {
        #[command(flatten)]
        target: TopicArgs,
        /// How many partitions.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// JSON lines instead of text: one line, {"created": TOPIC}.
        #[arg(long)]
        json: bool,
    },
    /// Every topic and its partition count.
    List {
        /// Broker address (host:port).
        #[arg(long)]
        broker: String,
        /// JSON lines instead of text: one line, {"topics": [{"topic", "partitions"}, ...]}.
        #[arg(long)]
        json: bool,
    },
    /// A topic's partitions: offsets, stored bytes, producers.
    Describe {
        #[command(flatten)]
        target: TopicArgs,
        /// JSON lines instead of text: one line, {"topic", "partitions": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Delete a topic and everything it stores.
    Delete {
        #[command(flatten)]
        target: TopicArgs,
        /// JSON lines instead of text: one line, {"deleted": TOPIC}.
        #[arg(long)]
        json: bool,
    },
}

/// Flags of `topic`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

pub async fn run(args: Args) -> Result<()> {
    let connect = |broker: &str| {
        let broker = broker.to_owned();
        async move {
            Client::connect(&broker, crate::connect::client_config(&broker)?)
                .await
                .map_err(anyhow::Error::from)
        }
    };
    match args.command {
        Command::Create {
            target,
            partitions,
            json,
        } => {
            connect(&target.broker)
                .await?
                .create_topic(&target.topic, partitions)
                .await?;
            done(json, "created", &target.topic);
        }
        Command::Delete { target, json } => {
            connect(&target.broker)
                .await?
                .delete_topic(&target.topic)
                .await?;
            done(json, "deleted", &target.topic);
        }
        Command::List { broker, json } => {
            let metadata = connect(&broker).await?.metadata().await?;
            if json {
                let topics: Vec<_> = metadata
                    .topics
                    .iter()
                    .map(|t| json!({"topic": t.name, "partitions": t.partitions}))
                    .collect();
                println!("{}", json!({ "topics": topics }));
            } else {
                for t in &metadata.topics {
                    println!("{} partitions={}", t.name, t.partitions);
                }
            }
        }
        Command::Describe { target, json } => {
            let topic = connect(&target.broker)
                .await?
                .describe_topic(&target.topic)
                .await?;
            if json {
                let partitions: Vec<_> = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        json!({
                            "partition": p.partition,
                            "log_start_offset": p.log_start_offset,
                            "log_end_offset": p.log_end_offset,
                            "stored_bytes": p.stored_bytes,
                            "producers": p.producers,
                        })
                    })
                    .collect();
                println!("{}", json!({"topic": topic.name, "partitions": partitions}));
            } else {
                println!(
                    "topic {}: {} partition(s)",
                    topic.name,
                    topic.partitions.len()
                );
                println!(
                    "{:>9} {:>14} {:>14} {:>14} {:>10}",
                    "PARTITION", "START", "END", "BYTES", "PRODUCERS"
                );
                for p in &topic.partitions {
                    println!(
                        "{:>9} {:>14} {:>14} {:>14} {:>10}",
                        p.partition,
                        p.log_start_offset,
                        p.log_end_offset,
                        p.stored_bytes,
                        p.producers
                    );
                }
            }
        }
    }
    Ok(())
}

fn done(json: bool, what: &str, topic: &str) {
    if json {
        println!("{}", json!({ what: topic }));
    } else {
        println!("{what} topic {topic}");
    }
}
