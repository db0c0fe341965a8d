//! With `check --transactional`, the `read_committed` group's consumers are processors, as in a
//! consume-transform-produce pipeline: what each poll shows them is written to a second topic
//! (each record's value as it came, to the partition of the same number) and the group's
//! offsets are committed in the same transaction (TxnOffsetCommit under the member's
//! generation, KIP-447). A transaction that fails is aborted and the member reads again from
//! the committed offsets. If the broker keeps offsets and output together, the second topic
//! holds every committed input record exactly once, each partition in its input's order
//! ([`minibroker_verify::check_pipeline`]).

use anyhow::Result;
use minibroker_client::NewRecord;
use minibroker_kafka_client::{
    GroupMember, KafkaConsumer, KafkaProduceError, KafkaProducer, KafkaProducerConfig, Polled,
};

/// One member's transactional producer.
pub struct Processor {
    producer: KafkaProducer,
    /// The topic read, and the topic written.
    input: String,
    output: String,
}

impl Processor {
    /// The processor of `transactional_id` (the same for every incarnation of a member, so a
    /// new one fences the one before), writing `output`, on the broker at `kafka`.
    ///
    /// # Errors
    /// If the transactional producer cannot start.
    pub async fn start(
        kafka: &str,
        (input, output): (&str, &str),
        transactional_id: &str,
    ) -> Result<Self> {
        // The protocol before KIP-890 part 2, as librdkafka and the Java client speak it with
        // offsets in a transaction.
        let config = KafkaProducerConfig {
            before_part_2: true,
            ..KafkaProducerConfig::default()
        };
        let producer =
            KafkaProducer::connect_transactional(kafka, config, transactional_id).await?;
        Ok(Self {
            producer,
            input: input.to_owned(),
            output: output.to_owned(),
        })
    }

    /// Writes what `polled` showed and commits `consumer`'s positions, in one transaction. On a
    /// failure the transaction is aborted and the consumer rewound to the committed offsets;
    /// the error is returned only when the processor cannot go on (fenced by a newer one).
    ///
    /// # Errors
    /// A fenced producer, or a consumer that cannot rewind.
    pub async fn process(&mut self, consumer: &mut KafkaConsumer, polled: &[Polled]) -> Result<()> {
        match self.transaction(consumer, polled).await {
            Ok(()) => Ok(()),
            Err(error) if error.is_fenced() => anyhow::bail!("processor fenced: {error}"),
            Err(error) => {
                tracing::debug!(%error, "a processor's transaction failed: aborted, read again");
                let _ = self.producer.abort().await;
                consumer.rewind().await?;
                Ok(())
            }
        }
    }

    async fn transaction(
        &mut self,
        consumer: &KafkaConsumer,
        polled: &[Polled],
    ) -> Result<(), KafkaProduceError> {
        self.producer.begin()?;
        for part in polled.iter().filter(|p| !p.records.is_empty()) {
            let records: Vec<NewRecord> = part
                .records
                .iter()
                .map(|r| NewRecord::value(r.value.clone()))
                .collect();
            self.producer
                .send(&self.output, part.partition, &records)
                .await?;
        }
        let offsets: Vec<(String, i32, i64)> = consumer
            .positions()
            .iter()
            .map(|(&partition, &offset)| (self.input.clone(), partition, offset))
            .collect();
        let member = GroupMember {
            group: consumer.group(),
            generation: consumer.generation(),
            member_id: consumer.member_id(),
        };
        self.producer.send_offsets(member, &offsets).await?;
        self.producer.commit().await?;
        Ok(())
    }
}
