"""``switchyard replay``: fold the recorded routing log again and re-derive every decision.

The fold is the live router's own :func:`app.routing.fold.handle`, called with the
same arguments the router passed: each route's state starts at ``RouteState()``,
each routing-log record is folded in partition/offset order with its offset as
``position``. An event the router skipped (a duplicate: ``Step.applied`` False)
is skipped here the same way; a record the router could not parse or fold (it
dead-letters those) changes no state here either.

Every re-derived decision is compared, by decision id, with the recorded one,
field by field and exactly (floats round-trip exactly through JSON, so there is
no rounding). Decisions the router made but that never reached ``llm.decisions``
and recorded decisions the log cannot produce are reported apart. A decision
recorded twice (at-least-once delivery) counts once when both copies agree; a
request redelivered after its attempt closed is routed again under the same
decision id, and the copies are then paired in log order.
Error responses the router itself produced are checked against ``llm.responses``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from app.audit.log import Entry, RecordedLog, RoutingEvent, events, route_of
from app.events import Decision, Response
from app.routing.fold import handle
from app.routing.policy import Policy
from app.routing.state import RouteState

_EMPTY = RouteState()
MismatchKind = Literal["differs", "not_rederived", "not_recorded"]


@dataclass
class Rederived:
    decisions: list[Decision] = field(default_factory=list)
    #: Error responses produced by the router (no deployment could take the request).
    responses: list[Response] = field(default_factory=list)
    states: dict[str, RouteState] = field(default_factory=dict)
    events: int = 0
    applied: int = 0
    skipped: int = 0
    unreadable: int = 0
    #: Records whose fold raised (the live router dead-letters them and goes on).
    errors: list[str] = field(default_factory=list)


def rederive(entries: Iterable[Entry[RoutingEvent]], policy: Policy) -> Rederived:
    """Fold routing-log entries (sorted by partition, offset) with the live ``handle``."""
    result = Rederived()
    states = result.states
    for entry in entries:
        event = entry.event
        if event is None:
            result.unreadable += 1
            continue
        route = route_of(event)
        result.events += 1
        try:
            step = handle(states.get(route, _EMPTY), event, entry.offset, policy)
        except Exception as exc:  # the router dead-letters these and keeps the row
            result.errors.append(f"partition {entry.partition} offset {entry.offset}: {exc!r}")
            continue
        states[route] = step.state
        if not step.applied:
            result.skipped += 1
            continue
        result.applied += 1
        for dispatch in step.dispatches:
            result.decisions.append(dispatch.decision)
        result.responses.extend(step.responses)
    return result


@dataclass(frozen=True)
class Mismatch:
    kind: MismatchKind
    decision_id: str
    request_id: str
    attempt: int
    #: ``path: recorded X, replayed Y`` lines (at most a few per decision).
    differences: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "decision_id": self.decision_id,
            "request_id": self.request_id,
            "attempt": self.attempt,
            "differences": self.differences,
        }


@dataclass
class ReplayReport:
    source: str
    replay_config_hash: str
    recorded_config_hashes: dict[str, int]
    recorded: int
    rederived: int
    reproduced: int
    mismatches: list[Mismatch]
    events: int
    applied: int
    skipped: int
    fold_errors: list[str]
    unreadable: dict[str, int]
    truncated_partitions: dict[int, int]
    router_responses: int
    router_responses_matched: int
    states: dict[str, RouteState] = field(default_factory=dict, repr=False)

    def count(self, kind: MismatchKind) -> int:
        return sum(1 for m in self.mismatches if m.kind == kind)

    @property
    def mismatched(self) -> int:
        return self.count("differs")

    @property
    def ok(self) -> bool:
        return (
            not self.mismatches
            and not self.fold_errors
            and not self.truncated_partitions
            and self.router_responses_matched == self.router_responses
        )

    @property
    def config_differs(self) -> bool:
        return any(h != self.replay_config_hash for h in self.recorded_config_hashes)

    def to_json(self, limit: int = 20) -> dict[str, Any]:
        return {
            "source": self.source,
            "ok": self.ok,
            "decisions": self.recorded,
            "reproduced": self.reproduced,
            "mismatched": self.mismatched,
            "recorded_not_rederived": self.count("not_rederived"),
            "rederived_not_recorded": self.count("not_recorded"),
            "rederived": self.rederived,
            "replay_config_hash": self.replay_config_hash,
            "recorded_config_hashes": self.recorded_config_hashes,
            "routing_events": self.events,
            "applied": self.applied,
            "skipped_duplicates": self.skipped,
            "fold_errors": self.fold_errors[:limit],
            "unreadable": self.unreadable,
            "truncated_partitions": {str(p): o for p, o in self.truncated_partitions.items()},
            "router_responses": self.router_responses,
            "router_responses_matched": self.router_responses_matched,
            "first_mismatches": [m.to_json() for m in self.mismatches[:limit]],
        }


def replay(log: RecordedLog, policy: Policy) -> ReplayReport:
    again = rederive(log.routing, policy)
    recorded = _by_id(events(log.decisions))
    rederived = _by_id(again.decisions)
    mismatches: list[Mismatch] = []
    reproduced = 0
    for decision_id, copies in recorded.items():
        derived = rederived.get(decision_id, [])
        for original, decision in zip(copies, derived, strict=False):
            differences = diff(original.model_dump(), decision.model_dump())
            if differences:
                mismatches.append(_mismatch("differs", decision, differences))
            else:
                reproduced += 1
        mismatches.extend(_mismatch("not_rederived", d) for d in copies[len(derived) :])
        mismatches.extend(_mismatch("not_recorded", d) for d in derived[len(copies) :])
    for decision_id, derived in rederived.items():
        if decision_id not in recorded:
            mismatches.extend(_mismatch("not_recorded", d) for d in derived)
    order = {"differs": 0, "not_rederived": 1, "not_recorded": 2}
    mismatches.sort(key=lambda m: order[m.kind])
    return ReplayReport(
        source=log.source,
        replay_config_hash=policy.config_hash,
        recorded_config_hashes=dict(
            Counter(d.config_hash for copies in recorded.values() for d in copies)
        ),
        recorded=sum(len(copies) for copies in recorded.values()),
        rederived=len(again.decisions),
        reproduced=reproduced,
        mismatches=mismatches,
        events=again.events,
        applied=again.applied,
        skipped=again.skipped,
        fold_errors=again.errors,
        unreadable={k: v for k, v in log.unreadable().items() if v},
        truncated_partitions={p: o for p, o in log.routing_start.items() if o > 0},
        router_responses=len(again.responses),
        router_responses_matched=_matched_responses(log, again.responses),
        states=again.states,
    )


def _by_id(decisions: Iterable[Decision]) -> dict[str, list[Decision]]:
    """Distinct copies per decision id, in log order (identical redeliveries count once).

    The same id twice with different content is legitimate: a request redelivered
    after its first attempt closed is routed again, and the router publishes both.
    """
    found: dict[str, list[Decision]] = {}
    for decision in decisions:
        copies = found.setdefault(decision.id, [])
        if decision not in copies:
            copies.append(decision)
    return found


def _matched_responses(log: RecordedLog, produced: list[Response]) -> int:
    recorded: dict[str, list[Response]] = {}
    for response in events(log.responses):
        recorded.setdefault(response.id, []).append(response)
    return sum(1 for r in produced if r in recorded.get(r.id, []))


def _mismatch(
    kind: MismatchKind, decision: Decision, differences: list[str] | None = None
) -> Mismatch:
    return Mismatch(kind, decision.id, decision.request_id, decision.attempt, differences or [])


def diff(recorded: Any, replayed: Any, path: str = "", limit: int = 8) -> list[str]:
    """Where two JSON-like values differ, as ``path: recorded X, replayed Y`` lines."""
    out: list[str] = []
    _diff(recorded, replayed, path, out, limit)
    return out


def _diff(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            _diff(
                a.get(key, "<absent>"),
                b.get(key, "<absent>"),
                f"{path}.{key}".lstrip("."),
                out,
                limit,
            )
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{index}]", out, limit)
        return
    if a != b or type(a) is not type(b):
        out.append(f"{path}: recorded {a!r}, replayed {b!r}")


def render(report: ReplayReport, show: int = 5) -> str:
    lines = [
        f"source: {report.source}",
        f"routing log: {report.events} events folded, {report.applied} applied, "
        f"{report.skipped} skipped as duplicates (as the router did)",
        f"decisions: {report.recorded}, reproduced: {report.reproduced}, "
        f"mismatched: {report.mismatched}",
        f"recorded but not re-derived: {report.count('not_rederived')}; "
        f"re-derived but not recorded: {report.count('not_recorded')}",
    ]
    if report.router_responses:
        lines.append(
            f"router error responses: {report.router_responses} re-derived, "
            f"{report.router_responses_matched} match llm.responses"
        )
    hashes = ", ".join(f"{h} ({n})" for h, n in sorted(report.recorded_config_hashes.items()))
    lines.append(
        f"config_hash: replay policy {report.replay_config_hash}; recorded {hashes or '-'}"
    )
    if report.config_differs:
        lines.append(
            "WARNING: the replay policy's config hash differs from the recorded one: the replay "
            "runs under another providers file or other BANDIT_*/CB_* settings, so mismatches are "
            "expected. Use the worker's providers file (--providers) and environment."
        )
    for partition, offset in sorted(report.truncated_partitions.items()):
        lines.append(
            f"ERROR: routing partition {partition} starts at offset {offset}, not 0: "
            "history was truncated, the state cannot be rebuilt exactly"
        )
    for name, count in sorted(report.unreadable.items()):
        lines.append(f"unreadable {name} records: {count} (skipped, as the router does)")
    for error in report.fold_errors[:show]:
        lines.append(f"fold error (the router dead-letters these): {error}")
    for mismatch in report.mismatches[:show]:
        lines.append(
            f"{mismatch.kind}: decision {mismatch.decision_id} "
            f"(request {mismatch.request_id!r}, attempt {mismatch.attempt})"
        )
        lines.extend(f"    {d}" for d in mismatch.differences)
    if len(report.mismatches) > show:
        lines.append(f"... and {len(report.mismatches) - show} more (--show N, --json)")
    lines.append("OK: every decision reproduced" if report.ok else "FAILED")
    return "\n".join(lines)
