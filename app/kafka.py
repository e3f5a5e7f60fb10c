"""Plain aiokafka helpers for everything that is not a Faust agent (CLI, demo, tests).

``client_security`` is the one place Kafka security (SASL, TLS: ``SWITCHYARD_KAFKA_*``,
app/kafka_security.py) becomes client arguments: every ``AIOKafkaProducer``,
``AIOKafkaConsumer`` and ``AIOKafkaAdminClient`` the project builds passes
``**client_security()``, and the Faust app ``**faust_security(settings)``
(tests/test_kafka_security.py checks every construction site).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.helpers import create_ssl_context

from app.config.schema import ConfigError
from app.kafka_security import KafkaSecurity
from app.settings import Settings, get_settings


def ssl_context(security: KafkaSecurity) -> ssl.SSLContext:
    """The TLS context of ``SWITCHYARD_KAFKA_SSL_*`` (system CAs unless a CA file is named)."""
    password = security.ssl_key_password.get_secret_value() if security.ssl_key_password else None
    try:
        context: ssl.SSLContext = create_ssl_context(
            cafile=security.ssl_cafile,
            certfile=security.ssl_certfile,
            keyfile=security.ssl_keyfile,
            password=password,
        )
    except (OSError, ssl.SSLError) as exc:  # the message names no secret, only what failed
        failed = type(exc).__name__
        raise ConfigError(f"SWITCHYARD_KAFKA_SSL_*: cannot load the TLS files ({failed})") from None
    context.check_hostname = security.ssl_check_hostname
    return context


def _checked(settings: Settings | None) -> KafkaSecurity:
    security = (settings or get_settings()).kafka_security
    problems = security.problems()
    if problems:
        raise ConfigError("; ".join(problems))
    return security


def client_security(settings: Settings | None = None) -> dict[str, Any]:
    """aiokafka keyword arguments for ``SWITCHYARD_KAFKA_*`` (none for plaintext).

    ``settings``: the process's settings unless given.
    """
    security = _checked(settings)
    protocol = security.security_protocol
    if not protocol.uses_sasl and not protocol.uses_tls:
        return {}
    kwargs: dict[str, Any] = {"security_protocol": protocol.value}
    if protocol.uses_tls:
        kwargs["ssl_context"] = ssl_context(security)
    if protocol.uses_sasl:
        assert security.sasl_password is not None  # _checked
        kwargs["sasl_mechanism"] = security.sasl_mechanism.value
        kwargs["sasl_plain_username"] = security.sasl_username
        kwargs["sasl_plain_password"] = security.sasl_password.get_secret_value()
    return kwargs


def standalone_consumer(
    bootstrap: str | Sequence[str], settings: Settings | None = None, **options: Any
) -> AIOKafkaConsumer:
    """A consumer in no group that commits nothing: its owner assigns and seeks the
    partitions it reads. ``options``: aiokafka's other arguments (isolation level, fetch
    sizes and long-poll); ``settings``: whose Kafka security, the process's unless given."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        **options,
        **client_security(settings),
    )


#: What every producer of records that must not be lost passes (the gateway's and the
#: platforms' requests, policy versions): every in-sync replica (at least the topic's
#: ``min.insync.replicas``) has the record before it is acknowledged. The worker's
#: producers (Faust's) have ``acks=all`` by default. Not idempotent producers: Tansu has
#: no InitProducerId, and a record sent twice is a duplicate by id (events' ids are
#: derived from what they are about), which every consumer already drops.
DURABLE_PRODUCER: dict[str, Any] = {"acks": "all"}

#: The name app/analytics/sink.py looks up.
client_security_kwargs = client_security


def faust_security(settings: Settings) -> dict[str, Any]:
    """``faust.App`` keyword arguments for the same security (``broker_credentials``)."""
    import faust

    security = _checked(settings)
    protocol = security.security_protocol
    context = ssl_context(security) if protocol.uses_tls else None
    if protocol.uses_sasl:
        assert security.sasl_password is not None  # _checked
        credentials: Any = faust.SASLCredentials(
            username=security.sasl_username,
            password=security.sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=security.sasl_mechanism.value,
        )
        return {"broker_credentials": credentials}
    if context is not None:
        return {"broker_credentials": faust.SSLCredentials(context)}
    return {}


def bootstrap_servers(broker_url: str) -> str:
    """``kafka://h1:9092;kafka://h2:9092`` or ``h1:9092,h2:9092`` -> ``h1:9092,h2:9092``."""
    hosts = []
    for part in broker_url.replace(";", ",").split(","):
        part = part.strip()
        if part:
            hosts.append(part.split("://", 1)[-1])
    return ",".join(hosts)


def public_topics(settings: Settings) -> list[str]:
    t = settings.topics
    return [
        t.requests,
        t.routing,
        t.dispatch,
        t.spill,
        t.decisions,
        t.outcomes,
        t.responses,
        t.deadletter,
        t.feedback,
        t.feedback_matching,
        t.replies,
        t.deltas,
    ]


def topic_configs(settings: Settings) -> dict[str, str]:
    """The configs of every topic Switchyard creates: ``min.insync.replicas`` above 1 (with
    producers' ``acks=all``, a record is acknowledged once that many replicas have it)."""
    if settings.min_insync_replicas <= 1:
        return {}
    return {"min.insync.replicas": str(settings.min_insync_replicas)}


async def ensure_topics(
    settings: Settings,
    served_within_s: float = 60.0,
    changelogs: Mapping[str, tuple[int, dict[str, str]]] | None = None,
) -> None:
    """Create the topics the worker reads and writes, with the configured partition count,
    and return once the broker serves every partition of each. ``changelogs``: the
    tables' changelog topics too (name: partitions and configs, as Faust declares them),
    so that they exist before the worker's consumer first joins its group: one that
    joins before a changelog exists is assigned none of it, and restores nothing from
    it, until its metadata is next refreshed (minutes).

    A broker acknowledges a topic's creation before every broker has learnt who leads its
    partitions; a client that looks in between finds no topic or a ``NotLeader`` error (on a
    single Apache Kafka node holding a few thousand partitions, for seconds), and a
    consumer that met it could be left never fetching a partition.
    """
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers(settings.broker), **client_security(settings)
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        configs = topic_configs(settings)
        wanted = [
            NewTopic(name, settings.partitions, settings.replication_factor, topic_configs=configs)
            for name in public_topics(settings)
            if name not in existing
        ]
        if settings.topics.policy not in existing:
            # One partition: its order numbers the policy versions.
            policy = NewTopic(
                settings.topics.policy, 1, settings.replication_factor, topic_configs=configs
            )
            wanted.append(policy)
        for name, (count, own) in (changelogs or {}).items():
            if name not in existing:
                config = {**configs, **own}
                wanted.append(
                    NewTopic(name, count, settings.replication_factor, topic_configs=config)
                )
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(wanted)
    finally:
        await admin.close()
    if wanted:
        await wait_served(settings, {t.name: t.num_partitions for t in wanted}, served_within_s)


async def wait_served(settings: Settings, partitions: dict[str, int], within_s: float) -> None:
    """Return once every partition of ``partitions`` (topic: count) has a leader that answers
    a ListOffsets; TimeoutError past ``within_s``."""
    consumer = standalone_consumer(
        bootstrap_servers(settings.broker), settings, request_timeout_ms=5000
    )
    await consumer.start()
    try:
        async with asyncio.timeout(within_s):
            while not await _all_served(consumer, partitions):
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise TimeoutError(f"topics not served by the broker within {within_s:g}s") from None
    finally:
        await consumer.stop()


async def _all_served(consumer: AIOKafkaConsumer, partitions: dict[str, int]) -> bool:
    await consumer._client.force_metadata_update()
    for topic, count in partitions.items():
        if len(consumer.partitions_for_topic(topic) or ()) < count:
            return False
    tps = [TopicPartition(topic, p) for topic, count in partitions.items() for p in range(count)]
    try:
        await consumer.end_offsets(tps)
    except KafkaError:  # NotLeaderForPartition, UnknownTopicOrPartition: not yet
        return False
    return True
