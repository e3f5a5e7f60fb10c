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

The fold itself is :class:`app.audit.replay_fold.Refold`, the loop a parallel replay's
workers run too. Routes are independent in the fold, so ``replay(..., jobs=N)`` folds and
compares them in N worker processes (:mod:`app.audit.replay_parallel`, which states why),
each record parsed once, by the worker that needs it: the report is the one the serial
replay gives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from app.audit.gc_pause import no_cycle_collection
from app.audit.grades import check_grades
from app.audit.log import Entry, RecordedLog, RoutingEvent, events
from app.audit.log_texts import ExportTexts, LogTexts
from app.audit.mismatch import KIND_ORDER, Mismatch, advance, diff, differences, mismatch, pending
from app.audit.replay_fold import (
    FoldCounts,
    Made,
    Origin,
    Refold,
    States,
    distinct_by_id,
    policy_book,
    versions_of,
)
from app.audit.replay_parallel import FoldPool, replay_parallel
from app.audit.replay_report import ReplayReport, render
from app.contract import Decision, Response
from app.routing.driver import Driver
from app.routing.policy import Policy

R = TypeVar("R", Decision, Response)
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
class Rederived(FoldCounts):
    """The whole routing log folded again: its counts, and what the fold made."""

    decisions: list[Decision] = field(default_factory=list)
    #: Responses: every one the fold derives (errors the router publishes, successful
    #: answers the executor publishes as the same record).
    responses: list[Response] = field(default_factory=list)
    states: States = field(default_factory=dict)
    #: The policy versions the log carried, with their config hashes.
    policy_versions: dict[int, str] = field(default_factory=dict)
    #: Records whose fold raised (the live router dead-letters them and goes on).
    errors: list[str] = field(default_factory=list)
    #: (partition, offset) of the event that made each decision and each response, in
    #: step with ``decisions`` and ``responses``.
    decision_origins: list[Origin] = field(default_factory=list)
    response_origins: list[Origin] = field(default_factory=list)


def rederive(entries: Iterable[Entry[RoutingEvent]], policy: Policy) -> Rederived:
    """Fold routing-log entries (sorted by partition, offset) with the live ``handle``."""
    with no_cycle_collection():
        return _rederive(entries, policy)[0]


def _rederive(entries: Iterable[Entry[RoutingEvent]], policy: Policy) -> tuple[Rederived, Refold]:
    """``policy`` folds a log that carries no policy version; one that does is folded
    with the policy version in force at each position, as the live router did."""
    result = Rederived()
    entries = list(entries)
    book = policy_book(entry.event for entry in entries)
    result.policy_versions = versions_of(book)
    refold = Refold(Driver(lambda: policy, states=result.states, book=book), result)
    for index, entry in enumerate(entries):
        if entry.event is None:
            result.unreadable += 1
        else:
            refold.fold(entry.event, index, entry.partition, entry.offset)
    result.errors = [message for _, message in refold.errors]
    result.decisions = [made.record for made in refold.decisions]
    result.decision_origins = [made.origin for made in refold.decisions]
    result.responses = [made.record for made in refold.responses]
    result.response_origins = [made.origin for made in refold.responses]
    return result, refold


def replay(
    log: RecordedLog | LogTexts | ExportTexts,
    policy: Policy,
    *,
    allow_pending: bool = False,
    jobs: int = 1,
    pool: FoldPool | None = None,
) -> ReplayReport:
    """Re-derive and compare. ``allow_pending``: outputs of the log's last events that
    are not recorded yet (a live router still at work) do not fail the replay.

    ``jobs`` > 1: the routes are folded and compared in that many worker processes (at
    most one per route; :mod:`app.audit.replay_parallel`), for the same report.
    ``pool``: in its workers, however many. A log of one route is replayed here either
    way. ``log`` may be texts (:mod:`app.audit.log_texts`): the workers parse them."""
    with no_cycle_collection():
        if jobs > 1 or pool is not None:
            report = replay_parallel(log, policy, allow_pending, jobs, pool)
            if report is not None:
                return report
        return _replay(log if isinstance(log, RecordedLog) else log.parsed(), policy, allow_pending)


def _replay(log: RecordedLog, policy: Policy, allow_pending: bool) -> ReplayReport:
    again, refold = _rederive(log.routing, policy)
    decisions = _by_id(events(log.decisions))
    responses = _by_id(events(log.responses))
    hashes: Counter[str] = Counter()
    for copies in decisions.values():
        for decision in copies:
            hashes[decision.config_hash] += 1
    progress: dict[int, int] = {}
    made_decisions = distinct_by_id(refold.decisions)
    made_responses = distinct_by_id(refold.responses)
    decisions_reproduced, mismatches = _pair(decisions, made_decisions, progress)
    responses_reproduced, response_mismatches = _pair(responses, made_responses, progress)
    mismatches = [pending(m, progress) for m in [*mismatches, *response_mismatches]]
    # The first mismatch in log order is where the record and the fold part ways.
    mismatches.sort(key=lambda m: (m.record, KIND_ORDER[m.kind], m.origin or (-1, -1)))
    return ReplayReport(
        source=log.source,
        replay_config_hash=policy.config_hash,
        recorded_config_hashes=dict(hashes),
        recorded=sum(len(copies) for copies in decisions.values()),
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
        policy_versions=again.policy_versions,
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
    rederived: dict[str, list[Made[R]]],
    progress: dict[int, int],
) -> tuple[int, list[Mismatch]]:
    """Compare copies with the same id in log order; exact equality, field by field.

    ``progress`` gets, per routing partition, the offset of the last event whose
    output is in the record (the router got at least that far)."""
    reproduced = 0
    mismatches: list[Mismatch] = []
    for record_id, copies in recorded.items():
        derived = rederived.get(record_id)
        if derived is None:
            mismatches.extend(mismatch("not_rederived", r) for r in copies)
            continue
        for original, again in zip(copies, derived, strict=False):
            advance(progress, again.origin)
            found = differences(original, again.record)
            if found is None:
                reproduced += 1
            else:
                mismatches.append(mismatch("differs", again.record, found, again.origin))
        if len(copies) > len(derived):
            mismatches.extend(mismatch("not_rederived", r) for r in copies[len(derived) :])
        elif len(derived) > len(copies):
            mismatches.extend(map(_unrecorded, derived[len(copies) :]))
    for record_id, derived in rederived.items():
        if record_id not in recorded:
            mismatches.extend(map(_unrecorded, derived))
    return reproduced, mismatches


def _unrecorded(made: Made[Decision] | Made[Response]) -> Mismatch:
    return mismatch("not_recorded", made.record, origin=made.origin)
