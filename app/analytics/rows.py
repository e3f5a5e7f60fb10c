"""What each recorded event becomes in the analytics store: rows, never text.

Pure functions from a record's bytes to ``(table, row)`` pairs, validated with the
event contract's own models; a record that cannot be read is a :class:`Skip` with
a reason (its position is kept, never its content). Streams and what they give:

* ``decisions``, ``outcomes``, ``responses``: one row each;
* ``feedback``: the valid feedback, validated as the worker validates it;
* ``routing`` (the routing log, which carries prompts and completions): a
  ``request.accepted`` gives a ``requests`` row (hash, length, labels: no messages),
  ``attempt.finished`` its outcome (the completion is dropped), ``grade.applied`` a
  ``grades`` row, ``policy.changed`` a ``policy_changes`` row; ``route.tick`` nothing.

Adding an event is one function here and one table in :mod:`app.analytics.schema`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import ValidationError

from app.audit.decision_fields import COLUMNS as DECISION_COLUMNS
from app.audit.decision_fields import context_of
from app.contract import (
    Decision,
    FeedbackAccepted,
    GradeApplied,
    LogPosition,
    Outcome,
    RequestAccepted,
    Response,
)
from app.grades.intake import accept_feedback
from app.settings import DEFAULT_MAX_JSON_DEPTH

Row = dict[str, Any]
Rows = list[tuple[str, Row]]
#: Bound of a feedback record (the worker's default; larger ones are skipped as it skips them).
FEEDBACK_MAX_BYTES = 16 * 1024
_EPOCH = datetime.fromtimestamp(0, tz=UTC)


@dataclass(frozen=True, slots=True)
class Position:
    topic: str
    partition: int
    offset: int

    def columns(self) -> Row:
        return {
            "kafka_topic": self.topic,
            "kafka_partition": self.partition,
            "kafka_offset": self.offset,
        }


@dataclass(frozen=True, slots=True)
class Skip:
    reason: str


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


# --------------------------------------------------------------------------- public topics


def decision_row(decision: Decision) -> Row:
    """Its columns (app/audit/decision_fields.py), candidates and exclusions as JSON, and
    its context fields as ``details``."""
    dumped = decision.model_dump(mode="json", include={"candidates", "excluded"})
    row: Row = {name: getattr(decision, name) for name in DECISION_COLUMNS}
    row.update(
        n_candidates=len(decision.candidates),
        n_excluded=len(decision.excluded),
        candidates=_json(dumped["candidates"]),
        excluded=_json(dumped["excluded"]),
        details=_json(context_of(decision)),
    )
    return row


def outcome_row(outcome: Outcome) -> Row:
    row = outcome.model_dump(mode="json", exclude={"type", "schema_version"})
    row["occurred_at"] = outcome.occurred_at
    return row


def response_row(response: Response) -> Row:
    error = response.error
    row: Row = {
        "id": response.id,
        "occurred_at": response.occurred_at,
        "request_id": response.request_id,
        "status": response.status,
        "attempts": response.attempts,
        "deployment": response.deployment,
        "error_type": None if error is None else error.type,
        "error_message": None if error is None else error.message,
        "error_code": None if error is None else error.code,
        "error_http_status": None if error is None else error.http_status,
        "error_retry_after_s": None if error is None else error.retry_after_s,
    }
    row.update(completion_metadata(response.completion))
    return row


def completion_metadata(completion: dict[str, Any] | None) -> Row:
    """An OpenAI-format completion's id, model, finish reason, usage and text length."""
    completion = completion if isinstance(completion, dict) else {}
    choices = [c for c in completion.get("choices") or [] if isinstance(c, dict)]
    found = completion.get("usage")
    usage: dict[str, Any] = found if isinstance(found, dict) else {}
    first = choices[0] if choices else {}
    return {
        "completion_id": _text(completion.get("id")),
        "completion_model": _text(completion.get("model")),
        "finish_reason": _text(first.get("finish_reason")),
        "choices": len(choices) if completion else None,
        "prompt_tokens": _int(usage.get("prompt_tokens")),
        "completion_tokens": _int(usage.get("completion_tokens")),
        "total_tokens": _int(usage.get("total_tokens")),
        "completion_chars": sum(_chars(c.get("message")) for c in choices) if completion else None,
    }


def _chars(message: Any) -> int:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(p["text"]) for p in content if isinstance(p, dict) and "text" in p)
    return 0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def feedback_rows(raw: bytes, position: Position) -> Rows | Skip:
    from app.grades.matching import grade_id

    where = LogPosition(topic=position.topic, partition=position.partition, offset=position.offset)
    result = accept_feedback(
        raw,
        where,
        _EPOCH,
        max_bytes=FEEDBACK_MAX_BYTES,
        deadletter_max_bytes=64,
        max_json_depth=DEFAULT_MAX_JSON_DEPTH,
    )
    if not isinstance(result, FeedbackAccepted):
        return Skip(result.reason)
    feedback = result.feedback
    row: Row = {
        "id": grade_id(feedback.request_id, str(feedback.feedback_id)),
        "request_id": feedback.request_id,
        "feedback_id": feedback.feedback_id,
        "source": feedback.source,
        "score": feedback.grade,
        "label": feedback.label,
        "weight": feedback.weight,
        "occurred_at": feedback.occurred_at,
    }
    return [("feedback", row)]


# --------------------------------------------------------------------------- routing log


def request_row(event: RequestAccepted) -> Row:
    request, features = event.request, event.features
    return {
        "id": event.id,
        "request_id": request.request_id,
        "occurred_at": event.occurred_at,
        "ingested_at": event.ingested_at,
        "route": event.route,
        "tenant": request.tenant,
        "model": request.model,
        "pinned": event.pinned,
        "suffix": event.suffix,
        "mode": None if request.routing is None else request.routing.mode,
        "max_tokens": request.max_tokens,
        "messages": len(request.messages),
        "prompt_sha256": event.prompt_sha256,
        "prompt_chars": event.prompt_chars,
        "task_type": None if features is None else features.task_type,
        "length_bucket": None if features is None else features.length_bucket,
        "has_code": None if features is None else features.has_code,
        "features": None if features is None else features.model_dump_json(),
        "has_session": request.session_id is not None,
        "guardrail_hit": event.guardrail is not None,
        "model_error": event.model_error,
        "request_topic": event.source.topic,
        "request_partition": event.source.partition,
        "request_offset": event.source.offset,
    }


def grade_row(event: GradeApplied) -> Row:
    row = event.model_dump(mode="json", exclude={"type", "schema_version"})
    row["occurred_at"] = event.occurred_at
    return row


def policy_row(data: dict[str, Any]) -> Row:
    """A ``policy.changed`` record, read field by field (it needs nothing else)."""
    document = data.get("document")
    row: Row = {
        "id": data["id"],
        "occurred_at": datetime.fromisoformat(str(data["occurred_at"]).replace("Z", "+00:00")),
        "route": str(data["route"]),
        "version": int(data["version"]),
        "hash": _text(data.get("hash")),
        "source": _text(data.get("source")),
        "document": None if document is None else _json(document),
    }
    return row


def _routing(data: dict[str, Any]) -> Rows:
    kind = data.get("type")
    if kind == "request.accepted":
        return [("requests", request_row(RequestAccepted.model_validate(data)))]
    if kind == "attempt.finished":
        return [("outcomes", outcome_row(Outcome.model_validate(data.get("outcome"))))]
    if kind == "grade.applied":
        return [("grades", grade_row(GradeApplied.model_validate(data)))]
    if kind == "policy.changed":
        return [("policy_changes", policy_row(data))]
    if kind == "route.tick":
        return []
    raise _UnknownType(kind)


class _UnknownType(Exception):
    """A routing-log record of a type this store does not know."""


_PUBLIC: dict[str, tuple[str, Callable[[dict[str, Any]], Row]]] = {
    "decisions": ("decisions", lambda d: decision_row(Decision.model_validate(d))),
    "outcomes": ("outcomes", lambda d: outcome_row(Outcome.model_validate(d))),
    "responses": ("responses", lambda d: response_row(Response.model_validate(d))),
}
STREAMS = ("routing", "decisions", "outcomes", "responses", "feedback")


def rows_of(stream: str, raw: bytes, position: Position) -> Rows | Skip:
    """The rows a record gives (each with its position columns), or why it gives none."""
    if stream == "feedback":
        found = feedback_rows(raw, position)
    else:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return Skip("not_json")
        if not isinstance(data, dict):
            return Skip("not_object")
        try:
            if stream == "routing":
                found = _routing(data)
            else:
                table, make = _PUBLIC[stream]
                found = [(table, make(data))]
        except _UnknownType:
            return Skip("unknown_type")
        except (ValidationError, LookupError, ValueError, TypeError):
            return Skip("invalid")
    if isinstance(found, Skip):
        return found
    where = position.columns()
    return [(table, {**row, **where}) for table, row in found]
