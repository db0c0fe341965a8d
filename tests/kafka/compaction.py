"""A compacted topic through real Kafka clients: confluent-kafka's idempotent producer writes many
updates per key and tombstones, then every client library reads the topic back once the broker
has compacted it. Each command prints one JSON summary line ("ok" says whether every expectation
held) and exits non-zero when one did not.

Usage: compaction.py write BOOTSTRAP TOPIC EXPECTED_FILE ROUNDS FILLER
       compaction.py check BOOTSTRAP TOPIC EXPECTED_FILE

`write` creates TOPIC (cleanup.policy=compact, small segments), writes ROUNDS updates of each of
50 keys, then tombstones: keys k0-k4 dated ten minutes back (long past delete.retention.ms,
three seconds), k5-k9 dated now; then FILLER records of five other keys, so that all of it lies in
what may be compacted (sealed segments; an in-memory log's full 1 MiB chunks). It saves every
acknowledged record by offset in EXPECTED_FILE.

`check` reads TOPIC from the beginning (waiting up to a minute for the cleaner, until two reads
a second apart agree) and expects:
every record at the offset it was written at, with its key and value; the newest record of
each key; no tombstone (each goes delete.retention.ms after the pass that first saw it, the
old-dated ones too: the retention counts from that pass, not from the client's timestamp); at
most half the records written; and the same records read by kafka-python and aiokafka.
"""

import json
import sys
import time

from clients import read_aiokafka, read_kafka_python

KEYS = 50
PARTITIONS = 1


def write(bootstrap, topic, expected_file, rounds, fillers):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "segment.bytes": "16384",
              "delete.retention.ms": "3000", "min.cleanable.dirty.ratio": "0.1"}
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 0, "batch.num.messages": 10})
    written, failures = {}, []

    def delivered(error, message):
        if error is not None:
            failures.append(str(error))
            return
        value = message.value().decode() if message.value() is not None else None
        written[message.offset()] = [message.key().decode(), value]

    now = int(time.time() * 1000)
    padding = "x" * 150
    for round_ in range(rounds):
        for key in range(KEYS):
            producer.produce(topic, key=f"k{key}", value=f"k{key} round {round_} {padding}",
                             on_delivery=delivered)
        producer.poll(0)
    for key in range(10):
        stamp = now - 600_000 if key < 5 else now
        producer.produce(topic, key=f"k{key}", value=None, timestamp=stamp,
                         on_delivery=delivered)
    for filler in range(fillers):
        while True:
            try:
                producer.produce(topic, key=f"filler{filler % 5}", value=padding,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    unsent = producer.flush(30)
    with open(expected_file, "w") as out:
        json.dump(written, out)
    ok = unsent == 0 and not failures and len(written) == rounds * KEYS + 10 + fillers
    print(json.dumps({"client": "compaction", "ok": ok, "written": len(written),
                      "problems": failures[:5]}))
    sys.exit(0 if ok else 1)


def problems_of(expected, found):
    """What is wrong with `found` ({offset: [key, value]}) for `expected`."""
    problems = []
    for offset, record in found.items():
        if expected.get(offset) != record:
            problems.append(f"offset {offset} holds {record}, written {expected.get(offset)}")
    newest = {}
    for offset in sorted(expected):
        newest[expected[offset][0]] = offset
    for key, offset in newest.items():
        tombstone = key in {f"k{k}" for k in range(10)}
        if tombstone and offset in found:
            problems.append(f"the tombstone of {key} at {offset} is still there")
        if not tombstone and offset not in found:
            problems.append(f"the newest record of {key} (offset {offset}) is gone")
    if len(found) * 2 > len(expected):
        problems.append(f"{len(found)} of {len(expected)} records left: not compacted")
    return problems


def as_records(received):
    return {offset: [key.decode(), value.decode() if value is not None else None]
            for _, offset, key, value, _ in received}


def read_to_end(bootstrap, topic):
    """Every record of TOPIC's partition 0 up to its high watermark, with confluent-kafka."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check",
                         "enable.auto.commit": False})
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    received, deadline = [], time.time() + 30
    while time.time() < deadline:
        position = consumer.position([TopicPartition(topic, 0)])[0].offset
        if position >= high:
            break
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            received.append((0, message.offset(), message.key(), message.value(), []))
    consumer.close()
    return received


def check(bootstrap, topic, expected_file):
    with open(expected_file) as file:
        expected = {int(offset): record for offset, record in json.load(file).items()}
    # Read until the topic is compacted as expected and stays so between two reads a second
    # apart (the cleaner may still be at work on what a pass left dirty).
    deadline, found, problems = time.time() + 60, {}, ["not read yet"]
    while time.time() < deadline:
        previous = found
        found = as_records(read_to_end(bootstrap, topic))
        problems = problems_of(expected, found)
        if not problems and found == previous:
            break
        time.sleep(1)
    readers = {}
    if not problems:
        for name, read in (("kafka-python", read_kafka_python), ("aiokafka", read_aiokafka)):
            records = as_records(read(bootstrap, topic, PARTITIONS, len(found)))
            readers[name] = len(records)
            if records != found:
                problems.append(f"{name} reads other records than confluent-kafka")
    ok = not problems
    print(json.dumps({"client": "compaction", "ok": ok, "written": len(expected),
                      "left": len(found), "readers": readers, "problems": problems[:5]}))
    sys.exit(0 if ok else 1)


def main():
    command = sys.argv[1]
    if command == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    elif command == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
