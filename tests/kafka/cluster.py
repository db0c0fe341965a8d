"""An idempotent confluent-kafka producer against a cluster of brokers, for the project's
cluster tests: the test breaks something (kills a broker, stops the database) while it runs,
and then judges what was stored.

    python cluster.py produce BOOTSTRAP TOPIC PARTITIONS COUNT
        produces values v-0 .. v-(COUNT-1) over PARTITIONS partitions (creating the topic), prints
        "half" once half of them are acknowledged, and at the end a JSON summary: ok when every
        value was acknowledged, with the acknowledged (partition, offset, value) triples
    python cluster.py one-by-one BOOTSTRAP TOPIC COUNT
        produces values v-0 .. v-(COUNT-1) to partition 0 of TOPIC (created with one partition),
        each acknowledged before the next is sent; prints "first" once v-0 is sent (the test
        breaks its answer's way back), and a summary as produce does, with when v-0 was
        acknowledged (seconds since the epoch)
    python cluster.py brokers BOOTSTRAP
        a JSON summary with the node ids Metadata lists
    python cluster.py read BOOTSTRAP TOPIC PARTITIONS
        reads every partition from its first offset to its end, by assignment (no group): a
        JSON summary with the (partition, offset, value) triples read
"""

import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def done(summary, ok):
    summary["ok"] = bool(ok)
    print(json.dumps(summary), flush=True)
    sys.exit(0 if ok else 1)


def ensure_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions)]).values():
        try:
            future.result(30)
        except Exception as error:  # created already: fine
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise


def produce(bootstrap, topic, partitions, count):
    ensure_topic(bootstrap, topic, partitions)
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 120000,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    acked, failed = [], []
    half = [False]

    def delivered(error, message):
        if error is not None:
            failed.append(str(error))
            return
        acked.append((message.partition(), message.offset(), message.value().decode()))
        if not half[0] and len(acked) >= count // 2:
            half[0] = True
            print("half", flush=True)

    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=b"v-%d" % i, partition=i % partitions,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        # An even pace, so the run lasts long enough to break something in the middle.
        if i % 100 == 99:
            time.sleep(0.02)
    left = producer.flush(150)
    summary = {"acked": acked, "failed": failed[:10], "unflushed": left}
    done(summary, left == 0 and not failed and len(acked) == count)


def read(bootstrap, topic, partitions):
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "cluster-read",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    ends = {}
    for partition in range(partitions):
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        ends[partition] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records, deadline = [], time.time() + 60
    positions = {p: 0 for p in range(partitions)}
    while any(positions[p] < ends[p] for p in ends) and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        records.append((message.partition(), message.offset(), message.value().decode()))
        positions[message.partition()] = message.offset() + 1
    done({"records": records, "ends": ends}, all(positions[p] >= ends[p] for p in ends))


def one_by_one(bootstrap, topic, count):
    ensure_topic(bootstrap, topic, 1)
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 0,
        "message.timeout.ms": 60000,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    acked, failed, acked_at = [], [], []

    def delivered(error, message):
        if error is not None:
            failed.append(str(error))
        else:
            acked.append((message.partition(), message.offset(), message.value().decode()))
            acked_at.append(time.time())

    for i in range(count):
        producer.produce(topic, value=b"v-%d" % i, partition=0, on_delivery=delivered)
        producer.poll(0)
        if i == 0:
            print("first", flush=True)
        if producer.flush(90) != 0:
            break
    summary = {"acked": acked, "failed": failed[:10], "first_acked_at": acked_at[:1]}
    done(summary, not failed and len(acked) == count)


def brokers(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_topics(timeout=30)
    done({"brokers": sorted(listed.brokers)}, True)


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "produce":
        produce(args[0], args[1], int(args[2]), int(args[3]))
    elif command == "one-by-one":
        one_by_one(args[0], args[1], int(args[2]))
    elif command == "brokers":
        brokers(args[0])
    elif command == "read":
        read(args[0], args[1], int(args[2]))
    else:
        sys.exit("usage: cluster.py produce|read ...")
