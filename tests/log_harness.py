"""The routing log played as the broker would, for fold tests: one driver, every record.

Every record a step sends (forwarded requests, budget asks, verdicts,
settlements) is appended to the log and folded in turn; each dispatch's outcome
comes back ``lag`` events later (attempts overlap), with the status and cost
the test chooses, built as the executor builds it (``retry`` only when the
attempt is not final). When only waits are left, time passes: ticks on every
route seen.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from factories import T0, outcome

from app.audit.log import RecordedLog, parse
from app.audit.replay import replay
from app.audit.replay_report import ReplayReport
from app.contract import (
    AttemptFinished,
    Decision,
    Dispatch,
    Response,
    RouteTick,
    RoutingLogEvent,
    StatusClass,
    derived_id,
    route_of,
)
from app.routing.answers import at
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.state import RouteState

ANSWER = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}


def always(status: StatusClass) -> Callable[[Decision], StatusClass]:
    return lambda _: status


def _success(_: Decision) -> StatusClass:
    return StatusClass.SUCCESS


@dataclass
class Log:
    policy: Policy
    lag: int = 8
    status: Callable[[Decision], StatusClass] = _success
    cost: float = 0.0
    #: Output tokens every attempt reports.
    tokens: int = 0
    events: dict[int, RoutingLogEvent] = field(default_factory=dict)
    responses: list[Response] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    max_ticks: int = 100

    def first_decisions(self) -> dict[str, Decision]:
        """Each request's first decision, by request id."""
        found: dict[str, Decision] = {}
        for decision in self.decisions:
            found.setdefault(decision.request_id, decision)
        return found

    def run(self, first: list[RoutingLogEvent], driver: Driver | None = None) -> Driver:
        driver = driver or Driver(lambda: self.policy)
        queue: deque[RoutingLogEvent] = deque(first)
        calls: deque[tuple[int, AttemptFinished]] = deque()
        routes: set[str] = set()
        position, ticks = len(self.events), 0
        while queue or calls or (self._waiting(driver, routes) and ticks < self.max_ticks):
            if calls and (not queue or calls[0][0] <= position):
                queue.append(calls.popleft()[1])
            if not queue:  # only waits left: time passes (the live worker ticks)
                ticks += 1
                queue.extend(tick(T0 + ticks, route) for route in sorted(routes))
            event = queue.popleft()
            routes.add(route_of(event))
            self.events[position] = event
            step = driver.fold(event, position, self.events)
            queue.extend(step.records)
            self.responses += step.responses
            for dispatch in step.dispatches:
                self.decisions.append(dispatch.decision)
                calls.append((position + self.lag, self.finished(dispatch)))
            self.decisions += step.decisions  # answered from the response cache
            position += 1
        return driver

    def finished(self, dispatch: Dispatch) -> AttemptFinished:
        decision = dispatch.decision
        status = self.status(decision)
        ok = status is StatusClass.SUCCESS
        result = outcome(
            decision.request_id,
            decision.deployment,
            T0 + 1,
            attempt=decision.attempt,
            status=status,
            final=ok or status is StatusClass.CLIENT_ERROR,
            retriable=not ok and status is not StatusClass.CLIENT_ERROR,
            route=decision.route,
        ).model_copy(update={"cost_usd": self.cost, "tokens_out": self.tokens})
        self.costs.append(self.cost)
        return AttemptFinished(
            id=derived_id("finished", decision.request_id, decision.attempt),
            occurred_at=result.occurred_at,
            outcome=result,
            tried=[result.deployment],
            retry=None if result.final else dispatch.accepted,
            completion=ANSWER if ok else None,
        )

    @staticmethod
    def _waiting(driver: Driver, keys: set[str]) -> bool:
        """Attempts wait on a route (a budget's key holds none)."""
        states = [driver.state(key) for key in keys]
        return any(
            isinstance(s, RouteState) and (s.parking.parked or s.open_attempts) for s in states
        )


def tick(t: float, route: str = "chat") -> RouteTick:
    return RouteTick(id=derived_id("tick", route, t), occurred_at=at(t), route=route)


def recorded(log: Log) -> RecordedLog:
    """The log as replay reads it: its routing events, decisions and responses."""
    found = RecordedLog("test")
    for offset, event in sorted(log.events.items()):
        found.routing.append(parse("routing", 0, offset, event.model_dump_json()))
    for n, decision in enumerate(log.decisions):
        found.decisions.append(parse("decisions", 0, n, decision.model_dump_json()))
    for n, response in enumerate(log.responses):
        found.responses.append(parse("responses", 0, n, response.model_dump_json()))
    return found


def replayed(log: Log, policy: Policy) -> ReplayReport:
    """The log's routing events re-derived and compared with its decisions and responses."""
    return replay(recorded(log), policy)
