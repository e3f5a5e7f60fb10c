"""Budgets as events: asks, verdicts and settlements on the routing log.

A budget (requests, tokens and dollars per minute, hour, day and month of a tenant,
an API key or a route) is a ledger with one writer: its own key of the routing log, ``budget:SCOPE``
(``budget:tenant:acme``), folded like a route. Before an attempt of a request
under budgets is decided, its route asks each ledger in turn to hold the
attempt's worst-case cost (:class:`BudgetAsk`, passed from ledger to ledger);
the last ledger, or the first that cannot hold it, answers the route
(:class:`BudgetVerdict`). When the attempt ends, its route tells every ledger
what it cost (:class:`BudgetSettle`), which frees the hold. Every worker folds
the same ledgers in the same order, so spend is exact however many workers run,
and replay re-derives it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.contract.base import Envelope


class BudgetAsk(Envelope):
    """Hold the attempt's worst case (``amount_usd``, ``tokens``, ``requests``) on ledger
    ``scopes[index]``."""

    type: Literal["budget.ask"] = "budget.ask"
    route: str
    request_id: str
    attempt: int
    amount_usd: float = Field(ge=0.0)
    #: Input and output tokens at most.
    tokens: int = Field(default=0, ge=0)
    #: 1 for a request's first attempt (a request counts once), else 0.
    requests: int = Field(default=0, ge=0, le=1)
    #: Every ledger the request is under, in the order they are asked.
    scopes: list[str]
    index: int = Field(ge=0)
    #: The request's deadline (epoch seconds): a ledger stops holding a place for it then.
    deadline: float

    @property
    def scope(self) -> str:
        return self.scopes[self.index]


class BudgetVerdict(Envelope):
    """To the route: every ledger holds the attempt's cost, or ``denied_by`` cannot."""

    type: Literal["budget.verdict"] = "budget.verdict"
    route: str
    request_id: str
    attempt: int
    granted: bool
    scopes: list[str]
    denied_by: str | None = None
    reason: str = ""
    #: Refused in this window but not in a later one: seconds until it starts.
    retry_after_s: float | None = Field(default=None, ge=0.0)


class BudgetSettle(Envelope):
    """To a ledger: the attempt ended and used ``cost_usd``, ``tokens`` and ``requests``
    (all 0 for a hold given back)."""

    type: Literal["budget.settle"] = "budget.settle"
    scope: str
    route: str
    request_id: str
    attempt: int
    cost_usd: float = Field(ge=0.0)
    tokens: int = Field(default=0, ge=0)
    requests: int = Field(default=0, ge=0, le=1)


def ledger_key(scope: str) -> str:
    """The routing-log key (and row) of a budget's ledger."""
    return f"budget:{scope}"
