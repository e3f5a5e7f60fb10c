"""The discrete-event simulation: requests arrive, a router decides, the world answers.

Time is simulated (no sleeping, no wall clock): an event queue ordered by time,
ties broken by a sequence number, so a run is a deterministic function of
(scenario, policy, requests, seed).

* Request ``i`` arrives at ``i · duration / requests``, is accepted by the
  ingest's pure function (:func:`app.ingest.accept`: validation, features,
  domain) with the simulated clock as its time, and is folded through the router
  as that ``RequestAccepted``; routing-log positions increase by one per event.
* Each attempt the router starts is answered by the world (``World.call``) from a
  generator seeded by (run seed, request, attempt) — not by deployment: common
  random numbers, coupled across deployments (a draw that makes one deployment
  slow or its answer rejected does the same, relative to its own distribution,
  on any other). Each deployment's own distribution is unchanged; regret
  between policies loses most of its noise. The call gets the executor's budget
  and blame (:mod:`app.execution.outcome`: the provider timeout cut at the request
  deadline; a call the deadline cut short, or one whose deadline had passed, is
  ``expired``). Its ``AttemptFinished`` is folded back at completion time, built
  by the executor's own :func:`app.execution.outcome.finish` from the router's
  ``Dispatch`` (a stand-in one for the simulator-only baselines), the one
  difference being the reward of a success: 1.0 when its user accepted it, 0.0
  when not (the simulated verdict; the live router learns it from grades).
  Fallbacks are whatever the router answers to that feedback.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from app.config.providers import ProviderConfig
from app.contract import (
    AttemptFinished,
    Decision,
    Dispatch,
    Outcome,
    RequestAccepted,
    StatusClass,
    derived_id,
)
from app.execution.outcome import (
    CallResult,
    blame_deadline,
    call_budget_s,
    deadline_passed,
    finish,
)
from app.routing.fold import at
from app.routing.policy import Policy
from bench.ingested import admitted, ingest
from bench.sim import policies
from bench.sim.routers import Choice, Router
from bench.sim.scenarios import ROUTE, prompt_for
from bench.sim.world import ORIGIN, Call, Scenario, World, utility

#: Time bins of the share-per-deployment series.
SHARE_BINS = 48


@dataclass
class _Request:
    index: int
    seed: int
    arrived: float
    domain: str | None
    event: RequestAccepted
    tried: list[str] = field(default_factory=list)
    cost: float = 0.0
    done: bool = False


@dataclass(frozen=True, slots=True)
class _Start:
    request: _Request
    choice: Choice


@dataclass(frozen=True, slots=True)
class _Completion:
    request: _Request
    choice: Choice
    result: CallResult
    #: Whether the user accepted the answer (a success's simulated verdict).
    accepted: bool
    started: float


@dataclass
class RunResult:
    scenario: str
    policy: str
    requests: int
    #: Utility of each request, by arrival index.
    utility: list[float]
    #: Requests answered successfully / accepted by their user / ended in error.
    answered: int = 0
    accepted: int = 0
    failed: int = 0
    first_try_ok: int = 0
    attempts: int = 0
    cost_usd: float = 0.0
    #: End-to-end latency of each answered request (ms).
    latencies_ms: list[float] = field(default_factory=list)
    #: Attempts started per deployment, per time bin.
    share: dict[str, list[int]] = field(default_factory=dict)
    detection_s: float | None = None
    recovery_s: float | None = None
    #: Attempts started on the incident's deployment while it was down.
    incident_attempts: int = 0
    #: The routing log as folded (only when asked for).
    log: list[RequestAccepted | AttemptFinished] | None = None


class _Run:
    def __init__(
        self, scenario: Scenario, policy: str, requests: int, seed: int, record: bool
    ) -> None:
        if requests < 1:
            raise ValueError("requests must be >= 1")
        self.scenario = scenario
        self.requests = requests
        self.seed = seed
        self.interval = scenario.duration_s / requests
        self.world = World(scenario, requests / scenario.duration_s)
        self.router: Router = policies.build_router(policy, self.world, scenario)
        self.policy = policy
        self.max_attempts = Policy(scenario.config, policies.params_of(policy)).max_attempts(ROUTE)
        self.rng = random.Random(f"switchyard-bench/{seed}/{scenario.id}")
        self.queue: list[tuple[float, int, int | _Start | _Completion]] = []
        self.by_id: dict[str, _Request] = {}
        self.sequence = 0
        self.result = RunResult(scenario.id, policy, requests, [0.0] * requests)
        self.result.share = {t.deployment: [0] * SHARE_BINS for t in scenario.truths}
        if record:
            self.result.log = []

    def push(self, t: float, item: int | _Start | _Completion) -> None:
        heapq.heappush(self.queue, (t, self.sequence, item))
        self.sequence += 1

    def fold(self, event: RequestAccepted | AttemptFinished) -> list[Choice]:
        if self.result.log is not None:
            self.result.log.append(event)
        return self.router.fold(event)

    def run(self) -> RunResult:
        self.push(0.0, 0)
        while self.queue:
            t, _, item = heapq.heappop(self.queue)
            if isinstance(item, int):
                if item + 1 < self.requests:
                    self.push((item + 1) * self.interval, item + 1)
                self.arrive(item, t)
            elif isinstance(item, _Start):
                self.start(item.request, item.choice, t)
            else:
                self.complete(item, t)
        return self.result

    # -- arrivals -----------------------------------------------------------------

    def arrive(self, index: int, t: float) -> None:
        domains = self.scenario.domains
        domain = domains[self.rng.randrange(len(domains))] if domains else None
        seed = self.rng.getrandbits(64)
        request_id = f"{self.scenario.id}-{self.seed}-{index:07d}"
        raw = {
            "request_id": request_id,
            "model": ROUTE,
            "messages": [{"role": "user", "content": prompt_for(domain)}],
            "metadata": {"domain": domain} if domain else {},
        }
        # What the ingest agent does with the record: the same pure function.
        event = admitted(ingest(raw, index, at(ORIGIN + t), self.scenario.config))
        request = _Request(index, seed, t, domain, event)
        self.by_id[event.request.request_id] = request
        choices = self.fold(event)
        self.unless_routed(request, choices, t)
        self.decided(choices, t)

    def unless_routed(self, request: _Request, choices: list[Choice], t: float) -> None:
        """No attempt for this request and none waiting: its last error stands."""
        request_id = request.event.request.request_id
        routed = any(c.request_id == request_id for c in choices)
        if not routed and not self.router.waiting(request_id):
            self.finish(request, t, None)

    def decided(self, choices: list[Choice], t: float) -> None:
        """Start the attempts the router dispatched (a waiting request's included), and
        end the requests it answered without an attempt (a wait that reached its deadline)."""
        for request_id in self.router.answered():
            self.finish(self.by_id[request_id], t, None)
        incident = self.scenario.incident
        for choice in choices:
            request = self.by_id[choice.request_id]
            if (
                incident is not None
                and self.result.detection_s is None
                and t >= incident.start_s
                and incident.deployment in choice.excluded
            ):
                self.result.detection_s = t - incident.start_s
            # The executor waits out the backoff before it calls.
            self.push(max(t, choice.not_before - ORIGIN), _Start(request, choice))

    def start(self, request: _Request, choice: Choice, t: float) -> None:
        """The executor's call: within the provider timeout and the request's deadline."""
        timeout_s = self.world.provider(choice.deployment).timeout_ms / 1000.0
        left_s = choice.deadline - ORIGIN - t
        if left_s <= 0.0:
            call, result = Call(StatusClass.EXPIRED, None, 0.0), deadline_passed()
        else:
            rng = random.Random(f"{request.seed}/{choice.attempt}")
            budget_ms = call_budget_s(timeout_s, left_s) * 1000.0
            call = self.world.call(choice.deployment, t, rng, request.domain, budget_ms)
            result = blame_deadline(result_of(call), timeout_s=timeout_s, left_s=left_s)
        self.result.attempts += 1
        request.cost += call.cost_usd
        bin_index = min(SHARE_BINS - 1, int(t / self.scenario.duration_s * SHARE_BINS))
        self.result.share[choice.deployment][bin_index] += 1
        incident = self.scenario.incident
        if (
            incident is not None
            and choice.deployment == incident.deployment
            and incident.start_s <= t < incident.end_s
        ):
            self.result.incident_attempts += 1
        completion = _Completion(request, choice, result, call.accepted, t)
        self.push(t + result.latency_ms / 1000.0, completion)

    # -- completions --------------------------------------------------------------

    def complete(self, done: _Completion, t: float) -> None:
        request, choice = done.request, done.choice
        dispatch = choice.dispatch or self.stand_in(request, choice)
        provider = self.world.provider(choice.deployment)
        outcome, finished = simulated_finish(dispatch, done.result, done.accepted, provider, t)
        final = outcome.final
        request.tried.append(choice.deployment)
        success = outcome.status_class is StatusClass.SUCCESS
        if choice.attempt == 1 and success:
            self.result.first_try_ok += 1
        incident = self.scenario.incident
        if (
            success
            and incident is not None
            and self.result.recovery_s is None
            and choice.deployment == incident.deployment
            and done.started >= incident.end_s
        ):
            self.result.recovery_s = t - incident.end_s
        choices = self.fold(finished)
        if final:
            self.finish(request, t, done)
        else:
            self.unless_routed(request, choices, t)
        self.decided(choices, t)

    def stand_in(self, request: _Request, choice: Choice) -> Dispatch:
        """The dispatch a simulator-only baseline would have sent (no trace of its choice)."""
        request_id, attempt = choice.request_id, choice.attempt
        provider, _, model = choice.deployment.partition(":")
        occurred_at = at(ORIGIN + request.arrived)
        decision = Decision(
            id=derived_id("decision", request_id, attempt),
            occurred_at=occurred_at,
            request_id=request_id,
            attempt=attempt,
            route=ROUTE,
            deployment=choice.deployment,
            provider=provider,
            model=model,
            strategy=self.policy,
            algorithm_version="baseline",
            candidates=[],
            excluded=[],
            config_hash="",
            state_version=-1,
            propensity=1.0,
            prompt_sha256="",
            prompt_chars=0,
        )
        return Dispatch(
            id=derived_id("dispatch", request_id, attempt),
            occurred_at=occurred_at,
            decision=decision,
            accepted=request.event,
            timeout_s=self.world.provider(choice.deployment).timeout_ms / 1000.0,
            max_attempts=self.max_attempts,
            not_before=choice.not_before,
            deadline=choice.deadline,
            tried=list(request.tried),
        )

    def finish(self, request: _Request, t: float, last: _Completion | None) -> None:
        if request.done:
            return
        request.done = True
        success = last is not None and last.result.status_class is StatusClass.SUCCESS
        accepted = success and last is not None and last.accepted
        latency_s = t - request.arrived
        result = self.result
        result.answered += success
        result.accepted += accepted
        result.failed += not success
        result.cost_usd += request.cost
        if success:
            result.latencies_ms.append(latency_s * 1000.0)
        result.utility[request.index] = utility(accepted, request.cost, latency_s, not success)


def simulate(
    scenario: Scenario, policy: str, requests: int, seed: int, *, record_log: bool = False
) -> RunResult:
    """Run ``requests`` requests of ``scenario`` through ``policy``."""
    return _Run(scenario, policy, requests, seed, record_log).run()


def result_of(call: Call) -> CallResult:
    """What the executor would have measured of a simulated call."""
    return CallResult(
        call.status,
        call.http_status,
        call.latency_ms,
        tokens_in=call.tokens_in,
        tokens_out=call.tokens_out,
        retry_after_s=call.retry_after_s,
    )


def simulated_finish(
    dispatch: Dispatch, result: CallResult, accepted: bool, provider: ProviderConfig, t: float
) -> tuple[Outcome, AttemptFinished]:
    """The executor's outcome and feedback of the call, a success's reward its user's verdict."""
    return finish(
        dispatch, result, provider, occurred_at=at(ORIGIN + t), judged=1.0 if accepted else 0.0
    )
