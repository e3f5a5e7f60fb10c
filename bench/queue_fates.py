"""The pure parts of ``bench burst`` and ``bench backlog``: what became of each request.

A request's *fate* is read from its first ``llm.responses`` record: ``ok``;
``refused_capacity`` (``no_candidate``/``exhausted`` because deployments were at
``concurrency_full``: the router refused while the log could have held it);
``deadline`` (``deadline_exceeded``, whether it waited too long or its attempt was
given up as ``lost``); ``other`` (any other error); ``unanswered``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.throughput.stats import latency_dict

FATES = ("ok", "refused_capacity", "deadline", "other", "unanswered")
REFUSAL_CODES = frozenset({"no_candidate", "exhausted"})
DEADLINE_TYPES = frozenset({"deadline_exceeded", "lost"})

Response = Mapping[str, Any]


def _error(response: Response) -> Mapping[str, Any]:
    error = response.get("error")
    return error if isinstance(error, Mapping) else {}


def fate(response: Response | None) -> str:
    """One of :data:`FATES` for a request's first response (None: never answered)."""
    if response is None:
        return "unanswered"
    if response.get("status") == "ok":
        return "ok"
    error = _error(response)
    if error.get("code") in REFUSAL_CODES and "concurrency_full" in str(error.get("message", "")):
        return "refused_capacity"
    if error.get("code") == "deadline_exceeded" or error.get("type") in DEADLINE_TYPES:
        return "deadline"
    return "other"


def error_kind(response: Response) -> str:
    """``type/code`` of an error response (``ok`` for a success)."""
    if response.get("status") == "ok":
        return "ok"
    error = _error(response)
    return f"{error.get('type')}/{error.get('code')}"


def fate_counts(responses: Iterable[Response | None]) -> dict[str, int]:
    counts = Counter(fate(r) for r in responses)
    return {name: counts.get(name, 0) for name in FATES}


def error_kinds(responses: Iterable[Response]) -> dict[str, int]:
    """Errors by ``type/code``, most frequent first."""
    kinds = Counter(error_kind(r) for r in responses if r.get("status") != "ok")
    return dict(kinds.most_common())


def first_error_messages(responses: Iterable[Response], limit: int = 3) -> dict[str, str]:
    """One example message per error kind (the first ``limit`` kinds met)."""
    examples: dict[str, str] = {}
    for response in responses:
        kind = error_kind(response)
        if kind != "ok" and kind not in examples and len(examples) < limit:
            examples[kind] = str(_error(response).get("message", ""))[:300]
    return examples


def drain_rates(started_at: float, ok_times: Iterable[float]) -> dict[str, float | None]:
    """Answers per second: ``overall`` from ``started_at`` (the first publish) to the last ok
    answer; ``steady`` between the 10th and the 90th percentile of the ok answers' times;
    ``first_ok_s`` and ``last_ok_s`` after ``started_at``."""
    times = sorted(ok_times)
    if not times:
        return {"overall": None, "steady": None, "first_ok_s": None, "last_ok_s": None}
    span = times[-1] - started_at
    low, high = int(0.1 * (len(times) - 1)), int(0.9 * (len(times) - 1))
    steady_span = times[high] - times[low]
    return {
        "overall": len(times) / span if span > 0 else None,
        "steady": (high - low) / steady_span if steady_span > 0 else None,
        "first_ok_s": times[0] - started_at,
        "last_ok_s": span,
    }


def latency_ms(published: Mapping[str, float], responses: Mapping[str, Response]) -> list[float]:
    """Publish → response (its broker timestamp ``_ts``), ms, of the ok ones in ``published``."""
    return [
        (float(responses[i]["_ts"]) - at) * 1000.0
        for i, at in published.items()
        if i in responses and responses[i].get("status") == "ok"
    ]


def outcome_counts(outcomes: Iterable[Response]) -> dict[str, dict[str, int]]:
    """Attempt outcomes per deployment and ``status_class``."""
    counts: dict[str, Counter[str]] = {}
    for outcome in outcomes:
        deployment = str(outcome.get("deployment"))
        counts.setdefault(deployment, Counter())[str(outcome.get("status_class"))] += 1
    return {d: dict(c.most_common()) for d, c in sorted(counts.items())}


def outcome_latency_ms(outcomes: Iterable[Response]) -> dict[str, dict[str, float]]:
    """Attempt latency (the outcome's ``latency_ms``) per ``status_class``."""
    values: dict[str, list[float]] = {}
    for outcome in outcomes:
        status = str(outcome.get("status_class"))
        values.setdefault(status, []).append(float(outcome.get("latency_ms") or 0.0))
    return {s: summary for s, v in values.items() if (summary := latency_dict(v)) is not None}


def exclusion_counts(decisions: Iterable[Response]) -> dict[str, dict[str, int]]:
    """How often decisions excluded each deployment, per reason (e.g. ``breaker_open``)."""
    counts: dict[str, Counter[str]] = {}
    for decision in decisions:
        for exclusion in decision.get("excluded") or []:
            deployment = str(exclusion.get("deployment"))
            counts.setdefault(deployment, Counter())[str(exclusion.get("reason"))] += 1
    return {d: dict(c.most_common()) for d, c in sorted(counts.items())}


@dataclass
class ChangelogStats:
    """The route-state changelog, streamed: rows, sizes, and the breaker states the rows hold."""

    records: int = 0
    total_bytes: int = 0
    max_bytes: int = 0
    #: The size of each route's latest row (its state at the end of the run).
    last_bytes: dict[str, int] = field(default_factory=dict)
    #: Per deployment and breaker state other than CLOSED: first row timestamp, row count.
    breaker_first_at: dict[str, dict[str, float]] = field(default_factory=dict)
    breaker_rows: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Largest numbers of parked attempts, requests waiting in the log (the route's
    #: ``line``, where the state has one) and open attempts one row held.
    max_parked: int = 0
    max_line_waiting: int = 0
    max_open_attempts: int = 0
    complete: bool = False

    def add(self, key: bytes | None, value: bytes | None, timestamp: float) -> None:
        size = len(value or b"")
        self.records += 1
        self.total_bytes += size
        self.max_bytes = max(self.max_bytes, size)
        route = (key or b"").decode("utf-8", "replace")
        self.last_bytes[route] = size
        if value:
            self._read_row(json.loads(value), timestamp)

    def _read_row(self, row: Any, timestamp: float) -> None:
        if not isinstance(row, dict):
            return
        self.max_parked = max(self.max_parked, len(row.get("parked") or {}))
        line = row.get("line")
        waiting = line.get("waiting", 0) if isinstance(line, dict) else 0
        self.max_line_waiting = max(self.max_line_waiting, int(waiting or 0))
        self.max_open_attempts = max(self.max_open_attempts, len(row.get("open_attempts") or {}))
        for deployment, arm in (row.get("arms") or {}).items():
            state = str(((arm or {}).get("breaker") or {}).get("state", "CLOSED"))
            if state == "CLOSED":
                continue
            self.breaker_first_at.setdefault(deployment, {}).setdefault(state, timestamp)
            rows = self.breaker_rows.setdefault(deployment, {})
            rows[state] = rows.get(state, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "total_mb": self.total_bytes / 1e6,
            "max_row_kb": self.max_bytes / 1e3,
            "last_row_kb": {k: v / 1e3 for k, v in self.last_bytes.items()},
            "max_parked": self.max_parked,
            "max_line_waiting": self.max_line_waiting,
            "max_open_attempts": self.max_open_attempts,
            "breaker_first_at": self.breaker_first_at,
            "breaker_rows": self.breaker_rows,
            "complete": self.complete,
        }


def summarise(published: Mapping[str, float], responses: Mapping[str, Response]) -> dict[str, Any]:
    """Fates, error kinds and ok latency of the requests in ``published`` (id → epoch s)."""
    mine = [responses.get(i) for i in published]
    answered = [r for r in mine if r is not None]
    return {
        "requests": len(published),
        "answered": len(answered),
        "fates": fate_counts(mine),
        "error_kinds": error_kinds(answered),
        "error_examples": first_error_messages(answered),
        "latency_ms": latency_dict(latency_ms(published, responses)),
    }


def percent(part: int | float, whole: int | float) -> str:
    return "–" if not whole else f"{100.0 * part / whole:.1f} %"


def number(value: float | None, pattern: str = "{:.1f}", scale: float = 1.0) -> str:
    return "–" if value is None else pattern.format(value * scale)
