"""After a rebalance, a partition nobody committed is read again from its start
(app/worker/seek_start.py), not from wherever the fetch loop left it."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata

from app.embedded.broker import EmbeddedBroker
from app.worker.seek_start import seek_to_committed_or_start

pytestmark = pytest.mark.broker


async def _topics(bootstrap: str, *names: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1) for name in names])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for name in names:
            for i in range(5):
                await producer.send_and_wait(name, b"r%d" % i, partition=0)
    finally:
        await producer.stop()


async def test_uncommitted_partitions_go_back_to_their_start(broker: EmbeddedBroker) -> None:
    tag = uuid.uuid4().hex[:8]
    never, committed, changelog = f"never-{tag}", f"done-{tag}", f"t-{tag}-changelog"
    await _topics(broker.bootstrap, never, committed, changelog)
    tps = [TopicPartition(name, 0) for name in (never, committed, changelog)]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=f"seek-{tag}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.commit({tps[1]: OffsetAndMetadata(2, "")})
        for tp in tps:  # what a fetch loop does before the seek: read everything
            consumer.seek(tp, 5)
        found = await seek_to_committed_or_start(consumer, frozenset({changelog}))
        assert found[tps[0]] is None and found[tps[1]] == 2
        positions = [await consumer.position(tp) for tp in tps]
        # Never committed: its start (Faust's seek would leave it at 5, its records lost);
        # committed: there; a changelog: left to the table recovery.
        assert positions == [0, 2, 5]
    finally:
        await consumer.stop()
