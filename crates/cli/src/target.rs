//! The flags that name one partition of a topic on a broker, shared by several commands.

/// `--broker ADDR --topic T --partition P`.
#[derive(Debug, clap::Args)]
pub struct PartitionArgs {
    /// Broker address (host:port).
    #[arg(long)]
    pub broker: String,
    /// Topic name.
    #[arg(long)]
    pub topic: String,
    /// Partition.
    #[arg(long)]
    pub partition: u32,
}
