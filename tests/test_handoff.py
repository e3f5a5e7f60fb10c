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


async def test_a_finished_call_acks_its_dispatch_and_a_cancelled_one_does_not() -> None:
    manual = Manual()
    acks = InOrderAcks(manual.ack)
    finished, cancelled_record = record(0, 7), record(1, 3)
    acks.received(finished)
    acks.received(cancelled_record)
    done = asyncio.ensure_future(asyncio.sleep(0))
    done.add_done_callback(handoff._acker(acks, finished))
    cancelled = asyncio.ensure_future(asyncio.sleep(10))
    cancelled.add_done_callback(handoff._acker(acks, cancelled_record))
    await done
    cancelled.cancel()
    await asyncio.sleep(0.01)
    assert manual.acked == [finished]
    assert acks.held() == 1  # left to the partition's next owner


async def test_a_call_ending_first_waits_for_the_dispatch_before_it() -> None:
    manual = Manual()
    acks = InOrderAcks(manual.ack)
    slow_record, fast_record = record(0, 7), record(0, 8)
    acks.received(slow_record)
    acks.received(fast_record)
    slow = asyncio.ensure_future(asyncio.sleep(0.05))
    slow.add_done_callback(handoff._acker(acks, slow_record))
    fast = asyncio.ensure_future(asyncio.sleep(0))
    fast.add_done_callback(handoff._acker(acks, fast_record))
    await fast
    await asyncio.sleep(0.01)
    assert manual.acked == []  # a commit now would pass the call still running
    await slow
    await asyncio.sleep(0.01)
    assert manual.acked == [slow_record, fast_record]
