"""Consume-transform-produce processors that keep running while the broker restarts under them,
for the project's tests: what a stream framework does with Kafka's transactions.

Each command prints one JSON line when it has committed its first transaction ("started"), and a
JSON summary when it is done; it exits non-zero when what it checks does not hold.

    python processors.py run confluent|aiokafka BOOTSTRAP SOURCE SINK TXN_ID GROUP [PAUSE_MS]
        one consumer in GROUP reads SOURCE read_committed and writes each value upper-cased to
        SINK, committing its input offsets in the same transaction, up to 10 records per
        transaction (PAUSE_MS apart, 0 by default), until its committed offsets reach SOURCE's
        end. A transaction a broker
        restart breaks is aborted and the consumer rewinds to its committed offsets, as a
        framework does. The summary counts the transactions committed and aborted, the
        assignments the consumer was given, the member ids it held, and every UNKNOWN_MEMBER_ID
        its client met; it holds only if the client met none, held one member id and was
        assigned once: a restart of the broker alone must not cost a consumer its membership.
"""

import asyncio
import json
import logging
import re
import sys
import time

from transactions import PARTITIONS, done, ensure_topic

PER_TRANSACTION = 10
DEADLINE_S = 150
# How librdkafka (UNKNOWN_MEMBER_ID, "Broker: Unknown member") and aiokafka
# (UnknownMemberIdError, "unknown member id", "member_id was not recognized") say it.
UNKNOWN_MEMBER = re.compile(r"unknown.?member|member_id was not recognized", re.IGNORECASE)


class Tally:
    """What the processor met: transactions, assignments, member ids and refusals."""

    def __init__(self):
        self.transactions = 0
        self.aborted = 0
        self.produced = 0
        self.assignments = 0
        self.members = set()
        self.unknown_member_id = 0
        self.started = False

    def committed(self, records):
        self.transactions += 1
        self.produced += records
        if not self.started:
            self.started = True
            print(json.dumps({"started": True}), flush=True)

    def summary(self, finished):
        return {"transactions": self.transactions, "aborted": self.aborted,
                "produced": self.produced, "assignments": self.assignments,
                "members": len(self.members), "unknown_member_id": self.unknown_member_id,
                "finished": finished}

    def holds(self, finished):
        return (finished and self.unknown_member_id == 0 and len(self.members) == 1
                and self.assignments == 1)


class Watch(logging.Handler):
    """Counts the client's log lines that report UNKNOWN_MEMBER_ID."""

    def __init__(self, tally):
        super().__init__(logging.DEBUG)
        self.tally = tally

    def emit(self, record):
        text = record.getMessage()
        if UNKNOWN_MEMBER.search(text):
            self.tally.unknown_member_id += 1
            print(json.dumps({"unknown_member_id": text}), file=sys.stderr, flush=True)


def watched_logger(name, tally):
    logger = logging.getLogger(name)
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Watch(tally))
    logger.propagate = False
    return logger


# --- confluent-kafka -----------------------------------------------------------------------

def run_confluent(bootstrap, source, sink, txn_id, group, pause):
    from confluent_kafka import Consumer, KafkaException, Producer

    tally = Tally()
    logger = watched_logger("processor.librdkafka", tally)

    def assigned(consumer, partitions):
        tally.assignments += 1
        tally.members.add(consumer.memberid())

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 30000,
                         "debug": "cgrp",
                         # Keep asking the brokers it knows while the only one restarts.
                         "metadata.recovery.strategy": "none"}, logger=logger)
    consumer.subscribe([source], on_assign=assigned)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "linger.ms": 5, "metadata.recovery.strategy": "none"})
    retrying(lambda: producer.init_transactions(30), KafkaException)
    deadline = time.time() + DEADLINE_S
    finished = False
    while time.time() < deadline:
        messages = [m for m in consumer.consume(PER_TRANSACTION, 0.5) if not m.error()]
        if not messages:
            if at_end(consumer, source):
                finished = True
                break
            continue
        try:
            producer.begin_transaction()
            for message in messages:
                producer.produce(sink, key=message.key(), value=message.value().upper(),
                                 partition=message.partition())
            positions = consumer.position(consumer.assignment())
            retrying(lambda: producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), 10), KafkaException)
            retrying(lambda: producer.commit_transaction(30), KafkaException)
            tally.committed(len(messages))
            time.sleep(pause)
        except KafkaException as error:
            if not error.args[0].txn_requires_abort():
                raise
            retrying(lambda: producer.abort_transaction(30), KafkaException)
            tally.aborted += 1
            rewind_confluent(consumer)
        tally.members.add(consumer.memberid())
    consumer.close()
    done(tally.summary(finished), tally.holds(finished))


def retrying(call, errors):
    """`call`, again while it fails with a retriable error (the broker is restarting)."""
    while True:
        try:
            return call()
        except errors as error:
            if not error.args[0].retriable():
                raise
            time.sleep(0.2)


def rewind_confluent(consumer):
    """Back to the committed offsets: the aborted transaction's input is read again."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

    while True:
        try:
            committed = consumer.committed(consumer.assignment(), 10)
            break
        except KafkaException:
            time.sleep(0.2)
    for tp in committed:
        offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
        consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def at_end(consumer, source):
    """Whether the consumer holds every partition of `source` and has read each to its end
    (its position was committed with the transaction that read up to it)."""
    from confluent_kafka import KafkaException

    assignment = consumer.assignment()
    if len(assignment) != PARTITIONS:
        return False
    try:
        for tp in consumer.position(assignment):
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
            if tp.offset < high:
                return False
    except KafkaException:
        return False
    return True


# --- aiokafka ------------------------------------------------------------------------------

async def run_aiokafka(bootstrap, source, sink, txn_id, group, pause):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.errors import KafkaError

    tally = Tally()
    watched_logger("aiokafka", tally)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, assigned):
            tally.assignments += 1
            tally.members.add(consumer._coordinator.member_id)

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level="read_committed", session_timeout_ms=30000,
                                retry_backoff_ms=200)
    consumer.subscribe([source], listener=Listener())
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id,
                                retry_backoff_ms=200)
    await retrying_async(producer.start, KafkaError)
    await retrying_async(consumer.start, KafkaError)
    deadline = time.time() + DEADLINE_S
    finished = False
    while time.time() < deadline:
        batch = await consumer.getmany(timeout_ms=500, max_records=PER_TRANSACTION)
        if not any(batch.values()):
            if await at_end_aiokafka(consumer, source):
                finished = True
                break
            continue
        try:
            async with producer.transaction():
                for tp, messages in batch.items():
                    for message in messages:
                        await producer.send(sink, key=message.key, value=message.value.upper(),
                                            partition=tp.partition)
                offsets = {tp: messages[-1].offset + 1 for tp, messages in batch.items()
                           if messages}
                await producer.send_offsets_to_transaction(offsets, group)
            tally.committed(sum(len(messages) for messages in batch.values()))
            await asyncio.sleep(pause)
        except KafkaError:
            # The transaction was aborted on the way out of its block (or never began):
            # its input is read again from the committed offsets.
            tally.aborted += 1
            await rewind_aiokafka(consumer)
        tally.members.add(consumer._coordinator.member_id)
    await consumer.stop()
    await producer.stop()
    done(tally.summary(finished), tally.holds(finished))


async def retrying_async(call, errors):
    while True:
        try:
            return await call()
        except errors:
            await asyncio.sleep(0.2)


async def rewind_aiokafka(consumer):
    from aiokafka.errors import KafkaError

    for tp in consumer.assignment():
        while True:
            try:
                offset = await consumer.committed(tp)
                break
            except KafkaError:
                await asyncio.sleep(0.2)
        if offset is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, offset)


async def at_end_aiokafka(consumer, source):
    from aiokafka.errors import KafkaError

    assignment = consumer.assignment()
    if len(assignment) != PARTITIONS:
        return False
    try:
        ends = await consumer.end_offsets(list(assignment))
        for tp in assignment:
            if await consumer.position(tp) < ends[tp]:
                return False
    except KafkaError:
        return False
    return True


def main(argv):
    command, args = argv[1], argv[2:]
    if command != "run":
        sys.exit(f"unknown command {command}")
    client, bootstrap, source, sink, txn_id, group = args[:6]
    pause = int(args[6]) / 1000 if len(args) > 6 else 0
    ensure_topic(bootstrap, sink)
    if client == "confluent":
        run_confluent(bootstrap, source, sink, txn_id, group, pause)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, source, sink, txn_id, group, pause))
    else:
        sys.exit(f"unknown client {client}")


if __name__ == "__main__":
    main(sys.argv)
