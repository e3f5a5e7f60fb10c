"""The gateway's replies: its own partitions of the replies topic, and who waits on them.

A consumer with no group assigns the gateway's partitions itself and starts at their
end: a gateway never reads ``llm.responses`` nor another gateway's partition. Each
reply resolves the future of the request waiting for it (a duplicate, or a reply for
a request no longer waited on, is dropped); the last answers are kept, bounded, for
``GET /v1/switchyard/requests/{id}``.

The same consumer reads the same partition numbers of the deltas topic: the pieces of
the streamed answers of this gateway's ``stream: true`` requests, put with their
replies in the request's inbox (:meth:`ReplyWaiter.expect_stream`), in arrival order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from typing import TypeVar

from aiokafka import TopicPartition
from pydantic import ValidationError

from app.compat.fetch_pacing import pace_fetches
from app.compat.tansu import fetch_max_wait_ms
from app.config.schema import ConfigError
from app.contract import Response, StreamDelta
from app.kafka import standalone_consumer

log = logging.getLogger(__name__)
Record = TypeVar("Record", Response, StreamDelta)


def _parsed(model: type[Record], value: bytes | None, what: str, topic: str) -> Record | None:
    """``value`` read as ``model``; None, and a warning naming ``what`` and ``topic``, when
    it is not one."""
    try:
        return model.model_validate_json(value or b"")
    except ValidationError:
        log.warning("unreadable %s on %s", what, topic)
        return None


#: Answers kept for lookups by id.
RECENT_ANSWERS = 10_000
#: What a streaming request's inbox receives.
Inbox = asyncio.Queue[StreamDelta | Response]


class ReplyWaiter:
    def __init__(
        self, bootstrap: str, topic: str, partitions: list[int], deltas_topic: str
    ) -> None:
        self.topic = topic
        self.deltas_topic = deltas_topic
        self.partitions = list(partitions)
        self._consumer = standalone_consumer(bootstrap, fetch_max_wait_ms=fetch_max_wait_ms())
        self._pending: dict[str, asyncio.Future[Response]] = {}
        self._streams: dict[str, Inbox] = {}
        self.recent: OrderedDict[str, Response] = OrderedDict()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> ReplyWaiter:
        await self._consumer.start()
        pace_fetches(self._consumer)
        await self._consumer._client.force_metadata_update()
        for topic in (self.topic, self.deltas_topic):
            existing = self._consumer.partitions_for_topic(topic) or set()
            missing = sorted(set(self.partitions) - existing)
            if missing:
                await self._consumer.stop()
                raise ConfigError(
                    f"SWITCHYARD_GATEWAY_REPLY_PARTITIONS: {topic} has no partition {missing}"
                )
        topics = (self.topic, self.deltas_topic)
        assigned = [TopicPartition(t, p) for t in topics for p in self.partitions]
        self._consumer.assign(assigned)
        await self._consumer.seek_to_end(*assigned)
        for tp in assigned:  # resolve the position now: later replies are all read
            await self._consumer.position(tp)
        self._task = asyncio.create_task(self._run(), name="gateway-replies")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()
        for future in self._pending.values():
            future.cancel()
        self._streams.clear()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def waiting(self) -> int:
        return len(self._pending) + len(self._streams)

    def expect(self, request_id: str) -> asyncio.Future[Response]:
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        return future

    def expect_stream(self, request_id: str) -> Inbox:
        """The inbox of a ``stream: true`` request: its deltas and its answer, as they come."""
        inbox: Inbox = asyncio.Queue()
        self._streams[request_id] = inbox
        return inbox

    def forget(self, request_id: str) -> None:
        self._streams.pop(request_id, None)
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.cancel()

    def deliver(self, response: Response) -> None:
        """A reply arrived (or was found by a lookup): resolve its waiter, keep it."""
        self.recent[response.request_id] = response
        self.recent.move_to_end(response.request_id)
        while len(self.recent) > RECENT_ANSWERS:
            self.recent.popitem(last=False)
        inbox = self._streams.get(response.request_id)
        if inbox is not None:
            inbox.put_nowait(response)
        future = self._pending.pop(response.request_id, None)
        if future is not None and not future.done():
            future.set_result(response)

    async def _run(self) -> None:
        while True:
            try:
                batches = await self._consumer.getmany(timeout_ms=500)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker's trouble: keep trying
                log.warning("reading replies failed: %s", type(exc).__name__)
                await asyncio.sleep(0.5)
                continue
            for tp, records in batches.items():
                read = self._read_delta if tp.topic == self.deltas_topic else self._read
                for record in records:
                    read(record.value)

    def _read_delta(self, value: bytes | None) -> None:
        delta = _parsed(StreamDelta, value, "delta", self.deltas_topic)
        if delta is None:
            return
        inbox = self._streams.get(delta.request_id)
        if inbox is not None:
            inbox.put_nowait(delta)

    def _read(self, value: bytes | None) -> None:
        response = _parsed(Response, value, "reply", self.topic)
        if response is not None:
            self.deliver(response)
