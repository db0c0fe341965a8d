"""Real Kafka clients logging in to minibroker's SASL and TLS listeners, for the project's tests.

Each command prints one JSON summary line and exits non-zero when what it checks does not hold.

    python security.py [TLS] login confluent|kafka-python|aiokafka BOOTSTRAP TOPIC MECHANISM USER PASSWORD
        logs in, produces 20 records idempotently and reads them back
    python security.py [TLS] refused confluent|kafka-python|aiokafka BOOTSTRAP MECHANISM USER PASSWORD
        the login must fail: prints the client's error
    python security.py [TLS] denied KIND BOOTSTRAP TOPIC MECHANISM USER PASSWORD
        confluent-kafka, logged in, is refused by the ACLs: prints the Kafka error code it got.
        KIND: produce (a plain produce), idempotent (InitProducerId), group (a subscribe),
        transaction (init_transactions), hidden (the topic is left out of a full listing and
        refused when named)

--pace SECONDS, before the command, spaces the produced records out (to outlive a session).
    python security.py [TLS] admin BOOTSTRAP MECHANISM USER PASSWORD
        confluent-kafka's AdminClient, as a super user: creates, describes and deletes an ACL,
        adds user dave (password "dave-pw") and describes him; as bob, CreateAcls is refused

TLS options, before the command: --ca FILE (trust it and speak TLS: SASL_SSL, or SSL with
MECHANISM "-"), --cert FILE --key FILE (a client certificate), --plaintext (no TLS even with --ca).
"""

import asyncio
import json
import sys
import time

COUNT = 20
TLS = {"ca": None, "cert": None, "key": None}
PACE = {"seconds": 0.0}


def protocol(mechanism):
    tls = TLS["ca"] is not None
    if mechanism == "-":
        return "SSL" if tls else "PLAINTEXT"
    return "SASL_SSL" if tls else "SASL_PLAINTEXT"


def confluent_login(bootstrap, mechanism, user, password):
    login = {"bootstrap.servers": bootstrap, "security.protocol": protocol(mechanism)}
    if mechanism != "-":
        login.update({"sasl.mechanism": mechanism, "sasl.username": user,
                      "sasl.password": password})
    if TLS["ca"]:
        login["ssl.ca.location"] = TLS["ca"]
    if TLS["cert"]:
        login.update({"ssl.certificate.location": TLS["cert"],
                      "ssl.key.location": TLS["key"]})
    return login


def python_login(bootstrap, mechanism, user, password, aio=False):
    login = {"bootstrap_servers": bootstrap, "security_protocol": protocol(mechanism)}
    if mechanism != "-":
        login.update({"sasl_mechanism": mechanism, "sasl_plain_username": user,
                      "sasl_plain_password": password})
    if TLS["ca"] and aio:
        from aiokafka.helpers import create_ssl_context
        login["ssl_context"] = create_ssl_context(cafile=TLS["ca"], certfile=TLS["cert"],
                                                  keyfile=TLS["key"])
    elif TLS["ca"]:
        login["ssl_cafile"] = TLS["ca"]
        if TLS["cert"]:
            login.update({"ssl_certfile": TLS["cert"], "ssl_keyfile": TLS["key"]})
    return login


def done(summary, ok):
    summary["ok"] = bool(ok)
    print(json.dumps(summary), flush=True)
    sys.exit(0 if ok else 1)


def confluent(bootstrap, topic, mechanism, user, password, check_only=False):
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    login = confluent_login(bootstrap, mechanism, user, password)
    if check_only:
        admin = AdminClient(login)
        try:
            admin.list_topics(timeout=3)
        except KafkaException as error:
            return str(error)
        return None
    producer = Producer({**login, "enable.idempotence": True})
    for i in range(COUNT):
        producer.produce(topic, value=f"{user}-{i}".encode(), partition=0)
        producer.poll(PACE["seconds"])
    left = producer.flush(15)
    consumer = Consumer({**login, "group.id": "secure", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            values.append(message.value().decode())
        if len(values) >= COUNT:
            break
    consumer.close()
    return left, values


def kafka_python(bootstrap, topic, mechanism, user, password, check_only=False):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError

    login = python_login(bootstrap, mechanism, user, password)
    if check_only:
        # With the version given the client skips its bootstrap probe (which retries for 30 s)
        # and fails its first metadata request instead.
        producer = KafkaProducer(**login, request_timeout_ms=2000, max_block_ms=2000,
                                 api_version=(2, 6))
        try:
            producer.partitions_for("unused")
        except KafkaError as error:
            return repr(error)
        finally:
            producer.close(timeout=1)
        return None
    producer = KafkaProducer(**login, enable_idempotence=True, acks="all")
    for i in range(COUNT):
        producer.send(topic, value=f"{user}-{i}".encode(), partition=0)
        time.sleep(PACE["seconds"])
    producer.flush(15)
    producer.close()
    consumer = KafkaConsumer(**login, enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    values = [m.value.decode() for m in consumer]
    consumer.close()
    return 0, values


async def aiokafka_run(bootstrap, topic, mechanism, user, password, check_only=False):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    login = python_login(bootstrap, mechanism, user, password, aio=True)
    producer = AIOKafkaProducer(**login, enable_idempotence=True,
                                request_timeout_ms=2000 if check_only else 30000)
    try:
        await producer.start()
    except Exception as error:
        await producer.stop()
        if check_only:
            return repr(error)
        raise
    if check_only:
        await producer.stop()
        return None
    for i in range(COUNT):
        await producer.send_and_wait(topic, value=f"{user}-{i}".encode(), partition=0)
        await asyncio.sleep(PACE["seconds"])
    await producer.stop()
    consumer = AIOKafkaConsumer(**login, enable_auto_commit=False)
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    await consumer.seek_to_beginning()
    values = []
    for _ in range(20):
        batches = await consumer.getmany(timeout_ms=300)
        for records in batches.values():
            values.extend(r.value.decode() for r in records)
        if len(values) >= COUNT:
            break
    await consumer.stop()
    return 0, values


def run(client, *args, check_only=False):
    if client == "confluent":
        return confluent(*args, check_only=check_only)
    if client == "kafka-python":
        return kafka_python(*args, check_only=check_only)
    return asyncio.run(aiokafka_run(*args, check_only=check_only))


def denied(kind, bootstrap, topic, mechanism, user, password):
    """The Kafka error code confluent-kafka gets when the ACLs refuse `kind`."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    login = confluent_login(bootstrap, mechanism, user, password)
    if kind in ("produce", "idempotent"):
        reports = []
        idempotent = kind == "idempotent"
        producer = Producer({**login, "enable.idempotence": idempotent,
                             "message.timeout.ms": 5000, "retries": 5 if idempotent else 0})
        try:
            producer.produce(topic, value=b"refused", partition=0,
                             on_delivery=lambda err, msg: reports.append(err))
            producer.flush(6)
        except (KafkaException, SystemError) as error:
            # A fatal error (an idempotent producer refused its id) comes out of the delivery
            # callback wrapped in a SystemError.
            while not isinstance(error, KafkaException) and error.__cause__ is not None:
                error = error.__cause__
            return error.args[0].code()
        if reports and reports[0] is not None:
            return reports[0].code()
        return 0
    if kind == "group":
        consumer = Consumer({**login, "group.id": "denied-group", "session.timeout.ms": 6000})
        consumer.subscribe([topic])
        try:
            for _ in range(40):
                message = consumer.poll(0.25)
                if message is not None and message.error():
                    return message.error().code()
        finally:
            consumer.close()
        return 0
    if kind == "transaction":
        producer = Producer({**login, "transactional.id": "denied-txn"})
        try:
            producer.init_transactions(10)
        except KafkaException as error:
            return error.args[0].code()
        return 0
    if kind == "hidden":
        admin = AdminClient(login)
        listed = admin.list_topics(timeout=5)
        if topic in listed.topics:
            return 0
        named = admin.list_topics(topic, timeout=5).topics[topic]
        return named.error.code() if named.error else 0
    sys.exit(f"unknown kind {kind}")


def admin(bootstrap, mechanism, user, password):
    """The security admin calls of confluent-kafka's AdminClient."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                       AclPermissionType, AdminClient, ResourcePatternType,
                                       ResourceType, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    client = AdminClient(confluent_login(bootstrap, mechanism, user, password))
    binding = AclBinding(ResourceType.TOPIC, "t-admin", ResourcePatternType.LITERAL, "User:bob",
                         "*", AclOperation.READ, AclPermissionType.ALLOW)
    for future in client.create_acls([binding], request_timeout=10).values():
        future.result()
    bobs = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                            AclOperation.ANY, AclPermissionType.ANY)
    described = client.describe_acls(bobs, request_timeout=10).result()
    upsert = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"dave-pw")
    for future in client.alter_user_scram_credentials([upsert], request_timeout=10).values():
        future.result()
    dave = client.describe_user_scram_credentials(["dave"], request_timeout=10)["dave"].result()
    infos = [(str(i.mechanism), i.iterations) for i in dave.scram_credential_infos]
    deleted = []
    for future in client.delete_acls([bobs], request_timeout=10).values():
        deleted.extend(future.result())
    after = client.describe_acls(bobs, request_timeout=10).result()
    refused = None
    as_bob = AdminClient(confluent_login(bootstrap, mechanism, "bob", password))
    try:
        for future in as_bob.create_acls([binding], request_timeout=10).values():
            future.result()
    except KafkaException as error:
        refused = error.args[0].code()
    return {"described": [str(b) for b in described], "dave": infos,
            "deleted": len(deleted), "after": len(after), "bob_refused": refused}


def main(argv):
    argv = list(argv)
    if "--pace" in argv:
        at = argv.index("--pace")
        PACE["seconds"] = float(argv[at + 1])
        del argv[at:at + 2]
    for flag in ("--ca", "--cert", "--key"):
        if flag in argv:
            at = argv.index(flag)
            TLS[flag[2:]] = argv[at + 1]
            del argv[at:at + 2]
    command, client, args = argv[1], argv[2], argv[3:]
    if command == "denied":
        bootstrap, topic, mechanism, user, password = args
        code = denied(client, bootstrap, topic, mechanism, user, password)
        done({"kind": client, "code": code}, code != 0)
    elif command == "admin":
        bootstrap, mechanism, user, password = [client] + args
        summary = admin(bootstrap, mechanism, user, password)
        done(summary, summary["deleted"] == 1 and summary["after"] == 0
             and summary["bob_refused"] == 31 and len(summary["dave"]) == 1)
    elif command == "login":
        bootstrap, topic, mechanism, user, password = args
        left, values = run(client, bootstrap, topic, mechanism, user, password)
        expected = [f"{user}-{i}" for i in range(COUNT)]
        done({"client": client, "mechanism": mechanism, "unsent": left, "read": len(values)},
             left == 0 and values == expected)
    elif command == "refused":
        bootstrap, mechanism, user, password = args
        error = run(client, bootstrap, "unused", mechanism, user, password, check_only=True)
        done({"client": client, "mechanism": mechanism, "error": error}, error is not None)
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
