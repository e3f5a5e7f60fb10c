"""Fetch pacing on Tansu: short waits while records flow, the idle wait once quiet."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from app.compat.fetch_pacing import FetchPacer, paced_on_start
from app.embedded.broker import EmbeddedBroker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_busy_while_records_come_idle_after_a_quiet_spell() -> None:
    clock = Clock()
    pacer = FetchPacer(busy_ms=4, idle_ms=20, idle_after_s=1.0, clock=clock)
    assert pacer.after_fetch(False) == 4  # just started: busy
    clock.now += 0.9
    assert pacer.after_fetch(False) == 4
    clock.now += 0.2
    assert pacer.after_fetch(False) == 20  # 1.1 s without a record
    assert pacer.after_fetch(True) == 4  # a record: busy at once
    clock.now += 0.5
    assert pacer.after_fetch(False) == 4
    clock.now += 0.6
    assert pacer.after_fetch(False) == 20


def test_idle_wait_is_never_shorter_than_the_busy_one() -> None:
    assert FetchPacer(busy_ms=10, idle_ms=4).idle_ms == 10


async def test_a_started_consumer_paces_its_fetches(tansu: EmbeddedBroker) -> None:
    """On the real broker: the fetcher's wait follows the pacer (idle, then busy on a record)."""
    topic = f"pacing-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=tansu.bootstrap, linger_ms=0)
    consumer = paced_on_start(
        AIOKafkaConsumer(
            topic,
            bootstrap_servers=tansu.bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
        ),
        FetchPacer(busy_ms=4, idle_ms=20),
    )
    await producer.start()
    await producer.send_and_wait(topic, b"first")
    await consumer.start()
    fetcher = consumer._fetcher  # type: ignore[attr-defined]
    try:
        assert (await asyncio.wait_for(consumer.getone(), 5)).value == b"first"
        assert fetcher._fetch_max_wait_ms == 4
        await asyncio.sleep(1.3)  # no record for over IDLE_AFTER_S
        assert fetcher._fetch_max_wait_ms == 20
        await producer.send_and_wait(topic, b"second")
        assert (await asyncio.wait_for(consumer.getone(), 5)).value == b"second"
        await asyncio.sleep(0.1)  # the fetch after it was built busy
        assert fetcher._fetch_max_wait_ms == 4
    finally:
        await consumer.stop()
        await producer.stop()
