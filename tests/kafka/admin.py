"""Kafka's admin APIs through the admin clients people use: confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient. Each command prints one JSON summary line ("ok" says whether
every expectation held) and exits non-zero when one did not.

Usage: admin.py describe-cluster BOOTSTRAP CLUSTER_ID
"""

import json
import sys


def describe_cluster(bootstrap, cluster_id):
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    host, port = bootstrap.rsplit(":", 1)
    # librdkafka answers describe_cluster from Metadata.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_cluster().result(15)
    confluent = {
        "cluster_id": described.cluster_id,
        "controller": described.controller.id if described.controller else None,
        "brokers": [f"{node.host}:{node.port}" for node in described.nodes],
    }
    legacy = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    cluster = legacy.describe_cluster()
    legacy.close()
    # kafka-python sends DescribeCluster (falling back to Metadata, without the cluster's
    # authorized operations, where a broker lacks it).
    kafka_python = {
        "cluster_id": cluster.get("cluster_id"),
        "controller": cluster.get("controller_id"),
        "brokers": [f"{b['host']}:{b['port']}" for b in cluster.get("brokers", [])],
        "authorized_operations": sorted(cluster.get("authorized_operations") or []),
    }
    ok = all(
        view["cluster_id"] == cluster_id and view["brokers"] == [f"{host}:{port}"]
        and view["controller"] is not None
        for view in (confluent, kafka_python)
    ) and "DESCRIBE" in kafka_python["authorized_operations"]
    print(json.dumps({"client": "admin", "ok": ok, "confluent": confluent,
                      "kafka_python": kafka_python}))
    sys.exit(0 if ok else 1)


def main():
    command = sys.argv[1]
    if command == "describe-cluster":
        describe_cluster(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
