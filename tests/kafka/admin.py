"""Kafka's admin APIs through the admin clients people use: confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient. Each command prints one JSON summary line ("ok" says whether
every expectation held) and exits non-zero when one did not.

Usage: admin.py describe-cluster BOOTSTRAP CLUSTER_ID
       admin.py delete-offsets BOOTSTRAP TOPIC
       admin.py create-partitions BOOTSTRAP TOPIC
       admin.py read-partitions BOOTSTRAP TOPIC
       admin.py describe-log-dirs BOOTSTRAP TOPIC
       admin.py describe-configs BOOTSTRAP OWN_TOPIC OTHER_TOPIC
       admin.py alter-configs BOOTSTRAP TOPIC
       admin.py read-configs BOOTSTRAP TOPIC
       admin.py delete-records BOOTSTRAP TOPIC
       admin.py read-after-delete BOOTSTRAP TOPIC
"""

import json
import sys
import time


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


def delete_offsets(bootstrap, topic):
    """A group's committed offsets deleted (OffsetDelete): refused for a topic its member is
    subscribed to, done once the group is empty, and then nothing is committed for either
    partition."""
    import kafka.errors
    from confluent_kafka import ConsumerGroupTopicPartitions, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as LegacyTopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(10):
        producer.produce(topic, value=str(i), partition=i % 2)
    producer.flush(15)
    group = f"{topic}-group"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    read, deadline = 0, time.time() + 30
    while read < 10 and time.time() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            read += 1
    consumer.commit(asynchronous=False)

    # confluent-kafka's Python AdminClient has no delete_consumer_group_offsets (librdkafka
    # does): kafka-python deletes, confluent-kafka reads what is left.
    legacy = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)

    def delete(partitions):
        asked = [LegacyTopicPartition(topic, p) for p in partitions]
        return sorted(error.__name__ for error in legacy.delete_group_offsets(group, asked).values()
                      if error is not kafka.errors.NoError)

    while_subscribed = delete([0])
    consumer.close()
    once_empty = delete([0, 1])
    legacy.close()
    both = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    listed = admin.list_consumer_group_offsets([both])[group].result(15)
    left = {tp.partition: tp.offset for tp in listed.topic_partitions}
    ok = (read == 10 and while_subscribed == ["GroupSubscribedToTopicError"]
          and once_empty == [] and left == {0: -1001, 1: -1001})
    print(json.dumps({"client": "admin", "ok": ok, "read": read,
                      "while_subscribed": while_subscribed, "once_empty": once_empty,
                      "left": {str(k): v for k, v in left.items()}}))
    sys.exit(0 if ok else 1)


def create_partitions(bootstrap, topic):
    """A topic of 2 partitions grown to 4 by confluent-kafka and to 5 by kafka-python, a record
    produced to each new partition; shrinking it is refused (INVALID_PARTITIONS)."""
    import kafka.errors
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
    from kafka.admin import KafkaAdminClient, NewPartitions as LegacyNewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    for future in admin.create_partitions([NewPartitions(topic, 4)]).values():
        future.result(15)
    legacy = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    legacy.create_partitions({topic: LegacyNewPartitions(5)})
    try:
        legacy.create_partitions({topic: LegacyNewPartitions(3)})
        shrink = "accepted"
    except kafka.errors.InvalidPartitionsError:
        shrink = "INVALID_PARTITIONS"
    legacy.close()
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition in range(2, 5):
        producer.produce(topic, value=f"new {partition}", partition=partition)
    unsent = producer.flush(15)
    ok = partitions == 5 and shrink == "INVALID_PARTITIONS" and unsent == 0
    print(json.dumps({"client": "admin", "ok": ok, "partitions": partitions, "shrink": shrink,
                      "unsent": unsent}))
    sys.exit(0 if ok else 1)


def read_partitions(bootstrap, topic):
    """The topic's partitions as a consumer finds them, and what each new one holds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False})
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, deadline = {}, time.time() + 20
    while len(values) < 3 and time.time() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            values[message.partition()] = message.value().decode()
    consumer.close()
    ok = partitions == 5 and values == {p: f"new {p}" for p in range(2, 5)}
    print(json.dumps({"client": "admin", "ok": ok, "partitions": partitions,
                      "values": {str(k): v for k, v in values.items()}}))
    sys.exit(0 if ok else 1)


def describe_log_dirs(bootstrap, topic):
    """Each partition's size in the broker's log directory, as kafka-python describes it
    (confluent-kafka's Python AdminClient has no call for it): partition 1 holds the records
    written, partition 0 none."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(3):
        producer.produce(topic, value="x" * 100, partition=1)
    producer.flush(15)
    legacy = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    described = legacy.describe_log_dirs()
    legacy.close()
    sizes, dirs = {}, []
    for broker in described:
        for log_dir in broker["log_dirs"]:
            dirs.append(log_dir["log_dir"])
            for described_topic in log_dir["topics"]:
                if described_topic["name"] == topic:
                    for partition in described_topic["partitions"]:
                        sizes[partition["partition_index"]] = partition["partition_size"]
    ok = len(dirs) == 1 and sizes.get(0) == 0 and sizes.get(1, 0) > 300
    print(json.dumps({"client": "admin", "ok": ok, "log_dirs": dirs,
                      "sizes": {str(k): v for k, v in sizes.items()}}))
    sys.exit(0 if ok else 1)


def describe_configs(bootstrap, own, other):
    """Topic and broker settings, with where each value comes from, as both admin clients
    show them: OWN has its own retention.ms, OTHER takes the broker's; nothing set leaves the
    default."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
    from kafka.admin import ConfigResource as LegacyResource, ConfigResourceType, KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(other, 1, 1)]).values():
        future.result(15)
    asked = [ConfigResource(ConfigResource.Type.TOPIC, own),
             ConfigResource(ConfigResource.Type.TOPIC, other),
             ConfigResource(ConfigResource.Type.BROKER, "1")]
    confluent = {}
    for resource, future in admin.describe_configs(asked).items():
        entries = future.result(15)
        confluent[resource.name] = {name: [entry.value, ConfigSource(entry.source).name]
                                    for name, entry in entries.items()}
    legacy = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    described = legacy.describe_configs(
        [LegacyResource(ConfigResourceType.TOPIC, own)], config_filter="all")
    legacy.close()
    kafka_python = json.loads(json.dumps(described, default=str))
    ok = (confluent[own]["retention.ms"] == ["50000", "DYNAMIC_TOPIC_CONFIG"]
          and confluent[other]["retention.ms"] == ["3600000", "STATIC_BROKER_CONFIG"]
          and confluent[other]["retention.bytes"] == ["-1", "DEFAULT_CONFIG"]
          and confluent["1"]["log.retention.ms"] == ["3600000", "STATIC_BROKER_CONFIG"]
          and "50000" in json.dumps(kafka_python))
    print(json.dumps({"client": "admin", "ok": ok, "confluent": confluent,
                      "kafka_python": kafka_python}))
    sys.exit(0 if ok else 1)


def topic_settings(admin, topic):
    """TOPIC's settings as confluent-kafka describes them: {name: [value, source]}."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(15)
    return {name: [entry.value, ConfigSource(entry.source).name] for name, entry in entries.items()}


#: What alter-configs leaves TOPIC with, and read-configs finds after a restart.
ALTERED = {"segment.bytes": ["65536", "DYNAMIC_TOPIC_CONFIG"],
           "max.message.bytes": ["100000", "DYNAMIC_TOPIC_CONFIG"],
           "retention.bytes": ["-1", "DEFAULT_CONFIG"],
           "retention.ms": ["-1", "DEFAULT_CONFIG"]}


def settled(settings):
    return all(settings.get(name) == want for name, want in ALTERED.items())


def alter_configs(bootstrap, topic):
    """A topic created with a setting, its settings replaced (AlterConfigs) and changed a step at
    a time (IncrementalAlterConfigs) by both admin clients, a bad value refused with
    INVALID_CONFIG, and the new max.message.bytes enforced on the next produce."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, NewTopic)
    from kafka.admin import AlterConfigOp, ConfigResource as LegacyResource, ConfigResourceType
    from kafka.admin import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    steps = {}
    created = NewTopic(topic, 1, 1, config={"retention.ms": "60000"})
    for future in admin.create_topics([created]).values():
        future.result(15)
    steps["created"] = topic_settings(admin, topic)["retention.ms"]

    # AlterConfigs replaces the topic's settings: retention.ms goes back to the broker's.
    replaced = ConfigResource(ConfigResource.Type.TOPIC, topic,
                              set_config={"retention.bytes": "1048576"})
    for future in admin.alter_configs([replaced]).values():
        future.result(15)
    settings = topic_settings(admin, topic)
    steps["replaced"] = [settings["retention.ms"], settings["retention.bytes"]]

    changes = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.bytes", "65536", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    for future in admin.incremental_alter_configs([changes]).values():
        future.result(15)

    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
    ])
    try:
        for future in admin.incremental_alter_configs([bad]).values():
            future.result(15)
        steps["bad"] = "accepted"
    except KafkaException as error:
        steps["bad"] = error.args[0].name()

    legacy = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    answer = legacy.alter_configs(
        [LegacyResource(ConfigResourceType.TOPIC, topic,
                        configs={"max.message.bytes": (AlterConfigOp.SET, "100000")})],
        incremental=True)
    steps["kafka_python"] = str(answer)
    legacy.close()

    # Applied at once: a batch over the new limit is refused by the broker.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})
    outcomes = []
    for size in (1000, 200_000):
        producer.produce(topic, value=b"x" * size,
                         on_delivery=lambda err, _msg: outcomes.append(err.name() if err else "ok"))
        producer.flush(15)
    steps["produced"] = outcomes

    settings = topic_settings(admin, topic)
    ok = (steps["created"] == ["60000", "DYNAMIC_TOPIC_CONFIG"]
          and steps["replaced"] == [["-1", "DEFAULT_CONFIG"], ["1048576", "DYNAMIC_TOPIC_CONFIG"]]
          and steps["bad"] == "INVALID_CONFIG"
          and outcomes == ["ok", "MSG_SIZE_TOO_LARGE"]
          and settled(settings))
    print(json.dumps({"client": "admin", "ok": ok, "steps": steps, "settings": settings}))
    sys.exit(0 if ok else 1)


def read_configs(bootstrap, topic):
    """TOPIC's settings as alter-configs left them (after a restart)."""
    from confluent_kafka.admin import AdminClient

    settings = topic_settings(AdminClient({"bootstrap.servers": bootstrap}), topic)
    ok = settled(settings)
    print(json.dumps({"client": "admin", "ok": ok, "settings": settings}))
    sys.exit(0 if ok else 1)


#: Where delete-records moves each partition's start: confluent-kafka partition 0, kafka-python 1.
DELETED_BEFORE = {0: 4, 1: 7}


def first_records(bootstrap, topic):
    """Each partition's low watermark and, read from the beginning, its first record's offset
    and value and how many records it holds: {partition: [low, offset, value, count]}."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False})
    found = {}
    for partition in DELETED_BEFORE:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
        found[partition] = [low, None, None, 0]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in DELETED_BEFORE])
    deadline = time.time() + 20
    while sum(f[3] for f in found.values()) < 20 - sum(DELETED_BEFORE.values()) \
            and time.time() < deadline:
        message = consumer.poll(1.0)
        if message is None or message.error():
            continue
        entry = found[message.partition()]
        if entry[1] is None:
            entry[1], entry[2] = message.offset(), message.value().decode()
        entry[3] += 1
    consumer.close()
    return found


def records_as_deleted(found):
    return all(found[p] == [start, start, f"p{p} {start}", 10 - start]
               for p, start in DELETED_BEFORE.items())


def delete_records(bootstrap, topic):
    """Ten records in each of two partitions, the first ones deleted (DeleteRecords) by
    confluent-kafka from partition 0 and by kafka-python from partition 1; an offset past the
    end refused (OFFSET_OUT_OF_RANGE); read back from the beginning, each partition starts at
    its new low watermark."""
    from confluent_kafka import KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import TopicPartition as LegacyPartition
    from kafka.admin import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})
    for i in range(10):
        for partition in DELETED_BEFORE:
            producer.produce(topic, value=f"p{partition} {i}", partition=partition)
        producer.flush(15)

    answers = {}
    asked = [TopicPartition(topic, 0, DELETED_BEFORE[0])]
    for future in admin.delete_records(asked).values():
        deleted = future.result(15)
        answers["confluent"] = getattr(deleted, "low_watermark", None)
    try:
        for future in admin.delete_records([TopicPartition(topic, 0, 99)]).values():
            future.result(15)
        answers["past_the_end"] = "accepted"
    except KafkaException as error:
        answers["past_the_end"] = error.args[0].name()
    legacy = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    deleted = legacy.delete_records({LegacyPartition(topic, 1): DELETED_BEFORE[1]})
    answers["kafka_python"] = {str(tp.partition): result for tp, result in deleted.items()}
    legacy.close()

    found = first_records(bootstrap, topic)
    ok = (answers["confluent"] == DELETED_BEFORE[0]
          and answers["past_the_end"] == "OFFSET_OUT_OF_RANGE"
          and records_as_deleted(found))
    print(json.dumps({"client": "admin", "ok": ok, "answers": answers,
                      "found": {str(k): v for k, v in found.items()}}, default=str))
    sys.exit(0 if ok else 1)


def read_after_delete(bootstrap, topic):
    """TOPIC's partitions as delete-records left them (after a restart)."""
    found = first_records(bootstrap, topic)
    ok = records_as_deleted(found)
    print(json.dumps({"client": "admin", "ok": ok,
                      "found": {str(k): v for k, v in found.items()}}))
    sys.exit(0 if ok else 1)


def main():
    command = sys.argv[1]
    if command == "describe-cluster":
        describe_cluster(sys.argv[2], sys.argv[3])
    elif command == "delete-offsets":
        delete_offsets(sys.argv[2], sys.argv[3])
    elif command == "create-partitions":
        create_partitions(sys.argv[2], sys.argv[3])
    elif command == "read-partitions":
        read_partitions(sys.argv[2], sys.argv[3])
    elif command == "describe-log-dirs":
        describe_log_dirs(sys.argv[2], sys.argv[3])
    elif command == "describe-configs":
        describe_configs(sys.argv[2], sys.argv[3], sys.argv[4])
    elif command == "alter-configs":
        alter_configs(sys.argv[2], sys.argv[3])
    elif command == "read-configs":
        read_configs(sys.argv[2], sys.argv[3])
    elif command == "delete-records":
        delete_records(sys.argv[2], sys.argv[3])
    elif command == "read-after-delete":
        read_after_delete(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
