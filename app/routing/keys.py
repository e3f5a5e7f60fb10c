"""The keys of the routing log: routes, and budgets' ledgers.

Every routing-log event belongs to one key (``route_of``, app/contract/routing_log.py):
a route's name, or a budget's ``budget:SCOPE`` (app/contract/budget.py). Each key has a
row in the route-state table, and the driver (app/routing/driver.py) folds each key's
events into that key's state: a :class:`~app.routing.state.RouteState` for a route,
a :class:`~app.routing.budget_state.BudgetState` for a budget.
"""

from __future__ import annotations

from app.contract import ledger_key
from app.routing.budget_state import BudgetState
from app.routing.state import RouteState

#: The state of one key of the routing log.
KeyState = RouteState | BudgetState

#: What every budget's key starts with (``budget:tenant:acme``).
LEDGER_KEY_PREFIX = ledger_key("")


def is_ledger_key(key: str) -> bool:
    """Whether a routing-log key is a budget's (its state is a :class:`BudgetState`)."""
    return key.startswith(LEDGER_KEY_PREFIX)


def new_state(key: str) -> KeyState:
    """The state of a key before its first event."""
    return BudgetState() if is_ledger_key(key) else RouteState()
