"""Calls ahead of the routing log's acknowledgement: a request's call started while its
record is on its way to the broker, its records held until the router's own fold of
that record decides the same call.

A request's decision waits for one broker round trip: the router folds the request's
routing-log record at its offset, which only the broker's acknowledgement gives. When
this worker owns the route's partition and has folded every record of it it knows of,
the record's offset is almost always the next one; the fold is a pure function of the
route's state, the event, its position and the policy, so the call that fold will start
is known before the acknowledgement comes (:func:`dispatch_ahead`). Its call can start
at once, and the broker round trip and the fold run beside the provider's answer instead
of before it.

Nothing is decided early, and nothing is written early: the router still folds the
record once the broker has it, at its real offset, and writes and sends what that fold
produced. A call ahead only publishes its outcome once that fold decided an equal
dispatch (:meth:`CallsAhead.claim`); any other fold at or past the guessed position
takes it back (:meth:`CallsAhead.settle`): the call is cancelled, or its answer dropped,
and the router's own dispatch is called as always. A call taken back was made for
nothing (counted in ``switchyard_calls_ahead_total``); a guess is wrong only when another
process wrote to the partition within the round trip.

Nothing here knows Faust or the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from app import metrics
from app.contract import Dispatch, RequestAccepted, RoutingLogEvent
from app.routing.fold import handle, wanted
from app.routing.keys import KeyState
from app.routing.policy import Policy
from app.routing.state import RouteState

#: Seconds a call ahead waits for the router's fold before it is taken back (its record
#: was refused, or the fold never came): far past any broker round trip.
VERDICT_TIMEOUT_S = 30.0


def dispatch_ahead(
    state: KeyState, event: RoutingLogEvent, position: int, policy: Policy
) -> Dispatch | None:
    """The call the fold of ``event`` at ``position`` on a route in ``state`` starts,
    when that fold starts exactly one, of that request, and needs nothing read back from
    the log; else None. Never for a ``stream: true`` request: its answer's pieces reach the
    client while the call runs, before any verdict."""
    if not isinstance(event, RequestAccepted) or not isinstance(state, RouteState):
        return None
    if event.request.stream is True:
        return None
    step = handle(state, event, position, policy)
    if wanted(step.state) is not None or len(step.dispatches) != 1 or step.responses:
        return None
    dispatch = step.dispatches[0]
    return dispatch if dispatch.decision.request_id == event.request.request_id else None


#: A call's coroutine, given the verdict on it: True once the router's fold decided the
#: same dispatch (the call publishes its outcome), False when it is taken back.
Run = Callable[[Awaitable[bool]], Coroutine[Any, Any, None]]


@dataclass
class _Ahead:
    dispatch: Dispatch
    partition: int
    task: asyncio.Task[None]
    verdict: asyncio.Future[bool]
    timeout: asyncio.TimerHandle | None = None


@dataclass
class CallsAhead:
    """The calls started ahead of their fold, by dispatch id."""

    timeout_s: float = VERDICT_TIMEOUT_S
    _calls: dict[str, _Ahead] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, dispatch_id: object) -> bool:
        return dispatch_id in self._calls

    def start(self, dispatch: Dispatch, partition: int, run: Run) -> asyncio.Task[None]:
        """Start ``dispatch``'s call, guessed for ``partition`` at its decision's
        ``state_version``; its records wait for the verdict."""
        loop = asyncio.get_running_loop()
        verdict: asyncio.Future[bool] = loop.create_future()
        task = loop.create_task(run(verdict))
        ahead = _Ahead(dispatch, partition, task, verdict)
        ahead.timeout = loop.call_later(self.timeout_s, self._expire, dispatch.id, verdict)
        self._calls[dispatch.id] = ahead
        return task

    def claim(self, dispatch: Dispatch) -> asyncio.Task[None] | None:
        """The router's fold decided ``dispatch``: the call ahead of it, let through, when
        it is the same call; else None (a call ahead under its id is taken back)."""
        ahead = self._calls.pop(dispatch.id, None)
        if ahead is None:
            return None
        if ahead.dispatch != dispatch:
            _take_back(ahead)
            return None
        _give_verdict(ahead, True)
        metrics.CALLS_AHEAD.labels(verdict="claimed").inc()
        return ahead.task

    def settle(self, partition: int, through: int) -> None:
        """The router folded ``partition`` through offset ``through``: a call ahead of a
        position up to there that no fold claimed was guessed wrong."""
        for dispatch_id, ahead in list(self._calls.items()):
            if ahead.partition == partition and ahead.dispatch.decision.state_version <= through:
                del self._calls[dispatch_id]
                _take_back(ahead)

    def take_back_all(self) -> None:
        """Partitions moved, or the worker stops: no call ahead will be claimed here."""
        calls, self._calls = list(self._calls.values()), {}
        for ahead in calls:
            _take_back(ahead)

    def _expire(self, dispatch_id: str, verdict: asyncio.Future[bool]) -> None:
        ahead = self._calls.get(dispatch_id)
        if ahead is not None and ahead.verdict is verdict:
            del self._calls[dispatch_id]
            _take_back(ahead)


def _give_verdict(ahead: _Ahead, claimed: bool) -> None:
    if ahead.timeout is not None:
        ahead.timeout.cancel()
    if not ahead.verdict.done():
        ahead.verdict.set_result(claimed)


def _take_back(ahead: _Ahead) -> None:
    _give_verdict(ahead, False)
    ahead.task.cancel()  # a call still running ends now; one that ended drops its answer
    metrics.CALLS_AHEAD.labels(verdict="taken_back").inc()
