"""Outcomes for attempts that never happened: where they come from, and how sure we are.

A counterfactual policy may send an attempt to a deployment the record has no
outcome for. Its outcome is then taken, in this order, from:

1. ``recorded``: the very attempt happened on that deployment; its recorded
   feedback is folded at its recorded position (a measurement).
2. ``same_request``: this request ran on that deployment in another attempt; that
   outcome is reused (a measurement of this request on that deployment, at
   another moment).
3. ``estimated``: a seeded bootstrap draw from the deployment's recorded
   outcomes (status, latency, tokens together), i.e. its observed success rate,
   latency and token distribution. An estimate: it ignores how this request
   differs from the average one and any drift over time.
4. ``pooled``: the deployment was never observed; a draw from all the route's
   recorded outcomes. A guess, reported as such.

The cost of a drawn outcome is recomputed from its tokens with the prices of the
deployment in the alternative config. Its feedback is folded after the drawn
outcome's recorded *delay* (decision to outcome: provider latency plus the
pipeline's queueing at the time), not just its latency, so congestion that made
the record exclude deployments (``concurrency_full``) shows in the alternative
too; it is the congestion of the recorded policy, another bias to keep in mind.
Draws are seeded by (run, request id, attempt, deployment), so a counterfactual
is reproducible; running it with several ``run`` numbers shows the spread the
draws cause.

Why not inverse-propensity weighting: under UCB1 the logged propensity is 1.0
for the chosen deployment and 0 for the others, so the log has no support for a
different choice and IPW is undefined there; under Thompson it is usable but
noisy. The per-deployment basis (n, success rate with a 95 % Wilson interval,
latency, cost) is reported so the reader can judge each estimate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from app.contract import Outcome
from app.routing.bandit import seeded_rng
from app.routing.fold import epoch

Source = Literal["recorded", "same_request", "estimated", "pooled"]
SOURCES: tuple[Source, ...] = ("recorded", "same_request", "estimated", "pooled")
MEASURED: frozenset[Source] = frozenset({"recorded", "same_request"})


@dataclass(frozen=True)
class Basis:
    """What the record says about one deployment."""

    deployment: str
    n: int
    successes: int
    mean_latency_ms: float
    mean_cost_usd: float

    @property
    def success_rate(self) -> float:
        return self.successes / self.n if self.n else 0.0

    def wilson(self, z: float = 1.96) -> tuple[float, float]:
        """95 % Wilson score interval of the success rate."""
        if not self.n:
            return 0.0, 1.0
        p, n = self.success_rate, self.n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class OutcomeModel:
    """The recorded outcomes, indexed for drawing."""

    by_deployment: dict[str, list[Outcome]] = field(default_factory=dict)
    by_route: dict[str, list[Outcome]] = field(default_factory=dict)
    by_request: dict[tuple[str, str], Outcome] = field(default_factory=dict)
    #: Decision id -> decision time (epoch s), to measure each outcome's feedback delay.
    decided_at: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_outcomes(
        cls, outcomes: Iterable[Outcome], decided_at: Mapping[str, float] | None = None
    ) -> OutcomeModel:
        model = cls(decided_at=dict(decided_at or {}))
        seen: set[str] = set()
        for outcome in outcomes:
            if outcome.id in seen:
                continue
            seen.add(outcome.id)
            model.by_deployment.setdefault(outcome.deployment, []).append(outcome)
            model.by_route.setdefault(outcome.route, []).append(outcome)
            model.by_request.setdefault((outcome.request_id, outcome.deployment), outcome)
        return model

    def draw(
        self, run: int, request_id: str, attempt: int, deployment: str, route: str
    ) -> tuple[Outcome, Source] | None:
        observed = self.by_request.get((request_id, deployment))
        if observed is not None:
            return observed, "same_request"
        pool = self.by_deployment.get(deployment)
        source: Source = "estimated"
        if not pool:
            pool, source = self.by_route.get(route), "pooled"
        if not pool:
            return None
        rng = seeded_rng("counterfactual", run, request_id, attempt, deployment)
        return pool[rng.randrange(len(pool))], source

    def delay_s(self, outcome: Outcome) -> float:
        """Seconds from the recorded decision to its outcome: the provider's latency plus
        whatever the pipeline queued it for (backoff, executor backlog) at the time.
        Just the latency when the decision is not in the record."""
        decided = self.decided_at.get(outcome.decision_id)
        if decided is None:
            return outcome.latency_ms / 1000.0
        return max(outcome.latency_ms / 1000.0, epoch(outcome.occurred_at) - decided)

    def basis(self) -> list[Basis]:
        rows = []
        for deployment, outcomes in sorted(self.by_deployment.items()):
            n = len(outcomes)
            rows.append(
                Basis(
                    deployment=deployment,
                    n=n,
                    successes=sum(1 for o in outcomes if o.reward >= 0.5),
                    mean_latency_ms=sum(o.latency_ms for o in outcomes) / n,
                    mean_cost_usd=sum(o.cost_usd for o in outcomes) / n,
                )
            )
        return rows
