"""Router: the single writer of a route's state. Folds the routing log in order.

Reads the routing topic, folds each event through the router service's pipeline
(:mod:`app.router.pipeline`: fold, send, write the row once the sends are acknowledged),
bound here to the worker's topics and tables,
and acks events in offset order once a written row includes them (app/worker/acks.py).
Records this worker wrote are folded once the broker acknowledged them, in log order
(:mod:`app.worker.local_log`). An unreadable event, or one the fold fails on, is
dead-lettered with its reason. A timer publishes the time on every route.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from datetime import UTC, datetime
from typing import Any, cast

from faust import StreamT
from faust.types import TP, EventT
from pydantic import TypeAdapter, ValidationError

from agents import exactly_once, handoff, ingest, policy, replies, route_gauges
from agents.app import (
    WRITER_HEADER,
    WRITER_ID,
    app,
    deadletter_topic,
    decisions_topic,
    responses_topic,
    routing_log,
    routing_topic,
    settings,
)
from agents.judge import read_judgement
from app import metrics
from app.contract import RequestAccepted, Response, RouteTick, RoutingLogEvent, derived_id
from app.ingest import dead_letter
from app.kafka import bootstrap_servers
from app.policy.holder import policy_holder
from app.router.ahead import dispatch_ahead
from app.router.pipeline import Pipeline, SendFailed
from app.router.ports import Outbox, RouterPorts, Transactions
from app.routing.driver import Driver, UnknownPolicyVersion
from app.routing.keys import KeyState
from app.worker.acks import InOrderAcks
from app.worker.intake import log_time, position_of
from app.worker.local_log import LocalLog
from app.worker.recall import LogReader
from app.worker.transactions import TransactionalWriter
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


def _reply(response: Response) -> None:
    replies.send_response(response, replies.address_of(response.request_id))


async def _refresh_policy() -> None:
    await policy.follower().refresh()


async def _router_writer(partition: int) -> TransactionalWriter:
    return await exactly_once.router_writers.get(partition)


#: The routing log read back (a waiting request, a parked attempt's carrier).
_reader = LogReader(
    bootstrap_servers(settings.broker),
    routing_topic.get_topic_name(),
    tansu=settings.tansu_compat,
    read_committed=exactly_once.ON,
)
_ports = RouterPorts(
    load_state=load_route_state,
    save_state=save_route_state,
    outbox=Outbox(
        decisions=decisions_topic,
        responses=responses_topic,
        routing_log=routing_log,
        hand_off=handoff.hand_off,
        reply=_reply,
        answered=read_judgement,
    ),
    recall=_reader.recall,
    refresh_policy=_refresh_policy,
    remember_replies=replies.remember_event,
    export_gauges=route_gauges.export,
    batch_max=settings.router_batch_max,
    flush_interval_s=settings.router_flush_interval_s,
    transactions=Transactions(
        writer=_router_writer,
        changelog=changelog_name,
        row_record=row_record,
        keep=keep_route_state,
        restored_through=restored_through,
    )
    if exactly_once.ON
    else None,
)
_pipeline = Pipeline(
    _ports,
    Driver(
        lambda: policy_holder().current,
        max_recall_bytes=settings.recall_memory_bytes,
        book=policy_holder().book,
    ),
)
#: The route agent's acks, in offset order per partition (app/worker/acks.py).
_acks: InOrderAcks | None = None
#: Records this worker wrote, folded before the broker delivers them (app/worker/local_log.py).
_local = LocalLog()
#: One fold at a time, whichever way its record came.
_folding = asyncio.Lock()
#: Per route, the routing partition its requests were last folded from.
_partition_of_route: dict[str, int] = {}
#: The route agent's buffer of records delivered and not folded yet.
_delivered_queue: asyncio.Queue[Any] | None = None
#: Seconds a partition must have had no record of another process for a call ahead on
#: it: a guess is wrong when another process writes to the partition within the round
#: trip, and each wrong guess is a provider call made for nothing.
QUIET_FOR_CALLS_AHEAD_S = 1.0


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
            if isinstance(parsed, RequestAccepted):
                _partition_of_route[route_name] = partition
            if handoff.calls_ahead:
                handoff.calls_ahead.settle(partition, offset)


def _owns(partition: int) -> bool:
    return TP(routing_topic.get_topic_name(), partition) in app.consumer.assignment()


# A record of a transaction is not the log's until committed: exactly-once folds only what
# the broker delivers.
if settings.router_local_fold and not exactly_once.ON:
    _local.fold, _local.owns = _fold_local, _owns
    routing_log.on_delivered = _local.offer
handoff.state_of = _pipeline.state


def _call_ahead(route_name: str, value: bytes | str) -> None:
    """Ingest sent a request's record to the routing log: start its call now when the fold
    that will decide it can be foreseen (app/router/ahead.py): this worker owns the
    route's partition, has folded every record of it that it knows of, has no other
    routing-log record on its way, and no other process wrote to the partition lately;
    the record is then the partition's next."""
    if routing_log.unacknowledged != 1 or _folding.locked() or not handoff.has_room():
        return
    if _delivered_queue is not None and not _delivered_queue.empty():
        return  # records delivered, not folded yet
    partition = _partition_of_route.get(route_name)
    if partition is None or not _owns(partition):
        return
    position = _local.next_offset(partition, time.monotonic(), QUIET_FOR_CALLS_AHEAD_S)
    if position is None:
        return
    # In a context of its own: Faust reads a row from the current event's partition, and
    # the current event here is the request's, on another topic.
    contextvars.Context().run(_foresee, route_name, value, partition, position)


def _foresee(route_name: str, value: bytes | str, partition: int, position: int) -> None:
    try:
        event = _routing_event.validate_json(value)
        state = _pipeline.state(route_name)
        policy_now = _pipeline.driver.policy_for(state, event)
        dispatch = dispatch_ahead(state, event, position, policy_now)
    except (ValidationError, UnknownPolicyVersion):
        return  # the router's fold says what becomes of it
    except Exception:  # the call waits for the fold, as without calls ahead
        log.exception("router: no call ahead for a request of %s", route_name)
        return
    if dispatch is not None:
        handoff.call_ahead(dispatch, partition)


if settings.call_ahead and not exactly_once.ON:
    ingest.on_accepted = _call_ahead


def newest_states() -> dict[str, KeyState]:
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
    await _reader.stop()


@app.agent(routing_topic)
async def route(stream: StreamT[bytes]) -> None:
    global _acks, _delivered_queue
    manual: Any = cast(Any, stream).noack()  # acked once a written row includes the event
    _delivered_queue = manual.channel.queue

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
                if not _written_here(message.headers):
                    _local.delivered_foreign(message.partition, time.monotonic())
                safe = await _fold_delivered(event, more)
            if handoff.calls_ahead:
                handoff.calls_ahead.settle(message.partition, message.offset)
        for done in safe:
            await acks.done(done)


def _written_here(headers: Any) -> bool:
    """Whether a routing-log record's headers name this process as its writer."""
    return any(name == WRITER_HEADER and value == WRITER_ID for name, value in headers or ())


async def _fold_delivered(event: EventT[bytes], more: bool) -> list[Any]:
    """Fold a record the broker delivered; return the events now safe to ack."""
    try:
        parsed = _routing_event.validate_json(event.value)
    except ValidationError as exc:
        await _dead_letter(event, f"unreadable routing-log event: {exc.error_count()} error(s)")
        return [event]
    message = event.message
    if isinstance(parsed, RequestAccepted):
        _partition_of_route[parsed.route] = message.partition
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


@app.timer(interval=settings.tick_interval_s)  # type: ignore[untyped-decorator]
async def tick_routes() -> None:
    """Publish the time on every configured route; the router expires lost attempts with it."""
    now = datetime.now(UTC)
    for route_name in policy_holder().current.config.route_names():
        tick = RouteTick(
            id=derived_id("tick", route_name, now.isoformat()), occurred_at=now, route=route_name
        )
        await routing_log.send(key=route_name.encode(), value=tick.model_dump_json())
