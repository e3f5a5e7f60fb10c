"""Calls ahead of the routing log's acknowledgement (app/router/ahead.py): the call the
router's fold will start is foreseen exactly, and a call ahead publishes only once the
fold decided the same dispatch; any other fold takes it back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any

import pytest
from factories import T0, accepted, finish, policy

import agents.handoff as handoff
from app import metrics
from app.contract import Dispatch, RequestAccepted
from app.router.ahead import CallsAhead, dispatch_ahead
from app.routing.driver import Driver
from app.routing.keys import KeyState
from app.routing.policy import Policy
from app.routing.state import RouteState


def counted(verdict: str) -> float:
    return float(metrics.CALLS_AHEAD.labels(verdict=verdict)._value.get())


def folded_route(pol: Policy) -> tuple[Driver, int]:
    """A route that has run a while: requests and their answers, in the driver."""
    driver = Driver(lambda: pol)
    position = 0
    for n in range(6):
        step = driver.fold(accepted(f"warm-{n}", T0 + n), position)
        position += 1
        (dispatch,) = step.dispatches
        driver.fold(finish(f"warm-{n}", dispatch.decision.deployment, T0 + n + 0.5), position)
        position += 1
    return driver, position


def foreseen(driver: Driver, event: RequestAccepted, position: int) -> Dispatch | None:
    state: KeyState = driver.state(event.route)
    return dispatch_ahead(state, event, position, driver.policy_for(state, event))


def test_the_call_foreseen_is_the_one_the_fold_starts() -> None:
    pol = policy()
    driver, position = folded_route(pol)
    for n in range(5):
        event = accepted(f"next-{n}", T0 + 10 + n)
        ahead = foreseen(driver, event, position)
        state_before = driver.state(event.route)
        (dispatch,) = driver.fold(event, position).dispatches
        assert ahead == dispatch  # the whole dispatch: decision, deadline, request
        assert driver.state(event.route) != state_before  # foreseeing changed nothing
        position += 1


def test_a_call_foreseen_at_another_position_is_not_the_folds() -> None:
    """A record another process wrote first moves the request's offset: the dispatch
    foreseen at the guessed one differs (its ``state_version``), so it is taken back."""
    pol = policy()
    driver, position = folded_route(pol)
    event = accepted("moved", T0 + 10)
    guessed = foreseen(driver, event, position)
    (dispatch,) = driver.fold(event, position + 1).dispatches
    assert guessed is not None and guessed != dispatch
    assert guessed.id == dispatch.id


def test_nothing_is_foreseen_for_a_request_the_fold_answers_without_a_call() -> None:
    pol = policy()
    driver, position = folded_route(pol)
    blocked = accepted("blocked", T0 + 10).model_copy(update={"input_blocked": "no-secrets"})
    assert foreseen(driver, blocked, position) is None
    state = driver.state("chat")
    answer = finish("warm-1", "cerebras-x:m1", T0 + 11)
    assert dispatch_ahead(state, answer, position, pol) is None  # only a request's call
    assert dispatch_ahead(RouteState(), accepted("x", T0), 0, pol) is not None
    streamed = accepted("streamed", T0 + 10)
    streamed = streamed.model_copy(
        update={"request": streamed.request.model_copy(update={"stream": True})}
    )
    assert (
        foreseen(driver, streamed, position) is None
    )  # its pieces would go out before the verdict


class Call:
    """A call ahead: waits for its verdict; says what it saw."""

    def __init__(self) -> None:
        self.verdict: bool | None = None
        self.published = asyncio.Event()

    async def __call__(self, claimed: Awaitable[bool]) -> None:
        self.verdict = await claimed
        if self.verdict:
            self.published.set()


def ahead_of(pol: Policy | None = None) -> tuple[Dispatch, Driver, int]:
    driver, position = folded_route(pol or policy())
    event = accepted("req", T0 + 10)
    dispatch = foreseen(driver, event, position)
    assert dispatch is not None
    return dispatch, driver, position


async def test_a_call_claimed_by_its_fold_publishes() -> None:
    dispatch, _, _ = ahead_of()
    calls, call = CallsAhead(), Call()
    claimed_before = counted("claimed")
    task = calls.start(dispatch, 2, call)
    assert dispatch.id in calls and len(calls) == 1
    assert calls.claim(dispatch.model_copy()) is task  # an equal dispatch, as the fold makes
    await asyncio.wait_for(call.published.wait(), 1)
    assert call.verdict is True and not task.cancelled() and len(calls) == 0
    assert counted("claimed") == claimed_before + 1


async def test_a_call_the_fold_decided_otherwise_is_taken_back() -> None:
    dispatch, driver, position = ahead_of()
    (real,) = driver.fold(dispatch.accepted, position + 1).dispatches
    calls, call = CallsAhead(), Call()
    taken_back_before = counted("taken_back")
    task = calls.start(dispatch, 2, call)
    assert calls.claim(real) is None  # the hand-off then calls the fold's own dispatch
    with pytest.raises(asyncio.CancelledError):
        await task
    assert call.verdict in (None, False) and not call.published.is_set()
    assert counted("taken_back") == taken_back_before + 1


async def test_a_fold_at_or_past_the_guess_that_claimed_nothing_takes_the_call_back() -> None:
    dispatch, _, position = ahead_of()
    calls = CallsAhead()
    task = calls.start(dispatch, 2, Call())
    calls.settle(2, position - 1)  # an earlier record of the partition
    calls.settle(3, position + 5)  # another partition
    assert dispatch.id in calls
    calls.settle(2, position)  # the guessed position, folded for another record
    assert dispatch.id not in calls
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_call_no_fold_comes_for_is_taken_back_after_the_timeout() -> None:
    dispatch, _, _ = ahead_of()
    calls, call = CallsAhead(timeout_s=0.01), Call()
    task = calls.start(dispatch, 2, call)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert dispatch.id not in calls and not call.published.is_set()


async def test_a_rebalance_takes_every_call_back() -> None:
    dispatch, _, _ = ahead_of()
    calls = CallsAhead()
    tasks = [calls.start(dispatch, 2, Call())]
    other = dispatch.model_copy(update={"id": "other"})
    tasks.append(calls.start(other, 1, Call()))
    calls.take_back_all()
    assert len(calls) == 0
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)


class DispatchLog:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, *, key: bytes, value: Any, headers: Any = None) -> asyncio.Future[Any]:
        self.sent.append(key)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(SimpleNamespace(partition=2, offset=len(self.sent)))
        return done


class Calls:
    """Stands in for ``handoff._call``: each call made, with whether it was ahead."""

    def __init__(self) -> None:
        self.made: list[tuple[str, bool]] = []
        self.end = asyncio.Event()

    async def __call__(
        self, dispatch: Any, partition: int | None = None, claimed: Any = None
    ) -> None:
        self.made.append((dispatch.id, claimed is not None))
        if claimed is not None and not await claimed:
            return
        await self.end.wait()


@pytest.fixture
def hand_off_here(monkeypatch: pytest.MonkeyPatch) -> tuple[Calls, DispatchLog]:
    made, log = Calls(), DispatchLog()
    monkeypatch.setattr(handoff, "_call", made)
    monkeypatch.setattr(handoff, "dispatch_log", log)
    monkeypatch.setattr(handoff, "calls_ahead", CallsAhead())
    return made, log


async def test_the_hand_off_of_a_claimed_call_makes_no_second_call(
    hand_off_here: tuple[Calls, DispatchLog],
) -> None:
    made, log = hand_off_here
    dispatch, _, _ = ahead_of()
    handoff.call_ahead(dispatch, 2)
    await asyncio.sleep(0)
    assert made.made == [(dispatch.id, True)]
    await handoff.hand_off(dispatch.model_copy())
    await asyncio.sleep(0)
    assert made.made == [(dispatch.id, True)] and len(log.sent) == 1  # the record, always
    assert dispatch.id in handoff._running  # the hand-off agent finds it running
    made.end.set()
    await asyncio.sleep(0.01)
    assert dispatch.id not in handoff._running and dispatch.id in handoff._ended


async def test_the_hand_off_of_another_dispatch_calls_it_and_drops_the_call_ahead(
    hand_off_here: tuple[Calls, DispatchLog],
) -> None:
    made, _ = hand_off_here
    dispatch, driver, position = ahead_of()
    (real,) = driver.fold(dispatch.accepted, position + 1).dispatches
    handoff.call_ahead(dispatch, 2)
    await asyncio.sleep(0)
    await handoff.hand_off(real)
    await asyncio.sleep(0)
    assert made.made == [(dispatch.id, True), (real.id, False)]
    assert handoff._running[real.id] is not None and len(handoff.calls_ahead) == 0
    made.end.set()
    await asyncio.sleep(0.01)
    assert real.id not in handoff._running


class Foresight:
    """The router's wiring of calls ahead (agents/router.py), on a route folded this far."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import agents.router as router
        from app.worker.local_log import LocalLog

        self.router = router
        pol = policy()
        self.driver, self.position = folded_route(pol)
        self.started: list[tuple[Dispatch, int]] = []
        local = LocalLog(folded_through={2: self.position - 1})
        monkeypatch.setattr(router, "_local", local)
        monkeypatch.setattr(router, "_owns", lambda partition: partition == 2)
        monkeypatch.setattr(router, "_partition_of_route", {"chat": 2})
        monkeypatch.setattr(router, "_delivered_queue", None)
        monkeypatch.setattr(router.routing_log, "unacknowledged", 1)
        monkeypatch.setattr(router._pipeline, "latest", {"chat": self.driver.state("chat")})
        monkeypatch.setattr(router._pipeline.driver, "policy", lambda: pol)
        monkeypatch.setattr(router._pipeline.driver, "book", type(self.driver.book)())
        monkeypatch.setattr(handoff, "has_room", lambda: True)
        monkeypatch.setattr(
            handoff, "call_ahead", lambda dispatch, p: self.started.append((dispatch, p))
        )

    def offer(self, request_id: str) -> list[tuple[Dispatch, int]]:
        event = accepted(request_id, T0 + 10)
        self.router._call_ahead("chat", event.model_dump_json())
        return self.started


def test_a_request_on_a_quiet_partition_is_called_ahead_at_the_next_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = Foresight(monkeypatch)
    ((dispatch, partition),) = seen.offer("quiet")
    (folded,) = seen.driver.fold(dispatch.accepted, seen.position).dispatches
    assert partition == 2 and dispatch == folded


def test_no_call_ahead_where_the_next_offset_cannot_be_foreseen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = Foresight(monkeypatch)
    router = seen.router
    monkeypatch.setattr(router.routing_log, "unacknowledged", 2)  # another record on its way
    assert seen.offer("a") == []
    monkeypatch.setattr(router.routing_log, "unacknowledged", 1)
    router._local.delivered_foreign(2, time.monotonic())  # another process wrote there
    assert seen.offer("b") == []
    router._local.delivered_foreign(2, time.monotonic() - router.QUIET_FOR_CALLS_AHEAD_S - 0.1)
    monkeypatch.setattr(router, "_owns", lambda partition: False)  # the partition moved
    assert seen.offer("c") == []
    monkeypatch.setattr(router, "_owns", lambda partition: True)
    router._local.waiting[2] = {seen.position + 3: b"{}"}  # acknowledged, not folded yet
    assert seen.offer("d") == []
    router._local.waiting.clear()
    assert [d.decision.request_id for d, _ in seen.offer("e")] == ["e"]  # quiet again
