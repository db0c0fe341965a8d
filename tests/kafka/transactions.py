"""Kafka transactions with real clients against minibroker, for the project's tests.

Each command prints one JSON summary line and exits non-zero when what it checks does not hold.

    python transactions.py basics confluent|kafka-python|aiokafka BOOTSTRAP TOPIC
        commit and abort across 3 partitions; read_committed sees only what committed,
        read_uncommitted sees everything; an open transaction holds back read_committed
        consumers (the last stable offset) until it commits
    python transactions.py process BOOTSTRAP SOURCE SINK TXN_ID [DIE_AFTER]
        consume-transform-produce: read SOURCE in group "processor", write each value upper-cased
        to SINK and commit the input offsets in the same transaction, 10 records per transaction,
        until SOURCE is drained; with DIE_AFTER, the process kills itself (no clean-up) in the
        middle of the transaction after that many records were produced: it says so on stdout
        and waits to be killed
    python transactions.py check-output BOOTSTRAP SOURCE SINK COUNT [GROUP]
        SINK, read_committed, holds each of SOURCE's COUNT values transformed exactly once, each
        partition in its input's order, and
        GROUP ("processor" by default) has committed offsets past every record of SOURCE
    python transactions.py zombie BOOTSTRAP TOPIC
        a second producer with the same transactional id fences the first: the first's commit
        fails, its open transaction is aborted, and only the second's records are read_committed
    python transactions.py timeout BOOTSTRAP TOPIC
        a transaction left open past its transaction.timeout.ms is aborted by the broker; its
        producer is fenced and a read_committed consumer sees nothing of it
    python transactions.py produce-open BOOTSTRAP TOPIC TXN_ID COUNT commit|abort|open [TIMEOUT_MS]
        writes COUNT records in one transaction (of transaction.timeout.ms TIMEOUT_MS, 60000 by
        default), then commits it, aborts it, or leaves it open and waits to be killed
    python transactions.py produce-wide BOOTSTRAP TOPIC TXN_ID PARTITIONS commit|abort [GO]
        one record to each of PARTITIONS partitions in one transaction, then its end (a wide
        transaction: its end writes a marker to every partition); with GO, the end waits until
        the file GO exists
    python transactions.py produce-many BOOTSTRAP TOPIC COUNT PAD TIMEOUT_MS
        COUNT records (each followed by PAD dots) to partition 0 of TOPIC in transactions of 100,
        every third aborted, then 10 more in a transaction left open (of transaction.timeout.ms
        TIMEOUT_MS), then COUNT / 2 more from an idempotent producer, behind the open
        transaction; prints the committed values and those behind as a JSON summary and waits
        to be killed
    python transactions.py read BOOTSTRAP TOPIC PARTITIONS read_committed|read_uncommitted
        every value readable now, and the last stable offsets (the end a read_committed consumer
        sees)
"""

import asyncio
import json
import sys
import time

PARTITIONS = 3


def done(summary, ok):
    summary["ok"] = bool(ok)
    print(json.dumps(summary), flush=True)
    sys.exit(0 if ok else 1)


def ensure_topic(bootstrap, topic, partitions=PARTITIONS):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        try:
            future.result(10)
        except Exception as error:  # an existing topic is fine
            if "already exists" not in str(error).lower():
                raise


def read_values(bootstrap, topic, partitions, isolation, settle=1.5):
    """Every value readable from the start of `topic` with `isolation`, in partition order."""
    by_partition = read_partitions(bootstrap, topic, partitions, isolation, settle)
    return [value for p in range(partitions) for value in by_partition[p]]


def read_partitions(bootstrap, topic, partitions, isolation, settle=1.5):
    """Every value readable from the start of each partition of `topic` with `isolation`, in
    order, by partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, at_end = {p: [] for p in range(partitions)}, set()
    deadline = time.time() + 20
    quiet_since = time.time()
    while time.time() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            if len(at_end) == partitions and time.time() - quiet_since > settle:
                break
            continue
        if message.error():
            if message.error().code() == -191:  # _PARTITION_EOF
                at_end.add(message.partition())
            continue
        quiet_since = time.time()
        values[message.partition()].append(message.value().decode())
    consumer.close()
    return values


def stable_offsets(bootstrap, topic, partitions):
    """Each partition's end as a read_committed consumer sees it (ListOffsets, isolation 1)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets",
                         "isolation.level": "read_committed"})
    ends = []
    for p in range(partitions):
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends.append(high)
    consumer.close()
    return ends


# --- basics, one per client ------------------------------------------------------------------

def confluent_steps(bootstrap, topic):
    """The transactional producer's steps with confluent-kafka, as (name, function) pairs."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn",
                         "linger.ms": 5})
    producer.init_transactions(10)

    def write(prefix, count):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, value=f"{prefix}-{i}".encode(), partition=i % PARTITIONS)
        producer.flush(10)

    return producer, write, lambda: producer.commit_transaction(10), \
        lambda: producer.abort_transaction(10)


def kafka_python_steps(bootstrap, topic):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-txn",
                             enable_idempotence=True, acks="all")
    producer.init_transactions()

    def write(prefix, count):
        producer.begin_transaction()
        for i in range(count):
            producer.send(topic, value=f"{prefix}-{i}".encode(), partition=i % PARTITIONS)
        producer.flush(10)

    return producer, write, producer.commit_transaction, producer.abort_transaction


def run_basics(client, bootstrap, topic):
    ensure_topic(bootstrap, topic)
    if client == "aiokafka":
        asyncio.run(aiokafka_basics(bootstrap, topic))
        return
    steps = {"confluent": confluent_steps, "kafka-python": kafka_python_steps}[client]
    _producer, write, commit, abort = steps(bootstrap, topic)
    write("committed", 12)
    commit()
    write("aborted", 6)
    abort()
    write("late", 3)
    # Open: read_committed consumers stop at its first offset on every partition.
    summary = check_basics(bootstrap, topic, open_transaction=True)
    commit()
    after = check_basics(bootstrap, topic, open_transaction=False)
    summary.update({"after_commit": after})
    done({"client": client, **summary}, summary["ok"] and after["ok"])


async def aiokafka_basics(bootstrap, topic):
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-txn",
                                enable_idempotence=True)
    await producer.start()

    async def write(prefix, count):
        await producer.begin_transaction()
        for i in range(count):
            await producer.send(topic, value=f"{prefix}-{i}".encode(), partition=i % PARTITIONS)
        await producer.flush()

    await write("committed", 12)
    await producer.commit_transaction()
    await write("aborted", 6)
    await producer.abort_transaction()
    await write("late", 3)
    summary = await asyncio.to_thread(check_basics, bootstrap, topic, True)
    await producer.commit_transaction()
    after = await asyncio.to_thread(check_basics, bootstrap, topic, False)
    await producer.stop()
    await aiokafka_read_committed(bootstrap, topic, after)
    summary.update({"after_commit": after})
    done({"client": "aiokafka", **summary}, summary["ok"] and after["ok"])


async def aiokafka_read_committed(bootstrap, topic, summary):
    """aiokafka's own read_committed consumer agrees with confluent-kafka's."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    values = []
    for _ in range(20):
        batches = await consumer.getmany(timeout_ms=300)
        for records in batches.values():
            values.extend(r.value.decode() for r in records)
    await consumer.stop()
    summary["aiokafka_read_committed"] = len(values)
    summary["ok"] = summary["ok"] and sorted(values) == sorted(expected_values(False))


def expected_values(open_transaction):
    values = [f"committed-{i}" for i in range(12)]
    if not open_transaction:
        values += [f"late-{i}" for i in range(3)]
    return values


def check_basics(bootstrap, topic, open_transaction):
    committed = read_values(bootstrap, topic, PARTITIONS, "read_committed")
    uncommitted = read_values(bootstrap, topic, PARTITIONS, "read_uncommitted")
    everything = expected_values(False) + [f"aborted-{i}" for i in range(6)]
    ends = stable_offsets(bootstrap, topic, PARTITIONS)
    ok = (sorted(committed) == sorted(expected_values(open_transaction))
          and sorted(uncommitted) == sorted(everything))
    return {"read_committed": len(committed), "read_uncommitted": len(uncommitted),
            "stable_offsets": ends, "ok": ok}


# --- consume-transform-produce ---------------------------------------------------------------

def run_process(bootstrap, source, sink, txn_id, die_after=None):
    from confluent_kafka import Consumer, Producer

    ensure_topic(bootstrap, sink)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "processor",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 6000})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "linger.ms": 5})
    producer.init_transactions(30)
    produced = 0
    transactions = 0
    deadline = time.time() + 90
    while time.time() < deadline:
        messages = [m for m in consumer.consume(10, 0.5) if not m.error()]
        if not messages:
            if drained(consumer, source):
                break
            continue
        producer.begin_transaction()
        for message in messages:
            producer.produce(sink, key=message.key(), value=message.value().upper(),
                             partition=message.partition())
            produced += 1
            if die_after is not None and produced >= die_after:
                producer.flush(10)  # the records are in the log, the transaction open
                print(json.dumps({"mid_transaction": produced}), flush=True)
                time.sleep(600)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 10)
        producer.commit_transaction(30)
        transactions += 1
    consumer.close()
    done({"produced": produced, "transactions": transactions}, True)


def drained(consumer, source):
    """Whether the consumer holds every partition of `source` and has read each to its end."""
    assignment = consumer.assignment()
    if len(assignment) != PARTITIONS:
        return False
    for tp in consumer.position(assignment):
        _low, high = consumer.get_watermark_offsets(tp, timeout=10)
        if tp.offset < high:
            return False
    return True


def run_check_output(bootstrap, source, sink, count, group="processor"):
    from confluent_kafka import Consumer, TopicPartition

    sink_values = read_partitions(bootstrap, sink, PARTITIONS, "read_committed")
    values = [value for p in range(PARTITIONS) for value in sink_values[p]]
    wanted = sorted(f"{source}-{i}".upper() for i in range(count))
    # Each record went to the sink's partition of its own: in order, each partition's output is
    # its input transformed.
    source_values = read_partitions(bootstrap, source, PARTITIONS, "read_committed")
    in_order = all(sink_values[p] == [value.upper() for value in source_values[p]]
                   for p in range(PARTITIONS))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    committed = consumer.committed([TopicPartition(source, p) for p in range(PARTITIONS)], 10)
    positions = [tp.offset for tp in committed]
    # At the input's end: from the committed offsets there is nothing left to process (a
    # committed offset may stop before a last COMMIT marker, which a consumer skips).
    consumer.assign([TopicPartition(source, p, max(offset, 0))
                     for p, offset in enumerate(positions)])
    remaining, at_end = 0, set()
    deadline = time.time() + 10
    while len(at_end) < PARTITIONS and time.time() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            if message.error().code() == -191:  # _PARTITION_EOF
                at_end.add(message.partition())
            continue
        remaining += 1
    consumer.close()
    duplicates = len(values) - len(set(values))
    done({"read": len(values), "distinct": len(set(values)), "duplicates": duplicates,
          "committed": positions, "remaining": remaining, "in_order": in_order},
         sorted(values) == wanted and in_order and remaining == 0
         and len(at_end) == PARTITIONS and all(offset > 0 for offset in positions))


# --- fencing and timeouts --------------------------------------------------------------------

def run_zombie(bootstrap, topic):
    from confluent_kafka import KafkaException, Producer

    ensure_topic(bootstrap, topic)
    config = {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"}
    zombie = Producer(config)
    zombie.init_transactions(10)
    zombie.begin_transaction()
    for i in range(5):
        zombie.produce(topic, value=f"zombie-{i}".encode(), partition=i % PARTITIONS)
    zombie.flush(10)
    successor = Producer(config)
    successor.init_transactions(10)  # fences the zombie, aborting its open transaction
    successor.begin_transaction()
    for i in range(4):
        successor.produce(topic, value=f"successor-{i}".encode(), partition=i % PARTITIONS)
    successor.commit_transaction(10)
    fenced = None
    try:
        zombie.produce(topic, value=b"zombie-late", partition=0)
        zombie.commit_transaction(10)
    except KafkaException as error:
        fenced = error.args[0].name()
    values = read_values(bootstrap, topic, PARTITIONS, "read_committed")
    done({"fenced": fenced, "read_committed": sorted(values)},
         fenced is not None and sorted(values) == [f"successor-{i}" for i in range(4)])


def run_timeout(bootstrap, topic):
    from confluent_kafka import KafkaException, Producer

    ensure_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn",
                         "transaction.timeout.ms": 1500})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"forgotten-{i}".encode(), partition=i % PARTITIONS)
    producer.flush(10)
    held = stable_offsets(bootstrap, topic, PARTITIONS)
    time.sleep(4)  # the broker aborts it, bumping the epoch
    released = stable_offsets(bootstrap, topic, PARTITIONS)
    refused = None
    try:
        producer.commit_transaction(10)
    except KafkaException as error:
        refused = error.args[0].name()
    values = read_values(bootstrap, topic, PARTITIONS, "read_committed")
    done({"refused": refused, "held": held, "released": released, "read_committed": values},
         refused is not None and values == [] and held == [0, 0, 0]
         and all(end > 0 for end in released))


def run_produce_open(bootstrap, topic, txn_id, count, end, timeout_ms):
    from confluent_kafka import Producer

    ensure_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": timeout_ms})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, value=f"{txn_id}-{i}".encode(), partition=i % PARTITIONS)
    producer.flush(10)
    if end == "commit":
        producer.commit_transaction(10)
    elif end == "abort":
        producer.abort_transaction(10)
    print(json.dumps({"written": count, "end": end, "ok": True}), flush=True)
    if end == "open":
        time.sleep(600)


def run_produce_many(bootstrap, topic, count, pad, timeout_ms):
    from confluent_kafka import Producer

    ensure_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn",
                         "transaction.timeout.ms": timeout_ms, "linger.ms": 5})
    producer.init_transactions(10)
    committed = []
    for start in range(0, count, 100):
        values = [f"v-{i}" + "." * pad for i in range(start, min(start + 100, count))]
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value.encode(), partition=0)
        producer.flush(30)
        if (start // 100) % 3 == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed.extend(values)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"open-{i}".encode(), partition=0)
    producer.flush(30)
    behind = [f"b-{i}" + "." * pad for i in range(count // 2)]
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "linger.ms": 5})
    for value in behind:
        plain.produce(topic, value=value.encode(), partition=0)
    plain.flush(30)
    print(json.dumps({"committed": committed, "behind": behind, "ok": True}), flush=True)
    time.sleep(600)


def run_produce_wide(bootstrap, topic, txn_id, partitions, end, go=None):
    import os

    from confluent_kafka import Producer

    ensure_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(10)
    producer.begin_transaction()
    for p in range(partitions):
        producer.produce(topic, value=f"{txn_id}-{p}".encode(), partition=p)
    producer.flush(10)
    print(json.dumps({"ending": end}), flush=True)
    while go is not None and not os.path.exists(go):
        time.sleep(0.05)
    try:
        if end == "commit":
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
    except Exception as error:  # the broker may be killed under it
        print(json.dumps({"end_failed": str(error)}), flush=True)
        return
    print(json.dumps({"ended": end, "ok": True}), flush=True)


def run_read(bootstrap, topic, partitions, isolation):
    values = read_values(bootstrap, topic, partitions, isolation)
    done({"values": values, "stable_offsets": stable_offsets(bootstrap, topic, partitions)},
         True)


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "basics":
        run_basics(args[0], args[1], args[2])
    elif command == "process":
        die_after = int(args[4]) if len(args) > 4 else None
        run_process(args[0], args[1], args[2], args[3], die_after)
    elif command == "check-output":
        run_check_output(args[0], args[1], args[2], int(args[3]), *args[4:5])
    elif command == "zombie":
        run_zombie(args[0], args[1])
    elif command == "timeout":
        run_timeout(args[0], args[1])
    elif command == "produce-open":
        timeout_ms = int(args[5]) if len(args) > 5 else 60000
        run_produce_open(args[0], args[1], args[2], int(args[3]), args[4], timeout_ms)
    elif command == "produce-many":
        run_produce_many(args[0], args[1], int(args[2]), int(args[3]), int(args[4]))
    elif command == "produce-wide":
        run_produce_wide(args[0], args[1], args[2], int(args[3]), args[4], *args[5:6])
    elif command == "read":
        run_read(args[0], args[1], int(args[2]), args[3])
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
