"""Matching feedback to the answer it grades: pure functions over one table row.

The answers table (tables/answers.py) is keyed by request id and co-partitioned
with ``llm.outcomes`` and the matching topic, so one agent sees, for a request,
its final outcome and every feedback about it, in its partition's order. For
each request it keeps one :class:`AnswerRow`: how it was answered (route,
deployment, context, when), the grade in force per source and the feedback ids
seen. Every function here takes the row (None: no row yet) and one event, and
returns a :class:`MatchStep`: the new row (or its deletion) and what to send.

Rules (README "Feedback"):

* feedback for a request answered ``ok`` within ``window_s`` of the answer becomes
  one ``GradeApplied`` for the answering deployment, with a deterministic id
  (request id + feedback id);
* a feedback id already seen for the request is a duplicate: dropped;
* a second grade from the same source replaces the first: ``replaces_*`` carry the
  grade taken back; a grade from another source adds;
* feedback that arrives before its request's final outcome waits in the row (at
  most ``MAX_WAITING``) until the outcome comes, or ``grace_s`` passes;
* otherwise it is unmatched, with why: ``unknown_request`` (no answer within the
  grace), ``not_ok`` (answered with an error), ``expired`` (after the window),
  ``grade_limit`` (``MAX_GRADES`` feedback ids already), ``too_many_waiting``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.contract import Feedback, GradeApplied, LogPosition, Outcome, StatusClass, derived_id

#: Feedback ids remembered per request (each one a grade applied); more are refused.
MAX_GRADES = 16
#: Feedback that may wait for its request's outcome, per request.
MAX_WAITING = 8


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Grade(_Row):
    score: float
    weight: float
    feedback_id: str


class Waiting(_Row):
    """A feedback that came before its request's final outcome."""

    feedback: Feedback
    source: LogPosition
    at: float


class AnswerRow(_Row):
    """One request, as the matcher needs it. No prompt, no completion, no free text."""

    status: Literal["ok", "error"] | None = None
    route: str | None = None
    deployment: str | None = None
    context: str | None = None
    answered_at: float | None = None
    #: Epoch seconds after which the row is pruned (answer + window, or wait + grace).
    expires_at: float
    grades: dict[str, Grade] = Field(default_factory=dict)
    seen: list[str] = Field(default_factory=list)
    waiting: list[Waiting] = Field(default_factory=list)


@dataclass(frozen=True)
class Unmatched:
    feedback: Feedback
    source: LogPosition
    why: str


@dataclass
class MatchStep:
    """The row to write (``write``: keep it as it was, set it, or delete it) and the effects."""

    row: AnswerRow | None
    write: Literal["keep", "set", "delete"] = "keep"
    grades: list[GradeApplied] = field(default_factory=list)
    unmatched: list[Unmatched] = field(default_factory=list)
    #: One metric result per feedback handled (graded, replaced, duplicate, pending, ...).
    results: list[str] = field(default_factory=list)


def at_time(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def on_outcome(row: AnswerRow | None, outcome: Outcome, when: float, window_s: float) -> MatchStep:
    """A request's final outcome: the row learns how it was answered; waiting feedback is
    matched. Non-final outcomes and a second copy of the final one change nothing."""
    if not outcome.final or (row is not None and row.status is not None):
        return MatchStep(row)
    answered = AnswerRow(
        status="ok" if outcome.status_class is StatusClass.SUCCESS else "error",
        route=outcome.route,
        deployment=outcome.deployment,
        context=getattr(outcome, "context", None),
        answered_at=when,
        expires_at=when + window_s,
    )
    step = MatchStep(answered, "set")
    for waiting in row.waiting if row is not None else []:
        _grade(step, waiting.feedback, waiting.source, max(waiting.at, when), window_s)
    return step


def on_feedback(
    row: AnswerRow | None,
    feedback: Feedback,
    source: LogPosition,
    when: float,
    *,
    window_s: float,
    grace_s: float,
) -> MatchStep:
    """One valid feedback (its ``feedback_id`` filled in), arrived at ``when``."""
    if row is not None and row.status is not None:
        step = MatchStep(row)
        _grade(step, feedback, source, when, window_s)
        return step
    current = row if row is not None else AnswerRow(expires_at=when + grace_s)
    if any(w.feedback.feedback_id == feedback.feedback_id for w in current.waiting):
        return MatchStep(row, results=["duplicate"])
    if len(current.waiting) >= MAX_WAITING:
        return _refuse(MatchStep(row), feedback, source, "too_many_waiting")
    waiting = [*current.waiting, Waiting(feedback=feedback, source=source, at=when)]
    return MatchStep(current.model_copy(update={"waiting": waiting}), "set", results=["pending"])


def on_sweep(row: AnswerRow, now: float) -> MatchStep:
    """Time passing: a row past its expiry is deleted; feedback still waiting for an
    answer that never came is unmatched (``unknown_request``)."""
    if row.expires_at > now:
        return MatchStep(row)
    step = MatchStep(None, "delete")
    for waiting in row.waiting:
        _refuse(step, waiting.feedback, waiting.source, "unknown_request")
    return step


def grade_id(request_id: str, feedback_id: str) -> str:
    """A GradeApplied's id: the same feedback always makes the same id."""
    return derived_id("grade", request_id, feedback_id)


def _refuse(step: MatchStep, feedback: Feedback, source: LogPosition, why: str) -> MatchStep:
    step.unmatched.append(Unmatched(feedback, source, why))
    step.results.append(f"unmatched_{why}")
    return step


def _grade(
    step: MatchStep, feedback: Feedback, source: LogPosition, at: float, window: float
) -> None:
    """Apply one feedback to the answered row in ``step`` (updating it in place)."""
    row = step.row
    assert row is not None and row.status is not None and row.answered_at is not None
    feedback_id = str(feedback.feedback_id)
    if row.status != "ok":
        _refuse(step, feedback, source, "not_ok")
    elif at > row.answered_at + window:
        _refuse(step, feedback, source, "expired")
    elif feedback_id in row.seen:
        step.results.append("duplicate")
    elif len(row.seen) >= MAX_GRADES:
        _refuse(step, feedback, source, "grade_limit")
    else:
        previous = row.grades.get(feedback.source)
        step.grades.append(_applied(row, feedback, previous, at))
        step.results.append("graded" if previous is None else "replaced")
        grade = Grade(score=feedback.grade, weight=feedback.weight, feedback_id=feedback_id)
        step.row = row.model_copy(
            update={
                "grades": {**row.grades, feedback.source: grade},
                "seen": [*row.seen, feedback_id],
            }
        )
        step.write = "set"


def _applied(row: AnswerRow, feedback: Feedback, previous: Grade | None, at: float) -> GradeApplied:
    feedback_id = str(feedback.feedback_id)
    return GradeApplied(
        id=grade_id(feedback.request_id, feedback_id),
        occurred_at=at_time(at),
        request_id=feedback.request_id,
        route=str(row.route),
        deployment=str(row.deployment),
        context=row.context,
        source=feedback.source,
        score=feedback.grade,
        weight=feedback.weight,
        feedback_id=feedback_id,
        replaces_score=None if previous is None else previous.score,
        replaces_weight=None if previous is None else previous.weight,
    )
