//! The flags that name a topic, or one partition of it, on a broker; shared by several commands.

/// `--broker ADDR --topic T`.
#[derive(Debug, clap::Args)]
pub struct TopicArgs {
    /// Broker address (host:port).
    #[arg(long)]
    pub broker: String,
    /// Topic name.
    #[arg(long)]
    pub topic: String,
}

/// `--broker ADDR --topic T --partition P`.
#[derive(Debug, clap::Args)]
pub struct PartitionArgs {
    #[command(flatten)]
    pub topic: TopicArgs,
    /// Partition.
    #[arg(long)]
    pub partition: u32,
}
