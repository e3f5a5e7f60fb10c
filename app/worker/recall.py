"""Reading the routing log back: the events a route's waiting requests are in, and the
answers its response cache gives again.

The router's fold keeps references to waiting requests, never the requests (a
waiting request stays in the log). Its memory (:class:`app.routing.driver.Recall`)
holds the ones it saw go by, up to a bound; after a restart, or past the bound, this reader
fetches them from the routing topic at their offsets with a consumer of its own
(no group, explicit assignment), so a backlog of any size costs the router a
bounded amount of memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import TypeAdapter, ValidationError

from app.compat.tansu import fetch_max_wait_ms
from app.contract import RequestAccepted, RoutingLogEvent, route_of
from app.kafka import client_security
from app.routing.driver import Recall, Recalled, record_size
from app.routing.fold import Want

log = logging.getLogger(__name__)
_event: TypeAdapter[RoutingLogEvent] = TypeAdapter(RoutingLogEvent)


class RecallFailed(RuntimeError):
    """The routing log no longer holds an event a waiting request is in."""


class LogReader:
    """Reads events of one topic by offset. One consumer per process, used under a lock."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        tansu: bool,
        timeout_s: float = 30.0,
        read_committed: bool = False,
    ) -> None:
        self.bootstrap = bootstrap
        #: Exactly-once: records of aborted transactions are not the log's.
        self.isolation_level = "read_committed" if read_committed else "read_uncommitted"
        self.topic = topic
        self.fetch_wait_ms = fetch_max_wait_ms() if tansu else 100
        self.timeout_s = timeout_s
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()
        #: Records read back (a measure of how often memory fell short).
        self.records_read = 0

    async def recall(
        self, want: Want, route: str, partition: int, through: int, memory: Recall
    ) -> Recalled:
        """The event ``want`` names, read from ``partition``; line reads refill ``memory``."""
        async with self._lock:
            consumer = await self._started()
            tp = TopicPartition(self.topic, partition)
            if want.kind == "parked":
                found = await self._read_one(consumer, tp, want.position)
                memory.carriers[want.position] = found
                return want.position, found
            if want.kind == "cached":  # the answer a response-cache hit gives again
                found = await self._read_one(consumer, tp, want.position)
                memory.keep_answer(want.position, found, record_size(found, None))
                return want.position, found
            events, up_to_date = await self._read_line(
                consumer, tp, route, want.position, through, memory.max_bytes
            )
        memory.refill(want.position, events, up_to_date)
        head = memory.head_after(want.position)
        if head is None:
            where = f"{self.topic}[{partition}]@{want.position}"
            raise RecallFailed(f"no request of {route!r} after {where}")
        return head

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                enable_auto_commit=False,
                group_id=None,
                isolation_level=self.isolation_level,
                fetch_max_wait_ms=self.fetch_wait_ms,
                max_partition_fetch_bytes=4 * 1024 * 1024,
                **client_security(),
            )
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    async def _read_one(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int
    ) -> RoutingLogEvent:
        consumer.assign([tp])
        consumer.seek(tp, offset)
        async for position, event, _ in self._records(consumer, tp, offset):
            if position == offset and event is not None:
                return event
            break
        raise RecallFailed(f"{tp.topic}[{tp.partition}]@{offset} is not readable")

    async def _read_line(
        self,
        consumer: AIOKafkaConsumer,
        tp: TopicPartition,
        route: str,
        after: int,
        through: int,
        max_bytes: int | None,
    ) -> tuple[list[tuple[int, RoutingLogEvent, bytes | None]], bool]:
        """The route's requests after ``after`` up to ``through`` (or ``max_bytes``), with
        their record bytes; True when the read reached ``through``."""
        consumer.assign([tp])
        consumer.seek(tp, after + 1)
        found: list[tuple[int, RoutingLogEvent, bytes | None]] = []
        size = 0
        async for position, event, raw in self._records(consumer, tp, after + 1):
            if position > through:
                return found, True
            if isinstance(event, RequestAccepted) and route_of(event) == route:
                found.append((position, event, raw))
                size += len(raw)
                if max_bytes is not None and size >= max_bytes:
                    return found, position >= through
            if position == through:
                return found, True
        return found, False

    def _records(self, consumer: AIOKafkaConsumer, tp: TopicPartition, start: int) -> _Records:
        return _Records(self, consumer, tp, start)


class _Records:
    """Async iterator over (offset, parsed event or None, record bytes) from ``start``,
    until a timeout."""

    def __init__(
        self, reader: LogReader, consumer: AIOKafkaConsumer, tp: TopicPartition, start: int
    ) -> None:
        self.reader, self.consumer, self.tp = reader, consumer, tp
        self.buffer: deque[tuple[int, RoutingLogEvent | None, bytes]] = deque()
        self.deadline = asyncio.get_running_loop().time() + reader.timeout_s

    def __aiter__(self) -> _Records:
        return self

    async def __anext__(self) -> tuple[int, RoutingLogEvent | None, bytes]:
        while not self.buffer:
            if asyncio.get_running_loop().time() > self.deadline:
                raise StopAsyncIteration
            batches = await self.consumer.getmany(self.tp, timeout_ms=500, max_records=500)
            for record in batches.get(self.tp, []):
                self.reader.records_read += 1
                raw = record.value or b""
                self.buffer.append((record.offset, _parse(raw), raw))
        return self.buffer.popleft()


def _parse(raw: bytes | None) -> RoutingLogEvent | None:
    try:
        return _event.validate_json(raw or b"")
    except ValidationError:
        return None  # the router dead-lettered it; it is nobody's request
