//! `minibroker topic create|list|describe|alter|delete`: topics by hand, over the native
//! protocol; `--config KEY=VALUE` sets a topic's own settings by Kafka's names (the broker checks
//! and saves them, as for the Kafka admin APIs).

use anyhow::{Context, Result, bail};
use minibroker_client::Client;
use minibroker_client::protocol::{TopicConfigChange, TopicConfigsResponse, TopicSetting};
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
        /// A setting of the topic's own, by Kafka's name (`retention.ms=60000`); repeatable.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = setting)]
        configs: Vec<(String, String)>,
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
    /// A topic's partitions (offsets, stored bytes, producers) and settings (each value and
    /// where it comes from: the topic, the broker or the default).
    Describe {
        #[command(flatten)]
        target: TopicArgs,
        /// JSON lines instead of text: one line, {"topic", "partitions": [...], "configs": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Change a topic's own settings: each `--config` set, then each `--delete-config` dropped
    /// (the broker's value applies again), all or none, saved and applied before the answer.
    Alter {
        #[command(flatten)]
        target: TopicArgs,
        /// A setting to give the topic (`retention.ms=60000`); repeatable.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = setting)]
        configs: Vec<(String, String)>,
        /// A setting of the topic's own to drop; repeatable.
        #[arg(long = "delete-config", value_name = "KEY")]
        deleted: Vec<String>,
        /// JSON lines instead of text: one line, {"altered": TOPIC}.
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
            configs,
            json,
        } => {
            let client = connect(&target.broker).await?;
            if configs.is_empty() {
                // The request every broker version knows.
                client.create_topic(&target.topic, partitions).await?;
            } else {
                let settings: Vec<TopicSetting<'_>> = configs
                    .iter()
                    .map(|(name, value)| TopicSetting { name, value })
                    .collect();
                client
                    .create_topic_with(&target.topic, partitions, &settings)
                    .await?;
            }
            done(json, "created", &target.topic);
        }
        Command::Alter {
            target,
            configs,
            deleted,
            json,
        } => {
            if configs.is_empty() && deleted.is_empty() {
                bail!("nothing to change: give --config KEY=VALUE or --delete-config KEY");
            }
            let changes: Vec<TopicConfigChange<'_>> = configs
                .iter()
                .map(|(name, value)| TopicConfigChange::Set(TopicSetting { name, value }))
                .chain(deleted.iter().map(|name| TopicConfigChange::Delete(name)))
                .collect();
            connect(&target.broker)
                .await?
                .alter_topic_configs(&target.topic, &changes)
                .await?;
            done(json, "altered", &target.topic);
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
            let client = connect(&target.broker).await?;
            let topic = client.describe_topic(&target.topic).await?;
            let configs = client.describe_topic_configs(&target.topic).await?;
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
                let configs: Vec<_> = configs
                    .configs
                    .iter()
                    .map(|c| json!({"name": c.name, "value": c.value, "source": c.source.to_string()}))
                    .collect();
                println!(
                    "{}",
                    json!({"topic": topic.name, "partitions": partitions, "configs": configs})
                );
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
                print_configs(&configs);
            }
        }
    }
    Ok(())
}

/// A `KEY=VALUE` flag.
fn setting(flag: &str) -> Result<(String, String)> {
    let (name, value) = flag
        .split_once('=')
        .with_context(|| format!("{flag:?} is not KEY=VALUE"))?;
    if name.is_empty() {
        bail!("{flag:?} has no KEY");
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// The settings table of `topic describe`.
fn print_configs(configs: &TopicConfigsResponse) {
    println!("{:<24} {:>20}  SOURCE", "CONFIG", "VALUE");
    for config in &configs.configs {
        println!(
            "{:<24} {:>20}  {}",
            config.name, config.value, config.source
        );
    }
}

fn done(json: bool, what: &str, topic: &str) {
    if json {
        println!("{}", json!({ what: topic }));
    } else {
        println!("{what} topic {topic}");
    }
}
