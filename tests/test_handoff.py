"""The hand-off record of a call is acked when the call ends, never when a stop or a
rebalance cancelled it: the partition's next owner must read it again and make the call
(else the attempt waits for the router's lost-attempt expiry: 130 s)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import agents.handoff as handoff
from app.worker.acks import InOrderAcks


class Manual:
    def __init__(self) -> None:
        self.acked: list[Any] = []

    async def ack(self, event: Any) -> bool:
        self.acked.append(event)
        return True


def record(partition: int, offset: int) -> Any:
    message = SimpleNamespace(topic="switchyard.dispatch", partition=partition, offset=offset)
    return SimpleNamespace(message=message)


def calls(*ends: tuple[Any, float]) -> tuple[Manual, InOrderAcks, list[asyncio.Future[None]]]:
    """Dispatch records received in this order, and a call for each (a sleep of its seconds)
    whose end acks its record with the hand-off's acker."""
    manual = Manual()
    acks = InOrderAcks(manual.ack)
    for event, _ in ends:
        acks.received(event)
    running = []
    for event, seconds in ends:
        call = asyncio.ensure_future(asyncio.sleep(seconds))
        call.add_done_callback(handoff._acker(acks, event))
        running.append(call)
    return manual, acks, running


async def test_a_finished_call_acks_its_dispatch_and_a_cancelled_one_does_not() -> None:
    finished, cancelled_record = record(0, 7), record(1, 3)
    manual, acks, (done, cancelled) = calls((finished, 0), (cancelled_record, 10))
    await done
    cancelled.cancel()
    await asyncio.sleep(0.01)
    assert manual.acked == [finished]
    assert acks.held() == 1  # left to the partition's next owner


async def test_a_call_ending_first_waits_for_the_dispatch_before_it() -> None:
    slow_record, fast_record = record(0, 7), record(0, 8)
    manual, _, (slow, fast) = calls((slow_record, 0.05), (fast_record, 0))
    await fast
    await asyncio.sleep(0.01)
    assert manual.acked == []  # a commit now would pass the call still running
    await slow
    await asyncio.sleep(0.01)
    assert manual.acked == [slow_record, fast_record]


class Calls:
    """Stands in for the call (``handoff._call``): records each, ends when told."""

    def __init__(self) -> None:
        self.made: list[tuple[str, int | None]] = []
        self.end = asyncio.Event()

    async def __call__(self, dispatch: Any, partition: int | None = None) -> None:
        self.made.append((dispatch.id, partition))
        await self.end.wait()


def committed(partition: int | None = None, problem: BaseException | None = None) -> Any:
    written: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    if problem is not None:
        written.set_exception(problem)
    else:
        written.set_result(SimpleNamespace(partition=partition))
    return written


def a_dispatch(dispatch_id: str) -> Any:
    return SimpleNamespace(id=dispatch_id, decision=SimpleNamespace(route="chat"))


async def test_exactly_once_a_committed_dispatch_is_called_at_once_where_nothing_waits(
    monkeypatch: Any,
) -> None:
    """Once the router's transaction wrote the dispatch, the call starts then, not a broker
    hop later; the hand-off agent reading the record finds it running, acks it when it ends
    and makes no second call."""
    made = Calls()
    monkeypatch.setattr(handoff, "_call", made)
    monkeypatch.setattr(handoff.exactly_once, "caught_up_now", lambda partition: partition == 3)

    async def caught_up(partition: int, route: str) -> bool:
        return True

    monkeypatch.setattr(handoff.exactly_once, "caught_up", caught_up)
    dispatch = a_dispatch("d-1")
    handoff._call_committed(dispatch, committed(3))
    assert "d-1" in handoff._running  # at once: the agent cannot start it a second time
    await asyncio.sleep(0)
    assert made.made == [("d-1", 3)]

    event = record(3, 11)
    manual = Manual()
    acks = InOrderAcks(manual.ack)
    acks.received(event)
    monkeypatch.setattr(handoff, "_read", lambda event, what="dispatch": dispatch)
    await handoff._take_committed(event, acks)
    await asyncio.sleep(0.01)
    assert made.made == [("d-1", 3)] and manual.acked == []
    made.end.set()
    await asyncio.sleep(0.01)
    assert manual.acked == [event]
    assert "d-1" in handoff._ended and "d-1" not in handoff._running


async def test_exactly_once_a_dispatch_waits_for_the_agent_when_not_caught_up_or_not_committed(
    monkeypatch: Any,
) -> None:
    made = Calls()
    monkeypatch.setattr(handoff, "_call", made)
    monkeypatch.setattr(handoff.exactly_once, "caught_up_now", lambda partition: partition == 3)
    handoff._call_committed(a_dispatch("d-2"), committed(2))  # partition 2: not caught up
    handoff._call_committed(a_dispatch("d-3"), committed(problem=RuntimeError("aborted")))
    handoff._running["d-4"] = asyncio.ensure_future(asyncio.sleep(0))  # the agent's, already
    handoff._call_committed(a_dispatch("d-4"), committed(3))
    await asyncio.sleep(0.01)
    assert made.made == []
    assert not {"d-2", "d-3"} & set(handoff._running)
    handoff._running.pop("d-4", None)
