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
The fold derives every response (the router publishes the errors, the executor a
successful answer, as the same record), so every response on
``llm.responses`` is re-derived and compared the same way (a completion's text
is compared but never printed). Every ``GradeApplied`` is also checked against the
feedback and the answer it was derived from (:mod:`app.audit.grades`).

Routes are independent in the fold, so ``replay(..., jobs=N)`` folds them in N worker
processes (:mod:`app.audit.replay_parallel`, which states why) and puts what they
re-derive back in log order: the report is the one the serial replay gives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from app.audit.gc_pause import no_cycle_collection
from app.audit.grades import GradeCheck, check_grades
from app.audit.log import Entry, RecordedLog, RoutingEvent, events
from app.audit.replay_parallel import (
    FoldPool,
    Merged,
    group_count,
    route_keys,
    start,
)
from app.audit.replay_report import Mismatch, MismatchKind, ReplayReport, diff, render
from app.audit.replay_worker import Made
from app.contract import AttemptFinished, Decision, PolicyChanged, Response
from app.routing.answers import answers, success_response
from app.routing.book import PolicyBook
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.state import RouteState

R = TypeVar("R", Decision, Response)
#: A recorded copy (the event, or its entry) and a re-derived one (the record, or its JSON).
A = TypeVar("A")
V = TypeVar("V")
A_contra = TypeVar("A_contra", contravariant=True)
V_contra = TypeVar("V_contra", contravariant=True)
#: (partition, offset) of a routing-log event.
Origin = tuple[int, int]
__all__ = [
    "FoldPool",
    "Mismatch",
    "Rederived",
    "ReplayReport",
    "diff",
    "rederive",
    "render",
    "replay",
]


@dataclass
class Rederived:
    decisions: list[Decision] = field(default_factory=list)
    #: Responses: every one the fold derives (errors the router publishes, successful
    #: answers the executor publishes as the same record).
    responses: list[Response] = field(default_factory=list)
    states: dict[str, RouteState] = field(default_factory=dict)
    #: The policy versions the log carried, with their config hashes.
    policy_versions: dict[int, str] = field(default_factory=dict)
    events: int = 0
    applied: int = 0
    skipped: int = 0
    unreadable: int = 0
    #: Records whose fold raised (the live router dead-letters them and goes on).
    errors: list[str] = field(default_factory=list)
    #: (partition, offset) of the event that made each decision and each response, in
    #: step with ``decisions`` and ``responses``.
    decision_origins: list[Origin] = field(default_factory=list)
    response_origins: list[Origin] = field(default_factory=list)


def rederive(entries: Iterable[Entry[RoutingEvent]], policy: Policy) -> Rederived:
    """Fold routing-log entries (sorted by partition, offset) with the live ``handle``."""
    with no_cycle_collection():
        return _rederive(entries, policy)


def _rederive(entries: Iterable[Entry[RoutingEvent]], policy: Policy) -> Rederived:
    """``policy`` folds a log that carries no policy version; one that does is folded
    with the policy version in force at each position, as the live router did."""
    result = Rederived()
    entries = list(entries)
    book = policy_book(entries)
    result.policy_versions = versions(book)
    driver = Driver(lambda: policy, states=result.states, book=book)
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
            result.decision_origins.append(where)
        for response in step.responses:
            result.responses.append(response)
            result.response_origins.append(where)
    return result


def versions(book: PolicyBook) -> dict[int, str]:
    """The book's versions with their policies' config hashes, in version order."""
    return {v: p.config_hash for v, p in sorted(book.versions.items())}


def policy_book(entries: Iterable[Entry[RoutingEvent]]) -> PolicyBook:
    """Every policy version the routing log carries (before folding: a route that has
    folded none yet uses the first)."""
    book = PolicyBook()
    for entry in entries:
        if isinstance(entry.event, PolicyChanged):
            book.add(entry.event.version, entry.event.document, entry.event.hash)
    return book


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
        result.response_origins.append(where)


def replay(
    log: RecordedLog,
    policy: Policy,
    *,
    allow_pending: bool = False,
    jobs: int = 1,
    pool: FoldPool | None = None,
) -> ReplayReport:
    """Re-derive and compare. ``allow_pending``: outputs of the log's last events that
    are not recorded yet (a live router still at work) do not fail the replay.

    ``jobs`` > 1: the routes are folded in that many worker processes (at most one per
    route; :mod:`app.audit.replay_parallel`), for the same report. ``pool``: in its
    workers, however many. A log of one route is folded here either way."""
    with no_cycle_collection():
        if jobs > 1 or pool is not None:
            keys = route_keys(log.routing)
            groups = group_count(keys)
            if pool is not None and groups > 1:
                return _replay_parallel(log, policy, allow_pending, pool, keys)
            if pool is None and min(jobs, groups) > 1:
                with FoldPool(min(jobs, groups)) as own:
                    return _replay_parallel(log, policy, allow_pending, own, keys)
        return _replay(log, policy, allow_pending)


def _replay(log: RecordedLog, policy: Policy, allow_pending: bool) -> ReplayReport:
    again = rederive(log.routing, policy)
    recorded = _recorded(log, _by_id(events(log.decisions)), _by_id(events(log.responses)))
    decisions = _Sides(
        _made_by_id(again.decisions, again.decision_origins),
        _Objects[Decision](),
        len(again.decisions),
    )
    responses = _Sides(
        _made_by_id(again.responses, again.response_origins),
        _Objects[Response](),
        len(again.responses),
    )
    return _report(log, policy, allow_pending, recorded, decisions, responses, again)


def _replay_parallel(
    log: RecordedLog,
    policy: Policy,
    allow_pending: bool,
    pool: FoldPool,
    keys: Sequence[str | None],
) -> ReplayReport:
    book = policy_book(log.routing)
    running = start(log.routing, policy, book, pool, keys)
    # While the workers fold: what the report takes from the record alone.
    recorded = _recorded(log, _entries_by_id(log.decisions), _entries_by_id(log.responses))
    again = running.merged()
    decisions = _Sides(_texts_by_id(again.decisions), _Texts(Decision), len(again.decisions))
    responses = _Sides(_texts_by_id(again.responses), _Texts(Response), len(again.responses))
    return _report(
        log, policy, allow_pending, recorded, decisions, responses, again, versions(book)
    )


class _Comparison(Protocol[A_contra, V_contra]):
    """How a recorded copy and a re-derived one are compared."""

    def differences(self, original: A_contra, again: V_contra) -> list[str] | None:
        """None: the same record (every field, floats bit for bit); else where they differ."""

    def recorded(self, original: A_contra) -> Decision | Response: ...

    def made(self, again: V_contra) -> Decision | Response: ...


class _Objects(Generic[R]):
    """The serial replay's records: recorded events and re-derived objects."""

    def differences(self, original: R, again: R) -> list[str] | None:
        return _differences(original, again)

    def recorded(self, original: R) -> R:
        return original

    def made(self, again: R) -> R:
        return again


class _Texts(Generic[R]):
    """A parallel replay's records: recorded entries and the JSON a worker re-derived.

    A recorded copy whose text is that JSON is the same record (JSON round-trips every
    record exactly: that is what makes the router's own records comparable); any
    other is parsed and compared as :class:`_Objects` compares."""

    def __init__(self, model: type[R]) -> None:
        self.model: type[R] = model

    def differences(self, original: Entry[R], again: str) -> list[str] | None:
        if original.raw == again:
            return None
        return _differences(self.recorded(original), self.made(again))

    def recorded(self, original: Entry[R]) -> R:
        assert original.event is not None  # unreadable records are never paired
        return original.event

    def made(self, again: str) -> R:
        record: R = self.model.model_validate_json(again)
        return record


def _differences(original: R, again: R) -> list[str] | None:
    if original == again:  # every field, floats bit for bit
        return None
    return diff(original.model_dump(), again.model_dump())


@dataclass(frozen=True)
class _Recorded:
    """What the report takes from the record alone: the distinct recorded copies by id
    (events, or their entries), counts and the grades' check."""

    decisions: dict[str, list[Any]]
    responses: dict[str, list[Any]]
    config_hashes: dict[str, int]
    unreadable: dict[str, int]
    grades: GradeCheck


def _recorded(
    log: RecordedLog,
    decisions: dict[str, list[Decision]] | dict[str, list[Entry[Decision]]],
    responses: dict[str, list[Response]] | dict[str, list[Entry[Response]]],
) -> _Recorded:
    hashes: Counter[str] = Counter()
    for copies in decisions.values():
        for copy in copies:
            decision = copy.event if isinstance(copy, Entry) else copy
            assert decision is not None  # _entries_by_id keeps readable entries only
            hashes[decision.config_hash] += 1
    return _Recorded(
        decisions,
        responses,
        dict(hashes),
        {k: v for k, v in log.unreadable().items() if v},
        check_grades(log),
    )


@dataclass(frozen=True)
class _Sides(Generic[A, V]):
    """One stream's re-derived copies by id, and how to compare them with the recorded."""

    rederived: dict[str, list[tuple[V, Origin]]]
    compare: _Comparison[A, V]
    #: Re-derived records, each copy counted.
    made: int


def _report(
    log: RecordedLog,
    policy: Policy,
    allow_pending: bool,
    recorded: _Recorded,
    decisions: _Sides[Any, Any],
    responses: _Sides[Any, Any],
    fold: Rederived | Merged,
    policy_versions: dict[int, str] | None = None,
) -> ReplayReport:
    """The comparison, and the report with the fold's counts, errors and states."""
    progress: dict[int, int] = {}
    decisions_reproduced, mismatches = _pair(recorded.decisions, decisions, progress)
    responses_reproduced, response_mismatches = _pair(recorded.responses, responses, progress)
    mismatches = [_pending(m, progress) for m in [*mismatches, *response_mismatches]]
    order = {"differs": 0, "not_rederived": 1, "not_recorded": 2}
    # The first mismatch in log order is where the record and the fold part ways.
    mismatches.sort(key=lambda m: (m.record, order[m.kind], m.origin or (-1, -1)))
    return ReplayReport(
        source=log.source,
        replay_config_hash=policy.config_hash,
        recorded_config_hashes=recorded.config_hashes,
        recorded=sum(len(copies) for copies in recorded.decisions.values()),
        rederived=decisions.made,
        reproduced=decisions_reproduced,
        responses_recorded=sum(len(copies) for copies in recorded.responses.values()),
        responses_rederived=responses.made,
        responses_reproduced=responses_reproduced,
        mismatches=mismatches,
        events=fold.events,
        applied=fold.applied,
        skipped=fold.skipped,
        fold_errors=fold.errors,
        unreadable=recorded.unreadable,
        truncated_partitions={p: o for p, o in log.routing_start.items() if o > 0},
        allow_pending=allow_pending,
        grades=recorded.grades,
        states=fold.states,
        policy_versions=(
            fold.policy_versions if isinstance(fold, Rederived) else policy_versions or {}
        ),
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


def _entries_by_id(entries: Iterable[Entry[R]]) -> dict[str, list[Entry[R]]]:
    """:func:`_by_id`, keeping each distinct copy's entry (its text too)."""
    found: dict[str, list[Entry[R]]] = {}
    for entry in entries:
        event = entry.event
        if event is None:
            continue
        copies = found.get(event.id)
        if copies is None:
            found[event.id] = [entry]
        elif event not in [copy.event for copy in copies]:
            copies.append(entry)
    return found


def _made_by_id(records: list[R], origins: list[Origin]) -> dict[str, list[tuple[R, Origin]]]:
    """Distinct re-derived copies per id, in log order, each with where it was made (the
    first identical copy's place)."""
    found: dict[str, list[tuple[R, Origin]]] = {}
    for record, origin in zip(records, origins, strict=True):
        copies = found.get(record.id)
        if copies is None:
            found[record.id] = [(record, origin)]
        elif record not in [copy for copy, _ in copies]:
            copies.append((record, origin))
    return found


def _texts_by_id(made: list[Made]) -> dict[str, list[tuple[str, Origin]]]:
    """:func:`_made_by_id` for a worker's JSON: identical copies are identical texts."""
    found: dict[str, list[tuple[str, Origin]]] = {}
    for _, record_id, text, origin in made:
        copies = found.get(record_id)
        if copies is None:
            found[record_id] = [(text, origin)]
        elif text not in [copy for copy, _ in copies]:
            copies.append((text, origin))
    return found


def _pair(
    recorded: dict[str, list[A]], sides: _Sides[A, V], progress: dict[int, int]
) -> tuple[int, list[Mismatch]]:
    """Compare copies with the same id in log order; exact equality, field by field.

    ``progress`` gets, per routing partition, the offset of the last event whose
    output is in the record (the router got at least that far)."""
    reproduced = 0
    mismatches: list[Mismatch] = []
    compare, rederived = sides.compare, sides.rederived
    for record_id, copies in recorded.items():
        derived = rederived.get(record_id)
        if derived is None:
            mismatches.extend(_mismatch("not_rederived", compare.recorded(r)) for r in copies)
            continue
        for original, (again, origin) in zip(copies, derived, strict=False):
            partition, offset = origin
            if offset > progress.get(partition, -1):
                progress[partition] = offset
            differences = compare.differences(original, again)
            if differences is None:
                reproduced += 1
            else:
                mismatch = _mismatch("differs", compare.made(again), differences)
                mismatches.append(replace(mismatch, origin=origin))
        if len(copies) > len(derived):
            mismatches.extend(
                _mismatch("not_rederived", compare.recorded(r)) for r in copies[len(derived) :]
            )
        elif len(derived) > len(copies):
            unrecorded = derived[len(copies) :]
            mismatches.extend(_unrecorded(compare.made(r), origin) for r, origin in unrecorded)
    for record_id, derived in rederived.items():
        if record_id not in recorded:
            mismatches.extend(_unrecorded(compare.made(r), origin) for r, origin in derived)
    return reproduced, mismatches


def _unrecorded(record: Decision | Response, origin: Origin) -> Mismatch:
    return replace(_mismatch("not_recorded", record), origin=origin)


def _pending(mismatch: Mismatch, progress: dict[int, int]) -> Mismatch:
    if mismatch.kind != "not_recorded" or mismatch.origin is None:
        return mismatch
    partition, offset = mismatch.origin
    return replace(mismatch, pending=offset > progress.get(partition, -1))


def _mismatch(
    kind: MismatchKind, record: Decision | Response, differences: list[str] | None = None
) -> Mismatch:
    if isinstance(record, Decision):
        return Mismatch(
            kind, "decision", record.id, record.request_id, record.attempt, differences or []
        )
    return Mismatch(
        kind, "response", record.id, record.request_id, record.attempts, differences or []
    )
