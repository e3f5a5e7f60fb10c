"""The fallback loop's pure parts: composite score, EWMA breaker, Retry-After, backoff,
deadline."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import (
    T0,
    accepted,
    arm,
    dep,
    finished,
    fold,
    open_breaker,
    outcome,
    policy,
    provider,
    route_state,
)

from app.contract import RouteTick, StatusClass
from app.routing.feedback import apply_outcome
from app.routing.fold import at, backoff_s, handle
from app.routing.params import BreakerMode, Strategy
from app.routing.select import select
from app.routing.state import ArmState, BreakerPhase

CHEAP = provider(
    "deepseek-v3.2",
    cost_per_mtok_input=0.27,
    cost_per_mtok_output=0.42,
    p95_latency_baseline_ms=620,
)
DEAR = provider(
    "claude", cost_per_mtok_input=3.0, cost_per_mtok_output=15.0, p95_latency_baseline_ms=1100
)


def test_composite_prices_seed_003_workload() -> None:
    (cheap, dear) = policy(CHEAP, DEAR).arms("chat")
    assert cheap.workload_cost_usd == pytest.approx((800 * 0.27 + 250 * 0.42) / 1e6)
    assert dear.workload_cost_usd == pytest.approx((800 * 3.0 + 250 * 15.0) / 1e6)


def test_composite_score_is_cost_times_latency_squared_times_failure_penalty() -> None:
    pol = policy(CHEAP, DEAR, strategy=Strategy.COMPOSITE)
    state = route_state(
        {
            dep("deepseek-v3.2"): ArmState(
                ewma_latency_ms=1240.0, ewma_failure=0.2, observations=9
            ),
            dep("claude"): ArmState(ewma_latency_ms=1100.0, ewma_failure=0.0, observations=9),
        }
    )
    selection = select(state, "chat", "r", 1, (), pol)
    cheap, dear = selection.candidates
    expected_cheap = (800 * 0.27 + 250 * 0.42) / 1e6 * (1240 / 620) ** 2 * (1 + 10 * 0.2)
    assert cheap.score == pytest.approx(expected_cheap)
    assert cheap.factors["latency_penalty"] == pytest.approx(4.0)
    assert cheap.factors["failure_penalty"] == pytest.approx(3.0)
    assert dear.score == pytest.approx((800 * 3.0 + 250 * 15.0) / 1e6)
    # Lowest wins: deepseek is still 6x cheaper after a 12x penalty.
    assert selection.chosen is not None and selection.chosen.deployment == dep("deepseek-v3.2")
    assert selection.propensity == 1.0


def test_composite_moves_off_a_failing_cheap_provider() -> None:
    pol = policy(CHEAP, DEAR, strategy=Strategy.COMPOSITE)
    state = route_state(
        {
            dep("deepseek-v3.2"): ArmState(
                ewma_latency_ms=1240.0, ewma_failure=0.9, observations=30
            ),
            dep("claude"): ArmState(ewma_latency_ms=1100.0, observations=30),
        }
    )
    chosen = select(state, "chat", "r", 1, (), pol).chosen
    assert chosen is not None and chosen.deployment == dep("claude")


def _failures(pol_mode: BreakerMode, count: int, start: float = T0) -> ArmState:
    pol = policy(CHEAP, DEAR, cb_mode=pol_mode)
    state = ArmState()
    for i in range(count):
        result = outcome(f"r{i}", dep("deepseek-v3.2"), start + i, status=StatusClass.SERVER_ERROR)
        state = apply_outcome(state, result, start + i, pol)
    return state


def test_ewma_breaker_needs_twenty_observations_before_opening() -> None:
    after_19 = _failures(BreakerMode.EWMA, 19)
    assert after_19.ewma_failure > 0.5
    assert after_19.breaker.state is BreakerPhase.CLOSED
    after_20 = _failures(BreakerMode.EWMA, 20)
    assert after_20.breaker.state is BreakerPhase.OPEN
    # The seed-000 breaker would have opened at the fifth failure.
    assert _failures(BreakerMode.SEED000, 5).breaker.state is BreakerPhase.OPEN


def test_ewma_breaker_stays_open_thirty_seconds_then_probes() -> None:
    pol = policy(CHEAP, DEAR, cb_mode=BreakerMode.EWMA)
    opened = _failures(BreakerMode.EWMA, 20)
    opened_at = opened.breaker.last_failure_time
    states = {dep("deepseek-v3.2"): opened}
    at_29 = select(route_state(states, clock=opened_at + 29), "chat", "r", 1, (), pol)
    assert [e.reason for e in at_29.excluded] == ["breaker_open"]
    at_31 = select(route_state(states, clock=opened_at + 31), "chat", "r", 1, (), pol)
    assert at_31.excluded == []
    assert at_31.arms[dep("deepseek-v3.2")].breaker.state is BreakerPhase.HALF_OPEN


def test_half_open_admits_one_probe_at_a_time() -> None:
    pol = policy(CHEAP, DEAR)
    half_open = replace(_failures(BreakerMode.SEED000, 5), in_flight=0)
    still_open = arm(pulls=5, breaker=open_breaker(T0 + 90))
    arms = {dep("deepseek-v3.2"): half_open, dep("claude"): still_open}
    state = route_state(arms, clock=T0 + 100)
    run = fold([accepted(f"p{i}", T0 + 100) for i in range(5)], pol, state)
    probes = [d for d in run.decisions if d.deployment == dep("deepseek-v3.2")]
    assert len(probes) == 1
    # The rest waits in the log for the probe's answer, not flooded onto the probe, and
    # not refused: busy candidates are waited for whatever SWITCHYARD_MAX_PARKED says.
    assert run.responses == [] and run.state.parking.line.waiting == 4
    assert run.state.parking.parked == {}
    no_parking = fold([accepted(f"p{i}", T0 + 100) for i in range(5)], policy(
        CHEAP, DEAR, max_parked=0
    ), state)  # fmt: skip
    assert no_parking.responses == [] and no_parking.state.parking.line.waiting == 4


def test_retry_after_keeps_traffic_off_that_provider_until_it_expires() -> None:
    pol = policy(CHEAP, DEAR)
    limited = outcome("r1", dep("deepseek-v3.2"), T0, status=StatusClass.RATE_LIMITED)
    limited = limited.model_copy(update={"retry_after_s": 10.0})
    state = apply_outcome(arm(pulls=3, mean=1.0, in_flight=1), limited, T0, pol)
    assert state.retry_after_until == T0 + 10.0
    assert state.breaker.state is BreakerPhase.CLOSED  # 429 is not an availability failure
    states = {dep("deepseek-v3.2"): state, dep("claude"): arm(pulls=3, mean=1.0)}
    during = select(route_state(states, clock=T0 + 9), "chat", "r", 1, (), pol)
    assert [(e.deployment, e.reason) for e in during.excluded] == [
        (dep("deepseek-v3.2"), "retry_after")
    ]
    after = select(route_state(states, clock=T0 + 11), "chat", "r", 1, (), pol)
    assert after.excluded == []


def test_backoff_grows_exponentially_with_deterministic_jitter() -> None:
    pol = policy(CHEAP, DEAR)
    assert backoff_s("r", 1, pol) == 0.0
    second, third = backoff_s("r", 2, pol), backoff_s("r", 3, pol)
    assert 0.075 <= second < 0.15
    assert 0.15 <= third < 0.30
    assert backoff_s("r", 2, pol) == second  # same request, same jitter
    jitters = {backoff_s(f"r{i}", 2, pol) for i in range(50)}
    assert len(jitters) > 40  # a burst of retries is spread out


def test_retry_is_dispatched_after_backoff_to_another_deployment() -> None:
    pol = policy(CHEAP, DEAR)
    request = accepted("r1", T0)
    first = fold([request], pol)
    (dispatch,) = first.dispatches
    failed = outcome(
        "r1",
        dispatch.decision.deployment,
        T0 + 1,
        status=StatusClass.SERVER_ERROR,
        final=False,
        retriable=True,
    )
    step = handle(first.state, finished(failed, retry=request), 1, pol)
    (retry,) = step.dispatches
    assert retry.decision.attempt == 2
    assert retry.decision.deployment != dispatch.decision.deployment
    assert retry.not_before == pytest.approx(T0 + 1 + backoff_s("r1", 2, pol))
    assert retry.deadline == T0 + pol.params.request_deadline_s


def test_no_retry_after_the_request_deadline() -> None:
    pol = policy(CHEAP, DEAR, request_deadline_s=5.0)
    request = accepted("r1", T0)
    first = fold([request], pol)
    late = outcome(
        "r1",
        first.decisions[0].deployment,
        T0 + 6,
        status=StatusClass.TIMEOUT,
        final=False,
        retriable=True,
    )
    step = handle(first.state, finished(late, retry=request), 1, pol)
    assert step.dispatches == []
    (response,) = step.responses
    assert response.status == "error"
    assert response.error is not None and response.error.code == "deadline_exceeded"


def test_a_tick_expires_a_lost_attempt_on_an_idle_route_with_an_error_response() -> None:
    pol = policy(CHEAP, DEAR, request_deadline_s=30.0)
    run = fold([accepted("r1", T0)], pol)
    tick = RouteTick(id="tick-1", occurred_at=at(T0 + 45), route="chat")
    step = handle(run.state, tick, 1, pol)
    assert step.state.open_attempts == {}
    assert all(arm.in_flight == 0 for arm in step.state.arms.values())
    (response,) = step.responses
    assert response.request_id == "r1" and response.status == "error"
    # A later duplicate of the lost attempt's outcome answers nothing more.
    late = finished(outcome("r1", run.decisions[0].deployment, T0 + 46))
    assert handle(step.state, late, 2, pol).responses == []


def test_a_request_republished_by_ingest_after_a_crash_is_not_routed_again() -> None:
    pol = policy(CHEAP, DEAR)
    first = accepted("r1", T0, offset=41)
    routed = fold([first], pol)
    deployment = routed.decisions[0].deployment
    done = finished(outcome("r1", deployment, T0 + 1))
    answered = fold([done], pol, routed.state)
    assert answered.responses and answered.state.open_attempts == {}
    # The same source record, appended again to the routing log at a new position.
    copy = fold([first.model_copy(update={"occurred_at": at(T0 + 2)})], pol, answered.state)
    assert copy.dispatches == [] and copy.responses == []
    assert copy.steps[0].applied is False
    # Its outcome arriving again cannot count twice either.
    again = fold([done], pol, copy.state)
    assert again.state.arm(deployment).pulls == 1
    # The next record of that source partition is a new request.
    following = accepted("r2", T0 + 3, offset=42)
    following = following.model_copy(
        update={"source": first.source.model_copy(update={"offset": 42})}
    )
    assert len(fold([following], pol, copy.state).dispatches) == 1
