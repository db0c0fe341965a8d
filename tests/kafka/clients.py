"""Real Kafka clients against minibroker's Kafka listener, for the project's tests.

Each command runs one client library unchanged: an idempotent producer (acks=all) writes keyed
records with headers over every partition of a topic, then a consumer (assigned partitions, from
the beginning) reads them back and the script checks that every record arrived exactly once, in
order per partition, with its key and headers. It prints one JSON summary line and exits
non-zero on any failure.

    python clients.py confluent|kafka-python|aiokafka BOOTSTRAP TOPIC PARTITIONS COUNT
    python clients.py codecs BOOTSTRAP PREFIX PARTITIONS COUNT  (every library writes with
        gzip, snappy, lz4 and zstd, a topic each, and every library reads each one back)
    python clients.py admin BOOTSTRAP TOPIC PARTITIONS
    python clients.py lossy BOOTSTRAP TOPIC COUNT      (produce only, through a faulty network)
    python clients.py steady BOOTSTRAP TOPIC PARTITIONS COUNT   (produce only, riding out restarts)
    python clients.py read-all BOOTSTRAP TOPIC PARTITIONS COUNT (every value read, once)
"""

import asyncio
import json
import sys
import time


def expected_records(topic, partitions, count):
    """(partition, key, value, headers) of every record to write, in order."""
    return [
        (i % partitions, f"key-{i}".encode(), f"{topic}-value-{i}".encode(),
         [("index", str(i).encode()), ("client", b"test")])
        for i in range(count)
    ]


def check(sent, received):
    """Every sent record received exactly once, in order per partition, keys and headers intact."""
    problems = []
    by_partition = {}
    for partition, key, value, headers in sent:
        by_partition.setdefault(partition, []).append((key, value, headers))
    got = {}
    for partition, offset, key, value, headers in received:
        got.setdefault(partition, []).append((offset, key, value, headers))
    for partition, records in by_partition.items():
        read = got.get(partition, [])
        offsets = [r[0] for r in read]
        if offsets != sorted(offsets) or len(set(offsets)) != len(offsets):
            problems.append(f"partition {partition}: offsets out of order or repeated")
        if [(k, v, h) for _, k, v, h in read] != records:
            problems.append(
                f"partition {partition}: read {len(read)} records, sent {len(records)}, "
                "or their keys, values or headers differ")
    return problems


def report(client, sent, received, extra=None):
    problems = check(sent, received)
    summary = {"client": client, "sent": len(sent), "received": len(received),
               "ok": not problems, "problems": problems[:5]}
    summary.update(extra or {})
    print(json.dumps(summary))
    sys.exit(0 if not problems else 1)


def produce_confluent(bootstrap, topic, sent, compression="none"):
    """Writes `sent` with confluent-kafka; returns the delivery failures."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "compression.type": compression})
    failures = []

    def delivered(error, _message):
        if error is not None:
            failures.append(str(error))

    for partition, key, value, headers in sent:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition,
                                 headers=headers, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(30) != 0:
        failures.append("unsent records after 30 s")
    return failures


def read_confluent(bootstrap, topic, partitions, count):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    received = []
    deadline = time.time() + 30
    while len(received) < count and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        received.append((message.partition(), message.offset(), message.key(), message.value(),
                         list(message.headers() or [])))
    consumer.close()
    return received


def produce_kafka_python(bootstrap, topic, sent, compression=None):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             linger_ms=5, compression_type=compression)
    futures = [producer.send(topic, value=v, key=k, partition=p, headers=h)
               for p, k, v, h in sent]
    producer.flush(30)
    failures = []
    for future in futures:
        try:
            future.get(timeout=30)
        except Exception as error:  # noqa: BLE001 - reported, not raised
            failures.append(repr(error))
    producer.close()
    return failures


def read_kafka_python(bootstrap, topic, partitions, count):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    assigned = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    received = []
    deadline = time.time() + 30
    while len(received) < count and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                received.append((r.partition, r.offset, r.key, r.value, list(r.headers)))
    consumer.close()
    return received


def produce_aiokafka(bootstrap, topic, sent, compression=None):
    from aiokafka import AIOKafkaProducer

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                    acks="all", linger_ms=5, compression_type=compression)
        await producer.start()
        try:
            batch = [await producer.send(topic, value=v, key=k, partition=p, headers=h)
                     for p, k, v, h in sent]
            results = await asyncio.gather(*batch, return_exceptions=True)
        finally:
            await producer.stop()
        return [repr(r) for r in results if isinstance(r, BaseException)]

    return asyncio.run(main())


def read_aiokafka(bootstrap, topic, partitions, count):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        received = []
        try:
            assigned = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            deadline = time.time() + 30
            while len(received) < count and time.time() < deadline:
                got = await consumer.getmany(timeout_ms=500)
                for records in got.values():
                    for r in records:
                        received.append((r.partition, r.offset, r.key, r.value,
                                         list(r.headers)))
        finally:
            await consumer.stop()
        return received

    return asyncio.run(main())


#: Each client library's producer and consumer.
CLIENTS = {
    "confluent": (produce_confluent, read_confluent),
    "kafka-python": (produce_kafka_python, read_kafka_python),
    "aiokafka": (produce_aiokafka, read_aiokafka),
}

CODECS = ("gzip", "snappy", "lz4", "zstd")


def run_client(client, bootstrap, topic, partitions, count):
    """One library's producer writes the records; its consumer reads them back."""
    produce, read = CLIENTS[client]
    sent = expected_records(topic, partitions, count)
    failures = produce(bootstrap, topic, sent)
    if failures:
        print(json.dumps({"client": client, "ok": False, "problems": failures[:5]}))
        sys.exit(1)
    report(client, sent, read(bootstrap, topic, partitions, count))


def run_codecs(bootstrap, prefix, partitions, count):
    """Every library's producer writes with every codec, each to a topic of its own, and every
    library's consumer reads each topic back whole."""
    problems, checked = [], 0
    for writer, (produce, _) in CLIENTS.items():
        for codec in CODECS:
            topic = f"{prefix}-{writer}-{codec}"
            sent = expected_records(topic, partitions, count)
            failures = produce(bootstrap, topic, sent, codec)
            problems += [f"{writer} {codec}: {failure}" for failure in failures[:3]]
            for reader, (_, read) in CLIENTS.items():
                found = check(sent, read(bootstrap, topic, partitions, count))
                problems += [f"{writer} {codec} read by {reader}: {p}" for p in found]
                checked += 1
    print(json.dumps({"client": "codecs", "ok": not problems, "checked": checked,
                      "problems": problems[:10]}))
    sys.exit(0 if not problems else 1)


def run_admin(bootstrap, topic, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(15)
    metadata = admin.list_topics(timeout=10)
    created = len(metadata.topics[topic].partitions)
    for future in admin.delete_topics([topic]).values():
        future.result(15)
    gone = topic not in admin.list_topics(timeout=10).topics
    ok = created == partitions and gone
    print(json.dumps({"client": "admin", "ok": ok, "partitions": created, "deleted": gone}))
    sys.exit(0 if ok else 1)


def run_lossy(bootstrap, topic, count):
    """An idempotent producer through a network that loses acks and resets connections: every
    record must be delivered (the broker deduplicates the retries)."""
    config = {"linger.ms": 0, "batch.num.messages": 20, "request.timeout.ms": 1000,
              "socket.timeout.ms": 2000, "message.timeout.ms": 60000, "retry.backoff.ms": 50}
    records = ((f"lossy-{i}", 0) for i in range(count))
    deliver_all("lossy", bootstrap, topic, config, records, count, pause_every=None)


def run_steady(bootstrap, topic, partitions, count):
    """An idempotent producer that keeps going while the broker is killed and restarted: every
    record must be delivered, each exactly once (checked by read-all)."""
    config = {"linger.ms": 5, "message.timeout.ms": 120000}
    records = ((f"steady-{i}", i % partitions) for i in range(count))
    # A steady stream (about 10,000 records a second), so a restart lands mid-run.
    deliver_all("steady", bootstrap, topic, config, records, count, pause_every=100)


def deliver_all(client, bootstrap, topic, config, records, count, pause_every):
    """Writes (value, partition) `records` with an idempotent confluent-kafka producer: every one
    must be delivered. Pauses 10 ms every `pause_every` records when given."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", **config})
    delivered, failures = [], []

    def on_delivery(error, message):
        if error is None:
            delivered.append((message.partition(), message.offset()))
        else:
            failures.append(str(error))

    for i, (value, partition) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value=value.encode(), partition=partition,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0.01 if pause_every and i % pause_every == 0 else 0)
    remaining = producer.flush(120)
    ok = remaining == 0 and not failures and len(delivered) == count
    print(json.dumps({"client": client, "ok": ok, "delivered": len(delivered),
                      "failures": failures[:5]}))
    sys.exit(0 if ok else 1)


def run_read_all(bootstrap, topic, partitions, count):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-all",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, repeated = set(), 0
    deadline = time.time() + 60
    while len(values) < count and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        if message.value() in values:
            repeated += 1
        values.add(message.value())
    extra = consumer.poll(2.0)
    consumer.close()
    ok = len(values) == count and repeated == 0 and extra is None
    print(json.dumps({"client": "read-all", "ok": ok, "distinct": len(values),
                      "repeated": repeated}))
    sys.exit(0 if ok else 1)


def main():
    command, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    if command == "admin":
        run_admin(bootstrap, topic, int(sys.argv[4]))
    elif command == "lossy":
        run_lossy(bootstrap, topic, int(sys.argv[4]))
    elif command in ("steady", "read-all"):
        runner = run_steady if command == "steady" else run_read_all
        runner(bootstrap, topic, int(sys.argv[4]), int(sys.argv[5]))
    elif command == "codecs":
        run_codecs(bootstrap, topic, int(sys.argv[4]), int(sys.argv[5]))
    else:
        run_client(command, bootstrap, topic, int(sys.argv[4]), int(sys.argv[5]))


if __name__ == "__main__":
    main()
