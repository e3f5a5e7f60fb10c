"""Replies for the gateways: a copy of a response where its request asked.

A request the gateway published carries ``reply_to`` (a partition of the replies
topic the gateway owns). Whoever publishes the response (the executor for a
successful answer, the router for an error) also sends a copy there, keyed by
request id, so a gateway reads only the answers to its own requests and never
``llm.responses``.

The copy is a convenience, not the record: ``llm.responses`` is. It is sent without
holding up the publisher (nothing waits for its delivery), and a copy that cannot be
sent is only logged; the gateway falls back to reading ``llm.responses`` by key.

The executor has the request (the dispatch carries it); the router's error answers
carry only a request id, so the router remembers the reply address of the requests it
folds (:func:`remember`), in a bounded map, until it answers them.

The pieces of a streamed answer (``response.delta``, :func:`send_delta`) go the same
way to the same partition number of the deltas topic, so a gateway reads only its own
requests' deltas; a request without a reply address has its deltas keyed by request id.
Unlike the copies, deltas are kept: they are how analysts reassemble every stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable
from typing import Any

from agents.app import Publisher, settings
from app.contract import (
    AttemptFinished,
    ChatRequest,
    Dispatch,
    ReplyTo,
    RequestAccepted,
    Response,
    StreamDelta,
)

log = logging.getLogger(__name__)

replies_topic = Publisher(settings.topics.replies)
deltas_topic = Publisher(settings.topics.deltas)
#: Reply addresses of requests the router folded and has not answered yet.
MAX_REMEMBERED = 100_000
_addresses: OrderedDict[str, ReplyTo] = OrderedDict()
_sending: set[asyncio.Task[Any]] = set()


def remember(request: ChatRequest) -> None:
    """Keep the reply address of a request the router may answer later (bounded)."""
    if request.reply_to is None:
        return
    _addresses[request.request_id] = request.reply_to
    _addresses.move_to_end(request.request_id)
    while len(_addresses) > MAX_REMEMBERED:
        _addresses.popitem(last=False)


def remember_event(event: object, dispatches: list[Dispatch]) -> None:
    """The reply addresses a routing-log event and the dispatches of its step carry."""
    if isinstance(event, RequestAccepted):
        remember(event.request)
    if isinstance(event, AttemptFinished) and event.answered:
        _addresses.pop(event.outcome.request_id, None)  # the executor sent its copy
    retry = getattr(event, "retry", None)
    if isinstance(retry, RequestAccepted):
        remember(retry.request)
    for dispatch in dispatches:
        remember(dispatch.accepted.request)


def address_of(request_id: str) -> ReplyTo | None:
    """The reply address the router remembered for ``request_id`` (forgotten once used)."""
    return _addresses.pop(request_id, None)


def send_response(response: Response | None, reply_to: ReplyTo | None) -> None:
    """Send a copy of ``response`` to ``reply_to`` when there are both; never waits."""
    if response is None or reply_to is None:
        return
    task = asyncio.ensure_future(_send(response, reply_to))
    _sending.add(task)
    task.add_done_callback(_sending.discard)


async def _send(response: Response, reply_to: ReplyTo) -> None:
    if reply_to.topic != settings.topics.replies:
        return  # only the replies topic: a request must not make a worker write elsewhere
    try:
        sent = await replies_topic.send(
            key=response.request_id.encode(),
            value=response.model_dump_json(),
            partition=reply_to.partition,
        )
        await sent
    except Exception as exc:  # the copy only; llm.responses has the record
        where = f"{reply_to.topic}/{reply_to.partition}"
        log.warning("reply copy to %s failed: %s", where, type(exc).__name__)


def reply_partition(reply_to: ReplyTo | None) -> int | None:
    """The partition a request's reply address names (None: none, or not the replies topic:
    a request must not make a worker write elsewhere)."""
    if reply_to is None or reply_to.topic != settings.topics.replies:
        return None
    return reply_to.partition


async def send_delta(delta: StreamDelta, reply_to: ReplyTo | None) -> Awaitable[Any]:
    """Enqueue a delta on the deltas topic (the reply address's partition, else by key);
    returns what resolves once the broker has it."""
    return await deltas_topic.send(
        key=delta.request_id.encode(),
        value=delta.model_dump_json(),
        partition=reply_partition(reply_to),
    )
