"""The router's pipeline: fold an event, send what it produced, write the row once the
sends are acknowledged, and say which events are then safe to ack.

The order matters. The row lands in the local store at once and is what makes a
redelivered event a no-op (its position is in the row). Written before its sends were
acknowledged, a SIGKILL in between left a row that had applied the event and sends
that never reached the broker: the redelivered event was skipped, and its response
(or dispatch) was gone for good.

The fold goes through :class:`app.routing.driver.Driver`, the loop every user of the
fold shares; when it needs an earlier event of the log (a request that waited in the
line, a parked attempt's carrier) that its bounded memory does not hold, it is read
back from the routing topic (``RouterPorts.recall``).

Waiting for the broker on every event would tie the router to one round trip per
event, so the pipeline folds the next event from the newest state in memory while
earlier sends are in flight, and at each event of a route writes the row of the newest
state whose sends (and all before them) are acknowledged. An event is safe to ack (so
its offset can be committed) only once a row that includes it is written. A kill loses
only unacked events; they are redelivered and re-folded from the row, and send the
same derived-id records again (consumers drop duplicates by id).

Exactly-once (app/worker/transactions.py): the sends go into the routing partition's
transaction instead, the rows' changelog records join it, and the rows reach the local
store once it is committed.

Nothing here knows Faust or the broker: the rows, topics, log and policy are the
:class:`~app.router.ports.RouterPorts` it is given.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, cast

from app import metrics
from app.contract import AttemptFinished, RoutingLogEvent, route_of
from app.router.outbox import publish
from app.router.ports import RouterPorts
from app.routing.driver import Driver, Recalled, UnknownPolicyVersion
from app.routing.fold import Want
from app.routing.keys import KeyState
from app.routing.steps import KeyStep
from app.telemetry import spans
from app.worker.transactions import NotCommitted, Sender, TransactionalWriter, direct

log = logging.getLogger(__name__)


class SendFailed(RuntimeError):
    """A record of the router was not delivered: the worker must not go on."""


@dataclass
class _Folded:
    """An event folded and sent, whose row is not written yet."""

    #: The broker's event to ack once the row is written (None: folded from the local log).
    event: Any
    state: KeyState
    sends: list[asyncio.Future[Any]]


@dataclass
class Pipeline:
    """Per route: the newest folded state, and the folded events waiting for their row."""

    ports: RouterPorts
    #: The fold's loop, with its recall memory and policy versions.
    driver: Driver
    latest: dict[str, KeyState] = field(default_factory=dict)
    unwritten: dict[str, deque[_Folded]] = field(default_factory=dict)
    #: The routing partition of each route with unwritten events.
    partition_of: dict[str, int] = field(default_factory=dict)
    #: When rows of each partition were last written (monotonic seconds).
    written_at: dict[int, float] = field(default_factory=dict)
    #: Counts the rebalances (each :meth:`forget`): a commit under way across one acks nothing.
    generation: int = 0
    #: Exactly-once: when each partition's oldest uncommitted event was folded (monotonic).
    pending_since: dict[int, float] = field(default_factory=dict)

    def state(self, route_name: str) -> KeyState:
        latest = self.latest.get(route_name)
        return latest if latest is not None else self.ports.load_state(route_name)

    async def fold(
        self,
        parsed: RoutingLogEvent,
        event: Any,
        offset: int,
        partition: int = 0,
        raw: bytes | None = None,
        more: bool = False,
    ) -> list[Any]:
        """Fold, send, write what is acknowledged; return the events now safe to ack.

        ``more``: events are already waiting in the stream's buffer. The rows then wait
        for the last of them, and are written at most every ``router_flush_interval_s``
        (one changelog record for a batch of events), and at least every
        ``router_batch_max`` events of a route. Must run in ``event``'s stream context: a
        row write goes to its partition, so only rows of routes on that partition are
        written.
        """
        route_name = await self._fold(parsed, event, offset, partition, raw)
        return await self._write_if_due(partition, len(self.unwritten[route_name]), more)

    async def fold_local(
        self, parsed: RoutingLogEvent, offset: int, partition: int, raw: bytes
    ) -> str:
        """Fold a record of the local log (:mod:`app.worker.local_log`); return its route. No row
        is written here: that needs a stream context, and the broker's copy will bring one."""
        return await self._fold(parsed, None, offset, partition, raw)

    async def delivered_copy(
        self, event: Any, route_name: str, partition: int, more: bool
    ) -> list[Any]:
        """The broker's copy of a record folded from the local log: acked with the row that
        includes it, at once when that row is written already."""
        queue = self.unwritten.get(route_name)
        if not queue:
            return [event, *await self._write_if_due(partition, 0, more)]
        queue.append(_Folded(event, queue[-1].state, []))
        return await self._write_if_due(partition, len(queue), more)

    async def _fold(
        self, parsed: RoutingLogEvent, event: Any, offset: int, partition: int, raw: bytes | None
    ) -> str:
        route_name = route_of(parsed)
        started = time.perf_counter()
        self.driver.states[route_name] = self.state(route_name)
        try:
            step = await self._drive(
                self.driver.steps(parsed, offset, raw), route_name, partition, offset
            )
        except UnknownPolicyVersion:
            # A route handed over by a rebalance names a version this worker's follower
            # has not read yet: read the policy topic, then fold.
            await self.ports.refresh_policy()
            step = await self._drive(
                self.driver.steps(parsed, offset, raw), route_name, partition, offset
            )
        metrics.DECISION_SECONDS.observe(time.perf_counter() - started)
        spans.decided(step.dispatches, started)  # a span per decision, when tracing
        self.ports.remember_replies(parsed, step.dispatches)  # reply addresses, for errors
        send: Sender = direct
        if self.ports.transactions is not None:
            send = (await self._writer(partition)).sender()
        sends = await publish(step, self.ports.outbox, send, _answered(parsed))
        self.latest[route_name] = step.state
        self.partition_of[route_name] = partition
        self.pending_since.setdefault(partition, self.ports.monotonic())
        self.unwritten.setdefault(route_name, deque()).append(_Folded(event, step.state, sends))
        metrics.ROUTER_EVENTS.labels(type=parsed.type, applied=str(step.applied)).inc()
        self.ports.export_gauges(route_name, step)
        return route_name

    async def _write_if_due(self, partition: int, pending: int, more: bool) -> list[Any]:
        """Write the acknowledged rows of the partition's routes, unless the batch goes on
        (``more``, or rows written lately, at least once) and the route has fewer than the
        batch's maximum events pending; return the events now safe to ack."""
        if self.ports.transactions is not None:
            return await self._commit_due(more)
        if pending < self.ports.batch_max and (more or self._wrote_lately(partition)):
            return []
        self.written_at[partition] = self.ports.monotonic()
        names = [r for r, p in self.partition_of.items() if p == partition]
        safe: list[Any] = []
        for name in names:
            safe += self.write_acknowledged(name)
        return safe

    async def _commit_due(self, more: bool) -> list[Any]:
        """Exactly-once, where the records themselves wait for the commit: commit each
        partition's transaction once the events read together are folded (``more``
        false), or its oldest uncommitted event waited ``router_flush_interval_s``, or
        a route has the batch's maximum events pending; return the events now safe to
        ack. Any partition, whichever partition's event is being folded."""
        now = self.ports.monotonic()
        safe: list[Any] = []
        for partition in sorted(set(self.partition_of.values())):
            names = [r for r, p in self.partition_of.items() if p == partition]
            pending = max(len(self.unwritten[name]) for name in names)
            waited = now - self.pending_since.get(partition, now)
            batch_goes_on = more and pending < self.ports.batch_max
            if batch_goes_on and waited < self.ports.flush_interval_s:
                continue
            self.pending_since.pop(partition, None)
            safe += await self._commit(partition, names)
        return safe

    async def _commit(self, partition: int, names: list[str]) -> list[Any]:
        """Exactly-once: commit the partition's records and the rows of its routes in one
        transaction, then write the rows here; return the events now safe to ack.

        The rows committed reach the local store even if a rebalance came meanwhile (the
        partition may stay here, and Faust restores only partitions newly assigned): the
        store must never be behind the changelog's committed rows. A transaction a
        rebalance ended (this worker's producers start anew at each assignment) commits
        nothing: its events, unacked, are folded again from the rows."""
        transactions = self.ports.transactions
        assert transactions is not None
        writer = await self._writer(partition)
        changelog = transactions.changelog()
        generation = self.generation
        states = {name: self.unwritten[name][-1].state for name in names}
        rows = {}
        for name, state in states.items():
            key, value = transactions.row_record(name, state)
            rows[name] = writer.send(changelog, key, value, partition)
        try:
            await writer.commit()
        except NotCommitted as exc:
            if self.generation != generation:
                return []
            raise SendFailed(f"the transaction of routing partition {partition} failed") from exc
        for name, state in states.items():
            transactions.keep(name, state, partition)
        if rows:
            through = max(row.result().offset for row in rows.values())
            transactions.restored_through(partition, through)
        if self.generation != generation:
            return []  # the events will be delivered again, and found in the rows
        safe: list[Any] = []
        for name in names:
            safe += self.write_acknowledged(name, lambda _name, _state: None)
        return safe

    def _wrote_lately(self, partition: int) -> bool:
        """Rows of this partition were written less than ``router_flush_interval_s`` ago."""
        last = self.written_at.get(partition)
        return last is not None and self.ports.monotonic() - last < self.ports.flush_interval_s

    def write_acknowledged(
        self, route_name: str, save: Callable[[str, KeyState], None] | None = None
    ) -> list[Any]:
        """Write the row of the newest state whose sends (and all before) are acknowledged
        (``save``: instead of the ports' ``save_state``); return the events it includes."""
        queue = self.unwritten.get(route_name) or deque()
        done: list[_Folded] = []
        while queue and all(send.done() for send in queue[0].sends):
            for send in queue[0].sends:
                if send.cancelled() or send.exception() is not None:
                    # The producer gave up on a record: stop here, ack nothing more.
                    raise SendFailed(f"send for {route_name!r} failed") from (
                        None if send.cancelled() else send.exception()
                    )
            done.append(queue.popleft())
        if done:
            (save or self.ports.save_state)(route_name, done[-1].state)
        if not queue:
            self.latest.pop(route_name, None)  # the row is the newest state again
            self.unwritten.pop(route_name, None)
            self.partition_of.pop(route_name, None)
        return [folded.event for folded in done if folded.event is not None]

    def forget(self) -> None:
        """Partitions moved: unacked events will be redelivered (here or elsewhere)."""
        self.generation += 1
        self.pending_since.clear()
        self.latest.clear()
        self.unwritten.clear()
        self.partition_of.clear()
        self.driver.forget()

    async def _drive(
        self, run: Generator[Want, Recalled, KeyStep], route_name: str, partition: int, through: int
    ) -> KeyStep:
        """Run the driver's step, reading back from the log what its memory lacks."""
        try:
            want = next(run)
            while True:
                found = await self.ports.recall(
                    want, route_name, partition, through, self.driver.recall(route_name)
                )
                metrics.ROUTER_RECALLS.labels(kind=want.kind).inc()
                want = run.send(found)
        except StopIteration as done:
            return cast(KeyStep, done.value)

    async def _writer(self, partition: int) -> TransactionalWriter:
        """Exactly-once: the partition's transaction (SendFailed when this worker lost it)."""
        assert self.ports.transactions is not None
        try:
            return await self.ports.transactions.writer(partition)
        except NotCommitted as exc:
            raise SendFailed(str(exc)) from exc


def _answered(parsed: RoutingLogEvent) -> str | None:
    if isinstance(parsed, AttemptFinished) and parsed.answered:
        return parsed.outcome.request_id
    return None
