"""The state of a budget's own routing-log key (``budget:SCOPE``): its ledger.

A budget is a key of the routing log of its own (app/contract/budget.py), folded by the
same driver as the routes (app/routing/driver.py) but into this state, not a route's:
its clock and position, the policy version it folds with, and the ledger
(app/routing/budget.py folds the asks and settlements into it). Records as the route
state's are (app/routing/state.py): slotted, frozen to the type checker, never changed.
"""

from __future__ import annotations

from dataclasses import field

from app.routing.records import record


@record
class Amount:
    """What an attempt holds on a ledger, or what was spent in a window: requests, tokens
    (input and output) and dollars."""

    requests: int = 0
    tokens: int = 0
    usd: float = 0.0

    def plus(self, other: Amount) -> Amount:
        return Amount(
            self.requests + other.requests, self.tokens + other.tokens, self.usd + other.usd
        )


@record
class Waiting:
    """On a ledger: an ask it could hold once attempts in flight settle (first come,
    first served); given up at the request's deadline."""

    request_id: str
    attempt: int
    route: str
    amount: Amount
    scopes: tuple[str, ...]
    index: int
    deadline: float


@record
class Spent:
    """What a ledger counted in one window: the window (its UTC minute, hour, day or
    month, as a label) and the amount."""

    label: str = ""
    amount: Amount = field(default_factory=Amount)


@record
class Ledger:
    """A budget's spend in the current UTC minute, hour, day and month (by window kind),
    and what it holds for attempts in flight (by ``request_id#attempt``)."""

    spent: dict[str, Spent] = field(default_factory=dict)
    holds: dict[str, Amount] = field(default_factory=dict)
    waiting: tuple[Waiting, ...] = ()
    #: Attempts settled last (``request_id#attempt``, at most ``RECENT_SETTLED``): a copy
    #: of an ask or a settlement a route re-sent after a crash changes nothing.
    settled: tuple[str, ...] = ()

    @property
    def held(self) -> Amount:
        total = Amount()
        for amount in self.holds.values():
            total = total.plus(amount)
        return total

    def in_window(self, kind: str) -> Spent:
        return self.spent.get(kind) or Spent()


@record
class BudgetState:
    """A budget's key: what its row holds."""

    #: Key clock: the largest event time seen, in epoch seconds. Never goes back.
    clock: float = 0.0
    #: Routing-log offset of the last event applied (-1: none).
    position: int = -1
    #: The policy version the key folds with: the last ``policy.changed`` folded (0: none
    #: yet, the first version applies). Its limits are the budget's in that version.
    policy_version: int = 0
    #: The ledger; None until the first ask or settlement (the budget has counted nothing:
    #: ``/admin/budgets`` and the gauges leave it out).
    ledger: Ledger | None = None
