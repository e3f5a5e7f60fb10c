"""Find a request's response on ``llm.responses`` by its id, in a bounded recent window.

Responses are keyed by request id, so one lives on the partition Kafka's default
partitioner (murmur2 of the key) picks: the lookup reads that partition only, from
``window`` records before its end to its end, and keeps the first response with the
id. A gateway killed mid-request loses nothing: the request completes in the log, and
any gateway finds the answer here (trade-off: a response older than the window is not
found, and a lookup costs reading up to ``window`` records of one partition; keeping
answers in the gateway instead would be free but dies with it).

Where the log position is known there is no window: a Responses API turn names its
request record's position (its response id) and where its answer will be (its
``turn``, app/contract/turn.py), so :meth:`ResponseLookup.request_at` reads the record
at its position and :meth:`ResponseLookup.response_after` reads forward from that
position until the answer, however old both are.
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
from app.contract import LogPosition, Response
from app.kafka import standalone_consumer

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
        found = await self._find(self.topic, request_id, _response)
        return found[0] if found is not None else None

    async def find_request(self, request_id: str) -> dict[str, Any] | None:
        """The ``llm.requests`` record of ``request_id`` (the gateway's JSON), if in the window."""
        found = await self.request_at(request_id)
        return found[0] if found is not None else None

    async def request_at(
        self, request_id: str, position: LogPosition | None = None
    ) -> tuple[dict[str, Any], LogPosition] | None:
        """The ``llm.requests`` record of ``request_id`` and where it is: the record at
        ``position`` exactly (one fetch, however old; None when the record there is not
        that request's), or without a position the first in the window."""
        if self.requests_topic is None:
            return None
        if position is not None:
            return await self._find(position.topic, request_id, _request, position, 1)
        return await self._find(self.requests_topic, request_id, _request)

    async def response_after(
        self, request_id: str, position: LogPosition
    ) -> tuple[Response, LogPosition] | None:
        """The response of ``request_id`` at or after ``position`` on its partition (where
        its request said its answer would be), and where it is: read forward from there,
        however old, to the partition's end (no window)."""
        return await self._find(position.topic, request_id, _response, position)

    async def _find(
        self,
        topic: str,
        request_id: str,
        parse: Callable[[bytes | None, str], T | None],
        start: LogPosition | None = None,
        count: int | None = None,
    ) -> tuple[T, LogPosition] | None:
        async with self._lock:
            consumer = standalone_consumer(self.bootstrap, fetch_max_wait_ms=fetch_max_wait_ms())
            await consumer.start()
            try:
                return await asyncio.wait_for(
                    self._scan(consumer, topic, request_id, parse, start, count),
                    timeout=LOOKUP_TIMEOUT_S,
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
        start: LogPosition | None,
        count: int | None,
    ) -> tuple[T, LogPosition] | None:
        """The first record keyed ``request_id`` that ``parse`` accepts: from ``start`` (at
        most ``count`` records from it), else in the window before the key's partition's end."""
        key = request_id.encode()
        partitions = await _partitions(consumer, topic)
        if start is not None and start.partition not in partitions:
            return None
        partition = start.partition if start else partition_of(key, len(partitions))
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]  # may be short of the true end
        begin = max(first, end - self.window) if start is None else max(first, start.offset)
        stop = None if start is None or count is None else start.offset + count
        if stop is not None and begin >= min(stop, end):
            return None  # not (or no longer) on the log
        consumer.seek(tp, min(begin, end))
        idle = 0
        while idle < 2:  # read past the reported end until nothing more comes
            batches = await consumer.getmany(tp, timeout_ms=200)
            records = batches.get(tp, [])
            idle = idle + 1 if not records and await consumer.position(tp) >= end else 0
            for record in records:
                if stop is not None and record.offset >= stop:
                    return None
                if record.key == key:
                    found = parse(record.value, request_id)
                    if found is not None:
                        return found, _at(tp, record.offset)
        return None


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()
    found = consumer.partitions_for_topic(topic)
    if not found:
        raise LookupError(f"topic {topic!r} does not exist")
    return set(found)


def _at(tp: TopicPartition, offset: int) -> LogPosition:
    return LogPosition(topic=tp.topic, partition=tp.partition, offset=offset)


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
