"""The Tansu workarounds (end offsets, held fetches), against the real embedded broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.compat.tansu import true_end_offsets
from app.embedded.broker import EmbeddedBroker
from app.embedded.kafka import KafkaBroker


async def _topic_with_one_batch_of(
    broker: EmbeddedBroker | KafkaBroker, records: int
) -> TopicPartition:
    topic = f"compat-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, 1, 1)])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=100)
    await producer.start()
    try:
        pending = [await producer.send(topic, b"r%d" % i, partition=0) for i in range(records)]
        for future in pending:
            await future
    finally:
        await producer.stop()
    return TopicPartition(topic, 0)


async def _reported_end(broker: EmbeddedBroker | KafkaBroker, tp: TopicPartition) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
    await consumer.start()
    try:
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def test_reported_end_offset_is_wrong_and_probe_corrects_it(tansu: EmbeddedBroker) -> None:
    tp = await _topic_with_one_batch_of(tansu, 5)
    reported = await _reported_end(tansu, tp)
    corrected = await true_end_offsets(tansu.bootstrap, {tp: reported})
    # The quirk this module exists for: Tansu reports start-of-last-batch + 1.
    # Should Tansu ever fix it, the first assertion fails and the workaround can go.
    assert reported == 1
    assert corrected[tp] == 5


async def test_probe_leaves_empty_partitions_alone(tansu: EmbeddedBroker) -> None:
    tp = TopicPartition(f"compat-empty-{uuid.uuid4().hex[:8]}", 0)
    assert await true_end_offsets(tansu.bootstrap, {tp: 0}) == {tp: 0}


async def test_tansu_holds_a_fetch_after_a_record_lands(
    tansu: EmbeddedBroker,
) -> None:
    """Why ``Settings.fetch_max_wait_ms`` is short: a record produced into a held fetch
    waits for the fetch's next look (halfway, or the end), not answered at once as Apache
    Kafka does. Should Tansu change, this fails and the short wait can go."""
    topic = f"compat-held-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=tansu.bootstrap, linger_ms=0)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=tansu.bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=400,
    )
    await producer.start()
    await producer.send_and_wait(topic, b"first")  # the topic exists before the consumer
    await consumer.start()
    started: asyncio.Queue[float] = asyncio.Queue()
    fetcher: Any = consumer._fetcher  # type: ignore[attr-defined]
    original = fetcher._proc_fetch_request

    async def timed(*args: Any) -> Any:
        started.put_nowait(time.monotonic())
        return await original(*args)

    fetcher._proc_fetch_request = timed
    try:
        await asyncio.wait_for(consumer.getone(), 5)  # "first"
        while not started.empty():
            started.get_nowait()
        fetch_began = await asyncio.wait_for(started.get(), 5)  # a fetch that finds nothing
        await asyncio.sleep(0.05)
        await producer.send_and_wait(topic, b"second")
        landed = time.monotonic() - fetch_began
        record = await asyncio.wait_for(consumer.getone(), 5)
        waited = time.monotonic() - fetch_began
    finally:
        await consumer.stop()
        await producer.stop()
    assert record.value == b"second"
    assert waited - landed > 0.1  # held: Apache Kafka answers within milliseconds
    assert waited < 0.45  # ... at most until the fetch's wait (0.4 s) runs out


async def test_on_kafka_the_end_offset_is_right_and_the_probe_agrees(
    kafka_broker: KafkaBroker,
) -> None:
    """Why the probe is switched on for Tansu only: Apache Kafka reports the true end."""
    tp = await _topic_with_one_batch_of(kafka_broker, 5)
    reported = await _reported_end(kafka_broker, tp)
    assert reported == 5
    assert await true_end_offsets(kafka_broker.bootstrap, {tp: reported}) == {tp: 5}


def test_a_worker_on_kafka_installs_no_workaround() -> None:
    """SWITCHYARD_TANSU_COMPAT=0 (what the stack sets on Kafka) builds a plain Faust app."""
    import subprocess
    import sys

    probe = (
        "import faust; from app.worker.faust_app import build_app;"
        "from app.settings import Settings;"
        "from app.compat import tansu;"
        "build_app(Settings(tansu_compat=False));"
        "from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread as T;"
        "print(tansu._installed, T._highwaters.__module__, T._create_worker_consumer.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    # The worker's fetch wait is every broker's (app/worker/fetch_wait.py, its tests:
    # tests/test_fetch_wait.py); the end-offset probe is Tansu's alone.
    assert out.split() == ["False", "faust.transport.drivers.aiokafka", "app.worker.fetch_wait"]
