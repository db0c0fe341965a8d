"""One confluent-kafka idempotent producer at full speed, for scripts/compare-peers.

Writes COUNT records of 100 bytes round-robin over PARTITIONS partitions of TOPIC (acks=all,
linger 5 ms), waits for every delivery, and prints one JSON line: records/s, p50/p99 delivery
latency (from produce() to its delivery report) and the Produce requests librdkafka sent (from
its statistics), so the broker's CPU can be counted per request.

    python peer-producer.py BOOTSTRAP TOPIC PARTITIONS COUNT
"""

import json
import sys
import time

from confluent_kafka import Producer


def main():
    bootstrap, topic, partitions, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    stats = {}

    def on_stats(raw):
        stats.update(json.loads(raw))

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "statistics.interval.ms": 500,
        "stats_cb": on_stats,
    })
    latencies = []
    failures = []

    def delivered(started):
        def report(error, _message):
            if error is not None:
                failures.append(str(error))
            else:
                latencies.append(time.perf_counter() - started)
        return report

    value = b"x" * 100
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions,
                                 on_delivery=delivered(time.perf_counter()))
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    producer.flush(60)
    elapsed = time.perf_counter() - started
    # One more statistics report, after the last request.
    deadline = time.time() + 2
    before = stats.get("ts")
    while time.time() < deadline and stats.get("ts") == before:
        producer.poll(0.1)
    requests = sum(
        broker.get("req", {}).get("Produce", 0) for broker in stats.get("brokers", {}).values())
    latencies.sort()

    def quantile(q):
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3, 2) if latencies else None

    print(json.dumps({
        "records": len(latencies),
        "failed": len(failures),
        "seconds": round(elapsed, 3),
        "records_per_sec": round(len(latencies) / elapsed),
        "p50_ms": quantile(0.5),
        "p99_ms": quantile(0.99),
        "produce_requests": requests,
    }))
    sys.exit(0 if not failures and len(latencies) == count else 1)


if __name__ == "__main__":
    main()
