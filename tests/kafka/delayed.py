"""Requests of one transaction delayed until their client has moved on to the next (KAFKA-17754),
with real, unmodified clients behind `minibroker proxy --kafka` holding one frame, for the
project's tests. Only the clients' timeouts are shortened.

Each command prints one JSON summary line and exits non-zero when what it checks does not hold:
read_committed shows exactly the records of the transactions whose commit succeeded, each once
(no aborted read, no lost write, no torn transaction), and the next transaction commits.

    python delayed.py produce kafka-python BOOTSTRAP TOPIC TXN_ID HOLD_MS
        transaction N's only Produce (N-a) is held HOLD_MS by the proxy, both attempts: the batch
        expires and N is aborted; N+1 writes N1-a, waits until the held copies have arrived,
        writes N1-b and commits (retried whole, on a new producer if need be, when refused)
    python delayed.py end confluent BOOTSTRAP TOPIC TXN_ID abort|commit HOLD_MS
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
# kafka-python's request timeout: a second attempt of a batch goes at about 3 s, and the batch
# expires (4.5 s) before that attempt times out.
REQUEST_TIMEOUT_MS = 3000


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


# --- a delayed Produce, kafka-python ----------------------------------------------------------

def kafka_python_producer(bootstrap, txn_id):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id,
                             request_timeout_ms=REQUEST_TIMEOUT_MS, delivery_timeout_ms=4500,
                             retry_backoff_ms=100, linger_ms=0)
    producer.init_transactions()
    return producer


def run_produce_kafka_python(bootstrap, topic, txn_id, hold_ms):
    ensure_topic(bootstrap, topic, PARTITIONS)
    summary = {"client": "kafka-python", "errors": []}
    producer = kafka_python_producer(bootstrap, txn_id)
    started = time.time()
    # N: its only batch is held in the network, expires, and N is aborted.
    producer.begin_transaction()
    late = producer.send(topic, value=b"N-a", partition=0)
    try:
        late.get(timeout=30)
        summary["n_a"] = "acknowledged"
    except Exception as error:
        summary["n_a"] = type(error).__name__
    try:
        producer.abort_transaction()
    except Exception as error:
        summary["errors"].append(f"abort N: {type(error).__name__}")
        producer.close(timeout=5)
        producer = kafka_python_producer(bootstrap, txn_id)
    # N+1, whole again when refused.
    committed = []
    released = started + (REQUEST_TIMEOUT_MS + hold_ms) / 1000 + 1.5
    for attempt in range(ATTEMPTS):
        summary["attempts"] = attempt + 1
        try:
            producer.begin_transaction()
            first = producer.send(topic, value=b"N1-a", partition=0)
            producer.flush(timeout=10)
            first.get(timeout=10)
            # The held copies of N-a arrive now, before N1-b.
            time.sleep(max(0.0, released - time.time()))
            second = producer.send(topic, value=b"N1-b", partition=0)
            producer.flush(timeout=10)
            second.get(timeout=10)
            producer.commit_transaction()
            committed += ["N1-a", "N1-b"]
            break
        except Exception as error:
            summary["errors"].append(f"N+1 attempt {attempt + 1}: {type(error).__name__}: {error}")
            try:
                producer.abort_transaction()
            except Exception:
                producer.close(timeout=5)
                producer = kafka_python_producer(bootstrap, txn_id)
    producer.close(timeout=5)
    judge(bootstrap, topic, summary, committed)


# --- a delayed EndTxn, librdkafka -------------------------------------------------------------

def run_end_confluent(bootstrap, topic, txn_id, end, hold_ms):
    from confluent_kafka import Producer

    ensure_topic(bootstrap, topic, PARTITIONS)
    summary = {"client": "confluent", "end": end, "errors": []}
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id,
            "socket.timeout.ms": 1500, "transaction.timeout.ms": 60000}
    producer = Producer(conf)
    producer.init_transactions(30)
    # N: its EndTxn is held in the network; the retry on a new connection ends it.
    producer.begin_transaction()
    producer.produce(topic, b"N-a", partition=0)
    producer.flush(10)
    ended = time.time()
    if end == "commit":
        producer.commit_transaction(30)
        committed = ["N-a"]
    else:
        producer.abort_transaction(30)
        committed = []
    summary["n_end_s"] = round(time.time() - ended, 2)
    released = ended + hold_ms / 1000 + 1.0
    for attempt in range(ATTEMPTS):
        summary["attempts"] = attempt + 1
        try:
            producer.begin_transaction()
            producer.produce(topic, b"N1-a", partition=0)
            producer.flush(10)
            # The held end arrives now, in the middle of N+1, which must stay open: its first
            # half is not read_committed yet.
            time.sleep(max(0.0, released - time.time()))
            if attempt == 0:
                summary["read_committed_mid"] = sorted(
                    read_values(bootstrap, topic, PARTITIONS, "read_committed"))
            producer.produce(topic, b"N1-b", partition=1)
            producer.flush(10)
            producer.commit_transaction(30)
            committed += ["N1-a", "N1-b"]
            break
        except Exception as error:
            summary["errors"].append(f"N+1 attempt {attempt + 1}: {error}")
            try:
                producer.abort_transaction(30)
            except Exception:
                producer = Producer(conf)
                producer.init_transactions(30)
    judge(bootstrap, topic, summary, committed)


def main(argv):
    command = argv[1]
    if command == "produce" and argv[2] == "kafka-python":
        run_produce_kafka_python(argv[3], argv[4], argv[5], int(argv[6]))
    elif command == "end" and argv[2] == "confluent":
        run_end_confluent(argv[3], argv[4], argv[5], argv[6], int(argv[7]))
    else:
        sys.exit(f"unknown command: {' '.join(argv[1:])}")


if __name__ == "__main__":
    main(sys.argv)
