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
