"""The analytics sink: an aiokafka consumer folding the recorded topics into the store.

It reads ``llm.decisions``, ``llm.outcomes``, ``llm.responses``, ``llm.feedback`` and
the routing log (for each request's tenant, route and prompt hash, the grades and the
policy changes; it never stores the messages or completions the routing log carries),
every partition, without a consumer group: where it is is the store's
``sink_offsets``, committed in the same DuckDB transaction as the rows
(:meth:`Store.apply`), so a restart, even after SIGKILL, resumes exactly after the
last committed batch. Topics that do not exist yet (a sink started before the
worker) are picked up when they appear.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from app import kafka
from app.analytics.rows import STREAMS
from app.analytics.store import Applied, SourceRecord, Store
from app.audit.log import topic_names
from app.compat.tansu import fetch_max_wait_ms, true_end_offsets
from app.settings import Settings

log = logging.getLogger(__name__)
#: How often the sink looks for topics or partitions that appeared.
REFRESH_S = 5.0


def security_kwargs(settings: Settings) -> dict[str, Any]:
    """The secure-Kafka client arguments, when app/kafka.py provides them."""
    helper = getattr(kafka, "client_security_kwargs", None)
    return dict(helper(settings)) if helper is not None else {}


class Sink:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        bootstrap: str | None = None,
        batch_max: int = 5000,
        on_batch: Callable[[Applied], None] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.bootstrap = bootstrap or kafka.bootstrap_servers(settings.broker)
        self.batch_max = batch_max
        self.on_batch = on_batch
        self.stream_of = {
            topic: stream
            for stream, topic in topic_names(settings.topics).items()
            if stream in STREAMS
        }
        self.total = Applied()
        self._assigned: set[TopicPartition] = set()

    def _consumer(self) -> AIOKafkaConsumer:
        wait_ms = fetch_max_wait_ms() if self.settings.tansu_compat else 500
        return AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="earliest",
            isolation_level="read_committed",  # an aborted transaction's records never were
            fetch_max_wait_ms=wait_ms,
            max_partition_fetch_bytes=4 * 1024 * 1024,
            **security_kwargs(self.settings),
        )

    async def run(self, stop: asyncio.Event | None = None, *, until_end: bool = False) -> Applied:
        """Fold until ``stop`` is set (``until_end``: until the end offsets seen at the start)."""
        stop = stop or asyncio.Event()
        consumer = self._consumer()
        await consumer.start()
        try:
            await self._refresh(consumer)
            ends = await self._ends(consumer) if until_end else None
            loop = asyncio.get_running_loop()
            next_refresh = loop.time() + REFRESH_S
            while not stop.is_set():
                if ends is not None and await self._reached(consumer, ends):
                    break
                if loop.time() >= next_refresh:
                    await self._refresh(consumer)
                    next_refresh = loop.time() + REFRESH_S
                await self._step(consumer)
        finally:
            await consumer.stop()
        return self.total

    async def _step(self, consumer: AIOKafkaConsumer) -> None:
        if not self._assigned:
            await asyncio.sleep(0.5)
            return
        batches = await consumer.getmany(timeout_ms=500, max_records=self.batch_max)
        records = [
            SourceRecord(
                self.stream_of[tp.topic], tp.topic, tp.partition, record.offset, record.value or b""
            )
            for tp, batch in batches.items()
            for record in batch
        ]
        if not records:
            return
        applied = await asyncio.to_thread(self.store.apply, records)
        self.total.add(applied)
        if self.on_batch is not None:
            self.on_batch(self.total)

    async def _refresh(self, consumer: AIOKafkaConsumer) -> None:
        """Assign every partition of the topics that exist, each at its committed offset."""
        with contextlib.suppress(Exception):
            await consumer._client.force_metadata_update()
        found = {
            TopicPartition(topic, number)
            for topic in self.stream_of
            for number in consumer.partitions_for_topic(topic) or ()
        }
        if found == self._assigned:
            return
        consumer.assign(sorted(found))
        committed = await asyncio.to_thread(self.store.offsets)
        for tp in found:
            where = committed.get((tp.topic, tp.partition))
            if where is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, where)
        self._assigned = found
        log.info("analytics sink reads %d partitions", len(found))

    async def _ends(self, consumer: AIOKafkaConsumer) -> dict[TopicPartition, int]:
        reported = await consumer.end_offsets(sorted(self._assigned))
        if self.settings.tansu_compat:
            return await true_end_offsets(self.bootstrap, reported)
        return dict(reported)

    async def _reached(self, consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
        for tp, end in ends.items():
            if end > 0 and await consumer.position(tp) < end:
                return False
        return True
