"""What one fold step returns: the new state and the records to send (a route's
:class:`Step`, a budget's :class:`BudgetStep`)."""

from __future__ import annotations

from dataclasses import field, replace

from app.contract import Decision, Dispatch, Response, RoutingLogEvent
from app.routing.budget_state import BudgetState
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
class BudgetStep:
    """A budget's key after one event (app/routing/budget_fold.py): its new state and the
    records that answer asks (on to the next ledger, or a verdict to the route). A ledger
    decides, dispatches and answers nothing itself: those stay empty, as the same fields
    of a route's :class:`Step` (a driver's caller reads either alike)."""

    state: BudgetState
    records: list[RoutingLogEvent] = field(default_factory=list)
    #: False when the event was a duplicate and changed nothing.
    applied: bool = True
    dispatches: list[Dispatch] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)


#: What folding one event of any routing-log key returns.
KeyStep = Step | BudgetStep


@record
class Blocked:
    """A new request no deployment can take now because its candidates are busy: it
    waits in the log. ``arms``: breaker moves the selection made on the clock (kept)."""

    arms: dict[str, ArmState] = field(default_factory=dict)

    def on(self, state: RouteState) -> RouteState:
        return replace(state, arms={**state.arms, **self.arms}) if self.arms else state
