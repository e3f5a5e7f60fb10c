"""Waiting for a deployment (issue 4): when every candidate is saturated, open or
cooling down, an attempt waits with backoff instead of failing or spinning.

Whether to wait is a pure function of the selection's exclusions: only reasons
that pass with time (``breaker_open``, a half-open probe in flight,
``concurrency_full``, ``retry_after``) make waiting worthwhile; a request whose
candidates are ruled out for good (already tried, pins, lists, domains) is
answered at once. A parked attempt is looked at again when the route clock
passes its ``retry_at`` — on any later routing-log event, a route tick included
— with the backoff doubling up to ``SWITCHYARD_MAX_PARK_WAIT_S`` and seeded
jitter, until its deadline.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.events import Exclusion
from app.routing import bandit
from app.routing.policy import Policy

#: Exclusion reasons that pass with time.
TEMPORARY = frozenset(
    {"breaker_open", "breaker_half_open_probe_in_flight", "concurrency_full", "retry_after"}
)


def worth_waiting(excluded: Iterable[Exclusion]) -> bool:
    """True when some candidate is out only for a reason that passes with time."""
    return any(e.reason in TEMPORARY for e in excluded)


def wait_s(request_id: str, attempt: int, waits: int, policy: Policy) -> float:
    """``min(cap, base x 2^waits) x U[0.5, 1)``, the jitter seeded by the attempt and wait."""
    params = policy.params
    jitter = 0.5 + 0.5 * bandit.seeded_rng("park", request_id, attempt, waits).random()
    base = max(params.retry_backoff_s, 0.01)
    return float(min(params.max_park_wait_s, base * 2**waits) * jitter)
