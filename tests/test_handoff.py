"""The hand-off record of a call is acked when the call ends, never when a stop or a
rebalance cancelled it: the partition's next owner must read it again and make the call
(else the attempt waits for the router's lost-attempt expiry: 130 s)."""

from __future__ import annotations

import asyncio
from typing import Any

import agents.handoff as handoff


class Manual:
    def __init__(self) -> None:
        self.acked: list[Any] = []

    async def ack(self, event: Any) -> bool:
        self.acked.append(event)
        return True


async def test_a_finished_call_acks_its_dispatch_and_a_cancelled_one_does_not() -> None:
    manual = Manual()
    done = asyncio.ensure_future(asyncio.sleep(0))
    done.add_done_callback(handoff._acker(manual, "finished"))
    cancelled = asyncio.ensure_future(asyncio.sleep(10))
    cancelled.add_done_callback(handoff._acker(manual, "cancelled"))
    await done
    cancelled.cancel()
    await asyncio.sleep(0.01)
    assert manual.acked == ["finished"]
