"""The router as a pure fold: outcomes, retries, exclusions and lost attempts."""

from __future__ import annotations

from typing import Any

from factories import (
    T0,
    A,
    B,
    C,
    abc,
    accepted,
    arm,
    finish,
    finished,
    fold,
    open_breaker,
    outcome,
    policy,
    provider,
    route_state,
    without_position,
)

from app.contract import (
    Exclusion,
    Response,
    StatusClass,
    derived_id,
)
from app.routing.fold import LOST_ATTEMPT_GRACE_S, at, epoch, handle
from app.routing.policy import Policy
from app.routing.rows import to_row
from app.routing.state import BreakerPhase, Line, RouteState

# --------------------------------------------------------------------------- outcomes


def test_attempt_finished_applies_once() -> None:
    pol = abc()
    opened = handle(RouteState(), accepted("req-1", T0), 0, pol).state
    done = finish("req-1", A, T0 + 2, latency_ms=1500.0, reward=0.8)
    once = handle(opened, done, 1, pol)
    assert once.applied is True
    assert once.dispatches == []
    (response,) = once.responses  # the router answers every request
    assert response.request_id == "req-1" and response.attempts == 1
    a = once.state.arm(A)
    assert (a.pulls, a.total_reward, a.alpha, a.beta) == (1, 0.8, 2.0, 1.0)
    assert (a.avg_latency_s, a.latency_samples, a.in_flight) == (1.5, 1, 0)
    assert once.state.open_attempts == {}
    assert once.state.clock == T0 + 2

    # Same record at the same position: identical.
    twice = handle(once.state, done, 1, pol)
    assert twice.applied is False
    assert to_row(twice.state) == to_row(once.state)
    # A duplicate record further down the log: only the position moves.
    later = handle(once.state, done, 2, pol)
    assert later.applied is False
    assert later.state.position == 2
    assert without_position(later.state) == without_position(once.state)


def test_outcome_for_unknown_attempt_is_ignored() -> None:
    pol = abc()
    state = handle(RouteState(), accepted("req-1", T0), 0, pol).state
    for stray in (
        finish("req-1", A, T0 + 1, attempt=2),
        finish("other", A, T0 + 1),
    ):
        step = handle(state, stray, 1, pol)
        assert step.applied is False
        assert step.state.arms == state.arms
        assert step.state.open_attempts == state.open_attempts


def _failed_first_attempt(pol: Policy, *, final: bool = False) -> tuple[RouteState, Any]:
    request = accepted("req-1", T0)
    opened = handle(RouteState(), request, 0, pol).state
    failure = outcome(
        "req-1", A, T0 + 1, status=StatusClass.SERVER_ERROR, retriable=True, final=final
    )
    return opened, finished(failure, tried=[A], retry=request)


def test_retriable_outcome_with_retry_dispatches_attempt_two() -> None:
    pol = abc()
    opened, event = _failed_first_attempt(pol)
    step = handle(opened, event, 1, pol)
    assert step.applied is True
    assert step.responses == []
    (dispatch,) = step.dispatches
    decision = dispatch.decision
    assert decision.attempt == 2
    assert decision.id == derived_id("decision", "req-1", 2)
    assert dispatch.id == derived_id("dispatch", "req-1", 2)
    assert decision.deployment == B
    assert decision.excluded == [Exclusion(deployment=A, reason="already_tried")]
    assert [c.deployment for c in decision.candidates] == [B, C]
    assert decision.state_version == 1
    assert decision.occurred_at == at(T0 + 1)
    assert dispatch.tried == [A]
    state = step.state
    assert set(state.open_attempts) == {"req-1#2"}
    assert state.open_attempts["req-1#2"].deployment == B
    assert state.arm(A).in_flight == 0
    assert state.arm(A).pulls == 1
    assert state.arm(A).breaker.failures == 1
    assert state.arm(B).in_flight == 1

    # Redelivering the same feedback neither re-applies the failure nor dispatches again.
    again = handle(state, event, 2, pol)
    assert again.applied is False
    assert again.dispatches == []
    assert without_position(again.state) == without_position(state)


def test_retry_uses_the_events_tried_list() -> None:
    pol = abc()
    state = fold([accepted("req-1", T0), accepted("other", T0)], pol).state  # a, then b
    request = accepted("req-1", T0)
    failure = outcome("req-1", A, T0 + 1, status=StatusClass.TIMEOUT, retriable=True, final=False)
    step = handle(state, finished(failure, tried=[A, B], retry=request), 2, pol)
    (dispatch,) = step.dispatches
    assert dispatch.decision.deployment == C
    assert dispatch.decision.excluded == [
        Exclusion(deployment=A, reason="already_tried"),
        Exclusion(deployment=B, reason="already_tried"),
    ]
    assert dispatch.tried == [A, B]


def test_final_outcome_does_not_retry() -> None:
    pol = abc()
    opened, event = _failed_first_attempt(pol, final=True)
    step = handle(opened, event, 1, pol)
    assert step.dispatches == []
    (response,) = step.responses
    assert response.status == "error" and response.error is not None
    assert response.error.code == "provider_error"
    assert step.state.open_attempts == {}


def test_no_deployment_left_gives_error_response() -> None:
    pol = policy(provider("a"), provider("b"))
    request = accepted("req-1", T0)
    run = fold([request], pol)
    first = outcome(
        "req-1", A, T0 + 1, status=StatusClass.SERVER_ERROR, retriable=True, final=False
    )
    run = fold([finished(first, tried=[A], retry=request)], pol, run.state)
    assert run.decisions[0].deployment == B
    # A timeout: a silent deployment is not asked again at once (a 5xx would be).
    second = outcome(
        "req-1",
        B,
        T0 + 2,
        attempt=2,
        status=StatusClass.TIMEOUT,
        retriable=True,
        final=False,
    )
    step = handle(run.state, finished(second, tried=[A, B], retry=request), 9, pol)
    assert step.dispatches == []
    (response,) = step.responses
    assert isinstance(response, Response)
    assert response.id == derived_id("response", "req-1")
    assert response.request_id == "req-1"
    assert response.status == "error"
    assert response.attempts == 2
    assert response.occurred_at == at(T0 + 2)
    assert response.error is not None
    assert response.error.type == "timeout"
    assert response.error.code == "exhausted"
    assert response.error.http_status is None
    assert "all attempts failed" in response.error.message
    assert step.state.open_attempts == {}
    assert step.state.arm(B).in_flight == 0
    assert step.state.arm(B).breaker.failures == 1


def test_no_candidate_at_first_attempt_when_waiting_is_off() -> None:
    pol = policy(provider("a"), provider("b"), max_parked=0)
    state = route_state(
        {A: arm(5, 0.5, breaker=open_breaker(T0)), B: arm(5, 0.5, breaker=open_breaker(T0))},
        T0,
    )
    step = handle(state, accepted("req-1", T0 + 10), 3, pol)
    assert step.dispatches == []
    (response,) = step.responses
    assert response.attempts == 0
    assert response.error is not None
    assert response.error.type == "no_deployment_available"
    assert response.error.code == "no_candidate"
    assert response.error.http_status == 503
    assert f"{A}: breaker_open" in response.error.message
    assert f"{B}: breaker_open" in response.error.message
    assert step.state.open_attempts == {}


def test_open_breaker_excluded_with_reason() -> None:
    pol = abc()
    state = route_state(
        {A: arm(10, 0.9, breaker=open_breaker(T0 - 5)), B: arm(10, 0.5), C: arm(10, 0.4)},
        T0,
    )
    (dispatch,) = handle(state, accepted("r", T0 + 1), 1, pol).dispatches
    assert dispatch.decision.excluded == [Exclusion(deployment=A, reason="breaker_open")]
    assert [c.deployment for c in dispatch.decision.candidates] == [B, C]
    assert dispatch.decision.deployment == B


def test_half_open_transition_persisted_by_fold() -> None:
    pol = abc()
    state = route_state(
        {A: arm(10, 0.1, breaker=open_breaker(T0)), B: arm(10, 0.9), C: arm(10, 0.9)},
        T0,
    )
    step = handle(state, accepted("r", T0 + 61), 1, pol)
    # a is HALF_OPEN now and, with no probe in flight, takes this request as its probe
    # although its mean is poor: otherwise it could never show that it recovered.
    decision = step.dispatches[0].decision
    assert (decision.deployment, decision.selection_rule) == (A, "half_open_probe")
    assert step.state.arm(A).breaker.state is BreakerPhase.HALF_OPEN
    assert step.state.arm(A).in_flight == 1
    # One probe at a time: the next request goes by score.
    nxt = handle(step.state, accepted("r2", T0 + 61.5), 2, pol)
    assert nxt.dispatches[0].decision.deployment == B


def test_half_open_transition_persisted_even_without_dispatch() -> None:
    pol = policy(provider("a"))
    state = route_state({A: arm(10, 0.1, breaker=open_breaker(T0), in_flight=3)}, T0)
    step = handle(state, accepted("r", T0 + 61), 1, pol)
    assert step.dispatches == [] and step.responses == []
    assert step.state.parking.line.waiting == 1  # waits in the log for the probe in flight
    assert step.state.arm(A).breaker.state is BreakerPhase.HALF_OPEN


def test_concurrency_full_excluded() -> None:
    pol = policy(provider("a", max_concurrency=1), provider("b"))
    run = fold([accepted("r1", T0), accepted("r2", T0 + 1)], pol)
    first, second = run.decisions
    assert first.deployment == A
    assert second.deployment == B
    assert second.excluded == [Exclusion(deployment=A, reason="concurrency_full")]
    # Once r1 finishes, a has room again.
    assert run.state.arm(A).in_flight == 1
    after = fold([finish("r1", A, T0 + 2), accepted("r3", T0 + 3)], pol, run.state)
    (third,) = after.decisions
    assert third.excluded == []
    assert third.deployment == A  # mean 1.0 vs b's 0.0 (in flight), same exploration
    assert after.state.arm(A).in_flight == 1


def test_concurrency_full_everywhere_waits_in_the_log_in_arrival_order() -> None:
    pol = policy(provider("a", max_concurrency=2), max_parked=0)
    run = fold([accepted(f"r{i}", T0 + i) for i in range(4)], pol)
    assert len(run.dispatches) == 2
    # Never refused for capacity, parked or not: r2 and r3 wait in the log.
    assert run.responses == [] and run.state.parking.parked == {}
    assert run.state.parking.line.waiting == 2 and run.state.parking.line.after == 1
    freed = fold([finish("r1", A, T0 + 5)], pol, run)
    assert [d.request_id for d in freed.decisions] == ["r2"]
    assert freed.state.parking.line.waiting == 1
    both = fold([finish("r0", A, T0 + 6), finish("r2", A, T0 + 7)], pol, freed)
    assert [d.request_id for d in both.decisions] == ["r3"]
    blocked_at = freed.state.parking.line.blocked_at
    assert both.state.parking.line == Line(waiting=0, after=3, blocked_at=blocked_at)


def test_clock_never_goes_backwards() -> None:
    pol = abc()
    run = fold([accepted("r1", T0 + 10), accepted("r2", T0 + 5), finish("r1", A, T0 + 1)], pol)
    assert [s.state.clock for s in run.steps] == [T0 + 10, T0 + 10, T0 + 10]
    second = run.decisions[1]
    assert second.occurred_at == at(T0 + 10)
    assert run.steps[1].state.open_attempts["r2#1"].decided_at == T0 + 10
    assert epoch(at(T0 + 10.25)) == T0 + 10.25


def test_breaker_uses_route_clock_not_event_time() -> None:
    # Failures stamped in the past open the breaker at the route clock (which never goes back).
    pol = policy(provider("a"))
    run = fold([accepted(f"r{i}", T0 + 100) for i in range(5)], pol)
    failures = [finish(f"r{i}", A, T0 + i, status=StatusClass.SERVER_ERROR) for i in range(5)]
    done = fold(failures, pol, run.state).state
    assert done.clock == T0 + 100
    assert done.arm(A).breaker == open_breaker(T0 + 100)


def test_lost_attempts_expire_after_deadline_plus_grace() -> None:
    pol = policy(provider("a", timeout_ms=1000), provider("b"), request_deadline_s=30.0)
    run = fold([accepted("r1", T0)], pol)
    deadline = T0 + 30.0 + LOST_ATTEMPT_GRACE_S
    at_deadline = fold([accepted("r2", deadline)], pol, run.state)
    assert "r1#1" in at_deadline.state.open_attempts
    past = fold([accepted("r3", deadline + 0.5)], pol, at_deadline.state)
    assert "r1#1" not in past.state.open_attempts
    (lost,) = past.responses
    assert lost.request_id == "r1" and lost.error is not None and lost.error.type == "lost"
    assert past.state.arm(A).in_flight == [d.deployment for d in past.decisions].count(A)
    # The lost attempt's late outcome is then ignored.
    late = handle(past.state, finish("r1", A, deadline + 1), 99, pol)
    assert late.applied is False
    assert late.state.arm(A).pulls == 0
