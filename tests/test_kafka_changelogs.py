"""On Apache Kafka the tables' changelogs are compacted topics: a route's row keeps its
last record, and the answers' rows also expire (``compact,delete``, tables/answers.py);
a worker restores its state from a changelog the broker has compacted."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from stack_helpers import bandit_stats, chat, total_pulls, warm_up

from app.client import RequestPublisher, TopicFollower
from app.embedded.kafka import KafkaBroker
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker


async def _configs(bootstrap: str, topics: list[str]) -> dict[str, dict[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
        answers: list[Any] = await admin.describe_configs(resources)
    finally:
        await admin.close()
    found: dict[str, dict[str, str]] = {}
    for answer in answers:
        for _code, _message, _kind, name, entries in answer.resources:
            found[name] = {entry[0]: entry[1] for entry in entries}
    return found


async def test_every_changelog_is_compacted(stack: EmbeddedStack) -> None:
    if stack.broker.is_tansu:
        pytest.skip("Tansu keeps no topic configs: compaction is Apache Kafka's")
    await warm_up(stack)
    app_id = f"switchyard-{stack.namespace}"
    names = {
        "route-state": "compact",
        "feedback-answers": "compact,delete",
        "feedback-expiry": "compact,delete",
    }
    topics = [f"{app_id}-{table}-changelog" for table in names]
    configs = await _configs(stack.broker.bootstrap, topics)
    policies = {topic: configs[topic]["cleanup.policy"] for topic in topics}
    assert policies == {f"{app_id}-{t}-changelog": p for t, p in names.items()}


async def _alter(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """Set the topic's configs (all of them: the request replaces the topic's set)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs)
        answers: list[Any] = await admin.alter_configs([resource])
    finally:
        await admin.close()
    errors = [(code, text) for a in answers for code, text, *_ in a.resources if code]
    assert not errors, errors


async def _kept_and_written(bootstrap: str, topic: str, count: int) -> tuple[int, int]:
    """Records the changelog still holds, and records ever written to it (its offsets)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(count)]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        await consumer.seek_to_beginning(*partitions)
        following = dict(await consumer.beginning_offsets(partitions))
        kept, deadline = 0, time.monotonic() + 30.0
        while any(following[tp] < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, f"{topic} not read to its end"
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                kept += len(records)
                following[tp] = records[-1].offset + 1
        return kept, sum(ends.values())
    finally:
        await consumer.stop()


async def _one_at_a_time(stack: EmbeddedStack, ids: list[str]) -> None:
    """Each request published once the one before it is answered: the router writes the
    route's row for each (its batches hold one event), many updates of one row."""
    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    follower = await TopicFollower(stack.broker.bootstrap, [stack.topics.responses]).start()
    try:
        for request_id in ids:
            await publisher.publish(chat(request_id))
            await publisher.flush()
            deadline = time.monotonic() + 30.0
            while not any(
                json.loads(r.value or b"{}").get("request_id") == request_id
                for r in await follower.poll(timeout_ms=100)
            ):
                assert time.monotonic() < deadline, f"{request_id} not answered"
    finally:
        await follower.stop()
        await publisher.stop()


async def test_a_fresh_worker_restores_the_same_state_from_a_compacted_changelog(
    kafka_broker: KafkaBroker,
) -> None:
    """Many updates of one row, the changelog compacted by the broker's log cleaner down
    to a fraction of the records written; a worker with an empty store restores from it
    exactly the state the first worker held."""
    namespace = f"t{uuid.uuid4().hex[:8]}"
    stack = EmbeddedStack(broker=kafka_broker, namespace=namespace, time_scale=0.05, seed=1)
    await stack.start(workers=1)
    try:
        first = stack.workers[0]
        port = first.env["SWITCHYARD_WEB_PORT"]
        await first.wait_ready()
        changelog = f"switchyard-{namespace}-route-state-changelog"
        # Small segments and any dirt cleanable: the cleaner compacts what rolls.
        compact_soon = {
            "cleanup.policy": "compact",
            "segment.ms": "1000",
            "min.cleanable.dirty.ratio": "0.01",
        }
        await _alter(kafka_broker.bootstrap, changelog, compact_soon)
        await _one_at_a_time(stack, [f"c-{i}" for i in range(250)])
        kept, written = await _kept_and_written(kafka_broker.bootstrap, changelog, 4)
        assert written >= 50  # one row, updated again and again
        deadline, more = time.monotonic() + 120.0, 0
        while kept * 4 > written and time.monotonic() < deadline:
            await asyncio.sleep(2.0)  # the active segment rolls on the next append
            more += 1
            await _one_at_a_time(stack, [f"roll-{more}"])
            kept, written = await _kept_and_written(kafka_broker.bootstrap, changelog, 4)
        assert kept * 4 <= written, f"not compacted: {kept} of {written} records kept"
        await asyncio.sleep(1.0)  # the last row written
        held = await bandit_stats(port)
        assert total_pulls(held) >= 250 + more
        await asyncio.to_thread(first.stop)

        fresh = stack.add_worker()  # its own, empty data directory
        await fresh.wait_ready()
        restored = await bandit_stats(fresh.env["SWITCHYARD_WEB_PORT"])
        assert restored == held
    finally:
        await stack.stop()


def test_the_worker_declares_every_changelog_as_faust_would() -> None:
    import tables.answers
    import tables.routing
    from agents.app import app, settings
    from app.worker.faust_app import changelog_topics

    assert tables.answers and tables.routing  # the tables, registered

    found = changelog_topics(app, settings.partitions)
    app_id = settings.app_id
    assert found[f"{app_id}-route-state-changelog"] == (
        settings.partitions,
        {"cleanup.policy": "compact"},
    )
    answers = found[f"{app_id}-feedback-answers-changelog"]
    assert answers[1]["cleanup.policy"] == "compact,delete"
    assert int(answers[1]["retention.ms"]) > 0


async def test_changelogs_exist_before_the_worker_joins(kafka_broker: KafkaBroker) -> None:
    """The worker creates the tables' changelogs before its consumer first joins its
    group (app/cli.py): a consumer that joined before the route-state changelog existed
    was assigned none of it (its metadata lacked it for minutes), so it restored
    nothing from it when a partition moved, and kept no standby."""
    from app.kafka import ensure_topics
    from app.settings import Settings

    namespace = f"t{uuid.uuid4().hex[:8]}"
    settings = Settings(broker=f"kafka://{kafka_broker.bootstrap}", partitions=3)
    changelog = f"switchyard-{namespace}-route-state-changelog"
    await ensure_topics(settings, changelogs={changelog: (3, {"cleanup.policy": "compact"})})
    configs = await _configs(kafka_broker.bootstrap, [changelog])
    assert configs[changelog]["cleanup.policy"] == "compact"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([changelog])
    finally:
        await admin.close()
    assert len(described["partitions"]) == 3
