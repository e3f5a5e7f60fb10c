"""A request's trace read from the analytics store: ``switchyard audit --json``'s document.

The same JSON :func:`app.audit.explain.build_trace` builds from the topics (a test
compares them for random requests), from point lookups by request id, so its cost
does not grow with the log. Where the topics hold two copies of something the store
holds one (a decision, a response, an outcome or a grade redelivered with its id):
the first copy, as the audit shows the first decision and response.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from app.analytics.store import Store
from app.audit.explain import EXCLUSION_REASONS, OUTCOME_FIELDS
from app.audit.grades import LISTED

_DECISION = (
    "id, occurred_at, attempt, route, deployment, strategy, algorithm_version, config_hash, "
    "state_version, propensity, details, candidates, excluded, previous_state_version"
)
_GRADE = (
    "kafka_offset, request_id, deployment, context, source, score, weight, "
    "replaces_score, replaces_weight, feedback_id"
)
_ACCEPTED = (
    "route, occurred_at, prompt_sha256, prompt_chars, request_topic, request_partition, "
    "request_offset, kafka_partition, kafka_offset"
)
_RESPONSE = (
    "status, attempts, deployment, error_type, error_message, error_code, "
    "error_http_status, error_retry_after_s, occurred_at"
)


def _about(store: Store, request_id: str, table: str, columns: str) -> list[tuple[Any, ...]]:
    """``columns`` of the rows of ``table`` about ``request_id``, in the order the sink read
    their events."""
    return store.query(
        f"SELECT {columns} FROM {table} WHERE request_id = ? "
        "ORDER BY kafka_partition, kafka_offset",
        [request_id],
    )


def _first(store: Store, request_id: str, table: str, columns: str) -> tuple[Any, ...] | None:
    """The first of :func:`_about`'s rows, if there is one."""
    rows = _about(store, request_id, table, columns)
    return rows[0] if rows else None


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def store_trace(store: Store, request_id: str) -> dict[str, Any] | None:
    """The request's trace as plain JSON, or None when the store has nothing about it."""
    decisions = _decisions(store, request_id)
    outcomes = _outcomes(store, request_id)
    accepted = _accepted(store, request_id)
    response = _response(store, request_id)
    if not (decisions or outcomes or accepted or response):
        return None
    attempts: list[dict[str, Any]] = []
    for number in sorted({*decisions, *outcomes}):
        decision: dict[str, Any] | None = None
        if number in decisions:
            shown, route, members, previous = decisions[number]
            moved = _grades_before(store, route, shown["state_version"], members, previous)
            decision = {**shown, "grades_before": moved}
        attempts.append({"attempt": number, "decision": decision, "outcome": outcomes.get(number)})
    rows = _about(store, request_id, "grades", _GRADE)
    return {
        "request_id": request_id,
        "accepted": accepted,
        "attempts": attempts,
        "grades": [_grade(row) for row in rows],
        "response": response,
    }


#: A decision as the trace shows it, with its route and the deployments it considered.
_Found = tuple[dict[str, Any], str, list[str], int | None]


def _decisions(store: Store, request_id: str) -> dict[int, _Found]:
    found: dict[int, _Found] = {}
    for row in _about(store, request_id, "decisions", _DECISION):
        if row[2] not in found:
            found[row[2]] = _decision(row)
    return found


def _decision(row: tuple[Any, ...]) -> _Found:
    (
        id_,
        at,
        _,
        route,
        deployment,
        strategy,
        version,
        config_hash,
        state_version,
        propensity,
        details,
        candidates,
        excluded,
        previous,
    ) = row
    ranked = sorted(
        json.loads(candidates), key=lambda c: (c["score"] is not None, -(c["score"] or 0.0))
    )
    shown = {
        "decision_id": id_,
        "occurred_at": _iso(at),
        "deployment": deployment,
        "strategy": strategy,
        "algorithm_version": version,
        "config_hash": config_hash,
        "state_version": state_version,
        "propensity": propensity,
        "reproduced_by_replay": None,
        "context": json.loads(details),
        "candidates": [
            {
                "rank": rank,
                "deployment": c["deployment"],
                "chosen": c["deployment"] == deployment,
                "score": c["score"],
                "never_tried": c["score"] is None,
                "factors": c["factors"],
            }
            for rank, c in enumerate(ranked, start=1)
        ],
        "excluded": [
            {**e, "why": EXCLUSION_REASONS.get(e["reason"], e["reason"])}
            for e in json.loads(excluded)
        ],
    }
    return shown, route, sorted({c["deployment"] for c in ranked} | {deployment}), previous


def _outcomes(store: Store, request_id: str) -> dict[int, dict[str, Any]]:
    columns = ", ".join(OUTCOME_FIELDS)
    rows = _about(store, request_id, "outcomes", f"attempt, deployment, {columns}")
    found: dict[int, dict[str, Any]] = {}
    for attempt, deployment, *values in rows:
        found.setdefault(
            attempt, {"deployment": deployment, **dict(zip(OUTCOME_FIELDS, values, strict=True))}
        )
    return found


def _accepted(store: Store, request_id: str) -> dict[str, Any] | None:
    row = _first(store, request_id, "requests", _ACCEPTED)
    if row is None:
        return None
    route, at, sha, chars, topic, partition, offset, log_partition, log_offset = row
    return {
        "route": route,
        "occurred_at": _iso(at),
        "prompt_sha256": sha,
        "prompt_chars": chars,
        "source": {"topic": topic, "partition": partition, "offset": offset},
        "routing_log": {"partition": log_partition, "offset": log_offset},
    }


def _response(store: Store, request_id: str) -> dict[str, Any] | None:
    row = _first(store, request_id, "responses", _RESPONSE)
    if row is None:
        return None
    status, attempts, deployment, kind, message, code, http_status, retry_after, at = row
    error = (
        None
        if kind is None
        else {
            "type": kind,
            "message": message,
            "code": code,
            "http_status": http_status,
            "retry_after_s": retry_after,
        }
    )
    return {
        "status": status,
        "attempts": attempts,
        "deployment": deployment,
        "error": error,
        "occurred_at": _iso(at),
    }


def _grade(row: tuple[Any, ...]) -> dict[str, Any]:
    names = _GRADE.replace("kafka_offset", "routing_offset").split(", ")
    return dict(zip(names, row, strict=True))


def _grades_before(
    store: Store, route: str, version: int, members: list[str], previous: int | None
) -> dict[str, Any]:
    """The grades the route folded for the decision's candidates since the route's previous
    decision, up to this one's state version (as app/audit/grades.py counts them)."""
    if previous is None:  # not linked (a store written without link_decisions)
        found = store.query(
            "SELECT max(state_version) FROM decisions WHERE route = ? AND state_version < ?",
            [route, version],
        )[0][0]
        previous = -1 if found is None else found
    rows = store.query(
        f"SELECT {_GRADE} FROM grades WHERE route = ? AND list_contains(?, deployment) "
        "AND kafka_offset > ? AND kafka_offset <= ? ORDER BY kafka_partition, kafka_offset",
        [route, members, previous, version],
    )
    folded = [_grade(row) for row in rows]
    per_deployment: dict[str, list[float]] = {}
    for grade in folded:
        totals = per_deployment.setdefault(grade["deployment"], [0, 0.0])
        totals[0] += 1
        totals[1] += grade["score"]
    return {
        "since_routing_offset": previous + 1,
        "count": len(folded),
        "per_deployment": {
            name: {"grades": int(n), "mean_score": total / n}
            for name, (n, total) in sorted(per_deployment.items())
        },
        "listed": folded[:LISTED],
    }
