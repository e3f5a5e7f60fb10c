"""Feedback: validate ``llm.feedback``, match each grade to its answer, publish ``GradeApplied``.

Two agents and a timer:

* ``feedback_intake`` reads ``llm.feedback`` (keyed as the producer likes) and
  validates each record (:func:`app.grades.intake.accept_feedback`): a bad one goes to
  ``llm.deadletter`` with its reason, by the rule ingest follows too
  (:func:`app.worker.intake.take_one`); a valid one is re-keyed by request id onto the
  internal matching topic. Unknown fields are dropped there: no free text goes on.
* ``match_feedback`` reads ``llm.outcomes`` and the matching topic (both keyed by
  request id, co-partitioned with the answers table, tables/answers.py) and is the
  table's single writer: final outcomes fill it, feedback is matched against it
  (:mod:`app.grades.matching`), sweeps prune it. A matched grade is published on the
  routing log keyed by route, where the router folds it in log order; an unmatched
  one goes to ``llm.deadletter`` as ``unmatched_feedback`` with why (and the
  validated feedback, never the original text), and is counted in
  ``switchyard_feedback_total{result="unmatched_<why>"}``.
* a timer sends a sweep to every partition of the matching topic.

Write after acknowledgement, as the router does: the row is written only once the
broker has acknowledged the grade's record, and the event is acked after the row
is written. A crash in between re-sends the same ``GradeApplied`` (same id, same
content) when the feedback is read again, so a consumer that drops duplicate ids
counts it once; never is a grade lost.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import faust
from faust import StreamT
from faust.types import EventT
from pydantic import ValidationError

from agents.app import app, deadletter_topic, routing_log, settings
from app.contract import (
    DeadLetter,
    FeedbackAccepted,
    FeedbackSweep,
    LogPosition,
    Outcome,
    derived_id,
)
from app.grades.intake import FEEDBACK, accept_feedback
from app.grades.matching import MatchStep, Unmatched, on_feedback, on_outcome, on_sweep
from app.ingest import dead_letter
from app.worker.intake import log_time, position_of, take_one, where
from tables.answers import (
    delete_answer,
    delete_index,
    due,
    expiry_key,
    load_answer,
    save_answer,
)

log = logging.getLogger(__name__)
#: Index entries one sweep prunes at most (the next sweep goes on).
SWEEP_BATCH = 2000


def _topic(*names: str) -> faust.TopicT:
    return app.topic(*names, key_type=bytes, value_type=bytes, partitions=settings.partitions)


feedback_topic = _topic(settings.topics.feedback)
matching_topic = _topic(settings.topics.feedback_matching)
join_source = _topic(settings.topics.outcomes, settings.topics.feedback_matching)


# --------------------------------------------------------------------------- intake


@app.agent(feedback_topic)
async def feedback_intake(stream: StreamT[bytes]) -> None:
    async for event in stream.events():
        await intake_one(event.value, position_of(event), log_time(event))


async def intake_one(raw: bytes | None, source: LogPosition, when: datetime) -> None:
    """Forward one feedback record, or dead-letter it. Raises only for the broker."""
    await take_one(
        raw or b"",
        source,
        when,
        validate=_accept,
        forward=_forward,
        reject=_publish_dead_letter,
        deadletter_max_bytes=settings.deadletter_max_bytes,
        what="feedback",
    )


def _accept(raw: bytes, source: LogPosition, when: datetime) -> FeedbackAccepted | DeadLetter:
    return accept_feedback(
        raw,
        source,
        when,
        max_bytes=settings.feedback_max_bytes,
        deadletter_max_bytes=settings.deadletter_max_bytes,
        max_json_depth=settings.max_json_depth,
        max_int_digits=settings.max_int_digits,
    )


async def _forward(accepted: FeedbackAccepted) -> None:
    key = accepted.feedback.request_id.encode()
    await matching_topic.send(key=key, value=accepted.model_dump_json())
    FEEDBACK.labels(result="accepted").inc()


async def _publish_dead_letter(letter: DeadLetter) -> None:
    FEEDBACK.labels(result=letter.reason).inc()
    log.info("feedback dead-lettered %s: %s", where(letter.source), letter.reason)
    await deadletter_topic.send(key=letter.id.encode(), value=letter.model_dump_json())


# --------------------------------------------------------------------------- matching


@app.agent(join_source)
async def match_feedback(stream: StreamT[bytes]) -> None:
    async for event in stream.events():
        await match_one(event)


def _epoch(event: EventT[bytes]) -> float:
    return float(event.message.timestamp)


async def match_one(event: EventT[bytes]) -> None:
    """One outcome, feedback or sweep; in the stream of its partition (table writes)."""
    partition = event.message.partition
    try:
        parsed = _parse(event.value or b"")
    except ValidationError:
        log.warning("matching: unreadable record %s skipped", where(position_of(event)))
        return
    if isinstance(parsed, FeedbackSweep):
        await _sweep(partition, _epoch(event))
        return
    if isinstance(parsed, Outcome):
        request_id = parsed.request_id
        before = load_answer(request_id)
        step = on_outcome(before, parsed, _epoch(event), settings.feedback_window_s)
    else:
        request_id = parsed.feedback.request_id
        before = load_answer(request_id)
        step = on_feedback(
            before,
            parsed.feedback,
            parsed.source,
            _epoch(event),
            window_s=settings.feedback_window_s,
            grace_s=settings.feedback_match_grace_s,
        )
    await _apply(step, request_id, before, partition)


def _parse(raw: bytes) -> Outcome | FeedbackAccepted | FeedbackSweep:
    if b'"type":"feedback.accepted"' in raw:
        return FeedbackAccepted.model_validate_json(raw)
    if b'"type":"feedback.sweep"' in raw:
        return FeedbackSweep.model_validate_json(raw)
    return Outcome.model_validate_json(raw)


async def _apply(step: MatchStep, request_id: str, before: Any, partition: int) -> None:
    """Send the grades and the unmatched letters, wait for the broker, then write the row."""
    sends = [
        await routing_log.send(key=grade.route.encode(), value=grade.model_dump_json())
        for grade in step.grades
    ]
    sends += [await _send_unmatched(item) for item in step.unmatched]
    if sends:
        await asyncio.gather(*sends)
    if step.write == "set" and step.row is not None:
        save_answer(request_id, step.row, before, partition)
    elif step.write == "delete" and before is not None:
        answered = before.status is not None
        delete_answer(request_id, expiry_key(before.expires_at, request_id), answered=answered)
    for result in step.results:
        FEEDBACK.labels(result=result).inc()


async def _send_unmatched(item: Unmatched) -> Any:
    source = item.source
    log.info("feedback %s unmatched: %s", where(source), item.why)
    letter = dead_letter(
        "unmatched_feedback",
        item.why,
        item.feedback.model_dump_json().encode(),
        source,
        datetime.now(UTC),
        settings.deadletter_max_bytes,
    )
    return await deadletter_topic.send(key=letter.id.encode(), value=letter.model_dump_json())


async def _sweep(partition: int, now: float) -> None:
    for key, request_id, expires in due(partition, now, SWEEP_BATCH):
        row = load_answer(request_id)
        if row is None or row.expires_at != expires:  # the row moved on (or is gone)
            delete_index(key)
            continue
        await _apply(on_sweep(row, now), request_id, row, partition)


@app.timer(interval=settings.tick_interval_s)  # type: ignore[untyped-decorator]
async def sweep_answers() -> None:
    """Time passing on every partition of the matching topic: the matcher prunes with it."""
    now = datetime.now(UTC)
    for partition in range(settings.partitions):
        sweep = FeedbackSweep(
            id=derived_id("feedback.sweep", partition, now.isoformat()),
            occurred_at=now,
            partition=partition,
        )
        await matching_topic.send(key=b"sweep", value=sweep.model_dump_json(), partition=partition)
