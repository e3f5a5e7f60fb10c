"""Tell, at a worker's start, whether the broker holds a fetch after records arrive.

Tansu holds a fetch that finds no record and looks again only partway through its
``fetch_max_wait_ms`` (see :mod:`app.compat.tansu`): with Faust's 1,500 ms every
hop would cost hundreds of milliseconds, silently. Rather than trust a setting
someone may forget, a worker that was not told (``SWITCHYARD_TANSU_COMPAT``
unset) measures it: it writes one record to the probe topic and fetches it back
with a long wait. A broker that answers as soon as data is there (Apache Kafka)
takes milliseconds; one that holds the fetch takes much of the wait.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from app.kafka import client_security

#: The fetch wait of the probe; a broker that holds fetches answers after about this.
PROBE_WAIT_MS = 1000
#: How long after the fetch starts waiting the probe record is written.
WRITE_AFTER_S = 0.1
#: A record delivered later than this after it was written sat in a held fetch.
HELD_AFTER_S = 0.3


async def broker_holds_fetches(bootstrap: str, topic: str, replication: int = 1) -> bool:
    """True when a fetch waiting at the end of the log is not answered as a record arrives."""
    await _ensure_topic(bootstrap, topic, replication)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **client_security())
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=PROBE_WAIT_MS,
        **client_security(),
    )
    await producer.start()
    await consumer.start()
    try:
        delays = [await _delivery_delay(producer, consumer, topic) for _ in range(2)]
    finally:
        await consumer.stop()
        await producer.stop()
    return min(delays) > HELD_AFTER_S


async def _delivery_delay(
    producer: AIOKafkaProducer, consumer: AIOKafkaConsumer, topic: str
) -> float:
    """Seconds from writing a record to a consumer waiting at the log's end getting it."""
    loop = asyncio.get_running_loop()
    last = await producer.send_and_wait(topic, b"probe")
    tp = TopicPartition(topic, last.partition)
    consumer.assign([tp])
    consumer.seek(tp, last.offset + 1)
    waiting = asyncio.ensure_future(consumer.getone(tp))
    await asyncio.sleep(WRITE_AFTER_S)  # the consumer's fetch is now waiting at the end
    written_at = loop.time()
    await producer.send_and_wait(topic, b"probe", partition=last.partition)
    await asyncio.wait_for(waiting, timeout=10 * PROBE_WAIT_MS / 1000.0)
    return loop.time() - written_at


async def _ensure_topic(bootstrap: str, topic: str, replication: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_security())
    await admin.start()
    try:
        if topic not in set(await admin.list_topics()):
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([NewTopic(topic, 1, replication)])
    finally:
        await admin.close()
