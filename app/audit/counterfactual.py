"""``switchyard replay --config ALT.yaml`` / ``--set NAME=VALUE``: what another policy does.

The recorded requests are folded, in their recorded order and with the live
:func:`app.routing.fold.handle`, under the alternative policy. Its state must
evolve as it would have, so every attempt it dispatches gets an outcome, fed
back as an ``AttemptFinished``:

* when the alternative sends attempt *k* of a request where the record sent it,
  the recorded feedback is folded at its recorded position, unchanged (so the
  same policy reproduces the record exactly, which the tests check);
* otherwise an outcome comes from :class:`app.audit.estimate.OutcomeModel`
  (``same_request``, ``estimated`` or ``pooled``; see there) and its feedback is
  folded once the route's event time passes the decision time plus the drawn
  outcome's recorded delay (latency and queueing; at least the retry backoff's
  ``not_before`` plus the latency),
  with ``retry`` when it failed in a retriable way and attempts remain.

Everything the alternative reports beyond its decisions is therefore partly an
estimate; the report says how many attempts rest on measurements and how many
on each kind of estimate, and gives the spread over ``runs`` seeded draws.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.audit.estimate import MEASURED, SOURCES, OutcomeModel, Source
from app.audit.log import RecordedLog, RoutingEvent, events
from app.contract import (
    AttemptFinished,
    BudgetAsk,
    BudgetSettle,
    BudgetVerdict,
    Decision,
    Dispatch,
    Outcome,
    RequestAccepted,
    derived_id,
    route_of,
)
from app.execution.outcome import finish, recorded_result
from app.routing.driver import Driver
from app.routing.dynamic import FORWARD_SOURCE
from app.routing.fold import at, epoch
from app.routing.keys import KeyState
from app.routing.policy import Policy

Key = tuple[str, int]
#: Error types of responses the router gives when no provider answered.
ROUTER_ERRORS = frozenset({"no_deployment_available", "deadline_exceeded", "lost"})


def key_of(decision: Decision) -> Key:
    return decision.request_id, decision.attempt


@dataclass
class RunResult:
    decisions: dict[Key, Decision] = field(default_factory=dict)
    outcomes: dict[Key, tuple[Outcome, Source]] = field(default_factory=dict)
    #: Attempts for which the record holds no outcome at all to draw from.
    unresolved: int = 0
    #: Requests the router answered without a provider's answer (see ROUTER_ERRORS).
    router_errors: int = 0
    #: Requests answered from the response cache (no attempt, no call).
    cache_hits: set[str] = field(default_factory=set)


def _derived(event: RoutingEvent) -> bool:
    """A record the live router derived from others (budget traffic, a request a dynamic
    route forwarded): a counterfactual run derives its own instead."""
    if isinstance(event, BudgetAsk | BudgetVerdict | BudgetSettle):
        return True
    return isinstance(event, RequestAccepted) and event.source.topic.startswith(FORWARD_SOURCE)


class _Run:
    def __init__(self, log: RecordedLog, alt: Policy, model: OutcomeModel, run: int) -> None:
        self.log, self.alt, self.model, self.run = log, alt, model, run
        self.result = RunResult()
        self.states: dict[str, KeyState] = {}
        # The alternative throughout: policy changes in the log do not switch it back.
        self.driver = Driver(lambda: self.alt, states=self.states, follow_versions=False)
        self.positions: dict[str, int] = {}
        self.pending: dict[str, list[tuple[float, int, AttemptFinished]]] = {}
        self.sequence = 0
        self.index = -1
        self.at_recorded: set[Key] = set()
        self.tried: dict[Key, list[str]] = {}
        self.feedback: dict[Key, int] = {}
        for index, entry in enumerate(log.routing):
            if isinstance(entry.event, AttemptFinished):
                o = entry.event.outcome
                self.feedback.setdefault((o.request_id, o.attempt), index)

    def execute(self) -> RunResult:
        for index, entry in enumerate(self.log.routing):
            event = entry.event
            if event is None:
                continue
            self.index = index
            route = route_of(event)
            self.flush(route, epoch(event.occurred_at))
            if _derived(event):
                continue  # the alternative sends its own (fold: step.records)
            if not isinstance(event, AttemptFinished):  # requests and route ticks
                self.fold(route, event)
                continue
            key = (event.outcome.request_id, event.outcome.attempt)
            if key in self.at_recorded:  # the alternative made this very attempt
                self.at_recorded.discard(key)
                self.fold(route, event.model_copy(update={"tried": self.tried[key]}))
        for route in list(self.pending):
            self.flush(route, math.inf)
        return self.result

    def flush(self, route: str, until: float) -> None:
        queue = self.pending.get(route)
        while queue and queue[0][0] <= until:
            _, _, event = heapq.heappop(queue)
            self.fold(route, event)

    def fold(self, route: str, event: RoutingEvent) -> None:
        position = self.positions.get(route, -1) + 1
        self.positions[route] = position
        step = self.driver.fold(event, position)
        for record in step.records:  # budget asks and verdicts, forwarded requests
            self.fold(route_of(record), record)
        self.result.router_errors += sum(
            1 for r in step.responses if r.error is not None and r.error.type in ROUTER_ERRORS
        )
        for dispatch in step.dispatches:
            self.dispatched(route, dispatch)
        self.result.cache_hits.update(d.request_id for d in step.decisions)

    def dispatched(self, route: str, dispatch: Dispatch) -> None:
        decision = dispatch.decision
        key = key_of(decision)
        self.result.decisions[key] = decision
        self.tried[key] = [*dispatch.tried, decision.deployment]
        recorded_at = self.feedback.get(key, -1)
        if recorded_at > self.index:
            recorded = self.log.routing[recorded_at].event
            assert isinstance(recorded, AttemptFinished)
            if recorded.outcome.deployment == decision.deployment:
                self.at_recorded.add(key)
                self.result.outcomes[key] = (recorded.outcome, "recorded")
                return
        drawn = self.model.draw(self.run, *key, decision.deployment, route)
        if drawn is None:
            self.result.unresolved += 1
            return
        source_outcome, source = drawn
        finished = self.synthetic(dispatch, source_outcome)
        self.result.outcomes[key] = (finished.outcome, source)
        self.sequence += 1
        due = epoch(finished.occurred_at)
        heapq.heappush(self.pending.setdefault(route, []), (due, self.sequence, finished))

    def synthetic(self, dispatch: Dispatch, source: Outcome) -> AttemptFinished:
        """The drawn outcome's call as this dispatch's, built as the executor builds it (its
        recorded reward kept), under ids of this run."""
        decision = dispatch.decision
        key = key_of(decision)
        provider = self.alt.config.provider_by_id[decision.provider]
        done = max(
            epoch(decision.occurred_at) + self.model.delay_s(source),
            dispatch.not_before + source.latency_ms / 1000.0,
        )
        outcome, finished = finish(
            dispatch, recorded_result(source), provider, occurred_at=at(done), judged=source.reward
        )
        outcome = outcome.model_copy(
            update={"id": derived_id("counterfactual-outcome", self.run, *key)}
        )
        return finished.model_copy(
            update={"id": derived_id("counterfactual-finished", self.run, *key), "outcome": outcome}
        )


def simulate(log: RecordedLog, alt: Policy, run: int = 0) -> RunResult:
    return _Run(log, alt, outcome_model(log), run).execute()


def outcome_model(log: RecordedLog) -> OutcomeModel:
    decided_at = {d.id: epoch(d.occurred_at) for d in events(log.decisions)}
    return OutcomeModel.from_outcomes(_recorded_outcomes(log), decided_at)


def _recorded_outcomes(log: RecordedLog) -> list[Outcome]:
    return [e.outcome for e in events(log.routing) if isinstance(e, AttemptFinished)]


# --------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class Side:
    """Totals of one world: the recorded one (measured) or one alternative run."""

    requests: int
    attempts: int
    share: dict[str, float]
    requests_ok: float
    mean_reward: float
    mean_latency_ms: float
    total_cost_usd: float
    first_changed: int = 0
    sources: dict[str, int] = field(default_factory=dict)
    unresolved: int = 0
    router_errors: int = 0
    #: Requests answered from the response cache: no attempt (a success).
    cache_hits: int = 0


def _side(
    decisions: Mapping[Key, Decision],
    outcomes: list[Outcome],
    requests: int,
    hits: set[str] | None = None,
) -> Side:
    """``decisions``: the attempts (calls); ``hits``: requests answered from the cache."""
    counts = Counter(d.deployment for d in decisions.values())
    total = sum(counts.values())
    ok = {o.request_id for o in outcomes if o.reward >= 0.5} | (hits or set())
    n = len(outcomes)
    return Side(
        requests=requests,
        attempts=total,
        share={d: c / total for d, c in sorted(counts.items())},
        requests_ok=len(ok) / requests if requests else 0.0,
        mean_reward=sum(o.reward for o in outcomes) / n if n else 0.0,
        mean_latency_ms=sum(o.latency_ms for o in outcomes) / n if n else 0.0,
        total_cost_usd=sum(o.cost_usd for o in outcomes),
        cache_hits=len(hits or ()),
    )


@dataclass
class CounterfactualReport:
    recorded_config_hashes: dict[str, int]
    alternative_config_hash: str
    alternative_label: str
    recorded: Side
    runs: list[Side]
    basis: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "recorded_config_hashes": self.recorded_config_hashes,
            "alternative_config_hash": self.alternative_config_hash,
            "alternative": self.alternative_label,
            "recorded": asdict(self.recorded),
            "alternative_runs": [asdict(run) for run in self.runs],
            "basis": self.basis,
            "estimator": "see app/audit/estimate.py: recorded > same_request > estimated > pooled",
        }


def counterfactual(
    log: RecordedLog, alt: Policy, label: str, runs: int = 5
) -> CounterfactualReport:
    recorded_decisions: dict[Key, Decision] = {}
    recorded_hits: set[str] = set()
    for decision in events(log.decisions):
        if decision.selection_rule == "cache":  # answered from the cache: no call
            recorded_hits.add(decision.request_id)
            continue
        recorded_decisions.setdefault((decision.request_id, decision.attempt), decision)
    outcomes = {o.id: o for o in _recorded_outcomes(log)}
    requests = len(
        {e.request.request_id for e in events(log.routing) if isinstance(e, RequestAccepted)}
    )
    model = outcome_model(log)
    sides = []
    for run in range(max(1, runs)):
        result = _Run(log, alt, model, run).execute()
        side = _side(
            result.decisions,
            [o for o, _ in result.outcomes.values()],
            requests,
            result.cache_hits,
        )
        changed = sum(
            1
            for (request_id, attempt), decision in result.decisions.items()
            if attempt == 1
            and (request_id, 1) in recorded_decisions
            and recorded_decisions[(request_id, 1)].deployment != decision.deployment
        )
        sources = Counter(source for _, source in result.outcomes.values())
        sides.append(
            Side(
                **{
                    **side.__dict__,
                    "first_changed": changed,
                    "sources": {s: sources.get(s, 0) for s in SOURCES},
                    "unresolved": result.unresolved,
                    "router_errors": result.router_errors,
                }
            )
        )
    basis = []
    for row in model.basis():
        low, high = row.wilson()
        basis.append(
            {
                "deployment": row.deployment,
                "n": row.n,
                "success_rate": row.success_rate,
                "success_rate_95": [low, high],
                "mean_latency_ms": row.mean_latency_ms,
                "mean_cost_usd": row.mean_cost_usd,
            }
        )
    return CounterfactualReport(
        recorded_config_hashes=dict(Counter(d.config_hash for d in recorded_decisions.values())),
        alternative_config_hash=alt.config_hash,
        alternative_label=label,
        recorded=_side(recorded_decisions, list(outcomes.values()), requests, recorded_hits),
        runs=sides,
        basis=basis,
    )


def measured_share(side: Side) -> float:
    """Fraction of an alternative run's attempts whose outcome is a measurement."""
    total = sum(side.sources.values())
    return sum(n for s, n in side.sources.items() if s in MEASURED) / total if total else 1.0
