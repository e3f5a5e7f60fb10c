"""The router's local log (app/worker/local_log.py): records this worker wrote, folded once
the broker acknowledged them, never out of the log's order, never twice.

The router-level tests use the fakes of tests/router_fakes.py: the fold is the
real one, the broker and the table are not.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import faust
import pytest
from factories import T0, accepted, finish
from faust.streams import _current_event
from router_fakes import Wired, wired

from app.contract import RoutingLogEvent
from app.router.pipeline import Pipeline
from app.worker.local_log import LocalLog

__all__ = ["wired"]  # the fixture (tests/router_fakes.py)


class Folds:
    """A fold that records what it was offered, in order, as the router's would."""

    def __init__(self, log: LocalLog) -> None:
        self.log = log
        self.seen: list[tuple[int, int, bytes]] = []
        self.without_event: list[bool] = []
        log.fold = self.fold

    async def fold(self, partition: int) -> None:
        while (found := self.log.next_record(partition)) is not None:
            offset, value = found
            self.seen.append((partition, offset, value))
            self.without_event.append(faust.current_event() is None)
            self.log.folded(partition, offset, "chat")


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def first_request_folded(wired: Wired, request_id: str) -> Pipeline:
    """A router whose route's row includes one request, decided and acknowledged (offset 0)."""
    wired.broker.acknowledge = True
    worker = wired.router()
    assert await worker.fold(accepted(request_id, T0, offset=0), "ev0", 0) == ["ev0"]
    return worker


async def fold_locally(worker: Pipeline, event: RoutingLogEvent, offset: int) -> str:
    """``event``, written by this worker at ``offset`` of partition 0, folded from here."""
    return await worker.fold_local(event, offset, 0, event.model_dump_json().encode())


async def test_a_partition_is_unknown_until_the_broker_delivers_from_it() -> None:
    log = LocalLog()
    folds = Folds(log)
    log.offer(0, 5, b"r5")  # no record of partition 0 delivered yet: not ours to fold
    await settle()
    assert folds.seen == [] and log.waiting == {}
    assert log.delivered(0, 4) is None
    log.offer(0, 5, b"r5")
    await settle()
    assert folds.seen == [(0, 5, b"r5")]
    assert log.delivered(0, 5) == "chat"  # the broker's copy: only acked
    assert log.delivered(0, 6) is None  # a record written elsewhere: folded as usual


async def test_a_gap_holds_records_until_the_broker_fills_it() -> None:
    log = LocalLog()
    folds = Folds(log)
    log.delivered(1, 10)
    log.offer(1, 12, b"r12")  # 11 was written by another process: not read yet
    log.offer(1, 13, b"r13")
    await settle()
    assert folds.seen == []
    assert log.delivered(1, 11) is None  # folded from the broker: now 12 is next
    await settle()
    assert [offset for _, offset, _ in folds.seen] == [12, 13]
    log.offer(1, 14, b"r14")
    await settle()
    assert [offset for _, offset, _ in folds.seen] == [12, 13, 14]
    # A record the broker delivered first is not folded again from here.
    log.offer(1, 16, b"r16")
    assert log.delivered(1, 15) is None and log.delivered(1, 16) is None
    log.offer(1, 17, b"r17")
    await settle()
    assert [offset for _, offset, _ in folds.seen] == [12, 13, 14, 17]


async def test_a_rebalance_forgets_every_partition() -> None:
    log = LocalLog()
    folds = Folds(log)
    log.delivered(2, 0)
    log.forget()
    log.offer(2, 1, b"r1")
    await settle()
    assert folds.seen == []
    log.folded(2, 1, "chat")  # a fold that was running when the partitions moved
    assert log.folded_through == {} and log.delivered(2, 1) is None


async def test_the_next_offset_is_known_only_where_every_known_record_is_folded() -> None:
    """The offset the next record of a partition will have (for calls ahead): unknown
    before the broker delivered from the partition, while a record waits to be folded,
    within the quiet time after another process's record, and after a rebalance."""
    log = LocalLog()
    Folds(log)
    assert log.next_offset(3, now=100.0, quiet_s=1.0) is None
    log.delivered(3, 7)
    assert log.next_offset(3, now=100.0, quiet_s=1.0) == 8
    log.offer(3, 9, b"r9")  # 8 was written elsewhere, not read yet: 9 waits
    assert log.next_offset(3, now=100.0, quiet_s=1.0) is None
    log.delivered_foreign(3, now=100.0)
    assert log.delivered(3, 8) is None
    await settle()  # 9 folded from here
    assert log.next_offset(3, now=100.5, quiet_s=1.0) is None  # another process wrote
    assert log.next_offset(3, now=101.5, quiet_s=1.0) == 10
    log.forget()
    assert log.next_offset(3, now=200.0, quiet_s=1.0) is None


async def test_the_fold_runs_outside_the_senders_event() -> None:
    """The acknowledgement's callback runs in the sender's context (the ingest's event of
    ``llm.requests``), and Faust reads a table row from the current event's partition:
    folded in that context, the router read the wrong partition's (empty) row and decided
    from a fresh state (`switchyard demo` lost a retry; replay mismatched every decision)."""
    log = LocalLog()
    folds = Folds(log)
    log.delivered(0, 0)

    class Event:
        pass

    sender_event = Event()
    token = _current_event.set(weakref.ref(sender_event))  # type: ignore[arg-type]
    try:
        assert faust.current_event() is sender_event
        log.offer(0, 1, b"r1")
    finally:
        _current_event.reset(token)
    await settle()
    assert folds.without_event == [True]


async def test_a_local_fold_decides_before_the_broker_delivers_and_acks_with_the_row(
    wired: Wired,
) -> None:
    broker, table = wired.broker, wired.table
    worker = await first_request_folded(wired, "first")
    assert await fold_locally(worker, accepted("local", T0, offset=1), 1) == "chat"
    # Decided and called at once; nothing written or acked before the broker's copy comes.
    assert [d.decision.request_id for d in broker.launched] == ["first", "local"]
    assert table["chat"].position == 0
    assert await worker.delivered_copy("ev1", "chat", 0, more=False) == ["ev1"]
    assert table["chat"].position == 1
    assert list(table["chat"].open_attempts) == ["first#1", "local#1"]
    assert len(broker.launched) == 2  # the copy decided nothing again


async def test_a_kill_after_a_local_fold_loses_nothing(
    wired: Wired,
) -> None:
    broker, table = wired.broker, wired.table
    worker = await first_request_folded(wired, "a")
    (dispatch,) = broker.launched
    done = finish("a", dispatch.decision.deployment, T0 + 1)
    broker.acknowledge = False
    await fold_locally(worker, done, 1)
    assert await worker.delivered_copy("ev1", "chat", 0, more=False) == []  # its send is pending
    assert table["chat"].position == 0
    broker.kill()

    broker.acknowledge = True
    restarted = wired.router()  # a new process: the copy is folded from the row
    assert await restarted.fold(done, "ev1", 1) == ["ev1"]
    assert [r["request_id"] for r in broker.records("responses_topic")] == ["a"]
    assert table["chat"].position == 1 and table["chat"].open_attempts == {}


@pytest.mark.parametrize("copies_first", [True, False])
async def test_the_copy_of_a_record_whose_row_is_written_is_acked_at_once(
    wired: Wired, copies_first: bool
) -> None:
    table = wired.table
    worker = await first_request_folded(wired, "x")
    await fold_locally(worker, accepted("y", T0, offset=1), 1)
    acked: list[Any] = []
    if copies_first:
        acked += await worker.delivered_copy("ev1", "chat", 0, more=False)
    else:  # another event of the partition wrote the row first
        await fold_locally(worker, accepted("z", T0, offset=2), 2)
        acked += await worker.delivered_copy("ev1", "chat", 0, more=False)
        acked += await worker.delivered_copy("ev2", "chat", 0, more=False)
    assert acked == (["ev1"] if copies_first else ["ev1", "ev2"])
    assert table["chat"].position == (1 if copies_first else 2)


async def test_nothing_is_folded_from_here_for_a_partition_no_longer_assigned() -> None:
    """A revoked partition's record may still come out of a stream's buffer after the
    rebalance forgot it: the partition is known again, but another worker owns it now."""
    log = LocalLog()
    folds = Folds(log)
    assigned = {0}
    log.owns = assigned.__contains__
    log.delivered(3, 7)  # a stale record of partition 3
    log.offer(3, 8, b"r8")
    await settle()
    assert folds.seen == []
    assigned.add(3)  # assigned here again by a later rebalance
    log.forget()
    log.delivered(3, 9)
    log.offer(3, 10, b"r10")
    await settle()
    assert [offset for _, offset, _ in folds.seen] == [10]


async def test_records_the_broker_delivered_are_dropped_from_the_oldest() -> None:
    log = LocalLog()
    log.delivered(0, 0)
    for offset in range(2, 6):  # 1 is another worker's: a gap
        log.offer(0, offset, b"r")
    assert list(log.waiting[0]) == [2, 3, 4, 5]
    log.delivered(0, 1)
    log.delivered(0, 2)
    log.delivered(0, 3)
    assert list(log.waiting[0]) == [4, 5]


async def test_the_fold_runs_at_most_max_ahead_of_the_brokers_copies() -> None:
    """Rows are written only when the broker's copies come (a stream context): folding
    further ahead would keep every folded state in memory (a 10,000 burst: 172 MB)."""
    log = LocalLog(max_ahead=2)
    folds = Folds(log)
    log.delivered(0, 0)
    for offset in range(1, 6):
        log.offer(0, offset, b"r")
    await settle()
    assert [offset for _, offset, _ in folds.seen] == [1, 2]
    assert log.delivered(0, 1) == "chat"  # a copy: room for one more
    await settle()
    assert [offset for _, offset, _ in folds.seen] == [1, 2, 3]
    log.delivered(0, 2)
    log.delivered(0, 3)
    await settle()
    assert [offset for _, offset, _ in folds.seen] == [1, 2, 3, 4, 5]
