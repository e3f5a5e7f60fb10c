"""Find a request's response on ``llm.responses`` by its id, in a bounded recent window.

Responses are keyed by request id, so one lives on the partition Kafka's default
partitioner (murmur2 of the key) picks: the lookup reads that partition only, from
``window`` records before its end to its end, and keeps the first response with the
id. A gateway killed mid-request loses nothing: the request completes in the log, and
any gateway finds the answer here (trade-off: a response older than the window is not
found, and a lookup costs reading up to ``window`` records of one partition; keeping
answers in the gateway instead would be free but dies with it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import murmur2
from pydantic import ValidationError

from app.compat.tansu import fetch_max_wait_ms
from app.events import Response
from app.kafka import client_security

#: Give up on a lookup after this long.
LOOKUP_TIMEOUT_S = 10.0
T = TypeVar("T")


def partition_of(key: bytes, partitions: int) -> int:
    """The partition the default (Java-compatible) partitioner sends ``key`` to."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


class ResponseLookup:
    """Answers on ``topic`` (``llm.responses``) and, for a resumed stream, the requests
    themselves on ``requests_topic`` (``llm.requests``, keyed by request id too: who
    asked, where its deltas go), both in the same bounded window."""

    def __init__(
        self, bootstrap: str, topic: str, window: int, requests_topic: str | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.requests_topic = requests_topic
        self.window = window
        self._lock = asyncio.Semaphore(4)  # lookups at once

    async def find(self, request_id: str) -> Response | None:
        return await self._find(self.topic, request_id, _response)

    async def find_request(self, request_id: str) -> dict[str, Any] | None:
        """The ``llm.requests`` record of ``request_id`` (the gateway's JSON), if in the window."""
        if self.requests_topic is None:
            return None
        return await self._find(self.requests_topic, request_id, _request)

    async def _find(
        self, topic: str, request_id: str, parse: Callable[[bytes | None, str], T | None]
    ) -> T | None:
        async with self._lock:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                enable_auto_commit=False,
                group_id=None,
                fetch_max_wait_ms=fetch_max_wait_ms(),
                **client_security(),
            )
            await consumer.start()
            try:
                return await asyncio.wait_for(
                    self._scan(consumer, topic, request_id, parse), timeout=LOOKUP_TIMEOUT_S
                )
            except TimeoutError:
                return None
            finally:
                await consumer.stop()

    async def _scan(
        self,
        consumer: AIOKafkaConsumer,
        topic: str,
        request_id: str,
        parse: Callable[[bytes | None, str], T | None],
    ) -> T | None:
        key = request_id.encode()
        count = len(await _partitions(consumer, topic))
        tp = TopicPartition(topic, partition_of(key, count))
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]  # may be short of the true end
        consumer.seek(tp, max(first, end - self.window))
        idle = 0
        while idle < 2:  # read past the reported end until nothing more comes
            batches = await consumer.getmany(tp, timeout_ms=200)
            records = batches.get(tp, [])
            idle = idle + 1 if not records and await consumer.position(tp) >= end else 0
            for record in records:
                if record.key == key:
                    found = parse(record.value, request_id)
                    if found is not None:
                        return found
        return None


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()
    found = consumer.partitions_for_topic(topic)
    if not found:
        raise LookupError(f"topic {topic!r} does not exist")
    return set(found)


def _response(value: bytes | None, request_id: str) -> Response | None:
    try:
        found = Response.model_validate_json(value or b"")
    except ValidationError:
        return None
    return found if found.request_id == request_id else None


def _request(value: bytes | None, request_id: str) -> dict[str, Any] | None:
    try:
        found = json.loads(value or b"")
    except ValueError:
        return None
    if isinstance(found, dict) and found.get("request_id") == request_id:
        return found
    return None
