"""Faust's consumer and table recovery under transactions (``SWITCHYARD_EXACTLY_ONCE``).

The worker's streams and table restores must never see a record of an aborted
transaction (:func:`read_committed`), and a table's recovery must end at its changelog's
last committed record, not at a commit marker no consumer is ever given
(:func:`recovery_ends_at_committed_records`). The writers: :mod:`app.worker.transactions`.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.tables import recovery
from faust.transport.drivers import aiokafka as driver

from app.kafka import standalone_consumer

_read_committed = False


def read_committed() -> None:
    """Make the worker's consumer read only committed records (its streams and the table
    restores): records of an aborted transaction are never folded, restored or called."""
    global _read_committed
    if _read_committed:
        return
    thread_class: Any = driver.AIOKafkaConsumerThread
    create = thread_class._create_worker_consumer

    def create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = create(self, transport)
        consumer._isolation_level = "read_committed"  # read by start(), into its fetcher
        return consumer

    thread_class._create_worker_consumer = create_worker_consumer
    _read_committed = True


async def last_records(
    consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Per partition, the offset of its last record a ``read_committed`` consumer is given
    before ``ends`` (-1: none). A partition written in transactions ends with a commit
    marker, an offset no consumer is ever given (and aborted records are skipped)."""
    found: dict[TopicPartition, int] = {}
    starts = await consumer.beginning_offsets(list(ends))
    for tp, end in ends.items():
        consumer.assign([tp])
        window, last, start = 16, -1, end
        while last < 0 and start > starts[tp]:
            start = max(starts[tp], end - window)
            consumer.seek(tp, start)
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for record in batch.get(tp, []):
                    if record.offset < end:
                        last = max(last, record.offset)
            window *= 16
        found[tp] = last
    return found


def recovery_ends_at_committed_records(bootstrap: str) -> None:
    """Make Faust's table recovery wait for a changelog's last committed record, not for
    the offset before its end: there, in a partition written in transactions, sits a
    commit marker that is never delivered, and the recovery waited for it forever (Faust
    works around that only with its own exactly-once, after two idle 5 s polls)."""
    recovery_class: Any = recovery.Recovery
    build = recovery_class._build_highwaters
    if getattr(build, "committed_records", False):
        return

    async def build_highwaters(
        self: Any, consumer: Any, tps: set[Any], destination: Any, title: str
    ) -> None:
        await build(self, consumer, tps, destination, title)
        if not tps:
            return
        reader = standalone_consumer(bootstrap, isolation_level="read_committed")
        await reader.start()
        try:
            ends = {TopicPartition(tp.topic, tp.partition): destination[tp] + 1 for tp in tps}
            last = await last_records(reader, ends)
        finally:
            await reader.stop()
        for tp in tps:
            destination[tp] = last[TopicPartition(tp.topic, tp.partition)]

    build_highwaters.committed_records = True  # type: ignore[attr-defined]
    recovery_class._build_highwaters = build_highwaters
