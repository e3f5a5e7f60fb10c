"""The worker's exactly-once wiring (``SWITCHYARD_EXACTLY_ONCE``; the design is in
app/worker/transactions.py): its transactional writers per routing partition, the fencing
at each assignment, and the hand-off's wait for the router to catch up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from faust.types import TP

from agents.app import app, routing_log, routing_topic, settings
from app.contract import RouteTick, derived_id
from app.kafka import bootstrap_servers
from app.worker.read_committed import recovery_ends_at_committed_records
from app.worker.transactions import CatchUp, PartitionWriters, TransactionalWriter

ON = settings.exactly_once


def _writer(transactional_id: str) -> TransactionalWriter:
    return TransactionalWriter(
        bootstrap_servers(settings.broker),
        transactional_id,
        linger_ms=settings.producer_linger_ms,
        max_request_size=settings.producer_max_request_size,
    )


def owns(partition: int) -> bool:
    return TP(routing_topic.get_topic_name(), partition) in app.consumer.assignment()


#: The router's records and rows, per routing partition.
router_writers = PartitionWriters(_writer, f"{settings.app_id}-router", owns)
#: The calls' answers, outcomes and feedback, per routing partition (a call's route's).
call_writers = PartitionWriters(_writer, f"{settings.app_id}-calls", owns)
_catch_up = CatchUp(bootstrap_servers(settings.broker), routing_topic.get_topic_name())


class _Folded:
    """Per routing partition, the last offset the router acked in this assignment."""

    def __init__(self) -> None:
        self.through: dict[int, int] = {}
        self.assignment = 0
        self._changed = asyncio.Event()

    def acked(self, partition: int, offset: int) -> None:
        if offset > self.through.get(partition, -1):
            self.through[partition] = offset
            self._wake()

    def reset(self) -> None:
        self.through.clear()
        self.assignment += 1
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, partition: int, offset: int) -> bool:
        """True once the router acked ``offset``; False if a new assignment came first."""
        assignment = self.assignment
        while self.through.get(partition, -1) < offset:
            if self.assignment != assignment:
                return False
            await self._changed.wait()
        return True


folded = _Folded()


def routing_partitions(assigned: Iterable[TP]) -> set[int]:
    name = routing_topic.get_topic_name()
    return {tp.partition for tp in assigned if tp.topic == name}


async def fence(partitions: set[int]) -> None:
    """Start this worker's producers of ``partitions`` anew (aborting and fencing any
    earlier owner's, this worker's own before it lost them included) and stop those of
    partitions it no longer owns. Runs when an assignment arrives, before the tables are
    restored: no earlier owner commits a row or a record after that."""
    folded.reset()
    _catch_up.reset(set(range(settings.partitions)))
    for writers in (router_writers, call_writers):
        await writers.keep_only(partitions)
        await asyncio.gather(*(writers.renew(p) for p in partitions))


async def caught_up(partition: int, route: str) -> bool:
    """Wait until the router has folded the partition's routing log as far as it went when
    this worker was assigned it (every feedback an earlier owner committed). False: this
    worker does not own the partition (any more)."""
    while owns(partition):
        assignment = folded.assignment
        end = await _catch_up.end_of(partition)
        if _folded_to(partition, end) and folded.assignment == assignment:
            return True
        # A record after the end, so that the router acks past it even on an idle route.
        now = datetime.now(UTC)
        tick_id = derived_id("tick", route, now.isoformat())
        tick = RouteTick(id=tick_id, occurred_at=now, route=route)
        await routing_log.send(key=route.encode(), value=tick.model_dump_json())
        if await folded.wait_for(partition, end - 1):
            return True
    return False


def caught_up_now(partition: int) -> bool:
    """What :func:`caught_up` waits for, when it is known without a wait: this worker owns
    the partition, measured where its routing log stood when it got it, and the router has
    folded that far."""
    if not owns(partition):
        return False
    end = _catch_up.known_end(partition)
    return end is not None and _folded_to(partition, end)


def _folded_to(partition: int, end: int) -> bool:
    """The router has folded the partition up to ``end`` (exclusive)."""
    return folded.through.get(partition, -1) >= end - 1


@app.on_before_shutdown.connect  # type: ignore[arg-type]  # faust's stub lacks async receivers
async def _stop(sender: Any, *args: Any, **kwargs: Any) -> None:
    if ON:
        await router_writers.stop()
        await call_writers.stop()
        await _catch_up.stop()


async def _fence_assigned(assigned: set[Any]) -> None:
    await fence(routing_partitions(assigned))


if ON:
    app.before_assignment.append(_fence_assigned)
    recovery_ends_at_committed_records(bootstrap_servers(settings.broker))
