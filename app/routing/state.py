"""Routing state of one route, as stored in the route's table row (a budget's key holds
its ledger instead: app/routing/budget_state.py).

Slotted dataclasses, frozen to the type checker (:func:`app.routing.records.record`;
for the decision's time budget, docs/design.md#performance-targets: nothing is
validated or copied field by field inside the fold): the pure functions take one and
return a new one, never changing it (nor its dicts and lists: every update builds new
ones). The row is JSON (:mod:`app.routing.rows`); floats round-trip exactly, so a state rebuilt
from the changelog or by a replay is bit-identical to the live one.

A feature's own fields are a sub-state of the route state (``parking``: :class:`Parking`;
``cache``: :class:`ResponseCache`; ``budgets``: :class:`RouteBudgets`), a record like the
others; the row writes its fields as keys of the route's own object, where they were
before the feature had a record of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, TypeVar

from app.routing.cache_state import CacheRef, ResponseCache
from app.routing.rate_window import RateWindow
from app.routing.records import record

#: The latency EMA starts at 5.0 s for every provider (docs/design.md#ucb1-and-thompson-sampling).
INITIAL_LATENCY_S = 5.0
#: ``throughput`` mode: the output tokens/s EMA before any sample.
INITIAL_TOKENS_PER_S = 50.0


class BreakerPhase(StrEnum):
    CLOSED = "CLOSED"
    HALF_OPEN = "HALF_OPEN"
    OPEN = "OPEN"


#: Prometheus encoding of ``ai_circuit_breaker_state`` (docs/design.md#circuit-breaker).
BREAKER_GAUGE = {BreakerPhase.CLOSED: 0, BreakerPhase.HALF_OPEN: 1, BreakerPhase.OPEN: 2}


@record
class Breaker:
    state: BreakerPhase = BreakerPhase.CLOSED
    failures: int = 0
    last_failure_time: float = 0.0
    success_count: int = 0


@record
class Sums:
    """Discounted outcome sums of one memory (``adaptive``)."""

    #: Availability-relevant outcomes (up or down, by the reliability accounting) and the
    #: failures among them.
    calls: float = 0.0
    failures: float = 0.0
    #: Successful answers, and the sums of their rewards (acceptance) and latencies.
    answers: float = 0.0
    reward: float = 0.0
    latency_s: float = 0.0


@record
class Recent:
    """Two memories of the same outcomes (``adaptive``): each outcome weighs
    2^(-age / half-life), ``slow`` on ADAPTIVE_HALF_LIFE_S, ``fast`` on
    ADAPTIVE_FAST_HALF_LIFE_S. ``at``: route-clock time both were last brought up to date.
    """

    at: float = 0.0
    slow: Sums = field(default_factory=Sums)
    fast: Sums = field(default_factory=Sums)


@record
class Evidence:
    """What one deployment showed in one context bucket (learning from grades): its
    answers, the quality grades of those answers and what its attempts cost.

    Grades are sums over graded answers (``weight``-weighted): a grade that replaces an
    earlier one from the same source takes the old one back, so ``graded`` counts answers
    graded, not grades received.
    """

    #: Successful answers (each may get a grade later).
    answers: int = 0
    #: Answers graded, the grades' total weight, weighted sum, sum of squares and the
    #: weight of those at or above the success threshold (0.5).
    graded: int = 0
    weight: float = 0.0
    score: float = 0.0
    square: float = 0.0
    wins: float = 0.0
    #: Attempts that reported a cost, their dollars and tokens (the real-cost estimate).
    costed: int = 0
    cost_usd: float = 0.0
    tokens_in: float = 0.0
    tokens_out: float = 0.0


@record
class Pacer:
    """A budget pacer's dual variable (app/routing/pacer.py): the weight of cost, in
    quality per target-cost, and the spend already folded into it."""

    multiplier: float
    #: Dollars of outcomes already folded into ``multiplier`` (the scope's total then).
    spent: float = 0.0
    requests: int = 0


@record
class ArmState:
    """The bandit's statistics plus latency EMA, breaker and the in-flight count."""

    pulls: int = 0
    total_reward: float = 0.0
    alpha: float = 1.0
    beta: float = 1.0
    avg_latency_s: float = INITIAL_LATENCY_S
    latency_samples: int = 0
    in_flight: int = 0
    rate_limited: int = 0
    #: The provider asked (Retry-After) not to be called before this route-clock time.
    retry_after_until: float = 0.0
    breaker: Breaker = field(default_factory=Breaker)
    #: The composite score's EWMAs of failures (0/1) and latency over availability-relevant
    #: outcomes.
    ewma_failure: float = 0.0
    ewma_latency_ms: float = 0.0
    #: Tail latency (balanced mode's composite score): an exceedance-weighted EWMA
    #: tracking the 95th percentile of the same outcomes' latency (app/routing/tail.py).
    ewma_p95_ms: float = 0.0
    observations: int = 0
    #: ``throughput`` mode: EMA of output tokens per second on successes.
    tokens_per_s: float = INITIAL_TOKENS_PER_S
    throughput_samples: int = 0
    recent: Recent = field(default_factory=Recent)
    #: Quality grades, answers and cost per context bucket (app/routing/context.py), by
    #: key; ``*`` is every context. Bounded: CONTEXT_MAX_KEYS per deployment.
    evidence: dict[str, Evidence] = field(default_factory=dict)
    #: Tokens (the estimate app/routing/capabilities.py makes) of the smallest request
    #: the deployment refused as longer than its context window (0: none): no request
    #: that large is sent to it again.
    refused_tokens: int = 0

    @property
    def mean_reward(self) -> float:
        return self.total_reward / self.pulls if self.pulls else 0.0

    @property
    def started(self) -> int:
        """Attempts started: finished pulls plus those still in flight."""
        return self.pulls + self.in_flight


@record
class OpenAttempt:
    deployment: str
    decided_at: float
    #: The request's deadline (epoch seconds): no executor calls the provider after it.
    deadline: float
    #: Dynamic routes' budget nodes its request passed (their spend counts its cost).
    budget_nodes: tuple[str, ...] = ()
    #: Affinity: the keys its request may pin (``s:…`` session, ``c:…`` context),
    #: pinned to the deployment if the answer reports a prompt-cache read.
    affinity: tuple[str, ...] = ()
    #: Where its successful answer goes in the route's response cache (None: nowhere).
    cache: CacheRef | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Parked:
    """An attempt waiting for a deployment: every candidate was open or cooling down.

    It holds references, never the request (a waiting request stays in the log): the
    request is recalled from the routing log, at ``carrier``, when the wait is over.
    """

    request_id: str
    attempt: int
    #: Routing-log position of the event that carries the request: its RequestAccepted,
    #: or the AttemptFinished whose ``retry`` it is.
    carrier: int
    #: The request's deadline (epoch seconds): answered ``deadline_exceeded`` then.
    deadline: float
    tried: list[str] = field(default_factory=list)
    #: Route-clock time of the next look (backoff); how many looks found nothing yet.
    retry_at: float
    waits: int = 0
    #: Deployments of ``tried`` it may try again (their failure may mend: a 429, a 5xx).
    again: list[str] = field(default_factory=list)


@record
class Hold:
    """On a route: an attempt under budgets, asked for or held by every
    ledger in ``scopes``; settled with its cost when it ends, given back otherwise."""

    scopes: tuple[str, ...]
    amount: float
    granted: bool = False


@record
class RouteBudgets:
    """Budgets on a route: the budget pacers (app/routing/pacer.py) by scope (``route``,
    ``tenant:NAME``), and the attempts under budgets by ``request_id#attempt``
    (app/routing/budget_route.py)."""

    pacers: dict[str, Pacer] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)

    def hold(self, key: str, hold: Hold) -> RouteBudgets:
        """With ``hold`` under ``key`` (in its place if the key is there already)."""
        return RouteBudgets(self.pacers, {**self.holds, key: hold})

    def release(self, keys: Container[str]) -> RouteBudgets:
        """Without the holds under ``keys``."""
        return RouteBudgets(self.pacers, {k: v for k, v in self.holds.items() if k not in keys})


@record
class Line:
    """Requests of this route that wait in the routing log itself, in arrival order.

    They are the route's ``RequestAccepted`` events at positions after ``after``
    (every request arriving while one waits joins the line, so no list is kept):
    a fixed-size state whatever the backlog. The head is taken off the
    line when a deployment can take it, or answered once its deadline has passed.
    """

    waiting: int = 0
    #: The line is the route's requests at routing-log positions after this one.
    after: int = -1
    #: Position of the event at which the head last found no deployment: it is not
    #: tried again before a later event (something must have changed).
    blocked_at: int = -1


@record
class Parking:
    """Requests of the route waiting for a deployment (app/routing/parking.py): attempts
    parked by ``request_id#attempt``, and the new requests waiting in the log."""

    parked: dict[str, Parked] = field(default_factory=dict)
    line: Line = field(default_factory=Line)

    def park(self, key: str, parked: Parked) -> Parking:
        """With ``parked`` under ``key`` (in its place if the key is there already)."""
        return Parking({**self.parked, key: parked}, self.line)

    def unpark(self, key: str) -> Parking:
        """Without the attempt parked under ``key``."""
        return Parking({k: v for k, v in self.parked.items() if k != key}, self.line)


@record
class Pin:
    """A context or session pinned to the deployment that read its prompt cache,
    until ``until`` (route clock); ``started``: its first pin (a session's 24 h cap)."""

    deployment: str
    until: float
    started: float


#: How many grade ids a route remembers to drop a re-sent grade.
RECENT_GRADES = 512


@record
class RouteState:
    #: Route clock: the largest event time seen, in epoch seconds. Never goes back.
    clock: float = 0.0
    #: Routing-log offset of the last event applied (-1: none).
    position: int = -1
    arms: dict[str, ArmState] = field(default_factory=dict)
    #: Attempts decided and not yet finished, by ``request_id#attempt``.
    open_attempts: dict[str, OpenAttempt] = field(default_factory=dict)
    #: Per ``topic:partition`` of ``llm.requests``: the highest offset accepted onto this
    #: route. Ingest re-publishes after a crash in source order, so anything at or below
    #: it is a copy of a request already routed (and maybe already answered).
    accepted_through: dict[str, int] = field(default_factory=dict)
    #: Route-clock time before which no open attempt can be lost (0: check). A cache
    #: that spares the fold a scan of the open attempts on every event.
    expiry_check_at: float = 0.0
    #: Per-tenant request windows (the guardrails' rate limit), on the route clock.
    rate: RateWindow = field(default_factory=RateWindow)
    #: Attempts and new requests waiting for a deployment (app/routing/parking.py).
    parking: Parking = field(default_factory=Parking)
    #: Budget pacers and the attempts under budgets.
    budgets: RouteBudgets = field(default_factory=RouteBudgets)
    #: Ids of the grades folded last (at most ``RECENT_GRADES``): a grade the matcher
    #: re-sent after a crash (same id) is counted once (app/routing/grading.py).
    recent_grades: list[str] = field(default_factory=list)
    #: The policy version in force on the route: the last ``policy.changed``
    #: folded (0: none yet, the first version applies).
    policy_version: int = 0
    #: Dynamic routes' rate nodes: requests per window, by
    #: ``graph/node/subject``; and their budget nodes' spend: (period, USD).
    node_counts: RateWindow = field(default_factory=RateWindow)
    node_spend: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: Cache/session affinity pins by key (app/routing/affinity.py); bounded.
    affinity: dict[str, Pin] = field(default_factory=dict)
    #: The source offset of the last request this route forwarded (to a dynamic route's
    #: model or a fallback model; -1: none): each forward takes the next one, at least
    #: its position, so the target's copy watermark (``accepted_through``) sees them in
    #: the order they were sent, however many one position sends.
    forwarded_through: int = -1
    #: The response cache's entries and the requests it is answering (app/routing/cache.py).
    cache: ResponseCache = field(default_factory=ResponseCache)

    def arm(self, deployment: str) -> ArmState:
        arm = self.arms.get(deployment)
        return NEW_ARM if arm is None else arm


#: The state of a deployment never used on the route, and an empty evidence bucket
#: (shared: states are never changed).
NEW_ARM = ArmState()
NO_EVIDENCE = Evidence()


def attempt_key(request_id: str, attempt: int) -> str:
    return f"{request_id}#{attempt}"


T = TypeVar("T")
_KEEP: Any = object()


def _replacer(cls: type[T]) -> Callable[..., T]:
    """``dataclasses.replace`` for one class, generated as dataclasses generates
    ``__init__``: one positional constructor call (``replace`` walks the fields and
    builds keyword arguments: 2.0 vs 0.9 µs for a route state, 2.8 vs 1.3 for an arm)."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    assert not any(f.kw_only for f in fields(cls)), cls  # type: ignore[arg-type]
    keep = ", ".join(f"{name}=_KEEP" for name in names)
    values = ", ".join(f"old.{name} if {name} is _KEEP else {name}" for name in names)
    source = f"def evolve(old, *, {keep}):\n    return cls({values})\n"
    namespace: dict[str, Any] = {"cls": cls, "_KEEP": _KEEP}
    exec(source, namespace)  # generated from the class's own field names
    evolve: Callable[..., T] = namespace["evolve"]
    evolve.__doc__ = f"A copy of a {cls.__name__} with the given fields changed."
    return evolve


#: Fast ``dataclasses.replace`` for the two states every event copies (the sub-states,
#: of two fields each, are built whole: their constructor is what ``evolve`` would call).
evolve_route = _replacer(RouteState)
evolve_arm = _replacer(ArmState)
