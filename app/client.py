"""A small aiokafka client for platforms, tools and tests: publish requests, follow topics.

``TopicFollower`` assigns every partition of its topics itself (no consumer
group, so no rebalance wait) and reads from the beginning: on a memory broker
that is the whole history, and it never misses a record that raced its start.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from app.compat.fetch_pacing import pace_fetches
from app.compat.tansu import fetch_max_wait_ms
from app.kafka import DURABLE_PRODUCER, client_security
from app.settings import get_settings


class RequestPublisher:
    def __init__(self, bootstrap: str, topic: str = "llm.requests") -> None:
        self.topic = topic
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            linger_ms=get_settings().producer_linger_ms,
            **DURABLE_PRODUCER,
            **client_security(),
        )

    async def start(self) -> RequestPublisher:
        await self._producer.start()
        return self

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, request: dict[str, Any] | bytes, key: bytes | None = None) -> None:
        value = request if isinstance(request, bytes) else json.dumps(request).encode()
        await self._producer.send(self.topic, value=value, key=key)

    async def flush(self) -> None:
        await self._producer.flush()


class TopicFollower:
    def __init__(
        self,
        bootstrap: str,
        topics: Iterable[str],
        max_partition_fetch_bytes: int = 1 << 20,
        *,
        read_committed: bool = False,
    ) -> None:
        """``read_committed``: skip records of aborted transactions (exactly-once)."""
        self.topics = list(topics)
        # A short long-poll, longer once idle: Tansu holds a fetch (app/compat/).
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            group_id=None,
            isolation_level="read_committed" if read_committed else "read_uncommitted",
            fetch_max_wait_ms=fetch_max_wait_ms(),
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            fetch_max_bytes=max(52_428_800, max_partition_fetch_bytes),
            **client_security(),
        )

    async def start(self) -> TopicFollower:
        await self._consumer.start()
        pace_fetches(self._consumer)
        try:
            partitions = []
            for topic in self.topics:
                for number in sorted(await self._partitions(topic)):
                    partitions.append(TopicPartition(topic, number))
            self._consumer.assign(partitions)
            await self._consumer.seek_to_beginning(*partitions)
        except BaseException:
            await self._consumer.stop()  # a topic that does not exist leaves nothing open
            raise
        return self

    async def _partitions(self, topic: str) -> set[int]:
        await self._consumer._client.force_metadata_update()
        found = self._consumer.partitions_for_topic(topic)
        if not found:
            raise LookupError(f"topic {topic!r} does not exist")
        return set(found)

    async def stop(self) -> None:
        await self._consumer.stop()

    async def poll(self, timeout_ms: int = 200) -> list[ConsumerRecord[bytes, bytes]]:
        batches = await self._consumer.getmany(timeout_ms=timeout_ms)
        return [record for records in batches.values() for record in records]

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord[bytes, bytes]]:
        while True:
            for record in await self.poll():
                yield record


def all_answered(
    request_ids: Iterable[str], topic: str
) -> Callable[[dict[str, list[dict[str, Any]]]], bool]:
    """A ``read_topics`` stop condition: every one of ``request_ids`` has a record on ``topic``."""
    wanted = set(request_ids)

    def done(records: dict[str, list[dict[str, Any]]]) -> bool:
        return wanted <= {r.get("request_id") for r in records[topic]}

    return done


async def read_topics(
    bootstrap: str,
    topics: Iterable[str],
    done: Callable[[dict[str, list[dict[str, Any]]]], bool],
    timeout_s: float,
    linger_s: float = 1.0,
    *,
    stamp: bool = False,
    read_committed: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """Read JSON records of ``topics`` from the start until ``done(records)`` or the timeout.

    Then keeps reading for ``linger_s`` so that late duplicates are seen too. With
    ``stamp``, each record also gets its broker timestamp as ``_ts`` (epoch seconds).
    ``read_committed``: records of aborted transactions are skipped.
    """
    follower = await TopicFollower(bootstrap, topics, read_committed=read_committed).start()
    records: dict[str, list[dict[str, Any]]] = {topic: [] for topic in follower.topics}
    loop = asyncio.get_running_loop()

    async def read_until(until: float, finished: Callable[[], bool]) -> None:
        while loop.time() < until and not finished():
            for record in await follower.poll():
                value = json.loads(record.value or b"{}")
                if stamp:
                    value["_ts"] = record.timestamp / 1000.0
                records[record.topic].append(value)

    try:
        await read_until(loop.time() + timeout_s, lambda: done(records))
        await read_until(loop.time() + linger_s, lambda: False)
    finally:
        await follower.stop()
    return records


async def read_raw(
    bootstrap: str, topics: Iterable[str], *, idle_s: float = 2.0, timeout_s: float = 120.0
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topics`` as stored (offsets, timestamps, raw bytes), from the start.

    Reads until nothing new arrived for ``idle_s`` (end offsets are not trusted:
    Tansu misreports them) or ``timeout_s`` passed. Fetches up to 32 MB per
    partition: a route-state changelog row can be large.
    """
    follower = await TopicFollower(bootstrap, topics, max_partition_fetch_bytes=32 << 20).start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    quiet_since = loop.time()
    try:
        while loop.time() < deadline and loop.time() - quiet_since < idle_s:
            batch = await follower.poll(timeout_ms=200)
            if batch:
                records.extend(batch)
                quiet_since = loop.time()
    finally:
        await follower.stop()
    return records
