"""Ingest: validate each ``llm.requests`` record; accept it or dead-letter it.

No record stops ingest. Whatever one record makes go wrong while it is read,
accepted, serialised or forwarded ends as a dead letter with a reason and the
original bytes (``internal`` for the unforeseen, ``oversized`` when the producer
refuses the record's size); only the broker's own trouble (an ``aiokafka``
error that is not about the record's size) is raised, so that the record is read
again rather than lost. Log lines about a record name its reason and position,
never its content.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from aiokafka.errors import KafkaError, MessageSizeTooLargeError, RecordTooLargeError
from faust import StreamT
from faust.types import EventT

from agents import replies
from agents.app import app, deadletter_topic, requests_topic, routing_log, settings
from app import metrics
from app.events import DeadLetter, LogPosition, RequestAccepted
from app.ingest import accept, dead_letter, encode_accepted, refusal_reply
from app.runtime import policy_holder

log = logging.getLogger(__name__)

#: Producer errors about the record itself: dead-lettered as ``oversized``.
SIZE_ERRORS = (MessageSizeTooLargeError, RecordTooLargeError)


def position_of(event: EventT[bytes]) -> LogPosition:
    message = event.message
    return LogPosition(topic=message.topic, partition=message.partition, offset=message.offset)


def log_time(event: EventT[bytes]) -> datetime:
    """The record's log timestamp: the only clock a request brings."""
    return datetime.fromtimestamp(event.message.timestamp, tz=UTC)


def where(source: LogPosition) -> str:
    return f"{source.topic}/{source.partition}@{source.offset}"


@app.agent(requests_topic)
async def ingest(stream: StreamT[bytes]) -> None:
    async for event in stream.events():
        await ingest_one(event.value, position_of(event), log_time(event))


async def ingest_one(raw: bytes | None, source: LogPosition, when: datetime) -> None:
    """Forward one record to the routing log, or dead-letter it. Raises only for the broker."""
    raw = raw or b""
    try:
        rejected = await _forward(raw, source, when)
    except Exception as exc:  # one record never stops ingest
        if isinstance(exc, KafkaError) and not isinstance(exc, SIZE_ERRORS):
            raise  # the broker's trouble, not the record's: read it again after the restart
        reason = "oversized" if isinstance(exc, SIZE_ERRORS) else "internal"
        log.warning("record %s: %s (%s)", where(source), reason, type(exc).__name__)
        rejected = _dead_letter(reason, type(exc).__name__, raw, source, when)
    if rejected is not None:
        await _publish_dead_letter(rejected)
        reply = refusal_reply(raw, rejected, settings.max_request_bytes)
        if reply is not None:  # a gateway waits for it: the refusal, not the deadline's 504
            replies.send_response(*reply)


async def _forward(raw: bytes, source: LogPosition, when: datetime) -> DeadLetter | None:
    """Send the record on when it is accepted; the dead letter when it is not."""
    result = accept(
        raw,
        source,
        when,
        policy_holder().current.config,
        max_request_bytes=settings.max_request_bytes,
        deadletter_max_bytes=settings.deadletter_max_bytes,
        max_json_depth=settings.max_json_depth,
        max_int_digits=settings.max_int_digits,
    )
    if isinstance(result, DeadLetter):
        return result
    return await _send_accepted(result, raw)


async def _send_accepted(accepted: RequestAccepted, raw: bytes) -> DeadLetter | None:
    accepted = accepted.model_copy(update={"ingested_at": datetime.now(UTC)})
    value = encode_accepted(
        accepted,
        raw,
        max_accepted_bytes=settings.max_accepted_bytes,
        deadletter_max_bytes=settings.deadletter_max_bytes,
    )
    if isinstance(value, DeadLetter):
        return value
    await routing_log.send(key=accepted.route.encode(), value=value)
    metrics.REQUESTS.labels(result="accepted").inc()
    return None


def _dead_letter(
    reason: str, detail: str, raw: bytes, source: LogPosition, when: datetime
) -> DeadLetter:
    return dead_letter(reason, detail, raw, source, when, settings.deadletter_max_bytes)


async def _publish_dead_letter(letter: DeadLetter) -> None:
    metrics.REQUESTS.labels(result=letter.reason).inc()
    log.info("dead-lettered %s: %s", where(letter.source), letter.reason)
    try:
        value = letter.model_dump_json()
    except ValueError:  # a detail that does not serialise: the bytes still go
        value = letter.model_copy(update={"detail": "(detail not serialisable)"}).model_dump_json()
    await deadletter_topic.send(key=letter.id.encode(), value=value)
