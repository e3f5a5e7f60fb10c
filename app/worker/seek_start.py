"""After a rebalance, a partition nobody committed is read again from its start.

When a rebalance ends, Faust's recovery resumes the flow and then seeks every assigned
partition to its committed offset (``Consumer.perform_seek``). aiokafka's
``seek_to_committed`` seeks only partitions with a committed offset above 0: one that
was never committed keeps whatever position the fetch loop reached in between. On
Apache Kafka, where a fetch returns as soon as records are there, that loop has often
read the partition to its end by then, into buffers that the rebalance's flow control
empties; the records are never delivered, never acked, and the partition is never
committed: a worker that took over ``llm.requests``-1 from a worker that had not yet
committed it left its 256 requests unanswered (1 run in 2 of three workers joining
during a 1,000-request burst; Tansu's held fetches made it rare).

:func:`install` makes the worker's consumer seek such partitions to their start, which
is what ``auto_offset_reset=earliest`` promises. What was already delivered by a
previous owner is delivered again: a duplicate, which every fold takes (at-least-once).
Changelog partitions are left to the table recovery, which positions them itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.transport.drivers import aiokafka as driver

_installed = False


async def seek_to_committed_or_start(
    consumer: AIOKafkaConsumer, changelogs: frozenset[str]
) -> Mapping[TopicPartition, int | None]:
    """``seek_to_committed``, then every stream partition without a commit to its start."""
    committed: Mapping[TopicPartition, int | None] = await consumer.seek_to_committed()
    never = [tp for tp, offset in committed.items() if not offset and tp.topic not in changelogs]
    if never:
        await consumer.seek_to_beginning(*never)
    return committed


def install() -> None:
    """Patch Faust's aiokafka consumer thread. Idempotent."""
    global _installed
    if _installed:
        return
    thread_class: Any = driver.AIOKafkaConsumerThread

    async def seek_to_committed(self: Any) -> Mapping[Any, int | None]:
        changelogs = frozenset(self.app.tables.changelog_topics)
        consumer = self._ensure_consumer()
        result: Mapping[Any, int | None] = await self.call_thread(
            seek_to_committed_or_start, consumer, changelogs
        )
        return result

    thread_class.seek_to_committed = seek_to_committed
    _installed = True
