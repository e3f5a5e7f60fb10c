"""Ingest: validate each ``llm.requests`` record; accept it or dead-letter it.

No record stops ingest (:func:`app.worker.intake.take_one`, the rule every input
topic's agent follows): a record that is not a valid request ends as a dead letter
with a reason and the original bytes; only the broker's own trouble is raised.

A record is acked once the broker has what ingest sent for it (the accepted request,
or the dead letter), in offset order (:mod:`app.worker.acks`): a send that fails for a
passing reason (a broker stalled past the producer's timeout) is sent again until it is
delivered (:class:`agents.app.Publisher`), and its record, with every later one of its
partition, stays unacked until then, so a stop in between reads it again rather than
losing it. A copy that reached the broker twice is one request: the router folds a
source position once.

A request naming a route (or preset) this worker's policy does not have is refused only
after a read of the policy topic that began after ingest took it (shared by the requests
taken meanwhile, :meth:`app.policy.log.PolicyFollower.catch_up`): a version proposed
before the request was sent (``switchyard policy apply``) may add it. Ingest goes on
meanwhile; the record's ack waits, in order, for what it became.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast

from faust import StreamT

from agents import replies
from agents.app import app, deadletter_topic, requests_topic, routing_log, settings
from app import metrics
from app.contract import DeadLetter, LogPosition, RequestAccepted
from app.ingest import POLICY_REFUSALS, accept, dead_letter, encode_accepted, refusal_reply
from app.policy.holder import policy_holder
from app.telemetry import spans
from app.worker.acks import InOrderAcks
from app.worker.intake import failure_reason, log_time, position_of, take_one, where

log = logging.getLogger(__name__)

#: Acks and dead letters under way (a reference each, until done).
_pending: set[asyncio.Future[Any]] = set()
#: Told ``(route, record)`` of each accepted request once its routing-log record is sent
#: (the router's calls ahead: app/router/ahead.py).
on_accepted: Callable[[str, bytes | str], None] | None = None


@app.agent(requests_topic)
async def ingest(stream: StreamT[bytes]) -> None:
    manual: Any = cast(Any, stream).noack()  # acked once the broker has what was sent
    await forward_all(manual.events(), manual.ack)


async def forward_all(events: AsyncIterator[Any], ack: Callable[[Any], Awaitable[Any]]) -> None:
    """Ingest each event; ack it, in offset order, once what was sent for it is delivered."""
    acks = InOrderAcks(ack)
    metrics.ACKS_HELD.labels(agent="ingest").set_function(acks.held)
    async for event in events:
        acks.received(event)
        sent = await ingest_one(event.value, position_of(event), log_time(event))
        sent.add_done_callback(partial(_delivered, acks, event))


def _delivered(acks: InOrderAcks, event: Any, sent: asyncio.Future[Any]) -> None:
    """Ack a delivered forward. One the broker refused for the record itself (the
    publisher sends passing failures again) is dead-lettered instead, then acked."""
    problem = sent.exception() if not sent.cancelled() else asyncio.CancelledError()
    if problem is None:
        _keep(asyncio.ensure_future(acks.done(event)))
    else:
        _keep(asyncio.ensure_future(_dead_letter_instead(acks, event, problem)))


async def _dead_letter_instead(acks: InOrderAcks, event: Any, problem: BaseException) -> None:
    source = position_of(event)
    reason = failure_reason(problem)
    log.warning("record %s: %s (%s, after the send)", where(source), reason, type(problem).__name__)
    letter = _dead_letter(
        reason, type(problem).__name__, event.value or b"", source, log_time(event)
    )
    try:
        sent = await _publish_dead_letter(letter)
        await sent
    except Exception as exc:  # nothing more can be done with it: logged, then acked
        log.error("record %s: its dead letter was not delivered (%s)", where(source),
                  type(exc).__name__)  # fmt: skip
    await acks.done(event)


def _keep(task: asyncio.Future[Any]) -> None:
    _pending.add(task)
    task.add_done_callback(_pending.discard)


async def ingest_one(raw: bytes | None, source: LogPosition, when: datetime) -> asyncio.Future[Any]:
    """Forward one record to the routing log, or dead-letter it; the delivery of what was
    sent. Raises only for the broker."""
    raw = raw or b""
    taken = time.monotonic()

    async def reject(letter: DeadLetter) -> asyncio.Future[Any]:
        if letter.reason in POLICY_REFUSALS:  # a newer policy version may know it
            later = asyncio.ensure_future(_after_catch_up(raw, source, when, taken, letter))
            _keep(later)
            return later
        return await _refuse(raw, letter)

    return await take_one(
        raw,
        source,
        when,
        validate=_accept,
        forward=partial(_send_accepted, raw=raw),
        reject=reject,
        deadletter_max_bytes=settings.deadletter_max_bytes,
        what="record",
    )


async def _refuse(raw: bytes, letter: DeadLetter) -> asyncio.Future[Any]:
    """Dead-letter a record; a gateway waiting for it gets the refusal."""
    sent = await _publish_dead_letter(letter)
    reply = refusal_reply(raw, letter, settings.max_request_bytes)
    if reply is not None:  # a gateway waits for it: the refusal, not the deadline's 504
        replies.send_response(*reply)
    return sent


async def _after_catch_up(
    raw: bytes, source: LogPosition, when: datetime, taken: float, letter: DeadLetter
) -> Any:
    """A record refused for a route or preset this worker's policy lacks, once the policy
    topic was read after it was taken: accepted under the version that adds it, else
    refused; the delivery of what was sent."""
    result: RequestAccepted | DeadLetter = letter
    try:
        await policy_holder().follower().catch_up(taken)
        result = _accept(raw, source, when)
    except Exception as exc:  # the policy topic unread: the refusal stands
        log.warning("record %s: policy topic not read (%s)", where(source), type(exc).__name__)
    if not isinstance(result, DeadLetter):
        sent = await _send_accepted(result, raw)
        if not isinstance(sent, DeadLetter):
            return await sent
        result = sent
    return await (await _refuse(raw, result))


def _accept(raw: bytes, source: LogPosition, when: datetime) -> RequestAccepted | DeadLetter:
    return accept(
        raw,
        source,
        when,
        policy_holder().current.config,
        max_request_bytes=settings.max_request_bytes,
        deadletter_max_bytes=settings.deadletter_max_bytes,
        max_json_depth=settings.max_json_depth,
        max_int_digits=settings.max_int_digits,
    )


async def _send_accepted(accepted: RequestAccepted, raw: bytes) -> DeadLetter | asyncio.Future[Any]:
    accepted = accepted.model_copy(update={"ingested_at": datetime.now(UTC)})
    accepted = spans.ingested(accepted)  # its span; a trace context when it came without
    value = encode_accepted(
        accepted,
        raw,
        max_accepted_bytes=settings.max_accepted_bytes,
        deadletter_max_bytes=settings.deadletter_max_bytes,
    )
    if isinstance(value, DeadLetter):
        return value
    sent = await routing_log.send(key=accepted.route.encode(), value=value)
    metrics.REQUESTS.labels(result="accepted").inc()
    if on_accepted is not None:
        on_accepted(accepted.route, value)
    return sent


def _dead_letter(
    reason: str, detail: str, raw: bytes, source: LogPosition, when: datetime
) -> DeadLetter:
    return dead_letter(reason, detail, raw, source, when, settings.deadletter_max_bytes)


async def _publish_dead_letter(letter: DeadLetter) -> asyncio.Future[Any]:
    metrics.REQUESTS.labels(result=letter.reason).inc()
    log.info("dead-lettered %s: %s", where(letter.source), letter.reason)
    try:
        value = letter.model_dump_json()
    except ValueError:  # a detail that does not serialise: the bytes still go
        value = letter.model_copy(update={"detail": "(detail not serialisable)"}).model_dump_json()
    return await deadletter_topic.send(key=letter.id.encode(), value=value)
