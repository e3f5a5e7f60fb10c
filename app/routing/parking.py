"""Waiting for a deployment: when every candidate is saturated, open or cooling down,
a request waits instead of failing or spinning.

Whether to wait is a pure function of the selection's exclusions: only reasons
that pass with time (``breaker_open``, a half-open probe in flight,
``concurrency_full``, ``retry_after``) make waiting worthwhile; a request whose
candidates are ruled out for good (already tried, pins, lists, domains) is
answered at once.

Two ways to wait, both holding references only, never a request, both in the route
state's ``parking`` (:class:`app.routing.state.Parking`):

* **In the log** (:class:`app.routing.state.Line`): a new request whose
  candidates are busy (``concurrency_full``, a probe in flight) stays where it
  is in the routing log, and so does every request of the route behind it; the
  head is tried again at each later event of the route (a finished attempt frees
  a slot) and taken off in arrival order, or answered once its deadline passed.
* **Parked** (:class:`app.routing.state.Parked`, at most ``SWITCHYARD_MAX_PARKED``
  per route): an attempt whose candidates are open or asked to wait
  (Retry-After), and every retry, is looked at again when the route clock passes
  its ``retry_at`` — on any later routing-log event, a route tick included — with
  the backoff doubling up to ``SWITCHYARD_MAX_PARK_WAIT_S`` and seeded jitter,
  until its deadline. Parking takes such a request out of the line so that the
  requests behind it (other pins, other domains) go on.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.contract import Exclusion
from app.routing import bandit
from app.routing.policy import Policy

#: Exclusion reasons that pass with time.
TEMPORARY = frozenset(
    {"breaker_open", "breaker_half_open_probe_in_flight", "concurrency_full", "retry_after"}
)


#: Exclusion reasons that end with an attempt of the route finishing: a new request
#: waits for them in the log, in arrival order, and is tried again at the next event.
BUSY = frozenset({"concurrency_full", "breaker_half_open_probe_in_flight"})


def wait_in_line(excluded: Iterable[Exclusion]) -> bool:
    """True when a candidate is only busy: the request waits in the log, not parked."""
    return any(e.reason in BUSY for e in excluded)


def worth_waiting(excluded: Iterable[Exclusion]) -> bool:
    """True when some candidate is out only for a reason that passes with time."""
    return any(e.reason in TEMPORARY for e in excluded)


def wait_s(request_id: str, attempt: int, waits: int, policy: Policy) -> float:
    """``min(cap, base x 2^waits) x U[0.5, 1)``, the jitter seeded by the attempt and wait."""
    params = policy.params
    jitter = 0.5 + 0.5 * bandit.seeded_rng("park", request_id, attempt, waits).random()
    base = max(params.retry_backoff_s, 0.01)
    return float(min(params.max_park_wait_s, base * 2**waits) * jitter)
