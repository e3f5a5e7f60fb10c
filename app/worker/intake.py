"""Taking one record of an input topic: validated and sent on, or dead-lettered.

Ingest (``llm.requests``) and the feedback intake (``llm.feedback``) read records a
producer outside the worker wrote, so each record may be anything. Both follow one
rule, :func:`take_one`: no record stops the agent. Whatever one record makes go wrong
while it is validated, serialised or sent on ends as a dead letter with a reason and
the original bytes (``internal`` for the unforeseen, ``oversized`` when the producer
refuses the record's size); only the broker's own trouble (an ``aiokafka`` error that
is not about the record's size) is raised, so that the record is read again rather than
lost. Log lines about a record name its reason and position, never its content.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from aiokafka.errors import KafkaError, MessageSizeTooLargeError, RecordTooLargeError

from app.contract import DeadLetter, LogPosition
from app.ingest import dead_letter

log = logging.getLogger(__name__)

#: Producer errors about the record itself: dead-lettered as ``oversized``.
SIZE_ERRORS = (MessageSizeTooLargeError, RecordTooLargeError)

Valid = TypeVar("Valid")
Sent = TypeVar("Sent")


def position_of(event: Any) -> LogPosition:
    """Where a consumed record (a Faust event) sits in the log."""
    message = event.message
    return LogPosition(topic=message.topic, partition=message.partition, offset=message.offset)


def log_time(event: Any) -> datetime:
    """The record's log timestamp: the only clock a record from outside brings."""
    return datetime.fromtimestamp(event.message.timestamp, tz=UTC)


def where(source: LogPosition) -> str:
    return f"{source.topic}/{source.partition}@{source.offset}"


def failure_reason(problem: BaseException) -> str:
    """The dead letter's reason for an error a record caused."""
    return "oversized" if isinstance(problem, SIZE_ERRORS) else "internal"


async def take_one(
    raw: bytes,
    source: LogPosition,
    when: datetime,
    *,
    validate: Callable[[bytes, LogPosition, datetime], Valid | DeadLetter],
    forward: Callable[[Valid], Awaitable[Sent | DeadLetter]],
    reject: Callable[[DeadLetter], Awaitable[Sent]],
    deadletter_max_bytes: int,
    what: str,
) -> Sent:
    """Validate ``raw`` and send it on (``forward``, which may still refuse it), or send
    its dead letter (``reject``); what either returned. ``what`` names the record in log
    lines. Raises only for the broker."""
    try:
        result = validate(raw, source, when)
        if not isinstance(result, DeadLetter):
            sent = await forward(result)
            if not isinstance(sent, DeadLetter):
                return sent
            result = sent
    except Exception as exc:  # one record never stops the agent
        if isinstance(exc, KafkaError) and not isinstance(exc, SIZE_ERRORS):
            raise  # the broker's trouble, not the record's: read it again after the restart
        reason = failure_reason(exc)
        log.warning("%s %s: %s (%s)", what, where(source), reason, type(exc).__name__)
        result = dead_letter(reason, type(exc).__name__, raw, source, when, deadletter_max_bytes)
    return await reject(result)
