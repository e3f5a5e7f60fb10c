"""The router's gauges, set from each step it folds: breakers, waiting requests, budgets.

Set only when a value changes where that is cheap to know (breakers), since every
event of every route goes through here.
"""

from __future__ import annotations

from app import metrics
from app.policy.holder import policy_holder
from app.routing.budget import windows as budget_windows
from app.routing.budget_state import BudgetState
from app.routing.state import BREAKER_GAUGE, RouteState
from app.routing.steps import KeyStep


def export(key: str, step: KeyStep) -> None:
    """The gauges of ``key`` (a route, or a budget's key) after ``step``."""
    state = step.state
    if isinstance(state, BudgetState):
        _export_budget(key, state)
        return
    _export_breakers(state)
    metrics.ROUTE_WAITING.labels(route=key, kind="line").set(state.parking.line.waiting)
    metrics.ROUTE_WAITING.labels(route=key, kind="parked").set(len(state.parking.parked))


def _export_budget(key: str, state: BudgetState) -> None:
    ledger = state.ledger
    if ledger is None:
        return
    scope = key.removeprefix("budget:")
    budget = policy_holder().current.config.budget_by_key.get(scope)
    metrics.BUDGET_HELD_USD.labels(scope=scope).set(ledger.held.usd)
    for shown in budget_windows(ledger, budget):
        labels = {"scope": scope, "window": shown.window}
        if shown.unit == "usd":
            metrics.BUDGET_SPENT_USD.labels(**labels).set(shown.spent)
            if shown.remaining is not None:
                metrics.BUDGET_REMAINING_USD.labels(**labels).set(shown.remaining)
        else:
            metrics.BUDGET_SPENT.labels(unit=shown.unit, **labels).set(shown.spent)
            if shown.remaining is not None:
                metrics.BUDGET_REMAINING.labels(unit=shown.unit, **labels).set(shown.remaining)


#: The breaker gauge's value last set per provider: set again only when it changes, not
#: for every arm on every event.
_breaker_exported: dict[str, int] = {}


def _export_breakers(state: RouteState) -> None:
    for deployment, arm in state.arms.items():
        provider = deployment.split(":", 1)[0]
        value = BREAKER_GAUGE[arm.breaker.state]
        if _breaker_exported.get(provider) != value:
            _breaker_exported[provider] = value
            metrics.CIRCUIT_BREAKER_STATE.labels(provider=provider).set(value)
