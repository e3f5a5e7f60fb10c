"""A budget's key as a pure fold: ``(state, event, policy) -> BudgetStep``.

A budget's ledger is a key of the routing log of its own (``budget:SCOPE``), folded by
the one driver (:mod:`app.routing.driver`) as a route is, into a
:class:`~app.routing.budget_state.BudgetState`. Its events: the asks routes send
(:class:`BudgetAsk`, held, queued or refused by :func:`app.routing.budget.ask`), the
settlements of attempts that ended (:class:`BudgetSettle`), and policy changes, which
may bring limits that let waiting asks be held. Any other event (a tick) moves the
clock only. An event at or below the key's position was folded already (a redelivery)
and changes nothing, as on a route (:mod:`app.routing.fold`).
"""

from __future__ import annotations

from dataclasses import replace

from app.contract import BudgetAsk, BudgetSettle, PolicyChanged, RoutingLogEvent
from app.routing import budget
from app.routing.budget_state import BudgetState, Ledger
from app.routing.fold import event_time
from app.routing.keys import LEDGER_KEY_PREFIX
from app.routing.policy import Policy
from app.routing.steps import BudgetStep


def handle(state: BudgetState, event: RoutingLogEvent, position: int, policy: Policy) -> BudgetStep:
    if position <= state.position:
        return BudgetStep(state, applied=False)
    state = replace(state, clock=max(state.clock, event_time(event)), position=position)
    if isinstance(event, BudgetAsk | BudgetSettle):
        return _count(state, event, policy)
    if isinstance(event, PolicyChanged):
        return _switch_policy(state, event, policy)
    return BudgetStep(state)


def _count(state: BudgetState, event: BudgetAsk | BudgetSettle, policy: Policy) -> BudgetStep:
    """Hold or queue an ask, count a settlement."""
    ledger = state.ledger or Ledger()
    limits = policy.config.budget_by_key.get(event.scope)
    if isinstance(event, BudgetAsk):
        ledger, records = budget.ask(ledger, event, limits, state.clock)
    else:
        ledger, records = budget.settle(ledger, event, limits, state.clock)
    return BudgetStep(replace(state, ledger=ledger), records)


def _switch_policy(state: BudgetState, change: PolicyChanged, policy: Policy) -> BudgetStep:
    """From here on the key folds with ``change.version``: the asks waiting that its
    limits let the ledger hold are served."""
    if change.version <= state.policy_version:
        return BudgetStep(state)  # a copy the relay re-sent: the key already switched
    state = replace(state, policy_version=change.version)
    if state.ledger is None or not state.ledger.waiting:
        return BudgetStep(state)
    scope = change.route.removeprefix(LEDGER_KEY_PREFIX)
    limits = policy.config.budget_by_key.get(scope)
    ledger, records = budget.serve_waiting(state.ledger, limits, state.clock)
    return BudgetStep(replace(state, ledger=ledger), records)
