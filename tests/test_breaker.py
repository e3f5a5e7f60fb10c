"""The circuit breaker (docs/design.md#circuit-breaker), with explicit event times.

The reliability accounting is in test_reliability_accounting.py.
"""

from __future__ import annotations

import os

import pytest
from factories import (
    SEED_DEFAULTS,
    T0,
    accepted,
    arm,
    dep,
    finish,
    fold,
    open_breaker,
    policy,
    provider,
    route_state,
    routing_config,
)
from pydantic import ValidationError

from app.contract import AttemptFinished, RequestAccepted, StatusClass
from app.routing import breaker as cb
from app.routing.breaker import BreakerParams
from app.routing.params import RoutingParams, Strategy, params_from_env
from app.routing.policy import Policy
from app.routing.select import select
from app.routing.state import BREAKER_GAUGE, Breaker, BreakerPhase

P = BreakerParams()  # seed defaults: 5 failures, 60 s, 3 successes
CLOSED, HALF_OPEN, OPEN = BreakerPhase.CLOSED, BreakerPhase.HALF_OPEN, BreakerPhase.OPEN
ROUTING_ENV = [
    "BANDIT_STRATEGY",
    "BANDIT_EXPLORATION_BONUS",
    "BANDIT_COST_WEIGHT",
    "BANDIT_LATENCY_WEIGHT",
    "CB_FAILURE_THRESHOLD",
    "CB_TIMEOUT_S",
    "CB_HALF_OPEN_MAX_CALLS",
    "SWITCHYARD_MAX_ATTEMPTS",
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ROUTING_ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def failures(n: int, start: float = T0, step: float = 1.0, b: Breaker | None = None) -> Breaker:
    b = b or Breaker()
    for i in range(n):
        b = cb.on_failure(b, start + i * step, P)
    return b


# --------------------------------------------------------------------------- parameters


def worker_params() -> RoutingParams:
    """The parameters a worker starting here reads from its environment (the fold never
    reads it: tests/test_core_purity.py)."""
    return params_from_env(os.environ)


def test_defaults_are_the_seed_values(clean_env: pytest.MonkeyPatch) -> None:
    p = RoutingParams()
    assert p.cb_failure_threshold == 5
    assert p.cb_timeout_s == 60.0
    assert p.cb_half_open_max_calls == 3
    assert p.strategy is Strategy.UCB1
    assert p.exploration_bonus == pytest.approx(1.4142, abs=1e-4)
    assert p.cost_weight == 0.1
    assert p.latency_weight == 0.15
    assert Policy(routing_config(provider("a")), p).breaker == BreakerParams(5, 60.0, 3)
    assert BreakerParams() == BreakerParams(
        failure_threshold=5, timeout_s=60.0, half_open_max_calls=3
    )
    assert {k: getattr(p, k) for k in SEED_DEFAULTS} == pytest.approx(SEED_DEFAULTS)


def test_env_vars_override(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CB_FAILURE_THRESHOLD", "2")
    clean_env.setenv("CB_TIMEOUT_S", "10.5")
    clean_env.setenv("CB_HALF_OPEN_MAX_CALLS", "1")
    clean_env.setenv("BANDIT_STRATEGY", "thompson")
    clean_env.setenv("BANDIT_EXPLORATION_BONUS", "2.0")
    clean_env.setenv("BANDIT_COST_WEIGHT", "0.3")
    clean_env.setenv("BANDIT_LATENCY_WEIGHT", "0.05")
    p = worker_params()
    assert p.cb_failure_threshold == 2
    assert p.cb_timeout_s == 10.5
    assert p.cb_half_open_max_calls == 1
    assert p.strategy is Strategy.THOMPSON
    assert p.exploration_bonus == 2.0
    assert p.cost_weight == 0.3
    assert p.latency_weight == 0.05
    assert Policy(routing_config(provider("a")), p).breaker == BreakerParams(2, 10.5, 1)


def test_test_factories_ignore_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CB_FAILURE_THRESHOLD", "2")
    clean_env.setenv("BANDIT_COST_WEIGHT", "0.9")
    assert policy().breaker == BreakerParams(5, 60.0, 3)
    assert policy().params.cost_weight == 0.1


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CB_FAILURE_THRESHOLD", "0"),
        ("CB_TIMEOUT_S", "0"),
        ("CB_HALF_OPEN_MAX_CALLS", "0"),
        ("BANDIT_STRATEGY", "epsilon"),
        ("BANDIT_EXPLORATION_BONUS", "-1"),
    ],
)
def test_invalid_env_values_rejected(clean_env: pytest.MonkeyPatch, name: str, value: str) -> None:
    clean_env.setenv(name, value)
    with pytest.raises(ValidationError):
        worker_params()


def test_env_overrides_drive_the_fold(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CB_FAILURE_THRESHOLD", "2")
    clean_env.setenv("CB_TIMEOUT_S", "10")
    clean_env.setenv("CB_HALF_OPEN_MAX_CALLS", "1")
    clean_env.setenv("SWITCHYARD_MAX_PARKED", "0")  # refuse instead of waiting (test_parking)
    pol = Policy(routing_config(provider("a")), worker_params())
    a = dep("a")
    run = fold(
        [
            accepted("r1", T0),
            finish("r1", a, T0 + 1, status=StatusClass.SERVER_ERROR),
            accepted("r2", T0 + 2),
            finish("r2", a, T0 + 3, status=StatusClass.SERVER_ERROR),
        ],
        pol,
    )
    assert run.state.arm(a).breaker == open_breaker(T0 + 3, failures=2)
    blocked = fold([accepted("r3", T0 + 13)], pol, run.state)  # exactly 10 s: still OPEN
    assert blocked.dispatches == []
    assert blocked.responses[0].error is not None
    assert "breaker_open" in blocked.responses[0].error.message
    probe = fold([accepted("r4", T0 + 13.5)], pol, blocked.state)
    assert probe.decisions[0].deployment == a
    assert probe.state.arm(a).breaker.state is HALF_OPEN
    closed = fold([finish("r4", a, T0 + 14)], pol, probe.state)
    assert closed.state.arm(a).breaker == Breaker()  # one success is enough


def test_env_threshold_two_opens_after_two_failures(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CB_FAILURE_THRESHOLD", "2")
    clean_env.setenv("CB_TIMEOUT_S", "10")
    clean_env.setenv("CB_HALF_OPEN_MAX_CALLS", "1")
    p = Policy(routing_config(provider("a")), worker_params()).breaker
    b = cb.on_failure(Breaker(), T0, p)
    assert b.state is CLOSED
    b = cb.on_failure(b, T0 + 1, p)
    assert b.state is OPEN
    assert cb.on_clock(b, T0 + 11, p).state is OPEN  # exactly 10 s: not yet
    half = cb.on_clock(b, T0 + 11.01, p)
    assert half.state is HALF_OPEN
    assert cb.on_success(half, p) == Breaker()  # one probe success is enough


# --------------------------------------------------------------------------- transitions


def test_closed_to_open_after_five_failures() -> None:
    b = failures(4, start=T0)
    assert b == Breaker(state=CLOSED, failures=4, last_failure_time=0.0, success_count=0)
    b = cb.on_failure(b, T0 + 10, P)
    assert b == Breaker(state=OPEN, failures=5, last_failure_time=T0 + 10, success_count=0)


def test_open_stays_open_until_more_than_timeout() -> None:
    b = failures(5, start=T0 - 4)  # last failure at T0
    assert b.state is OPEN
    assert b.last_failure_time == T0
    for now in (T0, T0 + 1, T0 + 59.999, T0 + 60.0):
        assert cb.on_clock(b, now, P) is b  # unchanged, same object
    half = cb.on_clock(b, T0 + 60.001, P)
    assert half == Breaker(state=HALF_OPEN, failures=5, last_failure_time=T0, success_count=0)
    assert cb.on_clock(b, T0 + 3600, P).state is HALF_OPEN


def test_on_clock_leaves_closed_and_half_open_alone() -> None:
    closed = Breaker(failures=3, last_failure_time=T0)
    assert cb.on_clock(closed, T0 + 1000, P) is closed
    half = Breaker(state=HALF_OPEN, failures=5, last_failure_time=T0, success_count=2)
    assert cb.on_clock(half, T0 + 1000, P) is half


def test_half_open_three_successes_close_and_reset() -> None:
    half = Breaker(state=HALF_OPEN, failures=5, last_failure_time=T0, success_count=0)
    one = cb.on_success(half, P)
    assert one == Breaker(state=HALF_OPEN, failures=5, last_failure_time=T0, success_count=1)
    two = cb.on_success(one, P)
    assert two.state is HALF_OPEN
    assert two.success_count == 2
    three = cb.on_success(two, P)
    assert three == Breaker(state=CLOSED, failures=0, last_failure_time=0.0, success_count=0)


def test_half_open_one_failure_reopens_with_new_time() -> None:
    half = Breaker(state=HALF_OPEN, failures=5, last_failure_time=T0, success_count=2)
    reopened = cb.on_failure(half, T0 + 75, P)
    assert reopened.state is OPEN
    assert reopened.last_failure_time == T0 + 75
    assert reopened.success_count == 0
    assert reopened.failures == 6
    # The new timeout counts from the new failure.
    assert cb.on_clock(reopened, T0 + 135, P).state is OPEN
    assert cb.on_clock(reopened, T0 + 135.5, P).state is HALF_OPEN


def test_half_open_failure_reopens_even_below_threshold() -> None:
    half = Breaker(state=HALF_OPEN, failures=0, last_failure_time=T0, success_count=0)
    reopened = cb.on_failure(half, T0 + 1, P)
    assert reopened == Breaker(state=OPEN, failures=1, last_failure_time=T0 + 1, success_count=0)


def test_closed_success_decrements_failures_not_below_zero() -> None:
    b = failures(3)
    assert b.failures == 3
    seen = []
    for _ in range(5):
        b = cb.on_success(b, P)
        seen.append(b.failures)
        assert b.state is CLOSED
    assert seen == [2, 1, 0, 0, 0]


def test_self_healing_delays_opening() -> None:
    # 4 failures, 1 success, then it takes 2 more failures (not 1) to open.
    b = failures(4)
    b = cb.on_success(b, P)
    b = cb.on_failure(b, T0 + 10, P)
    assert (b.state, b.failures) == (CLOSED, 4)
    b = cb.on_failure(b, T0 + 11, P)
    assert (b.state, b.failures, b.last_failure_time) == (OPEN, 5, T0 + 11)


def test_success_while_open_changes_nothing() -> None:
    b = failures(5)
    assert cb.on_success(b, P) == b


def test_gauge_encoding() -> None:
    assert BREAKER_GAUGE == {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}


# --------------------------------------------------------------------------- through select / fold


def test_select_excludes_open_breaker_until_timeout_then_persists_half_open() -> None:
    pol = policy(provider("a"), provider("b"))
    a, b = dep("a"), dep("b")
    arms = {a: arm(10, 0.9, breaker=open_breaker(T0)), b: arm(10, 0.1)}

    at_timeout = select(route_state(arms, T0 + 60), "chat", "r", 1, [], pol)
    assert [(e.deployment, e.reason) for e in at_timeout.excluded] == [(a, "breaker_open")]
    assert at_timeout.chosen is not None
    assert at_timeout.chosen.deployment == b
    assert at_timeout.arms == {}

    after = select(route_state(arms, T0 + 60.5), "chat", "r", 1, [], pol)
    assert after.excluded == []
    assert set(after.arms) == {a}
    assert after.arms[a].breaker == Breaker(
        state=HALF_OPEN, failures=5, last_failure_time=T0, success_count=0
    )
    assert after.arms[a].pulls == 10  # only the breaker moved
    assert after.chosen is not None
    assert after.chosen.deployment == a  # mean .9 vs .1


def test_half_open_admits_one_probe_at_a_time() -> None:
    pol = policy(provider("a"), provider("b"))
    a = dep("a")

    def reason(success_count: int, in_flight: int) -> str | None:
        half = Breaker(
            state=HALF_OPEN, failures=5, last_failure_time=T0, success_count=success_count
        )
        state = route_state({a: arm(10, 0.9, breaker=half, in_flight=in_flight)}, T0)
        excluded = {e.deployment: e.reason for e in select(state, "chat", "r", 1, [], pol).excluded}
        return excluded.get(a)

    assert reason(0, 0) is None
    assert reason(0, 1) == "breaker_half_open_probe_in_flight"
    assert reason(2, 0) is None
    assert reason(2, 1) == "breaker_half_open_probe_in_flight"


def test_full_breaker_lifecycle_through_fold() -> None:
    pol = policy(provider("a"), max_parked=0)  # refuse instead of waiting (test_parking)
    a = dep("a")
    events: list[RequestAccepted | AttemptFinished] = []
    t = T0
    # Five requests, each fails with a 503 (final, no retry): the 5th opens the breaker.
    for i in range(5):
        events += [
            accepted(f"f{i}", t),
            finish(f"f{i}", a, t + 1, status=StatusClass.SERVER_ERROR),
        ]
        t += 2
    run = fold(events, pol)
    last_failure = T0 + 9  # the 5th AttemptFinished
    assert run.state.arm(a).breaker == open_breaker(last_failure)
    assert len(run.dispatches) == 5

    # 30 s later: no deployment, an error response naming the reason.
    blocked = fold([accepted("x1", last_failure + 30)], pol, run.state)
    assert blocked.dispatches == []
    (response,) = blocked.responses
    assert response.status == "error"
    assert response.error is not None
    assert response.error.type == "no_deployment_available"
    assert response.error.code == "no_candidate"
    assert response.error.http_status == 503
    assert "breaker_open" in response.error.message
    assert response.attempts == 0
    assert blocked.state.arm(a).breaker.state is OPEN
    assert blocked.state.open_attempts == {}

    # Exactly 60 s after the last failure: still OPEN.
    still = fold([accepted("x2", last_failure + 60)], pol, blocked.state)
    assert still.dispatches == []
    assert still.state.arm(a).breaker.state is OPEN

    # 61 s after: HALF_OPEN, persisted in the state, and the request is a probe.
    probe = fold([accepted("p1", last_failure + 61)], pol, still.state)
    (dispatch,) = probe.dispatches
    assert dispatch.decision.deployment == a
    assert probe.state.arm(a).breaker == Breaker(
        state=HALF_OPEN, failures=5, last_failure_time=last_failure, success_count=0
    )
    assert probe.state.arm(a).in_flight == 1

    # One probe at a time: a request while p1 is in flight waits in the log...
    t = last_failure + 62
    waiting = fold([accepted("p2", t)], pol, probe)
    assert (waiting.dispatches, waiting.responses) == ([], [])
    assert waiting.state.parking.line.waiting == 1
    # ...and is the next probe once p1 has answered.
    after = fold([finish("p1", a, t + 1)], pol, waiting)
    assert [d.request_id for d in after.decisions] == ["p2"]
    state = fold([finish("p2", a, t + 2)], pol, after).state
    assert state.arm(a).breaker.state is HALF_OPEN
    assert state.arm(a).breaker.success_count == 2
    # Three successful probes, one after the other: CLOSED, failures reset.
    sent = fold([accepted("p3", t + 3)], pol, state)
    assert [d.deployment for d in sent.decisions] == [a]
    state = fold([finish("p3", a, t + 4)], pol, sent.state).state
    assert state.arm(a).breaker == Breaker()
    assert state.arm(a).in_flight == 0


def test_half_open_probe_failure_reopens_through_fold() -> None:
    pol = policy(provider("a"))
    a = dep("a")
    state = route_state({a: arm(20, 0.5, breaker=open_breaker(T0))}, T0 + 100)
    run = fold(
        [accepted("p1", T0 + 100), finish("p1", a, T0 + 101, status=StatusClass.TIMEOUT)],
        pol,
        state,
    )
    assert run.decisions[0].deployment == a
    assert run.state.arm(a).breaker == Breaker(
        state=OPEN, failures=6, last_failure_time=T0 + 101, success_count=0
    )
