"""What a decision knows about the request beyond its candidates: its context
buckets and the budget pacer that applies to it.

:func:`prepare` is called once per decision, before ranking; the pacer it moves
is written back into the route state with the decision (:func:`budgets`), so a
replay of the log moves it the same way.
"""

from __future__ import annotations

from app.contract import RequestAccepted
from app.routing import context, pacer
from app.routing.capabilities import Needs, needs_of
from app.routing.policy import Policy
from app.routing.records import record
from app.routing.state import Pacer, RouteBudgets, RouteState


@record
class Learning:
    #: The request's context key (None: no features) and the buckets learnt in, finest first.
    key: str | None = None
    chain: tuple[str, ...] = (context.EVERYTHING,)
    target: pacer.Target | None = None
    #: The pacer after this decision's update (None: no cost target applies).
    pacer: Pacer | None = None
    #: The request's size (balanced mode's token fit; None: not known).
    needs: Needs | None = None

    @property
    def multiplier(self) -> float | None:
        return None if self.pacer is None else self.pacer.multiplier

    @property
    def target_usd(self) -> float | None:
        return None if self.target is None else self.target.usd


NO_LEARNING = Learning()


def prepare(state: RouteState, accepted: RequestAccepted, attempt: int, policy: Policy) -> Learning:
    key = context.context_key(accepted)
    chain = context.levels(key) if policy.params.context_learning else (context.EVERYTHING,)
    target = pacer.target_of(accepted, policy)
    needs = needs_of(accepted)
    if target is None:
        return Learning(key, chain, needs=needs)
    moved = pacer.advance(
        state.budgets.pacers.get(target.scope),
        pacer.spent(state, target.scope),
        target.usd,
        attempt == 1,
        policy,
    )
    return Learning(key, chain, target, moved, needs)


def budgets(state: RouteState, learning: Learning) -> RouteBudgets:
    """The route's budgets with this decision's pacer update."""
    if learning.target is None or learning.pacer is None:
        return state.budgets
    pacers = {**state.budgets.pacers, learning.target.scope: learning.pacer}
    return RouteBudgets(pacers, state.budgets.holds)
