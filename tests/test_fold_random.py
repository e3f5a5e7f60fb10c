"""The router as a pure fold under random event sequences: invariants, determinism, JSON."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from factories import (
    T0,
    A,
    B,
    C,
    abc,
    accepted,
    arm,
    finished,
    fold,
    open_breaker,
    outcome,
    policy,
    provider,
    route_state,
)

from app.contract import (
    AttemptFinished,
    Decision,
    Dispatch,
    RequestAccepted,
    StatusClass,
)
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.reliability import is_retriable
from app.routing.rows import dumps, loads, to_row
from app.routing.select import select
from app.routing.state import BreakerPhase, RouteState, attempt_key

# --------------------------------------------------------------------------- random folds


STATUSES = [
    StatusClass.SUCCESS,
    StatusClass.SUCCESS,
    StatusClass.SUCCESS,
    StatusClass.SERVER_ERROR,
    StatusClass.RATE_LIMITED,
    StatusClass.TIMEOUT,
    StatusClass.CLIENT_ERROR,
    StatusClass.AUTH_ERROR,
    StatusClass.CONNECTION_ERROR,
]


def random_policy(**param_overrides: Any) -> Policy:
    return policy(
        provider("cerebras-x", max_concurrency=3, timeout_ms=2_000),
        provider("openai-x"),
        provider("groq-x", max_concurrency=2),
        provider("unknownco-y", timeout_ms=5_000),
        cb_failure_threshold=3,
        cb_timeout_s=7.5,
        **param_overrides,
    )


def simulate(pol: Policy, n: int, seed: int) -> tuple[list[Any], list[RouteState]]:
    """Drive the fold with random traffic: new requests, outcomes (retried or not), duplicates
    and events stamped in the past. Returns the events and the state after each of them."""
    rng = random.Random(seed)
    events: list[RequestAccepted | AttemptFinished] = []
    states: list[RouteState] = []
    dispatches: dict[str, Dispatch] = {}
    state = RouteState()
    driver = Driver(lambda: pol)
    t = T0
    for i in range(n):
        t += rng.choice([0.0, 0.001, 0.37, 1.1, 2.9, 4.3])
        stamp = t - rng.choice([0.0, 0.0, 0.0, 3.3])  # sometimes late
        open_keys = sorted(k for k in state.open_attempts if k in dispatches)
        roll = rng.random()
        event: RequestAccepted | AttemptFinished
        if roll < 0.08 and events:
            event = rng.choice(events)  # duplicate delivery
        elif roll < 0.45 or not open_keys:
            event = accepted(f"req-{i}", stamp, content="x" * rng.randint(1, 50))
        else:
            d = dispatches[rng.choice(open_keys)]
            status = rng.choice(STATUSES)
            http = {
                StatusClass.SERVER_ERROR: rng.choice([500, 501, 502, 503, 504]),
                StatusClass.CLIENT_ERROR: rng.choice([400, 413]),
                StatusClass.AUTH_ERROR: rng.choice([401, 402, 404]),
            }.get(status, "auto")
            retriable = is_retriable(status, None if http == "auto" else http)  # type: ignore[arg-type]
            attempt = d.decision.attempt
            final = not retriable or attempt >= d.max_attempts or rng.random() < 0.2
            result = outcome(
                d.decision.request_id,
                d.decision.deployment,
                stamp,
                attempt=attempt,
                status=status,
                http_status=http,
                latency_ms=rng.uniform(20.0, 40_000.0),
                reward=rng.random() if status is StatusClass.SUCCESS else 0.0,
                retriable=retriable,
                final=final,
            )
            event = finished(
                result,
                tried=[*d.tried, d.decision.deployment],
                retry=None if final else d.accepted,
            )
        step = driver.fold(event, i)
        for dispatch in step.dispatches:
            dispatches[attempt_key(dispatch.decision.request_id, dispatch.decision.attempt)] = (
                dispatch
            )
        assert step.state.clock >= state.clock
        state = step.state
        events.append(event)
        states.append(state)
    return events, states


def _check_invariants(state: RouteState) -> None:
    open_per_deployment = Counter(a.deployment for a in state.open_attempts.values())
    for deployment, arm_state in state.arms.items():
        assert arm_state.in_flight == open_per_deployment[deployment], deployment
        assert arm_state.alpha + arm_state.beta == 2.0 + arm_state.pulls
        assert arm_state.rate_limited >= 0  # 429s are counted apart, not pulls
        assert arm_state.latency_samples <= arm_state.pulls
        assert arm_state.breaker.failures >= 0
    assert set(open_per_deployment) <= set(state.arms)


@pytest.mark.parametrize("strategy", ["ucb1", "thompson", "composite"])
def test_random_fold_state_round_trips_through_json(strategy: str) -> None:
    pol = random_policy(strategy=strategy)
    events, states = simulate(pol, 400, seed=20240601)
    assert any(isinstance(e, AttemptFinished) and e.retry for e in events)
    final = states[-1]
    assert sum(a.pulls for a in final.arms.values()) > 50
    assert any(a.breaker.state is not BreakerPhase.CLOSED for s in states for a in s.arms.values())
    for state in states:
        restored = loads(dumps(state))
        assert restored == state
        assert to_row(restored) == to_row(state)
        _check_invariants(state)


@pytest.mark.parametrize("strategy", ["ucb1", "thompson", "composite"])
def test_fold_is_deterministic(strategy: str) -> None:
    pol = random_policy(strategy=strategy)
    events, states = simulate(pol, 300, seed=7)
    one = fold(events, pol)
    two = fold(events, pol)
    assert one.state == two.state == states[-1]
    assert [s.state for s in one.steps] == states
    assert [d.model_dump() for d in one.dispatches] == [d.model_dump() for d in two.dispatches]
    assert [r.model_dump() for r in one.responses] == [r.model_dump() for r in two.responses]
    assert [s.applied for s in one.steps] == [s.applied for s in two.steps]
    assert len(one.dispatches) > 100
    for decision in one.decisions:
        assert isinstance(decision, Decision)
        assert Decision.model_validate_json(decision.model_dump_json()) == decision
    # Decisions record the position they were computed at.
    for position, step in enumerate(one.steps):
        for dispatch in step.dispatches:
            assert dispatch.decision.state_version == position


def test_fold_resumed_from_json_matches_straight_fold() -> None:
    pol = random_policy()
    events, states = simulate(pol, 240, seed=99)
    half = fold(events[:120], pol)
    restored = loads(dumps(half.state))
    # A new driver, as after a restart: what waits is read back from the log.
    log = dict(enumerate(events))
    rest = fold(events[120:], pol, restored, log=log)
    assert rest.state == states[-1]
    straight = fold(events, pol)
    assert [d.model_dump() for d in half.dispatches + rest.dispatches] == [
        d.model_dump() for d in straight.dispatches
    ]


def test_different_config_hash_for_different_params() -> None:
    assert abc().config_hash == abc().config_hash
    assert abc().config_hash != abc(cost_weight=0.2).config_hash
    assert abc().config_hash != policy(provider("a"), provider("b")).config_hash


def test_select_is_pure() -> None:
    pol = abc()
    state = route_state({A: arm(3, 0.5, breaker=open_breaker(T0)), B: arm(2, 0.1)}, T0 + 100)
    before = to_row(state)
    first = select(state, "chat", "r", 1, [], pol)
    second = select(state, "chat", "r", 1, [], pol)
    assert to_row(state) == before
    assert first == second
    assert first.chosen is not None
    assert first.chosen.deployment == C  # never pulled
