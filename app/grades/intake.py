"""Validate one raw record of ``llm.feedback``: a valid feedback, or exactly why not.

Pure, like :func:`app.ingest.accept`, and poison-proof with the same checks
(:func:`app.ingest.read_json`: nesting, huge integers, NaN/Infinity, lone
surrogates). Never raises on input. Unknown fields are dropped by the model, so
no free text a producer adds goes any further than this function; the
``feedback_id`` is filled in (derived from request id, source and score or
label when absent) so that a re-send is the same feedback.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client import Counter
from pydantic import ValidationError

from app.contract import DeadLetter, Feedback, FeedbackAccepted, LogPosition, derived_id
from app.ingest import dead_letter, read_json
from app.settings import DEFAULT_MAX_INT_DIGITS, DEFAULT_MAX_JSON_DEPTH

#: Feedback read, by result: ``accepted``, a dead-letter reason, then what matching
#: made of it (``graded``, ``replaced``, ``duplicate``, ``pending``, ``unmatched_<why>``).
FEEDBACK = Counter(
    "switchyard_feedback_total",
    "Feedback records by result (accepted, dead-letter reason, graded, unmatched_*, ...).",
    ["result"],
)


def _schema_detail(error: ValidationError) -> str:
    """Where and what, never the input (a message could echo it)."""
    parts = []
    for item in error.errors(include_input=False)[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['type']}")
    return "; ".join(parts)


def _grade_problem(data: dict[str, Any]) -> str | None:
    has_score = data.get("score") is not None
    has_label = data.get("label") is not None
    if has_score == has_label:
        return "exactly one of score and label is required"
    return None


def accept_feedback(
    raw: bytes | None,
    source: LogPosition,
    when: datetime,
    *,
    max_bytes: int,
    deadletter_max_bytes: int,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    max_int_digits: int = DEFAULT_MAX_INT_DIGITS,
) -> FeedbackAccepted | DeadLetter:
    """The feedback to match, or the dead letter saying why it cannot be."""
    raw = raw or b""

    def refuse(reason: str, detail: str) -> DeadLetter:
        return dead_letter(reason, detail, raw, source, when, deadletter_max_bytes)

    if len(raw) > max_bytes:
        return refuse("oversized", f"{len(raw)} bytes > limit {max_bytes}")
    data, problem = read_json(raw, max_int_digits, max_json_depth)
    if problem is not None:
        return refuse(*problem)
    if not isinstance(data, dict):
        return refuse("not_object", f"expected a JSON object, got {type(data).__name__}")
    grade_problem = _grade_problem(data)
    if grade_problem is not None:
        return refuse("bad_feedback", grade_problem)
    try:
        feedback = Feedback.model_validate(data).with_id()
    except ValidationError as exc:
        return refuse("schema_violation", _schema_detail(exc))
    return FeedbackAccepted(
        id=derived_id("feedback.accepted", source.topic, source.partition, source.offset),
        occurred_at=when,
        feedback=feedback,
        source=source,
    )
