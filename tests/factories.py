"""Builders shared by the routing unit tests: providers, policies, routing-log events, folds.

Everything here is deterministic: event times are explicit epoch seconds, ids are
derived from their arguments, and routing parameters are always passed
explicitly so that ``CB_*`` / ``BANDIT_*`` variables in the environment running
the tests cannot change an expected value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.config.providers import ProviderConfig, deployment_id
from app.config.schema import Budget, RouteConfig, RoutingConfig
from app.contract import (
    AttemptFinished,
    ChatMessage,
    ChatRequest,
    Decision,
    Dispatch,
    ErrorBody,
    LogPosition,
    Outcome,
    RequestAccepted,
    Response,
    RouteTick,
    RoutingLogEvent,
    StatusClass,
    derived_id,
    route_of,
)
from app.routing.driver import Driver
from app.routing.fold import Step, at
from app.routing.params import RoutingParams, Strategy
from app.routing.policy import Policy
from app.routing.rows import to_row
from app.routing.state import ArmState, Breaker, BreakerPhase, RouteState

#: A fixed, recognisable epoch (2023-11-14T22:13:20Z) all test times are offsets of.
T0 = 1_700_000_000.0
SECRET = "fake-test-SECRET-0123456789abcdef"
ROUTE = "chat"

#: The routing parameters' defaults, spelled out (never read from the environment).
SEED_DEFAULTS: dict[str, Any] = {
    "strategy": Strategy.UCB1,
    "exploration_bonus": 2**0.5,
    "cost_weight": 0.1,
    "latency_weight": 0.15,
    "cb_failure_threshold": 5,
    "cb_timeout_s": 60.0,
    "cb_half_open_max_calls": 3,
    "max_attempts": 3,
}


# --------------------------------------------------------------------------- config


def provider(pid: str, *, model: str = "m1", **fields: Any) -> ProviderConfig:
    data: dict[str, Any] = {
        "id": pid,
        "base_url": f"https://{pid}.example.test/v1",
        "api_key": SECRET,
        "models": [{"name": model}],
    }
    data.update(fields)
    return ProviderConfig.model_validate(data)


def routing_config(
    *providers: ProviderConfig,
    routes: dict[str, list[str]] | None = None,
    default_route: str = ROUTE,
) -> RoutingConfig:
    return RoutingConfig(
        providers=list(providers),
        routes={name: RouteConfig(providers=ids) for name, ids in (routes or {}).items()},
        default_route=default_route,
    )


def params(**overrides: Any) -> RoutingParams:
    """RoutingParams from field names (the class only accepts its env-var aliases)."""
    values = {**SEED_DEFAULTS, **overrides}
    fields = RoutingParams.model_fields
    return RoutingParams(**{str(fields[name].validation_alias): v for name, v in values.items()})


def policy(*providers: ProviderConfig, **param_overrides: Any) -> Policy:
    if not providers:
        providers = (provider("cerebras-x"), provider("openai-x"), provider("groq-x"))
    return Policy(routing_config(*providers), params(**param_overrides))


def dep(pid: str, model: str = "m1") -> str:
    """Deployment id of ``pid``'s (default) model."""
    return deployment_id(pid, model)


# --------------------------------------------------------------------------- state


def arm(
    pulls: int = 0,
    mean: float = 0.0,
    *,
    latency: float = 5.0,
    in_flight: int = 0,
    breaker: Breaker | None = None,
    **fields: Any,
) -> ArmState:
    return ArmState(
        pulls=pulls,
        total_reward=mean * pulls,
        avg_latency_s=latency,
        latency_samples=pulls,
        in_flight=in_flight,
        breaker=breaker or Breaker(),
        **fields,
    )


def open_breaker(last_failure_time: float, failures: int = 5) -> Breaker:
    return Breaker(state=BreakerPhase.OPEN, failures=failures, last_failure_time=last_failure_time)


def route_state(
    arms: Mapping[str, ArmState] | None = None, clock: float = T0, position: int = 0
) -> RouteState:
    return RouteState(clock=clock, position=position, arms=dict(arms or {}))


# --------------------------------------------------------------------------- events


def accepted(
    request_id: str,
    t: float = T0,
    *,
    route: str = ROUTE,
    content: str = "hello",
    offset: int = 0,
) -> RequestAccepted:
    request = ChatRequest(
        request_id=request_id, messages=[ChatMessage(role="user", content=content)]
    )
    return RequestAccepted(
        id=derived_id("accepted", request_id),
        occurred_at=at(t),
        request=request,
        route=route,
        prompt_sha256=hashlib.sha256(content.encode()).hexdigest(),
        prompt_chars=len(content),
        # One source partition per request id: requests are independent, and a copy of
        # the same request (same id, same offset) is recognised as one.
        source=LogPosition(
            topic="llm.requests", partition=_partition_of(request_id), offset=offset
        ),
    )


def _partition_of(request_id: str) -> int:
    return int(hashlib.sha256(request_id.encode()).hexdigest()[:6], 16)


# --------------------------------------------------------------------------- a dispatch


def accepted_request(
    request: ChatRequest, when: datetime, *, prompt_chars: int, offset: int
) -> RequestAccepted:
    """``request`` accepted on the route at ``when`` from offset ``offset`` of
    ``llm.requests`` partition 0 (a prompt hash of zeros)."""
    return RequestAccepted(
        id=derived_id("accepted", request.request_id),
        occurred_at=when,
        request=request,
        route=ROUTE,
        prompt_sha256="0" * 64,
        prompt_chars=prompt_chars,
        source=LogPosition(topic="llm.requests", partition=0, offset=offset),
    )


def decision_for(
    request_id: str, deployment: str, when: datetime, *, attempt: int = 1, **fields: Any
) -> Decision:
    """A ``ucb1`` decision of ``deployment`` without candidates (``fields`` override)."""
    provider_id, _, model = deployment.partition(":")
    values: dict[str, Any] = {
        "id": derived_id("decision", request_id, attempt),
        "occurred_at": when,
        "request_id": request_id,
        "attempt": attempt,
        "route": ROUTE,
        "deployment": deployment,
        "provider": provider_id,
        "model": model,
        "strategy": "ucb1",
        "algorithm_version": "1",
        "candidates": [],
        "excluded": [],
        "config_hash": "abc",
        "propensity": 1.0,
        "prompt_sha256": "0" * 64,
    }
    return Decision(**{**values, **fields})


def dispatch_for(
    accepted: RequestAccepted,
    decision: Decision,
    when: datetime,
    *,
    max_attempts: int = 3,
    **fields: Any,
) -> Dispatch:
    """The dispatch of ``decision`` (``fields``: its timeout, deadline, ...)."""
    return Dispatch(
        id=derived_id("dispatch", decision.request_id, decision.attempt),
        occurred_at=when,
        decision=decision,
        accepted=accepted,
        max_attempts=max_attempts,
        **fields,
    )


#: Typical HTTP status of each class (None where there is no response).
HTTP_STATUS: dict[StatusClass, int | None] = {
    StatusClass.SUCCESS: 200,
    StatusClass.CLIENT_ERROR: 400,
    StatusClass.AUTH_ERROR: 401,
    StatusClass.RATE_LIMITED: 429,
    StatusClass.SERVER_ERROR: 503,
    StatusClass.TIMEOUT: None,
    StatusClass.CONNECTION_ERROR: None,
    StatusClass.BAD_RESPONSE: 200,
    StatusClass.EXPIRED: None,
}


def outcome(
    request_id: str,
    deployment: str,
    t: float = T0,
    *,
    attempt: int = 1,
    status: StatusClass = StatusClass.SUCCESS,
    http_status: int | str | None = "auto",
    latency_ms: float = 1000.0,
    reward: float | None = None,
    final: bool = True,
    retriable: bool = False,
    route: str = ROUTE,
) -> Outcome:
    provider_id, _, model = deployment.partition(":")
    return Outcome(
        id=derived_id("outcome", request_id, attempt),
        occurred_at=at(t),
        request_id=request_id,
        attempt=attempt,
        route=route,
        deployment=deployment,
        provider=provider_id,
        model=model,
        decision_id=derived_id("decision", request_id, attempt),
        status_class=status,
        http_status=HTTP_STATUS[status] if http_status == "auto" else http_status,  # type: ignore[arg-type]
        latency_ms=latency_ms,
        reward=(1.0 if status is StatusClass.SUCCESS else 0.0) if reward is None else reward,
        retriable=retriable,
        final=final,
    )


def finished(
    result: Outcome,
    *,
    tried: Sequence[str] | None = None,
    retry: RequestAccepted | None = None,
) -> AttemptFinished:
    return AttemptFinished(
        id=derived_id("finished", result.request_id, result.attempt),
        occurred_at=result.occurred_at,
        outcome=result,
        tried=list(tried) if tried is not None else [result.deployment],
        retry=retry,
    )


def finish(
    request_id: str,
    deployment: str,
    t: float = T0,
    **outcome_fields: Any,
) -> AttemptFinished:
    """A final AttemptFinished without retry."""
    return finished(outcome(request_id, deployment, t, **outcome_fields))


# --------------------------------------------------------------------------- fold


@dataclass
class Folded:
    state: RouteState
    steps: list[Step] = field(default_factory=list)
    #: The driver that folded them: pass this Folded to ``fold`` to go on with its memory.
    driver: Driver | None = None

    @property
    def dispatches(self) -> list[Dispatch]:
        return [d for s in self.steps for d in s.dispatches]

    @property
    def decisions(self) -> list[Decision]:
        return [d.decision for d in self.dispatches]

    @property
    def responses(self) -> list[Response]:
        return [r for s in self.steps for r in s.responses]

    def refusal(self) -> ErrorBody:
        """The error of the one response, no call dispatched: the request was refused."""
        assert self.dispatches == []
        (response,) = self.responses
        assert response.error is not None
        return response.error


def fold(
    events: Iterable[AttemptFinished | RequestAccepted | RouteTick],
    pol: Policy,
    state: RouteState | Folded | None = None,
    start: int | None = None,
    log: Mapping[int, RoutingLogEvent] | None = None,
) -> Folded:
    """Fold events in order with the live driver; positions continue from the state's.

    Given a :class:`Folded`, go on with its driver (it holds the events waiting
    requests are in); given a bare state, a new driver starts from it.
    """
    if isinstance(state, Folded):
        current, driver = state.state, state.driver
    else:
        current, driver = state or RouteState(), None
    if driver is None:
        driver = Driver(lambda: pol)
    position = current.position + 1 if start is None else start
    result = Folded(current, driver=driver)
    for event in events:
        driver.states[route_of(event)] = result.state
        step = driver.fold(event, position, log)
        result.steps.append(step)
        result.state = step.state
        position += 1
    return result


def failed_first(
    pol: Policy, request: RequestAccepted, t: float, status: StatusClass, **update: Any
) -> tuple[Folded, Outcome, Folded]:
    """``request`` folded, then its first attempt failing at ``t`` with ``status``,
    retriable and not final (``update``: more fields of the outcome): the fold of the
    request, the outcome and the fold of its attempt's end."""
    first = fold([request], pol)
    failed = outcome(
        request.request.request_id,
        first.decisions[0].deployment,
        t,
        status=status,
        retriable=True,
        final=False,
    ).model_copy(update=update)
    return first, failed, fold([finished(failed, retry=request)], pol, first)


# --------------------------------------------------------------------------- three-arm route


A, B, C = dep("a"), dep("b"), dep("c")


def abc(**param_overrides: Any) -> Policy:
    """A route over deployments a, b and c (a with a 12 s timeout)."""
    return policy(provider("a", timeout_ms=12_000), provider("b"), provider("c"), **param_overrides)


def budgeted_fallbacks(usd_per_day: float = 0.05, *, cost_weight: float = 0.1) -> Policy:
    """Budgets and a dynamic route: deployments ``a``, ``b``, ``c`` (1, 2, 3 dollars per
    million input tokens, 4, 5, 6 per million output), route ``chat`` (a, b) spending at
    most ``usd_per_day`` a day, route ``cheap`` (c), and tenant acme's requests sent to
    ``cheap`` first, ``chat`` after (dynamic route ``g``)."""
    graph: dict[str, Any] = {
        "bind": [{"tenant": "acme"}],
        "start": "main",
        "nodes": {"main": {"kind": "model", "target": "cheap", "fallback_models": ["chat"]}},
    }
    config = RoutingConfig(
        providers=[
            provider(p, cost_per_mtok_input=1.0 + i, cost_per_mtok_output=4.0 + i)
            for i, p in enumerate("abc")
        ],
        routes={
            "chat": RouteConfig(providers=["a", "b"]),
            "cheap": RouteConfig(providers=["c"]),
        },
        budgets=[Budget(scope="route", name="chat", usd_per_day=usd_per_day)],
        dynamic_routes={"g": graph},  # type: ignore[arg-type]
    )
    return Policy(config, params(cost_weight=cost_weight))


def without_position(state: RouteState) -> dict[str, Any]:
    """A route's row without its log position (two folds that differ only there)."""
    dumped = to_row(state)
    dumped.pop("position")
    return dumped
