"""The one loop that drives the fold, for every user of it.

The live router, replay, the counterfactual, the synthetic log, the simulator
and the benches all fold routing-log events through :class:`Driver`: it calls
:func:`app.routing.fold.handle` for each event of a route, then takes what the
state says is ready (:func:`~app.routing.fold.wanted`: parked attempts whose wait
is over, the head of the line) with events recalled from the log, until nothing
is. An event of a budget's key goes to :func:`app.routing.budget_fold.handle`,
which recalls nothing.

What the fold may recall is kept in a :class:`Recall` per route: the requests
on the route's line and the carriers of its parked attempts. Drivers that hold
the whole log keep them all; the live router bounds what it keeps in memory and
reads the rest back from the routing topic (:mod:`app.worker.recall`). Either way the
events are the log's own, so every driver takes the same steps.

:meth:`Driver.steps` is a generator: it yields each :class:`Want` it cannot
answer from memory and expects the recalled ``(position, event)`` back. Sync
users call :meth:`Driver.fold` (memory is complete for them); the live router
drives the generator and awaits its reads.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field

from pydantic import TypeAdapter

from app.contract import (
    AttemptFinished,
    PolicyChanged,
    RequestAccepted,
    RoutingLogEvent,
    route_of,
)
from app.routing import budget_fold
from app.routing.book import PolicyBook
from app.routing.budget_state import BudgetState
from app.routing.fold import Step, Want, handle, take, wanted
from app.routing.keys import KeyState, new_state
from app.routing.policy import Policy
from app.routing.state import RouteState
from app.routing.steps import BudgetStep, KeyStep

Recalled = tuple[int, RoutingLogEvent]


class NotInMemory(LookupError):
    """A sync driver was asked for an event it does not hold (a bug in its caller)."""


class UnknownPolicyVersion(LookupError):
    """A route's state names a policy version the driver's book lacks (a live router
    must read the policy topic before it folds)."""


@dataclass
class Recall:
    """One route's events the fold may need again, by routing-log position.

    ``line`` holds, in order, every request of the line at positions after
    ``line_from`` up to the last one kept (None: it knows nothing of the line, as
    after a restart). It keeps requests while their total size stays within
    ``max_bytes`` (None: no bound); past it, ``complete`` turns False and the rest
    must be read back from the log when the line gets to them.
    """

    max_bytes: int | None = None
    #: Requests as they were read (their record's bytes when the caller gave them: a
    #: parsed event weighs several times its JSON), parsed when recalled.
    line: list[tuple[int, RoutingLogEvent | bytes]] = field(default_factory=list)
    line_from: int | None = None
    complete: bool = False
    carriers: dict[int, RoutingLogEvent] = field(default_factory=dict)
    line_bytes: int = 0
    sizes: dict[int, int] = field(default_factory=dict)
    #: The answers the route's response cache refers to, by position (a cache hit's
    #: response is the source's completion), within ``max_bytes`` of their own.
    answers: dict[int, RoutingLogEvent] = field(default_factory=dict)
    answer_sizes: dict[int, int] = field(default_factory=dict)
    answer_bytes: int = 0

    def keep_answer(self, position: int, event: RoutingLogEvent, size: int) -> None:
        """Keep a cached answer while their total size stays within ``max_bytes``; past
        it, it is read back from the log when a hit needs it."""
        if position in self.answers:
            return
        if self.max_bytes is not None and self.answer_bytes + size > self.max_bytes:
            return
        self.answers[position] = event
        self.answer_sizes[position] = size
        self.answer_bytes += size

    def start_line(self, after: int) -> None:
        """The line starts after ``after``: what it holds from now on is all of it."""
        self._clear_line()
        self.line_from, self.complete = after, True

    def keep_line(
        self, position: int, event: RequestAccepted, size: int, raw: bytes | None = None
    ) -> None:
        if self.line_from is None or not self.complete:
            return
        if self.max_bytes is not None and self.line_bytes + size > self.max_bytes:
            self.complete = False  # this one and those after it stay in the log only
            return
        self.line.append((position, event if raw is None else raw))
        self.sizes[position] = size
        self.line_bytes += size

    def head_after(self, after: int) -> Recalled | None:
        if self.line_from is None or after < self.line_from:
            return None
        index = bisect.bisect_right(self.line, after, key=lambda item: item[0])
        if index == len(self.line):
            return None
        position, kept = self.line[index]
        return position, _parsed(kept)

    def refill(
        self, after: int, events: list[tuple[int, RoutingLogEvent, bytes | None]], up_to_date: bool
    ) -> None:
        """The line's requests after ``after``, read back from the log in order (with their
        record bytes when known); True ``up_to_date`` when the read reached the route's
        newest event."""
        self.start_line(after)
        for position, event, raw in events:
            if isinstance(event, RequestAccepted):
                self.keep_line(position, event, record_size(event, raw), raw)
        if not up_to_date:
            self.complete = False

    def find(self, want: Want) -> Recalled | None:
        if want.kind == "parked":
            event = self.carriers.get(want.position)
            return None if event is None else (want.position, event)
        if want.kind == "cached":
            event = self.answers.get(want.position)
            return None if event is None else (want.position, event)
        return self.head_after(want.position)

    def prune(self, state: RouteState) -> None:
        """Drop what the state no longer refers to."""
        if self.carriers:
            wanted_carriers = {p.carrier for p in state.parking.parked.values()}
            for position in [p for p in self.carriers if p not in wanted_carriers]:
                del self.carriers[position]
        if self.answers:
            cached = {e.position for e in state.cache.entries.values()}
            for position in [p for p in self.answers if p not in cached]:
                del self.answers[position]
                self.answer_bytes -= self.answer_sizes.pop(position, 0)
        line = state.parking.line
        if not line.waiting:
            self._clear_line()
            self.line_from = None
            return
        index = bisect.bisect_right(self.line, line.after, key=lambda item: item[0])
        for position, _ in self.line[:index]:
            self.line_bytes -= self.sizes.pop(position, 0)
        del self.line[:index]

    def _clear_line(self) -> None:
        self.line.clear()
        self.sizes.clear()
        self.line_bytes = 0


def record_size(event: RoutingLogEvent, raw: bytes | None) -> int:
    """What an event weighs against a recall bound: its record's bytes when known."""
    return len(raw) if raw is not None else len(event.model_dump_json())


def find_in_log(log: Mapping[int, RoutingLogEvent], route: str, want: Want) -> Recalled | None:
    """What ``want`` names, looked up in a whole log held in memory."""
    if want.kind in ("parked", "cached"):
        event = log.get(want.position)
        return None if event is None else (want.position, event)
    after = [
        p
        for p, e in log.items()
        if p > want.position and isinstance(e, RequestAccepted) and route_of(e) == route
    ]
    return (min(after), log[min(after)]) if after else None


_routing_event: TypeAdapter[RoutingLogEvent] = TypeAdapter(RoutingLogEvent)


def _parsed(kept: RoutingLogEvent | bytes) -> RoutingLogEvent:
    return _routing_event.validate_json(kept) if isinstance(kept, bytes) else kept


@dataclass
class Driver:
    """Per key: the state (a route's or a budget's), per route the recall memory, and
    the policy versions.

    Each event is folded with the policy version its key's state names, from
    ``book``; ``policy`` is the one to use while the book is empty (a log that never
    carried a policy: tests, benches, simulators), and always when ``follow_versions``
    is False (a counterfactual: its alternative policy throughout).
    """

    policy: Callable[[], Policy]
    states: dict[str, KeyState] = field(default_factory=dict)
    memory: dict[str, Recall] = field(default_factory=dict)
    max_recall_bytes: int | None = None
    book: PolicyBook = field(default_factory=PolicyBook)
    follow_versions: bool = True

    def policy_for(self, state: KeyState, event: RoutingLogEvent) -> Policy:
        """The policy to fold ``event`` with on a key in ``state``."""
        if not self.follow_versions:
            return self.policy()
        version = state.policy_version
        if isinstance(event, PolicyChanged):
            self.book.add(event.version, event.document, event.hash)
            version = max(version, event.version)
        if not self.book:
            return self.policy()
        if version == 0:
            first = self.book.first()
            assert first is not None
            return first
        policy = self.book.get(version)
        if policy is None:
            raise UnknownPolicyVersion(f"{route_of(event)}: policy version {version} is unknown")
        return policy

    def state(self, key: str) -> KeyState:
        found = self.states.get(key)
        return new_state(key) if found is None else found

    def route_state(self, route: str) -> RouteState:
        """A route's state (TypeError for a budget's key)."""
        state = self.state(route)
        if not isinstance(state, RouteState):
            raise TypeError(f"{route} is a budget's key, not a route")
        return state

    def recall(self, route: str) -> Recall:
        memory = self.memory.get(route)
        if memory is None:
            memory = self.memory[route] = Recall(self.max_recall_bytes)
        return memory

    def steps(
        self, event: RoutingLogEvent, position: int, raw: bytes | None = None
    ) -> Generator[Want, Recalled, KeyStep]:
        """Fold one event and take what is ready; yield each recall memory cannot answer."""
        key = route_of(event)
        before = self.state(key)
        if isinstance(before, BudgetState):
            return self._fold_ledger(key, before, event, position)
        policy, memory, step = self._handle(key, before, event, position, raw)
        while (want := wanted(step.state)) is not None:
            found = memory.find(want)
            if found is None:
                found = yield want
            step = self._take(memory, step, want, found, policy)
        return self._end(key, memory, step)

    def fold(
        self,
        event: RoutingLogEvent,
        position: int,
        log: Mapping[int, RoutingLogEvent] | None = None,
    ) -> KeyStep:
        """:meth:`steps` for a caller that holds the log: what memory lacks (a driver
        resumed from a stored state) is looked up in ``log``, by position. The same steps,
        without a generator (the replay's hot loop)."""
        key = route_of(event)
        before = self.state(key)
        if isinstance(before, BudgetState):
            return self._fold_ledger(key, before, event, position)
        policy, memory, step = self._handle(key, before, event, position, None)
        while (want := wanted(step.state)) is not None:
            found = memory.find(want)
            if found is None:
                found = find_in_log(log or {}, key, want)
                if found is None:
                    raise NotInMemory(f"{key}: {want} is not in memory or the log")
            step = self._take(memory, step, want, found, policy)
        return self._end(key, memory, step)

    def _fold_ledger(
        self, key: str, before: BudgetState, event: RoutingLogEvent, position: int
    ) -> BudgetStep:
        step = budget_fold.handle(before, event, position, self.policy_for(before, event))
        self.states[key] = step.state
        return step

    def _handle(
        self,
        route: str,
        before: RouteState,
        event: RoutingLogEvent,
        position: int,
        raw: bytes | None,
    ) -> tuple[Policy, Recall, Step]:
        policy = self.policy_for(before, event)
        step = handle(before, event, position, policy)
        memory = self.recall(route)
        self._remember(memory, before, step.state, event, position, raw)
        return policy, memory, step

    @staticmethod
    def _take(memory: Recall, step: Step, want: Want, found: Recalled, policy: Policy) -> Step:
        recalled_at, recalled = found
        step = step.then(take(step.state, want, recalled_at, recalled, policy))
        if any(p.carrier == recalled_at for p in step.state.parking.parked.values()):
            memory.carriers[recalled_at] = recalled
        return step

    def _end(self, route: str, memory: Recall, step: Step) -> Step:
        memory.prune(step.state)
        self.states[route] = step.state
        return step

    def forget(self) -> None:
        """Partitions moved: states are re-read from their rows, memory refilled."""
        self.states.clear()
        self.memory.clear()

    @staticmethod
    def _remember(
        memory: Recall,
        before: RouteState,
        after: RouteState,
        event: RoutingLogEvent,
        position: int,
        raw: bytes | None,
    ) -> None:
        waited, parking = before.parking.line.waiting, after.parking
        if waited == 0 and parking.line.waiting:
            memory.start_line(parking.line.after)
        if parking.line.waiting > waited and isinstance(event, RequestAccepted):
            size = 0 if memory.max_bytes is None else record_size(event, raw)
            memory.keep_line(position, event, size, raw)
        if parking.parked and any(p.carrier == position for p in parking.parked.values()):
            memory.carriers[position] = event
        entries = after.cache.entries
        if entries and isinstance(event, AttemptFinished):
            newest = next(reversed(entries.values()))
            if newest.position == position:  # this answer was just cached
                size = 0 if memory.max_bytes is None else record_size(event, raw)
                memory.keep_answer(position, event, size)
