"""Policies that exist only in the simulator, to compare the live router against.

* ``round_robin``: every deployment in turn, config order, no health tracking.
* ``static_priority``: a fixed priority list with the circuit breaker (the
  functions of :mod:`app.routing.breaker`, the reliability accounting) and the live
  router's Retry-After cooldown. The list is the ranking an operator would write
  after an offline benchmark: deployments by expected utility at t = 0 (ties:
  config order).
* ``oracle``: knows the true current state of every deployment (outages,
  throttles, drift, quality, the request's domain) and takes the one with the
  highest expected utility, among the route's default models and the
  specialised models the config declares for the request's domain. It does not
  know the dice: its utility is the bar regret is measured against, not an
  upper bound on luck.

All three share the live router's retry rules (its own functions where it has
them): an attempt is routed again when its feedback carries ``retry``, is not
final, ``attempt < max_attempts`` and the request's deadline has not passed, to
a deployment this request has not tried, after the fold's seeded backoff.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.config.providers import deployment_id
from app.contract import AttemptFinished, Outcome, RequestAccepted
from app.routing import breaker
from app.routing.fold import backoff_s, deadline_of, epoch
from app.routing.policy import Policy
from app.routing.reliability import ACCOUNTING, Availability
from app.routing.state import Breaker, BreakerPhase
from app.understanding.domains import specialized_model
from bench.sim.routers import Choice
from bench.sim.scenarios import ROUTE
from bench.sim.world import ORIGIN, World


class Baseline:
    """Retry bookkeeping of the simulator-only policies; subclasses choose."""

    def __init__(self, world: World, policy: Policy) -> None:
        self.world = world
        self.policy = policy
        self.arms = [arm.deployment for arm in policy.arms(ROUTE)]
        self.max_attempts = policy.max_attempts(ROUTE)
        self.clock = 0.0

    def fold(self, event: RequestAccepted | AttemptFinished) -> list[Choice]:
        self.clock = max(self.clock, epoch(event.occurred_at))
        if isinstance(event, RequestAccepted):
            return self._decide(event, 1, ())
        outcome = event.outcome
        self.observe(outcome)
        if event.retry is None or outcome.final or outcome.attempt >= self.max_attempts:
            return []
        return self._decide(event.retry, outcome.attempt + 1, event.tried)

    def _decide(
        self, accepted: RequestAccepted, attempt: int, tried: Sequence[str]
    ) -> list[Choice]:
        request_id = accepted.request.request_id
        deadline = deadline_of(accepted, self.policy)
        if attempt > 1 and self.clock >= deadline:
            return []
        candidates = [d for d in self.arms_for(accepted) if d not in tried]
        chosen, excluded = self.choose(accepted, candidates)
        if chosen is None:
            return []
        not_before = self.clock + backoff_s(request_id, attempt, self.policy)
        return [Choice(request_id, attempt, chosen, excluded, not_before, deadline)]

    def waiting(self, request_id: str) -> bool:
        """Baselines never park a request."""
        return False

    def answered(self) -> list[str]:
        """Baselines answer through the engine: no attempt left means the last error."""
        return []

    def arms_for(self, accepted: RequestAccepted) -> list[str]:
        """The deployments this policy may choose for the request (default models)."""
        return self.arms

    def choose(
        self, accepted: RequestAccepted, candidates: list[str]
    ) -> tuple[str | None, tuple[str, ...]]:
        raise NotImplementedError

    def observe(self, outcome: Outcome) -> None:
        """Feedback of one finished attempt."""


class RoundRobin(Baseline):
    def __init__(self, world: World, policy: Policy) -> None:
        super().__init__(world, policy)
        self._next = 0

    def choose(
        self, accepted: RequestAccepted, candidates: list[str]
    ) -> tuple[str | None, tuple[str, ...]]:
        for step in range(len(self.arms)):
            index = (self._next + step) % len(self.arms)
            if self.arms[index] in candidates:
                self._next = index + 1
                return self.arms[index], ()
        return None, ()


class StaticPriority(Baseline):
    def __init__(self, world: World, policy: Policy) -> None:
        super().__init__(world, policy)
        ranked = sorted(
            enumerate(self.arms), key=lambda item: (-world.expected_utility(item[1], 0.0), item[0])
        )
        self.order = [deployment for _, deployment in ranked]
        self.breakers = {d: Breaker() for d in self.arms}
        self.in_flight = dict.fromkeys(self.arms, 0)
        self.retry_after_until = dict.fromkeys(self.arms, 0.0)

    def choose(
        self, accepted: RequestAccepted, candidates: list[str]
    ) -> tuple[str | None, tuple[str, ...]]:
        params = self.policy.breaker
        excluded: list[str] = []
        for deployment in self.order:
            if deployment not in candidates:
                continue
            state = self.breakers[deployment] = breaker.on_clock(
                self.breakers[deployment], self.clock, params
            )
            if (
                state.state is BreakerPhase.OPEN
                or (
                    state.state is BreakerPhase.HALF_OPEN
                    and self.in_flight[deployment]
                    >= params.half_open_max_calls - state.success_count
                )
                or self.retry_after_until[deployment] > self.clock
            ):
                excluded.append(deployment)
                continue
            self.in_flight[deployment] += 1
            return deployment, tuple(excluded)
        return None, tuple(excluded)

    def observe(self, outcome: Outcome) -> None:
        deployment = outcome.deployment
        self.in_flight[deployment] = max(0, self.in_flight[deployment] - 1)
        if outcome.retry_after_s:
            self.retry_after_until[deployment] = max(
                self.retry_after_until[deployment], self.clock + outcome.retry_after_s
            )
        availability = ACCOUNTING[outcome.status_class].availability
        params = self.policy.breaker
        if availability is Availability.UP:
            self.breakers[deployment] = breaker.on_success(self.breakers[deployment], params)
        elif availability is Availability.DOWN:
            self.breakers[deployment] = breaker.on_failure(
                self.breakers[deployment], self.clock, params
            )


class Oracle(Baseline):
    def arms_for(self, accepted: RequestAccepted) -> list[str]:
        """Every deployment of the route's config, a domain's specialised models included."""
        domain = accepted.request.metadata.get("domain")
        if domain is None:
            return self.arms
        providers = self.policy.config.route_providers(ROUTE)
        special = [(p.id, specialized_model(p, domain)) for p in providers]
        return [*self.arms, *(deployment_id(pid, model) for pid, model in special if model)]

    def choose(
        self, accepted: RequestAccepted, candidates: list[str]
    ) -> tuple[str | None, tuple[str, ...]]:
        if not candidates:
            return None, ()
        t = self.clock - ORIGIN
        domain = accepted.request.metadata.get("domain")
        scores = [self.world.expected_utility(d, t, domain) for d in candidates]
        chosen = candidates[scores.index(max(scores))]
        excluded = tuple(
            d
            for d in self.arms
            if self.world.conditions(d, t).down is not None
            or self.world.retry_after_s(d, t) is not None
        )
        return chosen, excluded
