"""The worker's fetch wait (app/worker/fetch_wait.py): why it is short on every broker,
and that every worker gets it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.embedded.kafka import KafkaBroker

#: Faust's fetch wait for the worker's consumer, which the worker replaces.
FAUST_FETCH_WAIT_MS = 1500


async def _record_after_a_partial_take(broker: KafkaBroker, fetch_wait_ms: int) -> float:
    """Seconds until a record landing on a partition is given, when that partition was
    left out of the fetch in flight (its earlier records were not all taken yet)."""
    topic = f"fetch-wait-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        await admin.close()
    busy, quiet = TopicPartition(topic, 0), TopicPartition(topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=fetch_wait_ms,
    )
    await producer.start()
    for n in range(5):
        await producer.send_and_wait(topic, b"early-%d" % n, partition=0)
    await consumer.start()
    try:
        consumer.assign([busy, quiet])
        taken = await consumer.getmany(busy, timeout_ms=5000, max_records=1)
        assert len(taken[busy]) == 1
        # The other four wait in the consumer; past aiokafka's 0.1 s prefetch backoff the
        # fetcher sends a fetch naming only ``quiet``, on which nothing lands.
        await asyncio.sleep(0.3)
        rest = await consumer.getmany(busy, timeout_ms=5000)
        assert [r.value for r in rest[busy]] == [b"early-%d" % n for n in range(1, 5)]
        await producer.send_and_wait(topic, b"late", partition=0)
        landed = time.monotonic()
        late = await consumer.getmany(busy, timeout_ms=5000)
        waited = time.monotonic() - landed
        assert [r.value for r in late[busy]] == [b"late"]
        return waited
    finally:
        await consumer.stop()
        await producer.stop()


async def test_a_record_waits_out_the_fetch_in_flight_on_kafka(kafka_broker: KafkaBroker) -> None:
    """Why the worker's fetch wait is short on Apache Kafka too: with Faust's 1.5 s, a
    record on a partition left out of the fetch in flight waits for that fetch to end."""
    assert await _record_after_a_partial_take(kafka_broker, FAUST_FETCH_WAIT_MS) > 0.5
    assert await _record_after_a_partial_take(kafka_broker, 10) < 0.25


def _worker_consumer_waits(tansu_compat: bool) -> list[str]:
    probe = f"""
import asyncio
from app.settings import Settings
from app.worker import fetch_wait
from app.worker.faust_app import build_app

async def main():
    app = build_app(Settings(tansu_compat={tansu_compat}))
    consumer = app.consumer._thread._create_worker_consumer(app.transport)
    pacer = fetch_wait.installed()
    print(consumer._fetch_max_wait_ms, pacer.busy_ms, pacer.idle_ms,
          consumer.start.__qualname__.split('.')[-1])
    await consumer.stop()

asyncio.run(main())
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return out.split()


def test_every_worker_consumer_waits_briefly_while_busy_and_longer_when_idle() -> None:
    from app.settings import Settings
    from app.worker.fetch_wait import IDLE_WAIT_MS

    busy = str(Settings().fetch_max_wait_ms)
    assert _worker_consumer_waits(tansu_compat=False) == [
        busy,
        busy,
        str(IDLE_WAIT_MS),
        "start_paced",
    ]
    # Tansu holds fetches: its idle wait stays short (app/compat/tansu.py).
    idle_on_tansu = str(Settings().fetch_idle_wait_ms)
    assert _worker_consumer_waits(tansu_compat=True) == [busy, busy, idle_on_tansu, "start_paced"]
