"""New requests wait in the log for capacity, never refused for it.

The route state counts the waiting requests and keeps the position the line
starts after; the requests themselves stay in the routing log and are recalled
when their turn comes, by the driver every user shares.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest
from factories import (
    T0,
    accepted,
    finish,
    finished,
    fold,
    outcome,
    policy,
    provider,
    route_state,
)

from app.contract import RequestAccepted, RouteTick, RoutingLogEvent, StatusClass
from app.routing.driver import Driver, Recalled, find_in_log
from app.routing.feedback import apply_outcome
from app.routing.fold import Step, Want, at
from app.routing.rows import dumps
from app.routing.state import ArmState, BreakerPhase

A, B = "a:m1", "b:m1"
MARKER = "marker-prompt-7f3a"


def burst(n: int, t: float = T0) -> list[RequestAccepted]:
    return [
        accepted(f"r{i:05d}", t, offset=i, content=f"{MARKER} {i}" + "x" * 400) for i in range(n)
    ]


def two_small() -> tuple[object, ...]:
    return (provider("a", max_concurrency=5), provider("b", max_concurrency=5))


def test_a_burst_waits_for_capacity_in_arrival_order_with_a_fixed_size_state() -> None:
    pol = policy(*two_small(), max_parked=0)
    run = fold(burst(3000), pol)
    assert len(run.dispatches) == 10 and run.responses == []
    assert run.state.parking.line.waiting == 2990
    # The state counts the line; it never holds it (nor any prompt).
    row = dumps(run.state)
    assert MARKER.encode() not in row and len(row) < 4000
    small = dumps(fold(burst(20), pol).state)
    assert len(row) - len(small) < 200  # the same fields, bigger numbers
    # Every finish frees a slot, taken by the oldest waiting request.
    order: list[str] = []
    state, last = run, run.dispatches[0]
    for n in range(40):
        done = finish(last.decision.request_id, last.decision.deployment, T0 + 1 + n)
        state = fold([done], pol, state)
        (last,) = state.dispatches
        order.append(last.decision.request_id)
    assert order == [f"r{i:05d}" for i in range(10, 50)]
    assert all(r.request_id == "r00000" or r.attempts == 1 for r in state.responses)


def test_a_request_that_waited_past_its_deadline_is_answered_without_a_call() -> None:
    pol = policy(provider("a", max_concurrency=1), request_deadline_s=30.0)
    run = fold([accepted("first", T0), accepted("late", T0 + 1, offset=1)], pol)
    assert run.state.parking.line.waiting == 1
    later = fold([RouteTick(id="t", occurred_at=at(T0 + 40), route="chat")], pol, run)
    (response,) = later.responses
    assert response.request_id == "late" and response.error is not None
    assert (response.error.code, response.attempts) == ("deadline_exceeded", 0)
    assert later.dispatches == [] and later.state.parking.line.waiting == 0
    # Nothing was held against the deployment for the wait.
    assert later.state.arm(A).pulls == 0


def test_an_expired_attempt_is_not_the_providers_doing() -> None:
    pol = policy(provider("a"))
    arm = ArmState(pulls=3, total_reward=3.0, in_flight=2)
    for _ in range(10):
        expired = outcome("r", A, T0, status=StatusClass.EXPIRED, reward=0.0, retriable=False)
        arm = apply_outcome(arm, expired, T0, pol)
    assert arm.breaker.state is BreakerPhase.CLOSED and arm.breaker.failures == 0
    assert (arm.pulls, arm.total_reward, arm.in_flight) == (3, 3.0, 0)
    assert arm.observations == 0 and arm.latency_samples == 0


def test_a_backlog_after_an_outage_is_served_and_trips_no_breaker() -> None:
    """Requests that piled up while no worker ran: the expired ones are answered without a
    call, the others are served as capacity frees; no breaker moves."""
    pol = policy(*two_small(), request_deadline_s=120.0)
    pile = [accepted(f"p{i}", T0 + i * 0.05, offset=i) for i in range(3000)]  # 150 s at 20/s
    run = fold([*pile, RouteTick(id="t", occurred_at=at(T0 + 150), route="chat")], pol)
    answered = [r for r in run.responses]
    assert all(r.error is not None and r.error.code == "deadline_exceeded" for r in answered)
    assert run.dispatches and all(
        a.breaker.state is BreakerPhase.CLOSED for a in run.state.arms.values()
    )


def _driven_by_log(
    driver: Driver, log: dict[int, RoutingLogEvent], event: RoutingLogEvent, position: int
) -> tuple[Step, int]:
    """Drive :meth:`Driver.steps` as the live router does; count the reads from the log."""
    run: Generator[Want, Recalled, Step] = driver.steps(event, position)
    reads = 0
    try:
        want = next(run)
        while True:
            found = find_in_log(log, "chat", want)
            assert found is not None
            reads += 1
            if want.kind == "line":  # the live reader refills the memory from the log
                driver.recall("chat").refill(want.position, [(*found, None)], up_to_date=False)
            want = run.send(found)
    except StopIteration as done:
        return done.value, reads


def test_a_bounded_memory_reads_the_rest_of_the_line_back_and_decides_the_same() -> None:
    pol = policy(*two_small(), max_parked=0)
    events: list[RoutingLogEvent] = list(burst(300))
    for i in range(300):
        events.append(finish(f"r{i:05d}", A if i % 2 == 0 else B, T0 + 1 + i))
    log = dict(enumerate(events))
    unbounded = Driver(lambda: pol)
    bounded = Driver(lambda: pol, max_recall_bytes=20_000)  # about 40 requests
    reads = 0
    for position, event in enumerate(events):
        expected = unbounded.fold(event, position)
        got, n = _driven_by_log(bounded, log, event, position)
        reads += n
        assert [d.decision.request_id for d in got.dispatches] == [
            d.decision.request_id for d in expected.dispatches
        ]
        assert got.state == expected.state
    assert reads > 100  # the bound was hit and the line was read back
    assert bounded.recall("chat").line_bytes <= 20_000


def test_a_pinned_head_whose_pin_is_busy_holds_the_line() -> None:
    """Arrival order is kept per route: the line waits for its head (documented)."""
    pol = policy(provider("a", max_concurrency=1), provider("b", max_concurrency=1))
    state = route_state({A: ArmState(in_flight=1)}, T0)
    pinned = accepted("pin", T0, offset=0).model_copy(update={"pinned": A})
    run = fold([pinned, accepted("free", T0, offset=1)], pol, state)
    assert run.dispatches == [] and run.state.parking.line.waiting == 2


def test_an_answer_too_large_for_a_record_reaches_the_requester_as_response_too_large() -> None:
    pol = policy(provider("a"))
    run = fold([accepted("big", T0)], pol)
    error = "response_too_large: the answer's record is 1500000 bytes, over the limit"
    done = outcome("big", A, T0 + 1, status=StatusClass.CLIENT_ERROR, http_status=200)
    done = done.model_copy(update={"error": error})
    (response,) = fold([finished(done)], pol, run).responses
    assert response.error is not None
    assert (response.error.code, response.error.http_status) == ("response_too_large", 502)


def test_a_backlog_forwarded_late_is_answered_at_once_when_its_deadline_passed() -> None:
    """A worker was down: the request was published long ago, ingest forwards it now. The
    route clock follows ingest, so no call is made for a request past its deadline."""
    pol = policy(provider("a"), request_deadline_s=120.0)
    old = accepted("old", T0, offset=0).model_copy(update={"ingested_at": at(T0 + 150)})
    fresh = accepted("fresh", T0 + 60, offset=1).model_copy(update={"ingested_at": at(T0 + 150)})
    run = fold([old, fresh], pol)
    (response,) = run.responses
    assert response.request_id == "old" and response.error is not None
    assert response.error.code == "deadline_exceeded"
    assert [d.decision.request_id for d in run.dispatches] == ["fresh"]


def test_the_live_memory_keeps_a_waiting_request_as_its_record_bytes() -> None:
    """A parsed event weighs several times its JSON: the bound counts what is held."""
    pol = policy(provider("a", max_concurrency=1))
    driver = Driver(lambda: pol, max_recall_bytes=1_000_000)
    first, second = burst(2)
    driver.fold(first, 0)
    raw = second.model_dump_json().encode()
    run = driver.steps(second, 1, raw)
    with pytest.raises(StopIteration):
        next(run)
    memory = driver.recall("chat")
    assert memory.line == [(1, raw)] and memory.line_bytes == len(raw)
    assert memory.head_after(0) == (1, second)


def test_cached_answers_are_kept_within_the_bound_and_free_it_when_dropped() -> None:
    """The answers a response cache refers to count against the recall bound; an answer
    the cache no longer holds gives its room back."""
    from app.routing.driver import Recall
    from app.routing.state import RouteState

    first, second = burst(2)
    size = len(first.model_dump_json())
    memory = Recall(max_bytes=size)
    memory.keep_answer(0, first, size)
    memory.keep_answer(1, second, size)  # past the bound: read back from the log instead
    assert list(memory.answers) == [0] and memory.answer_bytes == size
    memory.prune(RouteState())  # the cache holds nothing now
    assert memory.answers == {} and memory.answer_bytes == 0
    memory.keep_answer(1, second, size)
    assert list(memory.answers) == [1]
