"""Router: the single writer of a route's state. Folds the routing log in order.

Read the row, call :func:`app.routing.fold.handle`, send what it produced,
write the row once the broker has acknowledged the sends, then ack the event.
Nothing else.

The order matters (issue 4). The row lands in the local store at once and is
what makes a redelivered event a no-op (its position is in the row). Written
before its sends were acknowledged, a SIGKILL in between left a row that had
applied the event and sends that never reached the broker: the redelivered
event was skipped, and its response (or dispatch) was gone for good.

The fold goes through :class:`app.routing.driver.Driver`, the loop every user
of the fold shares; when it needs an earlier event of the log (a request that
waited in the line, a parked attempt's carrier) that its bounded memory does not
hold, the router reads it back from the routing topic (:mod:`agents.recall`).

Waiting for the broker on every event would tie the router to one round trip
per event, so the router pipelines: it folds the next event from the newest
state in memory while earlier sends are in flight, and at each event of a route
writes the row of the newest state whose sends (and all before them) are
acknowledged. An event is acked (so its offset can be committed) only once a
row that includes it is written. A kill loses only unacked events; they are
redelivered and re-folded from the row, and send the same derived-id records
again (consumers drop duplicates by id). Records this worker wrote are folded once
the broker acknowledged them, in log order (:mod:`agents.local_log`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from faust import StreamT
from faust.types import TP, EventT
from pydantic import TypeAdapter, ValidationError

from agents import exactly_once, handoff, policy, replies, route_gauges
from agents.acks import InOrderAcks
from agents.app import (
    app,
    deadletter_topic,
    decisions_topic,
    responses_topic,
    routing_log,
    routing_topic,
    settings,
)
from agents.ingest import log_time, position_of
from agents.judge import read_judgement
from agents.local_log import LocalLog
from agents.recall import LogReader
from agents.transactions import NotCommitted, Sender, TransactionalWriter, direct
from app import metrics
from app.events import AttemptFinished, RouteTick, RoutingLogEvent, derived_id, route_of
from app.ingest import dead_letter
from app.kafka import bootstrap_servers
from app.routing.driver import Driver, Recalled, UnknownPolicyVersion
from app.routing.fold import Step, Want
from app.routing.state import RouteState
from app.runtime import policy_holder
from tables.routing import (
    changelog_name,
    keep_route_state,
    load_route_state,
    restored_through,
    row_record,
    save_route_state,
)

log = logging.getLogger(__name__)
_routing_event: TypeAdapter[RoutingLogEvent] = TypeAdapter(RoutingLogEvent)


class SendFailed(RuntimeError):
    """A record of the router was not delivered: the worker must not go on."""


@dataclass
class _Folded:
    """An event folded and sent, whose row is not written yet."""

    #: The broker's event to ack once the row is written (None: folded from the local log).
    event: Any
    state: RouteState
    sends: list[asyncio.Future[Any]]


def _policy() -> Any:
    return policy_holder().current


@dataclass
class Pipeline:
    """Per route: the newest folded state, and the folded events waiting for their row."""

    latest: dict[str, RouteState] = field(default_factory=dict)
    unwritten: dict[str, deque[_Folded]] = field(default_factory=dict)
    #: The routing partition of each route with unwritten events.
    partition_of: dict[str, int] = field(default_factory=dict)
    #: When rows of each partition were last written (monotonic seconds).
    written_at: dict[int, float] = field(default_factory=dict)
    driver: Driver = field(
        default_factory=lambda: Driver(
            _policy, max_recall_bytes=settings.recall_memory_bytes, book=policy_holder().book
        )
    )
    reader: LogReader | None = None

    def state(self, route_name: str) -> RouteState:
        latest = self.latest.get(route_name)
        return latest if latest is not None else load_route_state(route_name)

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
        """Fold a record of the local log (:mod:`agents.local_log`); return its route. No row
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
            await policy.follower().refresh()
            step = await self._drive(
                self.driver.steps(parsed, offset, raw), route_name, partition, offset
            )
        metrics.DECISION_SECONDS.observe(time.perf_counter() - started)
        replies.remember_event(parsed, step.dispatches)  # reply addresses, for errors
        send: Sender = direct
        if exactly_once.ON:
            send = (await _writer(partition)).sender()
        sends = await _publish(step, _answered(parsed), send)
        self.latest[route_name] = step.state
        self.partition_of[route_name] = partition
        self.unwritten.setdefault(route_name, deque()).append(_Folded(event, step.state, sends))
        metrics.ROUTER_EVENTS.labels(type=parsed.type, applied=str(step.applied)).inc()
        route_gauges.export(route_name, step)
        return route_name

    async def _write_if_due(self, partition: int, pending: int, more: bool) -> list[Any]:
        """Write the acknowledged rows of the partition's routes, unless the batch goes on
        (``more``, or rows written lately) and the route has fewer than the batch's maximum
        events pending; return the events now safe to ack."""
        if pending < settings.router_batch_max and (more or self._wrote_lately(partition)):
            return []
        self.written_at[partition] = time.monotonic()
        names = [r for r, p in self.partition_of.items() if p == partition]
        if exactly_once.ON:
            return await self._commit(partition, names)
        safe: list[Any] = []
        for name in names:
            safe += self.write_acknowledged(name)
        return safe

    async def _commit(self, partition: int, names: list[str]) -> list[Any]:
        """Exactly-once: commit the partition's records and the rows of its routes in one
        transaction, then write the rows here; return the events now safe to ack."""
        writer = await _writer(partition)
        changelog = changelog_name()
        rows = {}
        for name in names:
            key, value = row_record(name, self.unwritten[name][-1].state)
            rows[name] = writer.send(changelog, key, value, partition)
        try:
            await writer.commit()
        except NotCommitted as exc:
            raise SendFailed(f"the transaction of routing partition {partition} failed") from exc
        safe: list[Any] = []
        for name in names:
            safe += self.write_acknowledged(name, keep_route_state)
        if rows:
            restored_through(partition, max(row.result().offset for row in rows.values()))
        return safe

    def _wrote_lately(self, partition: int) -> bool:
        """Rows of this partition were written less than ``router_flush_interval_s`` ago."""
        last = self.written_at.get(partition)
        return last is not None and time.monotonic() - last < settings.router_flush_interval_s

    def write_acknowledged(
        self, route_name: str, save: Callable[[str, RouteState], None] | None = None
    ) -> list[Any]:
        """Write the row of the newest state whose sends (and all before) are acknowledged
        (``save``: instead of :func:`save_route_state`); return the events it includes."""
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
            (save or save_route_state)(route_name, done[-1].state)
        if not queue:
            self.latest.pop(route_name, None)  # the row is the newest state again
            self.unwritten.pop(route_name, None)
            self.partition_of.pop(route_name, None)
        return [folded.event for folded in done if folded.event is not None]

    def forget(self) -> None:
        """Partitions moved: unacked events will be redelivered (here or elsewhere)."""
        self.latest.clear()
        self.unwritten.clear()
        self.partition_of.clear()
        self.driver.forget()

    async def _drive(
        self, run: Generator[Want, Recalled, Step], route_name: str, partition: int, through: int
    ) -> Step:
        """Run the driver's step, reading back from the log what its memory lacks."""
        try:
            want = next(run)
            while True:
                found = await self._reader().recall(
                    want, route_name, partition, through, self.driver.recall(route_name)
                )
                metrics.ROUTER_RECALLS.labels(kind=want.kind).inc()
                want = run.send(found)
        except StopIteration as done:
            return cast(Step, done.value)

    def _reader(self) -> LogReader:
        if self.reader is None:
            self.reader = LogReader(
                bootstrap_servers(settings.broker),
                routing_topic.get_topic_name(),
                tansu=settings.tansu_compat,
                read_committed=exactly_once.ON,
            )
        return self.reader


_pipeline = Pipeline()
#: The route agent's acks, in offset order per partition (agents/acks.py).
_acks: InOrderAcks | None = None
#: Records this worker wrote, folded before the broker delivers them (agents/local_log.py).
_local = LocalLog()
#: One fold at a time, whichever way its record came.
_folding = asyncio.Lock()


async def _fold_local(partition: int) -> None:
    """Fold the partition's next records while this worker holds them."""
    async with _folding:
        while (found := _local.next_record(partition)) is not None:
            offset, value = found
            try:
                parsed = _routing_event.validate_json(value)
                route_name = await _pipeline.fold_local(parsed, offset, partition, value)
            except Exception:  # the broker's copy is folded (or dead-lettered) instead
                log.exception("router: local fold failed at %s:%d", partition, offset)
                _local.give_up(partition)
                return
            _local.folded(partition, offset, route_name)
            metrics.ROUTER_LOCAL_FOLDS.inc()


def _owns(partition: int) -> bool:
    return TP(routing_topic.get_topic_name(), partition) in app.consumer.assignment()


async def _writer(partition: int) -> TransactionalWriter:
    """Exactly-once: the partition's transaction (SendFailed when this worker lost it)."""
    try:
        return await exactly_once.router_writers.get(partition)
    except NotCommitted as exc:
        raise SendFailed(str(exc)) from exc


# A record of a transaction is not the log's until committed: exactly-once folds only what
# the broker delivers.
if settings.router_local_fold and not exactly_once.ON:
    _local.fold, _local.owns = _fold_local, _owns
    routing_log.on_delivered = _local.offer
handoff.state_of = _pipeline.state


def newest_states() -> dict[str, RouteState]:
    """States folded here whose rows are not written yet (they wait for their sends, or
    for the next event of their partition): what ``/admin`` shows over the rows."""
    return dict(_pipeline.latest)


@app.on_partitions_revoked.connect  # type: ignore[arg-type]  # faust's stub lacks async receivers
async def _forget_on_revoke(sender: Any, *args: Any, **kwargs: Any) -> None:
    _pipeline.forget()
    _local.forget()
    if _acks is not None:
        _acks.forget()


@app.on_before_shutdown.connect  # type: ignore[arg-type]  # faust's stub lacks async receivers
async def _stop_reader(sender: Any, *args: Any, **kwargs: Any) -> None:
    if _pipeline.reader is not None:
        await _pipeline.reader.stop()


@app.agent(routing_topic)
async def route(stream: StreamT[bytes]) -> None:
    global _acks
    manual: Any = cast(Any, stream).noack()  # acked once a written row includes the event

    async def ack(event: EventT[bytes]) -> None:
        await manual.ack(event)
        exactly_once.folded.acked(event.message.partition, event.message.offset)

    acks = _acks = InOrderAcks(ack if exactly_once.ON else manual.ack)
    metrics.ACKS_HELD.labels(agent="router").set_function(acks.held)
    async for event in manual.events():
        acks.received(event)
        message = event.message
        more = not manual.channel.queue.empty()  # rows wait for the batch's last event
        async with _folding:
            folded_for = _local.delivered(message.partition, message.offset)
            if folded_for is not None:
                safe = await _pipeline.delivered_copy(event, folded_for, message.partition, more)
            else:
                safe = await _fold_delivered(event, more)
        for done in safe:
            await acks.done(done)


async def _fold_delivered(event: EventT[bytes], more: bool) -> list[Any]:
    """Fold a record the broker delivered; return the events now safe to ack."""
    try:
        parsed = _routing_event.validate_json(event.value)
    except ValidationError as exc:
        await _dead_letter(event, f"unreadable routing-log event: {exc.error_count()} error(s)")
        return [event]
    message = event.message
    try:
        return await _pipeline.fold(
            parsed, event, message.offset, message.partition, event.value, more
        )
    except SendFailed:
        raise  # unacked events are redelivered after the restart
    except Exception as exc:  # a bug must not stop the route: record it and go on
        log.exception("router failed on %s", position_of(event))
        await _dead_letter(event, f"router error: {type(exc).__name__}")
        return [event]


async def _dead_letter(event: EventT[bytes], detail: str) -> None:
    letter = dead_letter(
        "internal",
        detail,
        event.value or b"",
        position_of(event),
        log_time(event),
        settings.deadletter_max_bytes,
    )
    await deadletter_topic.send(key=letter.id.encode(), value=letter.model_dump_json())


async def _publish(
    step: Step, answered: str | None = None, send: Sender = direct
) -> list[asyncio.Future[Any]]:
    """Send the step's records and start its calls; return the records' delivery futures.

    ``answered``: the request whose successful answer the executor already published
    (the feedback said so): the fold derives the same record, not sent again. ``send``:
    to the broker now, or into the partition's transaction (exactly-once).
    """
    pending: list[asyncio.Future[Any]] = []
    for dispatch in step.dispatches:
        decision = dispatch.decision
        key = decision.request_id.encode()
        pending.append(await send(decisions_topic, key, decision.model_dump_json(), None))
        pending.append(await handoff.hand_off(dispatch, send))
        metrics.BANDIT_CHOICE.labels(provider=decision.provider, strategy=decision.strategy).inc()
        metrics.DECISIONS_BY_DOMAIN.labels(
            domain=decision.domain or "none", candidate_filter=decision.candidate_filter
        ).inc()
    for record in step.records:  # budget asks, verdicts, settlements
        key = route_of(record).encode()
        pending.append(await send(routing_log, key, record.model_dump_json(), None))
    for response in step.responses:
        if response.request_id == answered and response.status == "ok":
            continue
        key = response.request_id.encode()
        pending.append(await send(responses_topic, key, response.model_dump_json(), None))
        replies.send_response(response, replies.address_of(response.request_id))
        await read_judgement(response)  # a judge request's failure, counted
        metrics.RESPONSES.labels(status=response.status, source="router").inc()
        if response.error is not None and response.attempts == 0 and response.error.code:
            metrics.REFUSALS.labels(code=response.error.code).inc()
    return pending


def _answered(parsed: RoutingLogEvent) -> str | None:
    if isinstance(parsed, AttemptFinished) and parsed.answered:
        return parsed.outcome.request_id
    return None


@app.timer(interval=settings.tick_interval_s)  # type: ignore[untyped-decorator]
async def tick_routes() -> None:
    """Publish the time on every configured route; the router expires lost attempts with it."""
    now = datetime.now(UTC)
    for route_name in policy_holder().current.config.route_names():
        tick = RouteTick(
            id=derived_id("tick", route_name, now.isoformat()), occurred_at=now, route=route_name
        )
        await routing_log.send(key=route_name.encode(), value=tick.model_dump_json())
