"""A sample recorded log for the store's tests, the console's browser tests and the bench.

:func:`bench.logs.synthetic.synthetic_log` (the live fold against simulated providers:
retries, a saturated deployment, a failing one whose breaker opens), then dressed
with what a live log also holds and the simulation does not make: a tenant per
request, grades of some answers and policy changes on the routing log. Grades and
policy changes are inserted into the routing log at their place, every later
offset moving up, and each decision's ``state_version`` with it, so the log stays
one a router could have written (for the audit; replay would not reproduce the
grades' effect).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from app.audit.log import Entry, RecordedLog, parse
from app.config.schema import RoutingConfig
from app.contract import (
    AttemptFinished,
    Decision,
    Feedback,
    GradeApplied,
    RequestAccepted,
    StatusClass,
)
from app.grades.matching import grade_id
from app.routing.fold import at, epoch
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from bench.logs.synthetic import Profile, provider, synthetic_log

TENANTS = ("acme", "globex", "initech", None)
PROFILES = {
    "cheap-a:m1": Profile(success=0.93, latency_ms=1400.0, failure=StatusClass.CLIENT_ERROR),
    "fast-b:m1": Profile(success=0.9, latency_ms=600.0, failure=StatusClass.TIMEOUT),
    "premium-c:m1": Profile(success=0.98, latency_ms=900.0),
    "flaky-d:m1": Profile(success=0.35, latency_ms=700.0),
}


def sample_policy(strategy: str = "ucb1") -> Policy:
    config = RoutingConfig(
        providers=[
            provider("cheap-a", 0.2),
            provider("fast-b", 0.4, max_concurrency=4),
            provider("premium-c", 5.0),
            provider("flaky-d", 0.3),
        ]
    )
    return Policy(config, RoutingParams(BANDIT_STRATEGY=strategy))  # type: ignore[call-arg]


def sample_log(
    requests: int,
    *,
    seed: int = 0,
    start: float = 1_700_000_000.0,
    grade_every: int = 7,
    policy_every: int = 0,
) -> RecordedLog:
    """``requests`` requests with tenants, a grade of every ``grade_every``-th answer and
    (``policy_every`` > 0) a policy change every ``policy_every`` requests per route."""
    log = synthetic_log(sample_policy(), PROFILES, requests, seed=seed, start=start)
    return dress(log, grade_every=grade_every, policy_every=policy_every)


def dress(log: RecordedLog, *, grade_every: int, policy_every: int) -> RecordedLog:
    routing: list[Entry[Any]] = []
    moved: dict[tuple[int, int], int] = {}  # (partition, old offset) -> new offset
    partitions = sorted({e.partition for e in log.routing})
    for partition in partitions:
        extra, answered = 0, 0
        for entry in (e for e in log.routing if e.partition == partition):
            event = entry.event
            if (
                policy_every
                and isinstance(event, RequestAccepted)
                and (entry.offset == 0 or event.source.offset % policy_every == 0)
            ):
                version = 1 + event.source.offset // policy_every
                routing.append(_policy_changed(partition, entry.offset + extra, event, version))
                extra += 1
            moved[(partition, entry.offset)] = entry.offset + extra
            routing.append(_with_tenant(replace(entry, offset=entry.offset + extra)))
            if _graded(event):
                answered += 1
                if grade_every and answered % grade_every == 0:
                    assert isinstance(event, AttemptFinished)
                    extra += 1
                    routing.append(_grade(partition, entry.offset + extra, event, answered))
    partition_of = {
        e.event.route: e.partition for e in log.routing if isinstance(e.event, RequestAccepted)
    }
    decisions = [_moved_decision(e, moved, partition_of) for e in log.decisions]
    grades = [e.event for e in routing if isinstance(e.event, GradeApplied)]
    feedback = [
        parse("feedback", 0, i, _feedback(grade).model_dump_json())
        for i, grade in enumerate(grades)
    ]
    dressed = RecordedLog(log.source, routing, decisions, log.outcomes, log.responses, feedback)
    dressed.routing_start = dict(log.routing_start)
    return dressed.sort()


def _with_tenant(entry: Entry[Any]) -> Entry[Any]:
    event = entry.event
    if not isinstance(event, RequestAccepted):
        return entry
    tenant = TENANTS[event.source.offset % len(TENANTS)]
    request = event.request.model_copy(update={"tenant": tenant})
    changed = event.model_copy(update={"request": request})
    return parse("routing", entry.partition, entry.offset, changed.model_dump_json())


def _graded(event: Any) -> bool:
    return (
        isinstance(event, AttemptFinished)
        and event.outcome.final
        and event.outcome.status_class is StatusClass.SUCCESS
    )


def _grade(partition: int, offset: int, event: AttemptFinished, count: int) -> Entry[Any]:
    outcome = event.outcome
    feedback_id = f"fb-{outcome.request_id}"
    grade = GradeApplied(
        id=grade_id(outcome.request_id, feedback_id),
        occurred_at=at(epoch(outcome.occurred_at) + 0.5),
        request_id=outcome.request_id,
        route=outcome.route,
        deployment=outcome.deployment,
        context=outcome.context,
        source="user" if count % 2 else "judge",
        score=(count % 5) / 4,
        feedback_id=feedback_id,
    )
    return parse("routing", partition, offset, grade.model_dump_json())


def _feedback(grade: GradeApplied) -> Feedback:
    return Feedback(
        request_id=grade.request_id,
        score=grade.score,
        source=grade.source,
        feedback_id=grade.feedback_id,
    )


def _policy_changed(
    partition: int, offset: int, event: RequestAccepted, version: int
) -> Entry[Any]:
    record = {
        "id": f"policy-{event.route}-{version}",
        "type": "policy.changed",
        "schema_version": 1,
        "occurred_at": event.occurred_at.isoformat(),
        "route": event.route,
        "version": version,
        "hash": f"{version:016x}",
        "document": {"config": {"providers": []}, "params": {"BANDIT_STRATEGY": "ucb1"}},
        "source": "start" if version == 1 else "apply",
    }
    return parse("routing", partition, offset, orjson.dumps(record).decode())


def _moved_decision(
    entry: Entry[Decision], moved: dict[tuple[int, int], int], partition_of: dict[str, int]
) -> Entry[Decision]:
    """The decision with its state version (a routing-log offset) where the event moved."""
    decision = entry.event
    if decision is None or decision.route not in partition_of:
        return entry
    new = moved.get((partition_of[decision.route], decision.state_version))
    if new is None or new == decision.state_version:
        return entry
    changed = decision.model_copy(update={"state_version": new})
    return parse("decisions", entry.partition, entry.offset, changed.model_dump_json())
