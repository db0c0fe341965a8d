"""One of `minibroker check --client`'s producers: the check's workload written by a real Kafka
client, so that what the check judges is that client's behaviour as much as the broker's.

    python producer.py CLIENT BOOTSTRAP TOPIC INDEX RECORDS BATCH_SIZE PARTITIONS [TRANSACTIONAL_ID]

CLIENT is confluent-kafka (librdkafka), kafka-python or aiokafka. The producer writes RECORDS
records whose values are the payload ids p<INDEX>-<n>, BATCH_SIZE at a time, batch b to partition
(INDEX + b) % PARTITIONS, idempotently; with TRANSACTIONAL_ID, in transactions of 10 batches,
every fourth aborted and written again in the next. Each record acknowledged (for a transaction:
once it has committed) is printed as one JSON line {"acked": {...}} in the shape of the check's
acknowledgements (no producer id, epoch or sequence: the client keeps them to itself), each
transaction's end as {"committed": 1} or {"aborted": 1}, and a failure as {"failed": "..."} with
a non-zero exit. The timeouts are short, for a run through a faulty network.
"""

import asyncio
import json
import sys

BATCHES_PER_TRANSACTION = 10
ABORT_EVERY = 4
ATTEMPTS = 3


def say(**line):
    print(json.dumps(line), flush=True)


def acked(index, partition, offset, n):
    say(acked={"partition": partition, "producer_id": -1, "epoch": -1, "sequence": -1,
               "offset": offset, "records": 1, "first_payload": f"p{index}-{n}"})


class Workload:
    """Which record goes where, and which transactions abort."""

    def __init__(self, index, records, batch_size, partitions):
        self.index, self.records = index, records
        self.batch_size, self.partitions = batch_size, partitions

    def batches(self):
        """(partition, [payload numbers]) for every batch, in order."""
        batch = 0
        for start in range(0, self.records, self.batch_size):
            numbers = list(range(start, min(start + self.batch_size, self.records)))
            yield (self.index + batch) % self.partitions, numbers
            batch += 1

    def transactions(self):
        """(abort, batches) for every transaction: an aborted one is followed by its rewrite."""
        batches = list(self.batches())
        ended = 0
        for start in range(0, len(batches), BATCHES_PER_TRANSACTION):
            chunk = batches[start:start + BATCHES_PER_TRANSACTION]
            if ended % ABORT_EVERY == ABORT_EVERY - 1:
                yield True, chunk
                ended += 1
            yield False, chunk
            ended += 1


def value(index, n):
    return f"p{index}-{n}".encode()


# --- confluent-kafka (librdkafka) -------------------------------------------------------------

def run_confluent(bootstrap, topic, work, transactional_id):
    from confluent_kafka import KafkaException, Producer

    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
              "request.timeout.ms": 1000, "socket.timeout.ms": 2000, "retry.backoff.ms": 50,
              "message.timeout.ms": 60000, "linger.ms": 5}
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    delivered = []

    def on_delivery(error, message):
        if error is None:
            delivered.append((message.partition(), message.offset(), message.value()))
        else:
            delivered.append(error)

    def write(batches):
        delivered.clear()
        for partition, numbers in batches:
            for n in numbers:
                producer.produce(topic, value=value(work.index, n), partition=partition,
                                 on_delivery=on_delivery)
            producer.flush(60)
        errors = [d for d in delivered if not isinstance(d, tuple)]
        if errors:
            raise RuntimeError(f"not delivered: {errors[0]}")
        return list(delivered)

    if not transactional_id:
        for batch in work.batches():
            for partition, offset, raw in write([batch]):
                acked(work.index, partition, offset, int(raw.decode().split("-")[1]))
        return
    producer.init_transactions(30)
    for abort, batches in work.transactions():
        for attempt in range(ATTEMPTS):
            try:
                producer.begin_transaction()
                written = write(batches)
                if abort:
                    producer.abort_transaction(30)
                    say(aborted=1)
                else:
                    producer.commit_transaction(30)
                    say(committed=1)
                    for partition, offset, raw in written:
                        acked(work.index, partition, offset, int(raw.decode().split("-")[1]))
                break
            except (KafkaException, RuntimeError) as error:
                kafka_error = error.args[0] if isinstance(error, KafkaException) else None
                if attempt + 1 == ATTEMPTS or (kafka_error and kafka_error.fatal()):
                    raise
                producer.abort_transaction(30)


# --- kafka-python -----------------------------------------------------------------------------

def run_kafka_python(bootstrap, topic, work, transactional_id):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             transactional_id=transactional_id, request_timeout_ms=1000,
                             retry_backoff_ms=50, linger_ms=5)

    def write(batches):
        futures = []
        for partition, numbers in batches:
            futures += [(n, producer.send(topic, value=value(work.index, n), partition=partition))
                        for n in numbers]
            producer.flush(60)
        return [(n, future.get(timeout=60)) for n, future in futures]

    if not transactional_id:
        for batch in work.batches():
            for n, metadata in write([batch]):
                acked(work.index, metadata.partition, metadata.offset, n)
        producer.close()
        return
    producer.init_transactions()
    for abort, batches in work.transactions():
        for attempt in range(ATTEMPTS):
            try:
                producer.begin_transaction()
                written = write(batches)
                if abort:
                    producer.abort_transaction()
                    say(aborted=1)
                else:
                    producer.commit_transaction()
                    say(committed=1)
                    for n, metadata in written:
                        acked(work.index, metadata.partition, metadata.offset, n)
                break
            except Exception:  # noqa: BLE001 - the transaction is aborted and written again
                if attempt + 1 == ATTEMPTS:
                    raise
                producer.abort_transaction()
    producer.close()


# --- aiokafka ---------------------------------------------------------------------------------

async def run_aiokafka(bootstrap, topic, work, transactional_id):
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                transactional_id=transactional_id, request_timeout_ms=1000,
                                retry_backoff_ms=50, linger_ms=5)
    await producer.start()

    async def write(batches):
        written = []
        for partition, numbers in batches:
            futures = [(n, await producer.send(topic, value=value(work.index, n),
                                               partition=partition)) for n in numbers]
            written += [(n, await future) for n, future in futures]
        return written

    try:
        if not transactional_id:
            for batch in work.batches():
                for n, metadata in await write([batch]):
                    acked(work.index, metadata.partition, metadata.offset, n)
            return
        for abort, batches in work.transactions():
            for attempt in range(ATTEMPTS):
                try:
                    await producer.begin_transaction()
                    written = await write(batches)
                    if abort:
                        await producer.abort_transaction()
                        say(aborted=1)
                    else:
                        await producer.commit_transaction()
                        say(committed=1)
                        for n, metadata in written:
                            acked(work.index, metadata.partition, metadata.offset, n)
                    break
                except Exception:  # noqa: BLE001 - the transaction is aborted and written again
                    if attempt + 1 == ATTEMPTS:
                        raise
                    await producer.abort_transaction()
    finally:
        await producer.stop()


def main(argv):
    client, bootstrap, topic = argv[1], argv[2], argv[3]
    index, records, batch_size, partitions = (int(a) for a in argv[4:8])
    transactional_id = argv[8] if len(argv) > 8 else None
    work = Workload(index, records, batch_size, partitions)
    try:
        if client == "confluent-kafka":
            run_confluent(bootstrap, topic, work, transactional_id)
        elif client == "kafka-python":
            run_kafka_python(bootstrap, topic, work, transactional_id)
        elif client == "aiokafka":
            asyncio.run(run_aiokafka(bootstrap, topic, work, transactional_id))
        else:
            raise ValueError(f"unknown client {client!r}")
    except Exception as error:  # noqa: BLE001 - reported to the check, which says it stopped
        say(failed=f"{client}: {error!r}")
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv)
