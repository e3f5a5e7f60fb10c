"""Plain aiokafka helpers for everything that is not a Faust agent (CLI, demo, tests)."""

from __future__ import annotations

import contextlib

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from app.settings import Settings


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
    ]


async def ensure_topics(settings: Settings) -> None:
    """Create the topics the worker reads and writes, with the configured partition count."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers(settings.broker))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(name, settings.partitions, settings.replication_factor)
            for name in public_topics(settings)
            if name not in existing
        ]
        if settings.topics.policy not in existing:
            # One partition: its order numbers the policy versions (issue 13).
            wanted.append(NewTopic(settings.topics.policy, 1, settings.replication_factor))
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(wanted)
    finally:
        await admin.close()
