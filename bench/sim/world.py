"""Ground truth of the quality simulator: what each deployment really does, at each moment.

A :class:`Scenario` is a list of deployments with their true behaviour (the reference
providers' table: log-normal latency from p50/p95, success rate, prices; plus an acceptance
rate, optionally per domain) and a list of *changes* over simulated time
(outages, latency drift, quality regressions, late arrivals, 429 storms).
A :class:`World` is one run's view of it; it is stateful only through the
token buckets of rate-limit windows, which depend on the traffic a policy sends.

Every random number of a call comes from the ``random.Random`` the caller passes
in, always in the same order (outcome, latency, acceptance): the engine seeds one
per (request, attempt), so two policies that send a request to the same
deployment see the same result, and to different ones, coupled results (common
random numbers: regret then measures choices, not luck).

Utility of one request (what the oracle maximises and regret is measured in)::

    U = accepted − LAMBDA_COST·cost_usd − LAMBDA_LATENCY·latency_s − FAILURE_PENALTY·failed

``accepted`` is 1 when the request got a successful answer that its user
accepted, ``cost_usd`` sums every attempt, ``latency_s`` is end-to-end (arrival
to the final answer or error, fallbacks included), ``failed`` is 1 when the
request ended with an error.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from app.config.providers import ProviderConfig, deployment_id
from app.config.schema import RoutingConfig
from app.contract import StatusClass
from app.embedded.simulated import (
    DEFAULT_RATE_LIMIT_SHARE,
    RATE_LIMIT_LATENCY_FRACTION,
    RETRY_AFTER_S,
    SimulatedModel,
    draw,
)
from app.embedded.simulated import Outcome as Drawn
from app.execution.outcome import cost_usd

#: Epoch seconds of simulated t = 0 (2026-01-01T00:00:00Z): events carry ORIGIN + t.
ORIGIN = 1_767_225_600.0
#: The reference workload: every request has 800 input and 250 output tokens.
TOKENS_IN = 800
TOKENS_OUT = 250
#: Utility of one dollar spent: an accepted answer is worth $0.05.
LAMBDA_COST = 20.0
#: Utility of one second of end-to-end latency: 10 s of waiting cost one answer.
LAMBDA_LATENCY = 0.1
#: A request that ends with an error is worse than an answer nobody accepts.
FAILURE_PENALTY = 1.0
#: A provider in total outage answers 503 at once (one round trip).
OUTAGE_LATENCY_MS = 30.0
#: A provider that is not there yet refuses the connection.
CONNECTION_ERROR_LATENCY_MS = 20.0


def utility(accepted: bool, cost: float, latency_s: float, failed: bool) -> float:
    """U of one request (see the module docstring)."""
    return (
        float(accepted)
        - LAMBDA_COST * cost
        - LAMBDA_LATENCY * latency_s
        - FAILURE_PENALTY * float(failed)
    )


# --------------------------------------------------------------------------- truth


@dataclass(frozen=True)
class Truth:
    """One deployment's true behaviour when nothing special happens."""

    model: SimulatedModel
    #: P(the user accepts a successful answer); with ``by_domain``, their mean.
    acceptance: float
    #: Acceptance per request domain (S7); a domain not listed uses ``acceptance``.
    by_domain: Mapping[str, float] = field(default_factory=dict)

    @property
    def deployment(self) -> str:
        return deployment_id(self.model.provider_id, self.model.model)

    def acceptance_in(self, domain: str | None) -> float:
        if domain is None:
            return self.acceptance
        return self.by_domain.get(domain, self.acceptance)

    @property
    def mean_latency_ms(self) -> float:
        """Mean of the log-normal fitted to p50/p95."""
        return math.exp(self.model.mu + self.model.sigma**2 / 2)


@dataclass(frozen=True)
class Conditions:
    """A deployment's behaviour at one moment, changes applied."""

    success_rate: float
    latency_factor: float
    acceptance: float
    #: Set when every call fails this way (outage: 503; not there yet: connection error).
    down: StatusClass | None = None


class Change(Protocol):
    """Something that happens to one deployment over simulated time."""

    @property
    def deployment(self) -> str: ...

    def apply(self, conditions: Conditions, t: float) -> Conditions: ...


@dataclass(frozen=True)
class Outage:
    """Every call answered 503 at once, from ``start_s`` (inclusive) to ``end_s``."""

    deployment: str
    start_s: float
    end_s: float

    def apply(self, conditions: Conditions, t: float) -> Conditions:
        if self.start_s <= t < self.end_s:
            return replace(conditions, down=StatusClass.SERVER_ERROR)
        return conditions


@dataclass(frozen=True)
class Joins:
    """In the config from the start but refusing connections until ``at_s`` (S5)."""

    deployment: str
    at_s: float

    def apply(self, conditions: Conditions, t: float) -> Conditions:
        if t < self.at_s:
            return replace(conditions, down=StatusClass.CONNECTION_ERROR)
        return conditions


@dataclass(frozen=True)
class LatencyDrift:
    """Latency factor 1 before ``start_s``, linear to ``factor`` at ``end_s``, then held."""

    deployment: str
    start_s: float
    end_s: float
    factor: float

    def apply(self, conditions: Conditions, t: float) -> Conditions:
        if t <= self.start_s:
            return conditions
        progress = min(1.0, (t - self.start_s) / (self.end_s - self.start_s))
        scale = 1.0 + (self.factor - 1.0) * progress
        return replace(conditions, latency_factor=conditions.latency_factor * scale)


@dataclass(frozen=True)
class AcceptanceStep:
    """Acceptance ``before`` until ``at_s``, ``after`` from then on (silent: still 2xx)."""

    deployment: str
    at_s: float
    before: float
    after: float

    def apply(self, conditions: Conditions, t: float) -> Conditions:
        return replace(conditions, acceptance=self.before if t < self.at_s else self.after)


@dataclass(frozen=True)
class Throttle:
    """A 429 storm: from ``start_s`` to ``end_s`` the deployment serves at most
    ``share`` of the arrival rate (token bucket, one second of burst) and answers
    the rest 429 with the ``Retry-After`` of its next free slot."""

    deployment: str
    start_s: float
    end_s: float
    share: float


@dataclass(frozen=True)
class Incident:
    """The event detection and recovery times are measured against (S2)."""

    deployment: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    description: str
    #: Every deployment the world knows, including ones no route names yet (S7 specialists).
    truths: tuple[Truth, ...]
    config: RoutingConfig
    changes: tuple[Outage | Joins | LatencyDrift | AcceptanceStep, ...] = ()
    throttles: tuple[Throttle, ...] = ()
    #: Request domains, drawn uniformly per request (S7); empty: no domain.
    domains: tuple[str, ...] = ()
    duration_s: float = 7200.0
    incident: Incident | None = None


# --------------------------------------------------------------------------- one call


@dataclass(frozen=True, slots=True)
class Call:
    """What one attempt did, as the executor would have measured it."""

    status: StatusClass
    http_status: int | None
    latency_ms: float
    accepted: bool = False
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    retry_after_s: float | None = None


@dataclass
class _Bucket:
    rate: float
    burst: float
    tokens: float
    last: float

    def refill(self, t: float) -> None:
        if t > self.last:
            self.tokens = min(self.burst, self.tokens + (t - self.last) * self.rate)
            self.last = t

    def wait_s(self) -> float:
        """Seconds until a call would pass (0 when one passes now)."""
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate


class World:
    """One run's ground truth. ``t`` is simulated seconds since the start of the run."""

    def __init__(self, scenario: Scenario, arrival_rate: float) -> None:
        self.scenario = scenario
        self.truths = {truth.deployment: truth for truth in scenario.truths}
        self._changes: dict[str, list[Outage | Joins | LatencyDrift | AcceptanceStep]] = {}
        for change in scenario.changes:
            self._changes.setdefault(change.deployment, []).append(change)
        self._throttles = {th.deployment: th for th in scenario.throttles}
        self._buckets: dict[str, _Bucket] = {}
        self._arrival_rate = arrival_rate
        self._providers: dict[str, ProviderConfig] = scenario.config.provider_by_id

    def provider(self, deployment: str) -> ProviderConfig:
        return self._providers[self.truths[deployment].model.provider_id]

    def conditions(self, deployment: str, t: float, domain: str | None = None) -> Conditions:
        truth = self.truths[deployment]
        conditions = Conditions(truth.model.success_rate, 1.0, truth.acceptance_in(domain))
        for change in self._changes.get(deployment, ()):
            conditions = change.apply(conditions, t)
        return conditions

    def retry_after_s(self, deployment: str, t: float) -> float | None:
        """When a storm would answer a call now with 429: its Retry-After; else None."""
        bucket = self._bucket(deployment, t)
        if bucket is None:
            return None
        wait = bucket.wait_s()
        return wait if wait > 0.0 else None

    def _bucket(self, deployment: str, t: float) -> _Bucket | None:
        throttle = self._throttles.get(deployment)
        if throttle is None or not throttle.start_s <= t < throttle.end_s:
            return None
        bucket = self._buckets.get(deployment)
        if bucket is None:
            rate = max(1e-9, throttle.share * self._arrival_rate)
            burst = max(1.0, rate)
            bucket = self._buckets[deployment] = _Bucket(rate, burst, burst, t)
        bucket.refill(t)
        return bucket

    def call(
        self,
        deployment: str,
        t: float,
        rng: random.Random,
        domain: str | None = None,
        timeout_ms: float | None = None,
    ) -> Call:
        """One attempt started at ``t``; its outcome, latency and acceptance come from ``rng``.

        ``timeout_ms`` is the caller's budget (default: the provider's ``timeout_ms``).
        """
        truth = self.truths[deployment]
        conditions = self.conditions(deployment, t, domain)
        drawn = draw(
            rng,
            truth.model,
            success_rate=conditions.success_rate,
            rate_limit_share=DEFAULT_RATE_LIMIT_SHARE,
        )
        accepted = rng.random() < conditions.acceptance
        if conditions.down is StatusClass.SERVER_ERROR:
            return Call(StatusClass.SERVER_ERROR, 503, OUTAGE_LATENCY_MS)
        if conditions.down is not None:
            return Call(conditions.down, None, CONNECTION_ERROR_LATENCY_MS)
        latency_ms = drawn.latency_ms * conditions.latency_factor
        bucket = self._bucket(deployment, t)
        if bucket is not None:
            wait = bucket.wait_s()
            if wait > 0.0:
                return Call(
                    StatusClass.RATE_LIMITED,
                    429,
                    latency_ms * RATE_LIMIT_LATENCY_FRACTION,
                    retry_after_s=wait,
                )
            bucket.tokens -= 1.0
        if drawn.outcome is Drawn.RATE_LIMITED:
            return Call(
                StatusClass.RATE_LIMITED,
                429,
                latency_ms * RATE_LIMIT_LATENCY_FRACTION,
                retry_after_s=RETRY_AFTER_S,
            )
        if timeout_ms is None:
            timeout_ms = float(self.provider(deployment).timeout_ms)
        if latency_ms >= timeout_ms:
            return Call(StatusClass.TIMEOUT, None, timeout_ms)
        if drawn.outcome is Drawn.SERVER_ERROR:
            return Call(StatusClass.SERVER_ERROR, 503, latency_ms)
        return Call(
            StatusClass.SUCCESS,
            200,
            latency_ms,
            accepted=accepted,
            cost_usd=self.success_cost(deployment),
            tokens_in=TOKENS_IN,
            tokens_out=TOKENS_OUT,
        )

    def success_cost(self, deployment: str) -> float:
        return cost_usd(self.provider(deployment), TOKENS_IN, TOKENS_OUT, 0)

    def expected_utility(self, deployment: str, t: float, domain: str | None = None) -> float:
        """Expected utility of one attempt started now: what the oracle maximises.

        ``p·(acceptance − LAMBDA_COST·cost) − LAMBDA_LATENCY·E[latency]``, with
        ``p`` = 0 while the deployment is down or throttled. A failed attempt adds
        its latency and leaves the request to a fallback.
        """
        conditions = self.conditions(deployment, t, domain)
        truth = self.truths[deployment]
        if conditions.down is StatusClass.SERVER_ERROR:
            return -LAMBDA_LATENCY * OUTAGE_LATENCY_MS / 1000.0
        if conditions.down is not None:
            return -LAMBDA_LATENCY * CONNECTION_ERROR_LATENCY_MS / 1000.0
        latency_s = truth.mean_latency_ms * conditions.latency_factor / 1000.0
        if self.retry_after_s(deployment, t) is not None:
            return -LAMBDA_LATENCY * latency_s * RATE_LIMIT_LATENCY_FRACTION
        p = conditions.success_rate
        value = p * (conditions.acceptance - LAMBDA_COST * self.success_cost(deployment))
        return value - LAMBDA_LATENCY * latency_s


def best_deployment(truths: Sequence[Truth], config: RoutingConfig) -> str:
    """The deployment with the highest expected utility in a quiet world (ties: first)."""
    world = World(Scenario("probe", "", "", tuple(truths), config), 1.0)
    scores = [world.expected_utility(truth.deployment, 0.0) for truth in truths]
    return truths[scores.index(max(scores))].deployment
