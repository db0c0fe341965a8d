"""Consumer groups with real Kafka clients against minibroker's group coordinator.

Each command prints one JSON summary line and exits non-zero on any failure:

    python groups.py split BOOTSTRAP TOPIC [STRATEGY]  two confluent consumers share 6 partitions
    python groups.py resume BOOTSTRAP TOPIC          commit, close, a new member resumes there
    python groups.py member BOOTSTRAP TOPIC GROUP    a member that polls until it is killed
    python groups.py survivor BOOTSTRAP TOPIC GROUP  waits for a killed member's partitions
    python groups.py kafka-python BOOTSTRAP TOPIC    a kafka-python group consumer reads to the end
    python groups.py aiokafka BOOTSTRAP TOPIC        an aiokafka group consumer reads to the end
    python groups.py commit BOOTSTRAP TOPIC GROUP N  reads N records of partition 0, commits, closes
    python groups.py position BOOTSTRAP TOPIC GROUP  the first offset a new member of GROUP reads
    python groups.py pipeline BOOTSTRAP SOURCE SINK  read SOURCE as a group, write SINK idempotently
"""

import json
import sys
import threading
import time

PARTITIONS = 6


def done(summary, ok):
    summary["ok"] = ok
    print(json.dumps(summary))
    sys.exit(0 if ok else 1)


def ensure_topic(bootstrap, topic, partitions=PARTITIONS):
    """Creates the topic (a consumer's subscription does not create it)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for attempt in range(10):  # through a faulty network a request may be lost
        try:
            for future in admin.create_topics([NewTopic(topic, partitions, 1)],
                                              request_timeout=5).values():
                future.result(10)
            return
        except KafkaException as error:
            if "already exists" in str(error).lower():
                return
            if attempt == 9:
                raise
        except TimeoutError:
            if attempt == 9:
                raise


def produce(bootstrap, topic, values, partitions=PARTITIONS):
    """Writes `values` round robin over the partitions with an idempotent producer."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % partitions)
        producer.poll(0)
    if producer.flush(30) != 0:
        done({"problem": "produce did not finish"}, False)


def group_consumer(bootstrap, group, **extra):
    from confluent_kafka import Consumer

    config = {"bootstrap.servers": bootstrap, "group.id": group,
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "session.timeout.ms": 3000, "heartbeat.interval.ms": 300}
    config.update(extra)
    return Consumer(config)


class Member:
    """A confluent consumer in its own thread, recording its assignment and what it read."""

    def __init__(self, bootstrap, topic, group, strategy="range"):
        self.consumer = group_consumer(bootstrap, group,
                                       **{"partition.assignment.strategy": strategy})
        self.assigned = set()
        self.read = []
        self.stop = threading.Event()
        self.lock = threading.Lock()

        # Eager strategies assign and revoke everything; cooperative-sticky only what moves.
        def on_assign(consumer, partitions):
            with self.lock:
                self.assigned |= {p.partition for p in partitions}

        def on_revoke(consumer, partitions):
            # Commit what was read before giving partitions up, so the next owner goes on
            # exactly where this one stopped.
            try:
                consumer.commit(asynchronous=False)
            except Exception:  # nothing read yet: nothing to commit
                pass
            with self.lock:
                self.assigned -= {p.partition for p in partitions}

        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            message = self.consumer.poll(0.2)
            if message is None or message.error():
                continue
            with self.lock:
                self.read.append((message.partition(), message.offset(),
                                  message.value().decode()))

    def snapshot(self):
        with self.lock:
            return set(self.assigned), list(self.read)

    def close(self):
        self.stop.set()
        self.thread.join()
        self.consumer.close()  # leaves the group


def wait_for(condition, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def run_split(bootstrap, topic, strategy):
    a = Member(bootstrap, topic, f"split-{strategy}", strategy)
    b = Member(bootstrap, topic, f"split-{strategy}", strategy)
    everything = set(range(PARTITIONS))

    def balanced():
        (sa, _), (sb, _) = a.snapshot(), b.snapshot()
        return sa and sb and not (sa & sb) and sa | sb == everything

    if not wait_for(balanced, 30):
        done({"problem": "no balanced assignment", "a": sorted(a.snapshot()[0]),
              "b": sorted(b.snapshot()[0])}, False)
    split = (sorted(a.snapshot()[0]), sorted(b.snapshot()[0]))
    values = [f"{topic}-{i}" for i in range(600)]
    produce(bootstrap, topic, values)
    wait_for(lambda: len(a.snapshot()[1]) + len(b.snapshot()[1]) >= 600, 30)
    read = [v for _, _, v in a.snapshot()[1] + b.snapshot()[1]]
    exactly_once = sorted(read) == sorted(values)
    # A leaves: B takes over all six.
    a.close()
    took_over = wait_for(lambda: b.snapshot()[0] == everything, 30)
    more = [f"{topic}-more-{i}" for i in range(60)]
    produce(bootstrap, topic, more)
    wait_for(lambda: sum(1 for _, _, v in b.snapshot()[1] if "-more-" in v) >= 60, 30)
    after = [v for _, _, v in b.snapshot()[1] if "-more-" in v]
    b.close()
    ok = exactly_once and took_over and sorted(after) == sorted(more)
    done({"strategy": strategy, "split": split, "read": len(read), "exactly_once": exactly_once,
          "took_over": took_over, "after_leave": len(after)}, ok)


def run_resume(bootstrap, topic):
    values = [f"{topic}-{i}" for i in range(120)]
    produce(bootstrap, topic, values, partitions=2)
    first = group_consumer(bootstrap, "resume")
    first.subscribe([topic])
    seen = []
    deadline = time.time() + 30
    while len(seen) < 50 and time.time() < deadline:
        message = first.poll(0.5)
        if message is not None and not message.error():
            seen.append((message.partition(), message.offset(), message.value().decode()))
    first.commit(asynchronous=False)  # the position after the last message returned
    first.close()
    second = group_consumer(bootstrap, "resume")
    second.subscribe([topic])
    rest = []
    deadline = time.time() + 30
    while len(seen) + len(rest) < 120 and time.time() < deadline:
        message = second.poll(0.5)
        if message is not None and not message.error():
            rest.append((message.partition(), message.offset(), message.value().decode()))
    # Nothing before the commit read again, nothing after it skipped.
    extra = second.poll(2.0)
    second.close()
    together = sorted(v for _, _, v in seen + rest)
    ok = together == sorted(values) and extra is None
    done({"before_commit": len(seen), "after_resume": len(rest),
          "reread": len(seen) + len(rest) - len(set(together))}, ok)


def run_member(bootstrap, topic, group):
    member = Member(bootstrap, topic, group)
    while True:
        assigned, _ = member.snapshot()
        print(json.dumps({"assigned": sorted(assigned)}), flush=True)
        time.sleep(0.5)


def run_survivor(bootstrap, topic, group):
    """Joins GROUP next to a member another process runs, reports once the two share the
    partitions, then waits (the test kills the other) until it owns all six."""
    survivor = Member(bootstrap, topic, group)
    everything = set(range(PARTITIONS))
    shared = wait_for(lambda: survivor.snapshot()[0] and survivor.snapshot()[0] != everything, 30)
    print(json.dumps({"shared": shared, "assigned": sorted(survivor.snapshot()[0])}), flush=True)
    started = time.time()
    took_over = wait_for(lambda: survivor.snapshot()[0] == everything, 60)
    elapsed = time.time() - started
    survivor.close()
    done({"took_over": took_over, "seconds": round(elapsed, 1)}, shared and took_over)


def run_kafka_python(bootstrap, topic):
    from kafka import KafkaConsumer

    values = [f"{topic}-{i}" for i in range(300)]
    produce(bootstrap, topic, values)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="kafka-python",
                             auto_offset_reset="earliest", enable_auto_commit=True,
                             session_timeout_ms=6000, heartbeat_interval_ms=1000)
    read = []
    deadline = time.time() + 45
    while len(read) < len(values) and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            read.extend(r.value.decode() for r in records)
    assigned = sorted(p.partition for p in consumer.assignment())
    consumer.close()
    done({"read": len(read), "assigned": assigned}, sorted(read) == sorted(values))


def run_aiokafka(bootstrap, topic):
    import asyncio
    from aiokafka import AIOKafkaConsumer

    values = [f"{topic}-{i}" for i in range(300)]
    produce(bootstrap, topic, values)

    async def main():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="aiokafka",
                                    auto_offset_reset="earliest", enable_auto_commit=True,
                                    session_timeout_ms=6000, heartbeat_interval_ms=1000)
        await consumer.start()
        read = []
        try:
            deadline = time.time() + 45
            while len(read) < len(values) and time.time() < deadline:
                got = await consumer.getmany(timeout_ms=500)
                for records in got.values():
                    read.extend(r.value.decode() for r in records)
            assigned = sorted(p.partition for p in consumer.assignment())
        finally:
            await consumer.stop()
        return read, assigned

    read, assigned = asyncio.run(main())
    done({"read": len(read), "assigned": assigned}, sorted(read) == sorted(values))


def run_commit(bootstrap, topic, group, count):
    values = [f"{topic}-{i}" for i in range(count * 2)]
    produce(bootstrap, topic, values, partitions=1)
    consumer = group_consumer(bootstrap, group)
    consumer.subscribe([topic])
    read = []
    deadline = time.time() + 30
    while len(read) < count and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            read.append(message.offset())
            if len(read) == count:
                break
    consumer.commit(asynchronous=False)
    consumer.close()
    done({"read": len(read), "committed": read[-1] + 1 if read else None}, len(read) == count)


def run_position(bootstrap, topic, group):
    consumer = group_consumer(bootstrap, group)
    consumer.subscribe([topic])
    first = None
    deadline = time.time() + 30
    while first is None and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            first = message.offset()
    consumer.close()
    done({"first_offset": first}, first is not None)


def commit_retrying(consumer, attempts=20):
    """A synchronous commit, retried: through a lossy network one may time out."""
    from confluent_kafka import KafkaException

    for _ in range(attempts):
        try:
            consumer.commit(asynchronous=False)
            return True
        except KafkaException:
            time.sleep(0.2)
    return False


def run_pipeline(bootstrap, source, sink):
    """Read SOURCE in a group, write each record to SINK with an idempotent producer, and
    commit once the batch is delivered. What this guarantees without transactions: the broker
    deduplicates the producer's retries, so SINK holds each record once per time the consumer
    handed it out — every record at least once, and more than once only if the consumer read
    it again (after a rebalance or a crash, from the last commit)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    values = [f"{source}-{i}" for i in range(300)]
    produce(bootstrap, source, values, partitions=1)
    consumer = group_consumer(bootstrap, "pipeline", **{"session.timeout.ms": 10000})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "request.timeout.ms": 1000,
                         "message.timeout.ms": 60000, "retry.backoff.ms": 50})
    failures = []

    def delivered(error, _message):
        if error is not None:
            failures.append(str(error))

    handed_out = []
    deadline = time.time() + 90
    while len(set(handed_out)) < len(values) and time.time() < deadline:
        good = [m for m in consumer.consume(50, 0.5) if not m.error()]
        for message in good:
            handed_out.append(message.value().decode())
            producer.produce(sink, value=message.value(), partition=0, on_delivery=delivered)
        if good:
            producer.flush(60)
            if not commit_retrying(consumer):
                failures.append("a commit kept failing")
    consumer.close()
    producer.flush(60)

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-check",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(sink, 0, 0)])
    written = []
    deadline = time.time() + 30
    while len(written) < len(handed_out) and time.time() < deadline:
        message = reader.poll(0.5)
        if message is not None and not message.error():
            written.append(message.value().decode())
    extra = reader.poll(2.0)
    reader.close()
    every_record = set(written) == set(values)
    # No duplicate from producer retries: the sink holds exactly what was handed out.
    no_retry_duplicates = sorted(written) == sorted(handed_out) and extra is None
    done({"source": len(values), "handed_out": len(handed_out), "written": len(written),
          "reprocessed": len(handed_out) - len(set(handed_out)),
          "failures": failures[:5]},
         every_record and no_retry_duplicates and not failures)


def main():
    command, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    rest = sys.argv[4:]
    ensure_topic(bootstrap, topic, 1 if command in ("commit", "position", "pipeline") else
                 2 if command == "resume" else PARTITIONS)
    if command == "pipeline":
        ensure_topic(bootstrap, rest[0], 1)
    if command == "split":
        run_split(bootstrap, topic, rest[0] if rest else "range")
    elif command == "resume":
        run_resume(bootstrap, topic)
    elif command == "member":
        run_member(bootstrap, topic, rest[0])
    elif command == "survivor":
        run_survivor(bootstrap, topic, rest[0])
    elif command == "kafka-python":
        run_kafka_python(bootstrap, topic)
    elif command == "aiokafka":
        run_aiokafka(bootstrap, topic)
    elif command == "commit":
        run_commit(bootstrap, topic, rest[0], int(rest[1]))
    elif command == "position":
        run_position(bootstrap, topic, rest[0])
    elif command == "pipeline":
        run_pipeline(bootstrap, topic, rest[0])
    else:
        done({"problem": f"unknown command {command}"}, False)


if __name__ == "__main__":
    main()
