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
The router answers every request from the fold, so every response on
``llm.responses`` is re-derived and compared the same way (a completion's text
is compared but never printed). Every ``GradeApplied`` is also checked against the
feedback and the answer it was derived from (:mod:`app.audit.grades`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from app.audit.grades import GradeCheck, check_grades
from app.audit.log import Entry, RecordedLog, RoutingEvent, events
from app.events import AttemptFinished, Decision, Response
from app.routing.answers import answers, success_response
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.state import RouteState

R = TypeVar("R", Decision, Response)
MismatchKind = Literal["differs", "not_rederived", "not_recorded"]


@dataclass
class Rederived:
    decisions: list[Decision] = field(default_factory=list)
    #: Responses: the router answers every request from the fold.
    responses: list[Response] = field(default_factory=list)
    states: dict[str, RouteState] = field(default_factory=dict)
    events: int = 0
    applied: int = 0
    skipped: int = 0
    unreadable: int = 0
    #: Records whose fold raised (the live router dead-letters them and goes on).
    errors: list[str] = field(default_factory=list)
    #: ``id()`` of each decision and response -> (partition, offset) of the event that made it.
    origin: dict[int, tuple[int, int]] = field(default_factory=dict)


def rederive(entries: Iterable[Entry[RoutingEvent]], policy: Policy) -> Rederived:
    """Fold routing-log entries (sorted by partition, offset) with the live ``handle``."""
    result = Rederived()
    driver = Driver(lambda: policy, states=result.states)
    for entry in entries:
        event = entry.event
        if event is None:
            result.unreadable += 1
            continue
        result.events += 1
        try:
            step = driver.fold(event, entry.offset)
        except Exception as exc:  # the router dead-letters these and keeps the row
            result.errors.append(f"partition {entry.partition} offset {entry.offset}: {exc!r}")
            continue
        where = (entry.partition, entry.offset)
        if not step.applied:
            result.skipped += 1
            _executor_copy(result, event, where)
            continue
        result.applied += 1
        for dispatch in step.dispatches:
            result.decisions.append(dispatch.decision)
            result.origin[id(dispatch.decision)] = where
        for response in step.responses:
            result.responses.append(response)
            result.origin[id(response)] = where
    return result


def _executor_copy(result: Rederived, event: RoutingEvent, where: tuple[int, int]) -> None:
    """The answer an executor published for an attempt the fold did not apply.

    An attempt executed twice (its worker died after the call, or a rebalance handed
    the dispatch over) reports twice; the fold applies the first report only, but each
    executor published its successful answer at once (same response id: a duplicate
    delivery). The log holds both reports, so replay derives both copies exactly.
    """
    if isinstance(event, AttemptFinished) and event.answered and answers(event):
        copy = success_response(event)
        result.responses.append(copy)
        result.origin[id(copy)] = where


@dataclass(frozen=True)
class Mismatch:
    kind: MismatchKind
    #: ``decision`` or ``response``.
    record: str
    event_id: str
    request_id: str
    attempt: int
    #: ``path: recorded X, replayed Y`` lines (at most a few per record).
    differences: list[str] = field(default_factory=list)
    #: not_recorded only: made by an event past the router's last recorded output on
    #: its partition, so the router may simply not have processed it yet.
    pending: bool = False
    #: (partition, offset) of the routing-log event that re-derived it (None: not re-derived).
    origin: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pending": self.pending,
            "record": self.record,
            "id": self.event_id,
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
    responses_recorded: int
    responses_rederived: int
    responses_reproduced: int
    mismatches: list[Mismatch]
    events: int
    applied: int
    skipped: int
    fold_errors: list[str]
    unreadable: dict[str, int]
    truncated_partitions: dict[int, int]
    allow_pending: bool = False
    grades: GradeCheck = field(default_factory=GradeCheck)
    states: dict[str, RouteState] = field(default_factory=dict, repr=False)

    def count(self, kind: MismatchKind, record: str = "decision") -> int:
        return sum(1 for m in self.mismatches if m.kind == kind and m.record == record)

    @property
    def mismatched(self) -> int:
        return self.count("differs")

    @property
    def pending(self) -> int:
        return sum(1 for m in self.mismatches if m.pending)

    @property
    def ok(self) -> bool:
        failing = [m for m in self.mismatches if not (m.pending and self.allow_pending)]
        clean = not self.fold_errors and not self.truncated_partitions
        return not failing and clean and self.grades.ok

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
            "pending": self.pending,
            "rederived": self.rederived,
            "responses": {
                "recorded": self.responses_recorded,
                "rederived": self.responses_rederived,
                "reproduced": self.responses_reproduced,
                "mismatched": self.count("differs", "response"),
                "recorded_not_rederived": self.count("not_rederived", "response"),
                "rederived_not_recorded": self.count("not_recorded", "response"),
            },
            "grades": self.grades.to_json(limit),
            "replay_config_hash": self.replay_config_hash,
            "recorded_config_hashes": self.recorded_config_hashes,
            "routing_events": self.events,
            "applied": self.applied,
            "skipped_duplicates": self.skipped,
            "fold_errors": self.fold_errors[:limit],
            "unreadable": self.unreadable,
            "truncated_partitions": {str(p): o for p, o in self.truncated_partitions.items()},
            "first_mismatches": [m.to_json() for m in self.mismatches[:limit]],
        }


def replay(log: RecordedLog, policy: Policy, *, allow_pending: bool = False) -> ReplayReport:
    """Re-derive and compare. ``allow_pending``: outputs of the log's last events that
    are not recorded yet (a live router still at work) do not fail the replay."""
    again = rederive(log.routing, policy)
    recorded = _by_id(events(log.decisions))
    responses = _by_id(events(log.responses))
    progress: dict[int, int] = {}
    decisions_reproduced, mismatches = _pair(recorded, _by_id(again.decisions), again, progress)
    responses_reproduced, response_mismatches = _pair(
        responses, _by_id(again.responses), again, progress
    )
    mismatches = [_pending(m, progress) for m in [*mismatches, *response_mismatches]]
    order = {"differs": 0, "not_rederived": 1, "not_recorded": 2}
    # The first mismatch in log order is where the record and the fold part ways.
    mismatches.sort(key=lambda m: (m.record, order[m.kind], m.origin or (-1, -1)))
    return ReplayReport(
        source=log.source,
        replay_config_hash=policy.config_hash,
        recorded_config_hashes=dict(
            Counter(d.config_hash for copies in recorded.values() for d in copies)
        ),
        recorded=sum(len(copies) for copies in recorded.values()),
        rederived=len(again.decisions),
        reproduced=decisions_reproduced,
        responses_recorded=sum(len(copies) for copies in responses.values()),
        responses_rederived=len(again.responses),
        responses_reproduced=responses_reproduced,
        mismatches=mismatches,
        events=again.events,
        applied=again.applied,
        skipped=again.skipped,
        fold_errors=again.errors,
        unreadable={k: v for k, v in log.unreadable().items() if v},
        truncated_partitions={p: o for p, o in log.routing_start.items() if o > 0},
        allow_pending=allow_pending,
        grades=check_grades(log),
        states=again.states,
    )


def _by_id(records: Iterable[R]) -> dict[str, list[R]]:
    """Distinct copies per id, in log order (identical redeliveries count once).

    The same id twice with different content is legitimate: a request redelivered
    after its first attempt closed is routed again, and the router publishes both.
    """
    found: dict[str, list[R]] = {}
    for record in records:
        copies = found.setdefault(record.id, [])
        if record not in copies:
            copies.append(record)
    return found


def _pair(
    recorded: dict[str, list[R]],
    rederived: dict[str, list[R]],
    derivation: Rederived,
    progress: dict[int, int],
) -> tuple[int, list[Mismatch]]:
    """Compare copies with the same id in log order; exact equality, field by field.

    ``progress`` gets, per routing partition, the offset of the last event whose
    output is in the record (the router got at least that far)."""
    reproduced = 0
    mismatches: list[Mismatch] = []
    for record_id, copies in recorded.items():
        derived = rederived.get(record_id, [])
        for original, again in zip(copies, derived, strict=False):
            partition, offset = derivation.origin[id(again)]
            progress[partition] = max(progress.get(partition, -1), offset)
            if original == again:  # every field, floats bit for bit
                reproduced += 1
            else:
                differences = diff(original.model_dump(), again.model_dump())
                mismatch = _mismatch("differs", again, differences)
                mismatches.append(replace(mismatch, origin=(partition, offset)))
        mismatches.extend(_mismatch("not_rederived", r) for r in copies[len(derived) :])
        unrecorded = derived[len(copies) :]
        mismatches.extend(_unrecorded(r, derivation) for r in unrecorded)
    for record_id, derived in rederived.items():
        if record_id not in recorded:
            mismatches.extend(_unrecorded(r, derivation) for r in derived)
    return reproduced, mismatches


def _unrecorded(record: R, derivation: Rederived) -> Mismatch:
    return replace(_mismatch("not_recorded", record), origin=derivation.origin[id(record)])


def _pending(mismatch: Mismatch, progress: dict[int, int]) -> Mismatch:
    if mismatch.kind != "not_recorded" or mismatch.origin is None:
        return mismatch
    partition, offset = mismatch.origin
    return replace(mismatch, pending=offset > progress.get(partition, -1))


def _mismatch(kind: MismatchKind, record: R, differences: list[str] | None = None) -> Mismatch:
    if isinstance(record, Decision):
        return Mismatch(
            kind, "decision", record.id, record.request_id, record.attempt, differences or []
        )
    return Mismatch(
        kind, "response", record.id, record.request_id, record.attempts, differences or []
    )


def diff(recorded: Any, replayed: Any, path: str = "", limit: int = 8) -> list[str]:
    """Where two JSON-like values differ, as ``path: recorded X, replayed Y`` lines."""
    out: list[str] = []
    _diff(recorded, replayed, path, out, limit)
    return out


def _diff(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    if len(out) >= limit:
        return
    if path == "completion" and (a is None) != (b is None):
        out.append(
            f"completion: recorded {'none' if a is None else 'one'}, "
            f"replayed {'none' if b is None else 'one'}"
        )
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
        if path.startswith("completion"):  # never print completion text
            out.append(f"{path}: recorded and replayed differ (content not shown)")
        else:
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
        *(
            [
                f"pending: {report.pending} of the re-derived outputs come from events after the "
                "router's last recorded output on their partition (it may still be at work; "
                + ("tolerated: --allow-pending)" if report.allow_pending else "--allow-pending)")
            ]
            if report.pending
            else []
        ),
    ]
    lines.append(
        f"responses: {report.responses_recorded}, reproduced: {report.responses_reproduced}, "
        f"mismatched: {report.count('differs', 'response')}; recorded but not re-derived: "
        f"{report.count('not_rederived', 'response')}; re-derived but not recorded: "
        f"{report.count('not_recorded', 'response')}"
    )
    grades = report.grades
    lines.append(
        f"grades: {grades.recorded}, backed by their feedback and answer: {grades.verified}"
    )
    lines.extend(f"grade problem: {problem}" for problem in grades.problems[:show])
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
            f"{mismatch.kind}: {mismatch.record} {mismatch.event_id} "
            f"(request {mismatch.request_id!r}, attempt {mismatch.attempt})"
        )
        lines.extend(f"    {d}" for d in mismatch.differences)
    if len(report.mismatches) > show:
        lines.append(f"... and {len(report.mismatches) - show} more (--show N, --json)")
    lines.append("OK: every decision reproduced" if report.ok else "FAILED")
    return "\n".join(lines)
