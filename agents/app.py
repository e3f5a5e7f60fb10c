"""The worker's Faust application (:func:`app.worker.faust_app.worker_app`) and its topics:
those agents read, and the writers of those the worker writes.

Agents (``agents/*``), tables (``tables/*``) and views (``agents/web.py``) register
against ``app``, built when this module is first imported, which only the worker does
(``switchyard worker``: app/cli.py imports the agents).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import faust
from aiokafka.errors import KafkaTimeoutError

from app.settings import get_settings
from app.worker.faust_app import worker_app

log = logging.getLogger(__name__)


settings = get_settings()
app = worker_app()


def _topic(name: str) -> faust.TopicT:
    return app.topic(name, key_type=bytes, value_type=bytes, partitions=settings.partitions)


class Publisher:
    """Writes records to one topic with the worker's producer, without Faust's channel
    layer (its ``FutureMessage``, codecs and per-send sensors): one record sent by
    ``Topic.send`` cost 65-71 µs of CPU here, 28-32 µs this way (``switchyard bench
    record_cost``).

    ``send`` returns the future of the record's delivery. A send the producer gives up on
    for a passing reason (a broker stalled past the producer's request timeout, a leader
    moving) is sent again, after a growing pause, until a copy is delivered: what waits
    on the future (the router's row, an ack) waits with it, and nothing is dropped. A copy
    that reached the broker twice is the same record twice (consumers take a record id
    once). A send refused for the record itself (its size) fails the future.
    """

    __slots__ = ("headers", "name", "on_delivered", "unacknowledged")

    def __init__(self, name: str, headers: list[tuple[str, bytes]] | None = None) -> None:
        self.name = name
        #: Headers every record of this writer carries (before a send's own).
        self.headers = headers
        #: Told ``(partition, offset, value)`` of each record the broker acknowledged.
        self.on_delivered: Callable[[int, int, bytes], None] | None = None
        #: Records sent whose delivery is not settled yet.
        self.unacknowledged = 0

    def get_topic_name(self) -> str:
        return self.name

    async def send(
        self,
        *,
        key: bytes | None,
        value: bytes | str,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Any]:
        data = value.encode() if isinstance(value, str) else value
        if self.headers is not None:
            headers = self.headers + (headers or [])
        sent = cast(
            "asyncio.Future[Any]",
            await app.producer.send(self.name, key, data, partition, None, headers),
        )
        delivered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        record = _Record(self, key, data, partition, headers, delivered)
        self.unacknowledged += 1
        delivered.add_done_callback(self._settled)
        sent.add_done_callback(record.settle)
        return delivered

    def _settled(self, _: asyncio.Future[Any]) -> None:
        self.unacknowledged -= 1


#: Seconds before a record the producer gave up on is sent again (doubling up to the last).
RESEND_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
#: Sends under way again (a reference each, until done).
_resending: set[asyncio.Future[Any]] = set()


def resendable(problem: BaseException) -> bool:
    """A send failure that passes: the broker's or the network's, not the record's."""
    return bool(getattr(problem, "retriable", False)) or isinstance(problem, KafkaTimeoutError)


@dataclass(slots=True)
class _Record:
    publisher: Publisher
    key: bytes | None
    data: bytes
    partition: int | None
    headers: list[tuple[str, bytes]] | None
    delivered: asyncio.Future[Any]
    resent: int = 0

    def settle(self, sent: asyncio.Future[Any]) -> None:
        if self.delivered.done():
            return
        problem = asyncio.CancelledError() if sent.cancelled() else sent.exception()
        if problem is None:
            metadata = sent.result()
            self.delivered.set_result(metadata)
            report = self.publisher.on_delivered
            if report is not None:
                report(metadata.partition, metadata.offset, self.data)
        elif resendable(problem):
            wait = RESEND_BACKOFF_S[min(self.resent, len(RESEND_BACKOFF_S) - 1)]
            log.warning("a record of %s was not delivered (%s); sent again in %gs",
                        self.publisher.name, type(problem).__name__, wait)  # fmt: skip
            again = asyncio.ensure_future(self._again(wait))
            _resending.add(again)
            again.add_done_callback(_resending.discard)
        else:
            self.delivered.set_exception(problem)

    async def _again(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self.resent += 1
        name = self.publisher.name
        try:
            sent = await app.producer.send(
                name, self.key, self.data, self.partition, None, self.headers
            )
        except Exception as exc:  # the producer refused it now: the same rules
            sent = asyncio.get_running_loop().create_future()
            sent.set_exception(exc)
        cast("asyncio.Future[Any]", sent).add_done_callback(self.settle)


#: Topics agents read (Faust topics), then the worker's writers (one per topic it writes).
requests_topic = _topic(settings.topics.requests)
routing_topic = _topic(settings.topics.routing)
dispatch_topic = _topic(settings.topics.dispatch)
spill_topic = _topic(settings.topics.spill)
#: This process, on the routing-log records it writes: a router tells its own records
#: from other processes' (calls ahead, app/router/ahead.py).
WRITER_HEADER = "switchyard-writer"
WRITER_ID = uuid.uuid4().hex.encode()
routing_log = Publisher(settings.topics.routing, headers=[(WRITER_HEADER, WRITER_ID)])
dispatch_log = Publisher(settings.topics.dispatch)
spill_log = Publisher(settings.topics.spill)
decisions_topic = Publisher(settings.topics.decisions)
outcomes_topic = Publisher(settings.topics.outcomes)
responses_topic = Publisher(settings.topics.responses)
deadletter_topic = Publisher(settings.topics.deadletter)
#: One partition: its order numbers the policy versions.
policy_topic = app.topic(settings.topics.policy, key_type=bytes, value_type=bytes, partitions=1)
