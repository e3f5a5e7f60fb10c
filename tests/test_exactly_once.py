"""Exactly-once answers on Apache Kafka (``SWITCHYARD_EXACTLY_ONCE``, docs/design.md).

The writer's contract on a real broker (a commit is read once, an aborted or fenced
transaction never), then the worker's: SIGKILLed under load, a ``read_committed``
reader of the decisions, outcomes and responses sees each record once, and a worker
with an empty store restores from the transactional changelog the state the log holds.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from pydantic import ValidationError
from stack_helpers import chat, total_pulls, wait_for_pulls

from app.client import RequestPublisher, all_answered, read_topics
from app.contract import StatusClass
from app.embedded.kafka import KafkaBroker
from app.embedded.stack import EmbeddedStack
from app.routing.reliability import ACCOUNTING, Availability
from app.settings import Settings
from app.worker.transactions import NotCommitted, TransactionalWriter


def test_exactly_once_is_refused_on_a_broker_without_transactions() -> None:
    with pytest.raises(ValidationError, match="needs a broker with transactions"):
        Settings(exactly_once=True, tansu_compat=True)


async def _topic(bootstrap: str) -> str:
    name = f"eos-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    return name


async def _values(bootstrap: str, topic: str, isolation_level: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, isolation_level=isolation_level
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        values: list[bytes] = []
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            values += [record.value or b"" for record in batch.get(tp, [])]
        return values
    finally:
        await consumer.stop()


@pytest.mark.broker
async def test_a_commit_is_read_once_and_a_fenced_transaction_never(
    kafka_broker: KafkaBroker,
) -> None:
    bootstrap = kafka_broker.bootstrap
    topic = await _topic(bootstrap)
    tid = f"test-{uuid.uuid4().hex[:8]}"
    # A producer of the id that sent records and did not commit (a worker killed, paused).
    earlier = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    await earlier.start()
    await earlier.begin_transaction()
    await (await earlier.send(topic, b"uncommitted"))
    try:
        writer = await TransactionalWriter(bootstrap, tid).start()  # fences and aborts it
        try:
            first = writer.send(topic, None, b"a")
            both = [writer.send(topic, None, b"b"), writer.send(topic, None, b"c")]
            await asyncio.gather(writer.commit(), writer.commit())  # callers share one
            assert (await first).offset < (await both[1]).offset
            with pytest.raises(Exception, match=r"Fenced|fenced|epoch"):
                await earlier.commit_transaction()
            # The writer itself fenced by a later one: its commit writes nothing.
            later = await TransactionalWriter(bootstrap, tid).start()
            lost = writer.send(topic, None, b"lost")
            with pytest.raises(NotCommitted):
                await writer.commit()
            with pytest.raises(NotCommitted):
                await lost
            await later.stop()
        finally:
            await writer.stop()
    finally:
        await earlier.stop()
    assert await _values(bootstrap, topic, "read_committed") == [b"a", b"b", b"c"]
    assert b"uncommitted" in await _values(bootstrap, topic, "read_uncommitted")


async def _publish_at(stack: EmbeddedStack, ids: list[str], rate: float) -> None:
    publisher = await RequestPublisher(stack.broker.bootstrap, stack.topics.requests).start()
    started = time.monotonic()
    try:
        for index, request_id in enumerate(ids):
            await asyncio.sleep(max(0.0, started + index / rate - time.monotonic()))
            await publisher.publish(chat(request_id))
        await publisher.flush()
    finally:
        await publisher.stop()


async def _kill_at(stack: EmbeddedStack, after_s: list[float]) -> None:
    started = time.monotonic()
    for at in after_s:
        await asyncio.sleep(max(0.0, started + at - time.monotonic()))
        stack.workers[0].kill()
        stack.workers[0].start()


def _neutral(status_class: str) -> bool:
    """The reliability accounting: a client error, a 429, a passed deadline is no pull."""
    return ACCOUNTING[StatusClass(status_class)].availability is Availability.NEUTRAL


def _duplicates(records: list[dict[str, Any]], key: str = "id") -> int:
    return sum(n - 1 for n in Counter(r[key] for r in records).values())


@pytest.mark.broker
async def test_sigkills_under_load_leave_each_record_once(kafka_broker: KafkaBroker) -> None:
    stack = EmbeddedStack(
        broker=kafka_broker,
        namespace=f"t{uuid.uuid4().hex[:8]}",
        time_scale=0.05,
        seed=5,
        env={"SWITCHYARD_EXACTLY_ONCE": "1"},
    )
    await stack.start(workers=1)
    try:
        worker = stack.workers[0]
        await worker.wait_ready()
        ids = [f"eos-{i:04d}" for i in range(150)]
        await asyncio.gather(_publish_at(stack, ids, rate=30), _kill_at(stack, [1.7, 3.4]))
        topics = stack.topics
        records = await read_topics(
            stack.broker.bootstrap,
            [topics.responses, topics.outcomes, topics.decisions],
            all_answered(ids, topics.responses),
            timeout_s=120,
            linger_s=2.0,
            read_committed=True,
        )
        responses = records[topics.responses]
        assert {r["request_id"] for r in responses} == set(ids)
        assert _duplicates(responses, "request_id") == 0
        assert _duplicates(records[topics.decisions]) == 0
        assert _duplicates(records[topics.outcomes]) == 0
        providers = stack.providers
        calls = sum(providers.stats(p).requests for p in providers.provider_ids)
        assert len(records[topics.outcomes]) <= calls
        # Transactions, not luck: commit markers sit between the decisions.
        ends = await _end_offsets(stack.broker.bootstrap, topics.decisions)
        assert sum(ends.values()) > len(records[topics.decisions])

        # A worker with an empty store restores every row from the changelog's
        # committed records: the bandit counts each outcome once.
        port = worker.env["SWITCHYARD_WEB_PORT"]
        counted = [o for o in records[topics.outcomes] if not _neutral(o["status_class"])]
        pulls = total_pulls(await wait_for_pulls(port, len(counted)))
        assert pulls == len(counted)
        worker.kill()
        shutil.rmtree(Path(worker.env["SWITCHYARD_DATA_DIR"]), ignore_errors=True)
        worker.start()
        await worker.wait_ready()
        restored = total_pulls(await wait_for_pulls(port, pulls))
        assert restored == pulls
    finally:
        await stack.stop()


async def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        found = consumer.partitions_for_topic(topic) or set()
        partitions = [TopicPartition(topic, p) for p in found]
        ends = await consumer.end_offsets(partitions)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()
