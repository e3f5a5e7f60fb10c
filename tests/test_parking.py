"""Waiting for a deployment: every candidate saturated, open or cooling."""

from __future__ import annotations

from factories import (
    T0,
    accepted,
    arm,
    dep,
    finish,
    finished,
    fold,
    open_breaker,
    outcome,
    policy,
    provider,
    route_state,
)

from app.contract import RouteTick, StatusClass
from app.routing.fold import at, handle
from app.routing.parking import wait_s
from app.routing.rows import dumps
from app.routing.state import RouteState

A, B = dep("a"), dep("b")


def tick(t: float) -> RouteTick:
    return RouteTick(id=f"tick-{t}", occurred_at=at(t), route="chat")


def both_open(since: float = T0) -> RouteState:
    breakers = {
        A: arm(5, 0.5, breaker=open_breaker(since)),
        B: arm(5, 0.5, breaker=open_breaker(since)),
    }
    return route_state(breakers, since)


def test_an_attempt_waits_while_every_breaker_is_open_then_goes_to_the_first_probe() -> None:
    pol = policy(provider("a"), provider("b"))
    step = fold([accepted("w-1", T0 + 10)], pol, both_open(), start=3)
    assert (step.dispatches, step.responses) == ([], [])
    assert list(step.state.parking.parked) == ["w-1#1"]
    # A reference to where the request is in the log, never the request itself.
    assert step.state.parking.parked["w-1#1"].carrier == 3
    assert b"messages" not in dumps(step.state)
    # Ticks before the breaker timeout: still waiting, backoff growing.
    waiting = fold([tick(T0 + 20), tick(T0 + 40)], pol, step)
    assert waiting.dispatches == [] and waiting.responses == []
    assert waiting.state.parking.parked["w-1#1"].waits >= 1
    # Past CB_TIMEOUT_S the breakers are half-open: the waiting request is the probe.
    routed = fold([tick(T0 + 70)], pol, waiting)
    (decision,) = routed.decisions
    assert (decision.request_id, decision.attempt, decision.selection_rule) == (
        "w-1", 1, "half_open_probe",
    )  # fmt: skip
    assert routed.state.parking.parked == {}


def test_a_wait_that_reaches_the_deadline_is_answered() -> None:
    pol = policy(provider("a"), provider("b"), request_deadline_s=30.0, cb_timeout_s=600.0)
    parked = handle(both_open(), accepted("w-2", T0 + 10), 3, pol).state
    late = fold([tick(T0 + 45)], pol, parked)
    (response,) = late.responses
    assert response.request_id == "w-2" and response.error is not None
    assert (response.error.code, response.attempts) == ("deadline_exceeded", 0)
    assert late.state.parking.parked == {} and late.dispatches == []


def test_full_deployments_wait_in_the_log_and_the_next_finish_frees_one() -> None:
    a = provider("a", max_concurrency=1)
    pol = policy(a)
    busy = fold([accepted("c-1", T0)], pol)
    assert [d.deployment for d in busy.decisions] == [A]
    waiting = fold([accepted("c-2", T0 + 0.01)], pol, busy)
    assert waiting.decisions == [] and waiting.state.parking.parked == {}
    assert waiting.state.parking.line.waiting == 1
    freed = fold([finish("c-1", A, T0 + 1.0)], pol, waiting)
    assert [d.request_id for d in freed.decisions] == ["c-2"]
    assert freed.state.parking.line.waiting == 0


def test_no_wait_when_nothing_could_ever_be_chosen() -> None:
    pol = policy(provider("a"))
    first = fold([accepted("p-1", T0)], pol)
    failed = outcome("p-1", A, T0 + 1, status=StatusClass.TIMEOUT, final=False, retriable=True)
    # Attempt 2 has only already-tried candidates, and a silent one is not asked again at
    # once: answered at once, nothing parked.
    step = fold([finished(failed, retry=accepted("p-1", T0))], pol, first.state)
    assert step.state.parking.parked == {}
    (response,) = step.responses
    assert response.error is not None and response.error.code == "exhausted"


def test_waiting_is_bounded_and_duplicates_are_ignored() -> None:
    pol = policy(provider("a"), provider("b"), max_parked=1)
    one = handle(both_open(), accepted("b-1", T0 + 10), 3, pol)
    again = handle(one.state, accepted("b-1", T0 + 10, offset=5), 4, pol)
    assert again.responses == [] and list(again.state.parking.parked) == ["b-1#1"]
    two = handle(again.state, accepted("b-2", T0 + 11, offset=6), 5, pol)
    (response,) = two.responses
    assert response.request_id == "b-2" and response.error is not None
    assert response.error.code == "no_candidate"


def test_backoff_doubles_to_its_cap_with_seeded_jitter() -> None:
    pol = policy(provider("a"), max_park_wait_s=2.0)
    waits = [wait_s("r", 1, n, pol) for n in range(8)]
    assert waits == [wait_s("r", 1, n, pol) for n in range(8)]
    assert all(
        0.5 * min(2.0, 0.15 * 2**n) <= w < min(2.0, 0.15 * 2**n) for n, w in enumerate(waits)
    )
