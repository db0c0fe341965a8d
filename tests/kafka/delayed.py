"""Requests of one transaction delayed until their client has moved on to the next (KAFKA-17754),
with real, unmodified clients behind `minibroker proxy --kafka` holding one frame, for the
project's tests. Only the clients' timeouts are shortened.

Each command prints one JSON summary line and exits non-zero when what it checks does not hold:
read_committed shows exactly the records of the transactions whose commit succeeded, each once
(no aborted read, no lost write, no torn transaction), and the next transaction commits.

    python delayed.py produce confluent|kafka-python|aiokafka BOOTSTRAP TOPIC TXN_ID HOLD_MS
        transaction N's only Produce (N-a) is held HOLD_MS by the proxy, both attempts: the batch
        expires and N is aborted; N+1 writes N1-a, waits until the held copies have arrived,
        writes N1-b and commits (retried whole, on a new producer if need be, when refused)
    python delayed.py end confluent|aiokafka BOOTSTRAP TOPIC TXN_ID abort|commit HOLD_MS
        transaction N (N-a) ends, and its EndTxn is held HOLD_MS by the proxy: the client's retry
        on a new connection ends N; N+1 writes N1-a to partition 0, waits until the held end has
        arrived (and reads read_committed then: nothing of N+1 may show), writes N1-b to
        partition 1 and commits
"""

import json
import sys
import time

from transactions import ensure_topic, read_values

PARTITIONS = 2
ATTEMPTS = 4


def done(summary, ok):
    summary["ok"] = bool(ok)
    print(json.dumps(summary), flush=True)
    sys.exit(0 if ok else 1)


def judge(bootstrap, topic, summary, committed):
    """Reads back both ways; read_committed must be exactly the `committed` values (and, where
    it was read in the middle of N+1, hold nothing of N+1 then)."""
    summary["read_committed"] = sorted(read_values(bootstrap, topic, PARTITIONS, "read_committed"))
    summary["read_uncommitted"] = sorted(
        read_values(bootstrap, topic, PARTITIONS, "read_uncommitted"))
    summary["committed"] = sorted(committed)
    next_committed = "N1-a" in committed and "N1-b" in committed
    whole = not any(v.startswith("N1") for v in summary.get("read_committed_mid", []))
    done(summary, summary["read_committed"] == sorted(committed) and next_committed and whole)


# --- the clients, behind one small interface -------------------------------------------------

class KafkaPython:
    """kafka-python's transactional producer. A batch's second attempt goes at about 3 s, and
    the batch expires (4.5 s) before that attempt times out."""

    REQUEST_TIMEOUT_MS = 3000

    def __init__(self, bootstrap, txn_id, topic):
        self.bootstrap, self.txn_id, self.topic = bootstrap, txn_id, topic
        self.producer = self.new()

    def new(self):
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=self.txn_id,
                                 request_timeout_ms=self.REQUEST_TIMEOUT_MS,
                                 delivery_timeout_ms=4500, retry_backoff_ms=100, linger_ms=0)
        producer.init_transactions()
        return producer

    def begin(self):
        self.producer.begin_transaction()

    def send(self, value, partition):
        future = self.producer.send(self.topic, value=value.encode(), partition=partition)
        self.producer.flush(timeout=30)
        future.get(timeout=30)

    def end(self, commit):
        if commit:
            self.producer.commit_transaction()
        else:
            self.producer.abort_transaction()

    def renew(self):
        self.close()
        self.producer = self.new()

    def close(self):
        self.producer.close(timeout=5)


class Confluent:
    """confluent-kafka (librdkafka): requests time out after 3 s (then go again on a new
    connection), messages after 4.5 s."""

    REQUEST_TIMEOUT_MS = 3000

    def __init__(self, bootstrap, txn_id, topic):
        self.bootstrap, self.topic = bootstrap, topic
        self.conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                     "socket.timeout.ms": self.REQUEST_TIMEOUT_MS, "message.timeout.ms": 4500,
                     "transaction.timeout.ms": 60000}
        self.producer = self.new()

    def new(self):
        from confluent_kafka import Producer

        producer = Producer(self.conf)
        producer.init_transactions(30)
        return producer

    def begin(self):
        self.producer.begin_transaction()

    def send(self, value, partition):
        failed = []
        self.producer.produce(self.topic, value.encode(), partition=partition,
                              on_delivery=lambda error, _message: error and failed.append(error))
        self.producer.flush(30)
        if failed:
            raise RuntimeError(str(failed[0]))

    def end(self, commit):
        if commit:
            self.producer.commit_transaction(30)
        else:
            self.producer.abort_transaction(30)

    def renew(self):
        self.producer = self.new()

    def close(self):
        self.producer.flush(5)


class AioKafka:
    """aiokafka, driven from plain calls through an event loop of its own: requests time out
    after 3 s."""

    REQUEST_TIMEOUT_MS = 3000

    def __init__(self, bootstrap, txn_id, topic):
        import asyncio

        self.bootstrap, self.txn_id, self.topic = bootstrap, txn_id, topic
        self.loop = asyncio.new_event_loop()
        self.producer = self.new()

    def run(self, step):
        return self.loop.run_until_complete(step)

    def new(self):
        from aiokafka import AIOKafkaProducer

        async def start():
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap,
                                        transactional_id=self.txn_id, enable_idempotence=True,
                                        request_timeout_ms=self.REQUEST_TIMEOUT_MS)
            await producer.start()
            return producer

        return self.run(start())

    def begin(self):
        self.run(self.producer.begin_transaction())

    def send(self, value, partition):
        async def send():
            sent = await self.producer.send(self.topic, value=value.encode(), partition=partition)
            await sent

        self.run(send())

    def end(self, commit):
        if commit:
            self.run(self.producer.commit_transaction())
        else:
            self.run(self.producer.abort_transaction())

    def renew(self):
        self.close()
        self.producer = self.new()

    def close(self):
        try:
            self.run(self.producer.stop())
        except Exception:
            pass


CLIENTS = {"kafka-python": KafkaPython, "confluent": Confluent, "aiokafka": AioKafka}


def next_transaction(client, summary, committed, released, read_mid=False):
    """N+1: N1-a to partition 0, then, once the held frames have arrived, N1-b to partition
    1 and a commit; retried whole (on a new producer when abort fails) when refused."""
    for attempt in range(ATTEMPTS):
        summary["attempts"] = attempt + 1
        try:
            client.begin()
            client.send("N1-a", 0)
            time.sleep(max(0.0, released - time.time()))
            if read_mid and attempt == 0:
                # Nothing of the open N+1 may be read_committed now.
                summary["read_committed_mid"] = sorted(
                    read_values(client.bootstrap, client.topic, PARTITIONS, "read_committed"))
            client.send("N1-b", 1)
            client.end(True)
            committed += ["N1-a", "N1-b"]
            return
        except Exception as error:
            summary["errors"].append(f"N+1 attempt {attempt + 1}: {type(error).__name__}: {error}")
            try:
                client.end(False)
            except Exception:
                client.renew()


# --- a delayed Produce ------------------------------------------------------------------------

def run_produce(name, bootstrap, topic, txn_id, hold_ms):
    ensure_topic(bootstrap, topic, PARTITIONS)
    summary = {"client": name, "errors": []}
    client = CLIENTS[name](bootstrap, txn_id, topic)
    started = time.time()
    # N: its only batch is held in the network, expires, and N is aborted.
    client.begin()
    try:
        client.send("N-a", 0)
        summary["n_a"] = "acknowledged"
    except Exception as error:
        summary["n_a"] = type(error).__name__
    try:
        client.end(False)
    except Exception as error:
        summary["errors"].append(f"abort N: {type(error).__name__}")
        client.renew()
    committed = []
    # The second attempt was sent about one request timeout after the first.
    released = started + (client.REQUEST_TIMEOUT_MS + hold_ms) / 1000 + 1.5
    next_transaction(client, summary, committed, released)
    client.close()
    judge(bootstrap, topic, summary, committed)


# --- a delayed EndTxn -------------------------------------------------------------------------

def run_end(name, bootstrap, topic, txn_id, end, hold_ms):
    ensure_topic(bootstrap, topic, PARTITIONS)
    summary = {"client": name, "end": end, "errors": []}
    client = CLIENTS[name](bootstrap, txn_id, topic)
    # N: its EndTxn is held in the network; the retry on a new connection ends it.
    client.begin()
    client.send("N-a", 0)
    ended = time.time()
    client.end(end == "commit")
    committed = ["N-a"] if end == "commit" else []
    summary["n_end_s"] = round(time.time() - ended, 2)
    released = ended + hold_ms / 1000 + 1.0
    next_transaction(client, summary, committed, released, read_mid=True)
    client.close()
    judge(bootstrap, topic, summary, committed)


def main(argv):
    command = argv[1]
    if command == "produce" and argv[2] in CLIENTS:
        run_produce(argv[2], argv[3], argv[4], argv[5], int(argv[6]))
    elif command == "end" and argv[2] in ("confluent", "aiokafka"):
        # kafka-python does not send a timed-out EndTxn again: its commit or abort fails, and the
        # new producer the application makes fences the held one.
        run_end(argv[2], argv[3], argv[4], argv[5], argv[6], int(argv[7]))
    else:
        sys.exit(f"unknown command: {' '.join(argv[1:])}")


if __name__ == "__main__":
    main(sys.argv)
