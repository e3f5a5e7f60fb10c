"""Acks in offset order (app/worker/acks.py): a committed offset never passes an event in flight."""

from __future__ import annotations

import bisect
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

from faust.transport.consumer import Consumer

from app.worker.acks import InOrderAcks

TOPIC = "switchyard.routing"


def event(offset: int, partition: int = 0) -> Any:
    return SimpleNamespace(message=SimpleNamespace(topic=TOPIC, partition=partition, offset=offset))


class FaustOffsets:
    """Faust's own commit arithmetic (``Consumer._new_offset``) over the acks it is given."""

    def __init__(self, committed: int) -> None:
        self.tp = (TOPIC, 0)
        self._acked: defaultdict[Any, list[int]] = defaultdict(list)
        self._acked_index: defaultdict[Any, set[int]] = defaultdict(set)
        self._gap: defaultdict[Any, Any] = defaultdict(lambda: None)
        self._committed_offset: dict[Any, int] = {self.tp: committed}

    async def ack(self, done: Any) -> None:
        offset = done.message.offset
        if offset not in self._acked_index[self.tp]:
            bisect.insort(self._acked[self.tp], offset)
            self._acked_index[self.tp].add(offset)

    def next_commit(self) -> int | None:
        offset: int | None = Consumer._new_offset(self, self.tp)  # type: ignore[arg-type]
        return offset


async def test_faust_alone_commits_past_one_event_still_in_flight() -> None:
    # Why app/worker/acks.py exists: with 31 (the next offset to read) in flight and
    # 32..40 acked, faust commits 41, and a rebalance now would lose 31.
    faust = FaustOffsets(committed=31)
    for offset in range(32, 41):
        await faust.ack(event(offset))
    assert faust.next_commit() == 41


async def test_in_order_acks_hold_the_commit_at_the_event_in_flight() -> None:
    faust = FaustOffsets(committed=31)
    acks = InOrderAcks(faust.ack)
    events = [event(offset) for offset in range(31, 41)]
    for received in events:
        acks.received(received)
    for finished in events[1:]:
        await acks.done(finished)
    assert faust.next_commit() is None
    assert acks.held() == 10
    await acks.done(events[0])
    assert faust.next_commit() == 41
    assert acks.held() == 0


async def test_each_partition_has_its_own_line() -> None:
    acked: list[tuple[int, int]] = []

    async def ack(done: Any) -> None:
        acked.append((done.message.partition, done.message.offset))

    acks = InOrderAcks(ack)
    a0, a1, b0 = event(5, partition=0), event(6, partition=0), event(9, partition=1)
    for received in (a0, a1, b0):
        acks.received(received)
    await acks.done(a1)
    await acks.done(b0)
    assert acked == [(1, 9)]
    await acks.done(a0)
    assert acked == [(1, 9), (0, 5), (0, 6)]


async def test_a_partition_read_again_drops_what_the_old_reading_held() -> None:
    acked: list[int] = []

    async def ack(done: Any) -> None:
        acked.append(done.message.offset)

    acks = InOrderAcks(ack)
    old = [event(offset) for offset in (10, 11, 12)]
    for received in old:
        acks.received(received)
    again = event(10)  # a rebalance: read again from the committed offset
    acks.received(again)
    await acks.done(old[1])  # the old reading's event: redelivered, never acked
    await acks.done(old[0])
    assert acked == []
    await acks.done(again)
    assert acked == [10]


async def test_events_finishing_after_a_revoke_are_not_acked() -> None:
    acked: list[int] = []

    async def ack(done: Any) -> None:
        acked.append(done.message.offset)

    acks = InOrderAcks(ack)
    early = event(3)
    acks.received(early)
    acks.forget()
    await acks.done(early)
    assert acked == [] and acks.held() == 0
