"""What one fold step returns: the new state and the records to send."""

from __future__ import annotations

from dataclasses import field, replace

from app.contract import Decision, Dispatch, Response, RoutingLogEvent
from app.routing.records import record
from app.routing.state import ArmState, RouteState


@record
class Step:
    state: RouteState
    dispatches: list[Dispatch] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)
    #: False when the event was a duplicate and changed nothing but the clock.
    applied: bool = True
    #: Routing-log events to send, each keyed by its own route (budget asks, verdicts
    #: and settlements of budgets).
    records: list[RoutingLogEvent] = field(default_factory=list)
    #: Decisions made without a call (answered from the response cache: app/routing/cache.py).
    decisions: list[Decision] = field(default_factory=list)

    def then(self, later: Step) -> Step:
        """This step followed by ``later`` (taken from the state this one left)."""
        return Step(
            later.state,
            self.dispatches + later.dispatches,
            self.responses + later.responses,
            self.applied,
            self.records + later.records,
            self.decisions + later.decisions,
        )


@record
class Blocked:
    """A new request no deployment can take now because its candidates are busy: it
    waits in the log. ``arms``: breaker moves the selection made on the clock (kept)."""

    arms: dict[str, ArmState] = field(default_factory=dict)

    def on(self, state: RouteState) -> RouteState:
        return replace(state, arms={**state.arms, **self.arms}) if self.arms else state
