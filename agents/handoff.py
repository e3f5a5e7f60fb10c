"""The hand-off of calls: the worker that decides an attempt calls at once; the log
covers a crash, and other workers take what it has no room for.

The router starts each attempt's call in its own process right after deciding it
(:func:`launch`: no broker hop between a decision and its call), up to
``executor_concurrency`` calls at once, and sends the dispatch to
``switchyard.dispatch`` keyed by route: the record lives on the routing log's
partition, so it belongs to the worker that owns the route (Faust assigns the
same partition of co-subscribed topics to the same worker). That worker's
:func:`handoff` agent reads it back and acks it once the call has ended here. A
dispatch it has not seen (the partition moved after a crash or a rebalance) is
called now if the route's row still has the attempt open, else dropped: a kill
loses no attempt, a provider is called twice at most, and the outcome counts once
(the fold applies an outcome only while its attempt is open).

A call may have started earlier still, ahead of the fold (:func:`call_ahead`,
app/router/ahead.py): the hand-off of a dispatch equal to it lets it publish
instead of starting another; the hand-off of any other takes it back.

When the deciding worker has no room left, the dispatch goes to
``switchyard.spill`` instead, keyed by request id, and any worker's :func:`spill`
agent makes the call: a hot route is not capped by one process's HTTP capacity.

Both agents ack a record once its call has ended, in offset order per partition
(app/worker/acks.py): a kill or a rebalance leaves every call still running to the
partition's next owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, cast

from faust import StreamT
from pydantic import ValidationError

from agents import exactly_once
from agents.app import app, dispatch_log, dispatch_topic, settings, spill_log, spill_topic
from agents.executor import CallTakenBack, run_dispatch
from app import metrics
from app.contract import Dispatch
from app.router.ahead import CallsAhead
from app.routing.keys import KeyState
from app.routing.state import RouteState, attempt_key
from app.worker.acks import InOrderAcks
from app.worker.transactions import NotCommitted, Sender, direct
from tables.routing import load_route_state

log = logging.getLogger(__name__)
#: Calls running in this process, by dispatch id.
_running: dict[str, asyncio.Task[None]] = {}
#: Dispatch ids whose call ended here lately (a fast call ends before its record is read).
_ended: OrderedDict[str, None] = OrderedDict()
_ENDED_KEPT = 65_536
#: Acks scheduled from a call's end (kept referenced until done).
_acking: set[asyncio.Future[None]] = set()
#: The hand-off and spill agents' acks, in offset order per partition (app/worker/acks.py).
_acks: InOrderAcks | None = None
_spill_acks: InOrderAcks | None = None
#: Spilled calls running in this process.
_spilled: set[asyncio.Task[None]] = set()
#: Calls started ahead of their fold (app/router/ahead.py), not claimed yet.
calls_ahead = CallsAhead()


#: The dispatch id, in a header: the hand-off agent reads back this worker's own
#: dispatches without parsing them (a dispatch carries the whole request).
DISPATCH_ID_HEADER = "switchyard-dispatch-id"


async def hand_off(dispatch: Dispatch, send: Sender = direct) -> asyncio.Future[Any]:
    """Call here at once (the record, keyed by route, covers a crash), or spill the call to
    any worker when this one has no room. Returns the record's delivery future.

    Exactly-once (``send`` into the router's transaction): the record; the call starts
    once the transaction is committed (:func:`_call_committed`), or once the hand-off
    agent reads the record committed (:func:`_take_committed`).
    """
    value = dispatch.model_dump_json()
    headers = [(DISPATCH_ID_HEADER, dispatch.id.encode())]
    key = dispatch.decision.route.encode()
    if exactly_once.ON:
        written = await send(dispatch_log, key, value, headers)
        written.add_done_callback(partial(_call_committed, dispatch))
        return written
    ahead = calls_ahead.claim(dispatch)
    if ahead is not None:  # the call started ahead of this fold is this one: it goes on
        _adopt(dispatch.id, ahead)
        return await dispatch_log.send(key=key, value=value, headers=headers)
    if has_room():
        sent = await dispatch_log.send(key=key, value=value, headers=headers)
        launch(dispatch)
        return sent
    metrics.SPILLED.inc()
    return await spill_log.send(key=dispatch.decision.request_id.encode(), value=value)


def _call_committed(dispatch: Dispatch, written: asyncio.Future[Any]) -> None:
    """Exactly-once: the router's transaction wrote the dispatch, so the decision stands
    whatever happens next: call now rather than after reading the record back (a broker
    hop), when the hand-off agent would make the call without waiting (the router has
    folded the partition as far as :func:`agents.exactly_once.caught_up` asks). The agent
    then finds the call running and acks the record once it ends; otherwise it makes it."""
    if written.cancelled() or written.exception() is not None:
        return  # not committed: the decision is taken back
    partition = written.result().partition  # the dispatch's: its routing partition
    if dispatch.id in _running or dispatch.id in _ended:
        return
    if exactly_once.caught_up_now(partition):
        launch(dispatch, partition, in_slot=True)


def dispatch_id_of(event: Any) -> str | None:
    """The dispatch id its header names (None: a record without the header)."""
    for name, value in event.message.headers or ():
        if name == DISPATCH_ID_HEADER and isinstance(value, bytes):
            return value.decode()
    return None


def has_room() -> bool:
    return len(_running) + len(calls_ahead) < settings.executor_concurrency


def call_ahead(dispatch: Dispatch, partition: int) -> None:
    """Start the call the router's fold of a record on its way to the broker will decide
    (app/router/ahead.py): it publishes nothing until that fold claims it."""
    calls_ahead.start(dispatch, partition, partial(_call, dispatch, None))


def launch(
    dispatch: Dispatch, partition: int | None = None, *, in_slot: bool = False
) -> asyncio.Task[None]:
    """Start the attempt's call in this process (``partition``: its routing partition,
    whose transaction takes its records, exactly-once; ``in_slot``: the call waits for
    one of the exactly-once calls' slots, which its caller did not take)."""
    call = _call_in_slot(dispatch, partition) if in_slot else _call(dispatch, partition)
    task = asyncio.ensure_future(call)
    _adopt(dispatch.id, task)
    return task


def _adopt(dispatch_id: str, task: asyncio.Task[None]) -> None:
    """``task`` makes the dispatch's call here: running, then ended."""
    _running[dispatch_id] = task
    task.add_done_callback(lambda done: _end(dispatch_id, done))


def _end(dispatch_id: str, task: asyncio.Task[None]) -> None:
    if _running.get(dispatch_id) is task:
        del _running[dispatch_id]
    if not task.cancelled() and isinstance(task.exception(), NotCommitted):
        return  # its records were not written: the call is to be made again
    _ended[dispatch_id] = None
    while len(_ended) > _ENDED_KEPT:
        _ended.popitem(last=False)


async def _call_in_slot(dispatch: Dispatch, partition: int | None) -> None:
    async with _slots:
        await _call(dispatch, partition)


async def _call(
    dispatch: Dispatch, partition: int | None = None, claimed: Awaitable[bool] | None = None
) -> None:
    try:
        await run_dispatch(dispatch, partition, claimed)
    except NotCommitted:
        raise  # the task says so: the hand-off makes the call again if it still owns it
    except CallTakenBack:
        return  # made ahead of a fold that decided otherwise: nothing was published
    except Exception as exc:  # an attempt that reports nothing expires in the router
        decision = dispatch.decision
        log.error(
            "call %s#%s failed: %s", decision.request_id, decision.attempt, type(exc).__name__
        )


#: The route's newest state (the router's, once it is imported: folded, maybe not yet
#: written), else its row.
state_of: Callable[[str], KeyState] = load_route_state


def _read(event: Any, what: str = "dispatch") -> Dispatch | None:
    """The dispatch a record holds; None (logged) when it is unreadable."""
    try:
        return Dispatch.model_validate_json(event.value)
    except ValidationError:
        log.error("unreadable %s at offset %s", what, event.message.offset)
        return None


def _in_background(step: Coroutine[Any, Any, None]) -> None:
    """Run ``step`` on its own, held (from the garbage collector) until it ends."""
    future = asyncio.ensure_future(step)
    _acking.add(future)
    future.add_done_callback(_acking.discard)


def _still_open(dispatch: Dispatch) -> bool:
    decision = dispatch.decision
    state = state_of(decision.route)
    key = attempt_key(decision.request_id, decision.attempt)
    # Past its deadline: reported expired, no call.
    return isinstance(state, RouteState) and key in state.open_attempts


@app.agent(dispatch_topic)
async def handoff(stream: StreamT[bytes]) -> None:
    global _acks
    manual: Any = cast(Any, stream).noack()  # acked once the call has ended
    acks = _acks = InOrderAcks(manual.ack)
    metrics.ACKS_HELD.labels(agent="handoff").set_function(acks.held)
    async for event in manual.events():
        acks.received(event)
        if exactly_once.ON:
            await _take_committed(event, acks)
            continue
        task = _task_for(event)
        if task is None:
            await acks.done(event)
            continue
        task.add_done_callback(_acker(acks, event))


def _task_for(event: Any) -> asyncio.Task[None] | None:
    """The call of this dispatch record running here, started now if its worker is gone and
    its attempt still open; None when there is no call to wait for."""
    known = dispatch_id_of(event)
    if known is not None and (known in _running or known in _ended):
        return _running.get(known)  # decided here: nothing to parse
    dispatch = _read(event)
    if dispatch is None:
        return None
    task = _running.get(dispatch.id)
    if task is None and dispatch.id not in _ended and _still_open(dispatch):
        task = launch(dispatch)  # decided by a worker that is gone
    return task


#: Exactly-once: calls of committed dispatches running at once, at most.
_slots = asyncio.Semaphore(settings.executor_concurrency)


async def _take_committed(event: Any, acks: InOrderAcks) -> None:
    """Exactly-once: make the call of a committed dispatch record, once the router has
    caught up with the partition (every feedback an earlier owner committed is folded),
    if its attempt is still open and its call has not ended here. Acked once the call's
    records are committed; a call whose records were not is made again."""
    dispatch = _read(event)
    if dispatch is None:
        await acks.done(event)
        return
    partition = event.message.partition
    if not await exactly_once.caught_up(partition, dispatch.decision.route):
        return  # the partition moved: its next owner reads the record again
    task = _running.get(dispatch.id)
    if task is None:
        if dispatch.id in _ended or not _still_open(dispatch):
            await acks.done(event)
            return
        await _slots.acquire()
        task = launch(dispatch, partition)
        task.add_done_callback(lambda _: _slots.release())
    task.add_done_callback(_committed_acker(acks, event))


def _committed_acker(acks: InOrderAcks, event: Any) -> Callable[[asyncio.Task[None]], None]:
    """Ack ``event`` once the call's records are committed; take it again if they were not."""

    def ended(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        again = isinstance(task.exception(), NotCommitted)
        _in_background(_take_committed(event, acks) if again else acks.done(event))

    return ended


@app.on_partitions_revoked.connect  # type: ignore[arg-type]  # faust's stub lacks async receivers
async def _forget_on_revoke(sender: Any, *args: Any, **kwargs: Any) -> None:
    calls_ahead.take_back_all()
    for acks in (_acks, _spill_acks):
        if acks is not None:
            acks.forget()


def _acker(acks: InOrderAcks, event: Any) -> Callable[[asyncio.Task[None]], None]:
    """Ack ``event`` once the call's task has ended; never for a call cancelled by a stop
    or a rebalance: the dispatch must be read again by the partition's next owner."""

    def ack(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        _in_background(acks.done(event))

    return ack


@app.agent(spill_topic)
async def spill(stream: StreamT[bytes]) -> None:
    """Make the calls other workers had no room for, ``spill_concurrency`` at once; each
    record is acked (in offset order) once its call has ended, so a kill leaves it to
    the partition's next owner."""
    global _spill_acks
    manual: Any = cast(Any, stream).noack()
    acks = _spill_acks = InOrderAcks(manual.ack)
    metrics.ACKS_HELD.labels(agent="spill").set_function(acks.held)
    slots = asyncio.Semaphore(settings.spill_concurrency)
    async for event in manual.events():
        acks.received(event)
        dispatch = _read(event, "spilled dispatch")
        if dispatch is None:
            await acks.done(event)
            continue
        await slots.acquire()
        task = asyncio.ensure_future(_call(dispatch))
        _spilled.add(task)
        task.add_done_callback(_spilled.discard)
        task.add_done_callback(lambda _: slots.release())
        task.add_done_callback(_acker(acks, event))


@app.on_before_shutdown.connect  # type: ignore[arg-type]  # faust's stub lacks async receivers
async def _cancel_calls(sender: Any, *args: Any, **kwargs: Any) -> None:
    """Calls still running are left to the partition's next owner (their records are unacked)."""
    calls_ahead.take_back_all()
    for task in [*_running.values(), *_spilled]:
        task.cancel()
