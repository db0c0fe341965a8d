"""An idempotent confluent-kafka producer against a cluster of brokers, for the project's
cluster tests: the test breaks something (kills a broker, stops the database) while it runs,
and then judges what was stored.

    python cluster.py produce BOOTSTRAP TOPIC PARTITIONS COUNT [PAD]
        produces values v-0 .. v-(COUNT-1) (each followed by PAD dots) over PARTITIONS
        partitions (creating the topic), prints
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
    python cluster.py shared BROKER_A BROKER_B TOPIC
        what one broker changes, the other serves: a topic's settings set through A, changed
        through B and described through both; compaction refused; records deleted through A
        and read through B from the new start; records older than the topic's retention.ms
        gone from B's earliest offset once retention ran (the brokers run it every second); a
        JSON summary of each step
    python cluster.py offsets BOOTSTRAP TOPIC
        partition 0's earliest and latest offsets, and the offset ListOffsets finds for
        timestamp 0 (the first record), as a JSON summary
    python cluster.py produce-as BOOTSTRAP TOPIC PARTITIONS COUNT USER PASSWORD
        as produce, logged in with SASL PLAIN
    python cluster.py group-consume BOOTSTRAP TOPIC GROUP OUT STOP
        one consumer of GROUP subscribed to TOPIC: each record it is given is written to the
        file OUT as a line "PARTITION OFFSET VALUE", and its offset committed (synchronously;
        a commit refused while the group's coordinator moves is left to the next one). Prints
        "started", and runs until the file STOP exists; then a JSON summary of the commits
        refused
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec


def done(summary, ok):
    summary["ok"] = bool(ok)
    print(json.dumps(summary), flush=True)
    sys.exit(0 if ok else 1)


def ensure_topic(bootstrap, topic, partitions, extra=None):
    admin = AdminClient({"bootstrap.servers": bootstrap, **(extra or {})})
    for future in admin.create_topics([NewTopic(topic, partitions)]).values():
        try:
            future.result(30)
        except Exception as error:  # created already: fine
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise


def login(user, password):
    """The settings of a client that logs in as USER with SASL PLAIN."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": user, "sasl.password": password}


def produce(bootstrap, topic, partitions, count, extra=None, pad=0):
    ensure_topic(bootstrap, topic, partitions, extra)
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 120000,
        "topic.metadata.refresh.interval.ms": 1000,
        **(extra or {}),
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
                producer.produce(topic, value=b"v-%d" % i + b"." * pad, partition=i % partitions,
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
    ends, retried = {}, []
    for partition in range(partitions):
        # Asked again while the client's view of the topic is not yet the cluster's (it is
        # reported, and the read is then judged in full as usual).
        deadline = time.time() + 20
        while True:
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                         timeout=30)
                break
            except KafkaException as error:
                if time.time() > deadline:
                    raise
                retried.append(str(error))
                time.sleep(0.2)
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
    done({"records": records, "ends": ends, "retried": retried[:5]},
         all(positions[p] >= ends[p] for p in ends))


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


def settings_of(admin, topic):
    """The topic's own settings, as DescribeConfigs lists them."""
    from confluent_kafka.admin import ConfigResource, ConfigSource
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(15)
    return {name: entry.value for name, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def earliest(bootstrap, topic):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cluster-earliest"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
    consumer.close()
    return low, high


def produce_at(bootstrap, topic, timestamps):
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})
    for i, timestamp in enumerate(timestamps):
        producer.produce(topic, value=b"r-%d" % i, partition=0, timestamp=timestamp)
        producer.flush(15)


def shared(broker_a, broker_b, topic):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin_a = AdminClient({"bootstrap.servers": broker_a})
    admin_b = AdminClient({"bootstrap.servers": broker_b})
    steps = {}
    created = NewTopic(topic, 1, config={"retention.ms": "86400000"})
    admin_a.create_topics([created])[topic].result(15)
    steps["created_seen_by_b"] = settings_of(admin_b, topic)
    changes = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
    ])
    admin_b.incremental_alter_configs([changes])[changes].result(15)
    steps["changed_seen_by_a"] = settings_of(admin_a, topic)

    compacted = NewTopic(topic + "-compacted", 1, config={"cleanup.policy": "compact"})
    try:
        admin_a.create_topics([compacted])[compacted.topic].result(15)
        steps["compacted"] = "created"
    except KafkaException as error:
        steps["compacted"] = [error.args[0].name(), error.args[0].str()]

    try:
        admin_b.create_topics([compacted], validate_only=True)[compacted.topic].result(15)
        steps["compacted_validated"] = "valid"
    except KafkaException as error:
        steps["compacted_validated"] = error.args[0].name()

    now = int(time.time() * 1000)
    produce_at(broker_a, topic, [now] * 10)
    deleted = admin_a.delete_records([TopicPartition(topic, 0, 4)])
    steps["low_watermark_a"] = next(iter(deleted.values())).result(15).low_watermark
    steps["watermarks_b"] = list(earliest(broker_b, topic))
    steps["read_b"] = [offset for _, offset, _ in read_from(broker_b, topic)]

    aged = topic + "-aged"
    admin_a.create_topics([NewTopic(aged, 1, config={"retention.ms": "3600000"})])[aged].result(15)
    day = 86400 * 1000
    produce_at(broker_a, aged, [now - day] * 3 + [now] * 2)
    deadline, low = time.time() + 20, None
    while time.time() < deadline:
        low, _ = earliest(broker_b, aged)
        if low == 3:
            break
        time.sleep(0.2)
    steps["aged_earliest_b"] = low
    ok = (steps["created_seen_by_b"] == {"retention.ms": "86400000"}
          and steps["changed_seen_by_a"] == {"retention.ms": "86400000",
                                             "retention.bytes": "1048576"}
          and steps["compacted"][0] == "INVALID_CONFIG"
          and steps["compacted_validated"] == "INVALID_CONFIG"
          and steps["low_watermark_a"] == 4
          and steps["watermarks_b"] == [4, 10]
          and steps["read_b"] == list(range(4, 10))
          and steps["aged_earliest_b"] == 3)
    done(steps, ok)


def offsets(bootstrap, topic):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cluster-offsets"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
    found = consumer.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=15)
    consumer.close()
    done({"earliest": low, "latest": high, "at_time_0": found[0].offset}, True)


def dated(bootstrap, topic):
    """One record a day ahead, then many newer ones."""
    ensure_topic(bootstrap, topic, 1)
    ahead = int(time.time() * 1000) + 86_400_000
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    producer.produce(topic, value=b"ahead", partition=0, timestamp=ahead)
    for _ in range(8000):
        producer.produce(topic, value=b"x" * 600, partition=0)
    producer.flush(30)
    done({"ahead": ahead}, True)


def newest(bootstrap, topic):
    """The record with the largest timestamp in partition 0 of TOPIC (KIP-734)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partition = TopicPartition(topic, 0)
    found = admin.list_offsets({partition: OffsetSpec.max_timestamp()})[partition].result(15)
    done({"offset": found.offset, "timestamp": found.timestamp}, True)


def group_consume(bootstrap, topic, group, out, stop):
    import os
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    consumer.subscribe([topic])
    print("started", flush=True)
    refused = []
    with open(out, "a") as written:
        while not os.path.exists(stop):
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            written.write("%d %d %s\n" % (message.partition(), message.offset(),
                                            message.value().decode()))
            written.flush()
            # A slow consumer, so the test breaks things while it runs.
            time.sleep(0.003)
            try:
                consumer.commit(message=message, asynchronous=False)
            except KafkaException as error:
                refused.append(error.args[0].name())
    consumer.close()
    done({"refused": refused[:20], "refusals": len(refused)}, True)


def read_from(bootstrap, topic):
    """Partition 0 of TOPIC from its earliest offset to its end: (partition, offset, value)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cluster-read-from",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
    consumer.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    records, deadline = [], time.time() + 30
    while (not records or records[-1][1] < high - 1) and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        records.append((message.partition(), message.offset(), message.value().decode()))
    consumer.close()
    return records


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "produce":
        pad = int(args[4]) if len(args) > 4 else 0
        produce(args[0], args[1], int(args[2]), int(args[3]), pad=pad)
    elif command == "one-by-one":
        one_by_one(args[0], args[1], int(args[2]))
    elif command == "brokers":
        brokers(args[0])
    elif command == "read":
        read(args[0], args[1], int(args[2]))
    elif command == "shared":
        shared(args[0], args[1], args[2])
    elif command == "offsets":
        offsets(args[0], args[1])
    elif command == "dated":
        dated(args[0], args[1])
    elif command == "newest":
        newest(args[0], args[1])
    elif command == "group-consume":
        group_consume(*args)
    elif command == "produce-as":
        produce(args[0], args[1], int(args[2]), int(args[3]), login(args[4], args[5]))
    else:
        sys.exit("usage: cluster.py produce|read ...")
