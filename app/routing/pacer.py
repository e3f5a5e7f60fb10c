"""Budget pacing: hold a route's or a tenant's mean cost per request at a target.

A primal-dual pacer, as in ParetoBandit: the ``adaptive`` strategy weighs cost
by a multiplier ``mu`` (quality given up per target's worth of dollars)::

    value = p x (q - mu x cost_usd / target) - waiting

and ``mu`` is the dual variable of the constraint *mean cost <= target*, moved by
a projected subgradient step at every decision::

    mu <- max(PACER_FLOOR, mu + PACER_STEP x (spent_since_last / target - 1))

``spent_since_last`` is the real cost (outcomes' ``cost_usd``) the scope's
deployments reported since the previous decision, read from their evidence sums
(``*`` for a route, ``tenant:NAME`` for a tenant), and the ``- 1`` is this
request's share of the budget (first attempts only). Summed over a run,
``mu_end - mu_start = PACER_STEP x (total_cost / target - requests)`` while ``mu``
stays above its floor: the mean cost is the target within ``(mu_end - mu_start) /
(PACER_STEP x requests)`` of it. The floor is below 0 by default
(``PACER_FLOOR = -1``): when quality alone does not spend the budget (the
estimates rank a cheaper deployment first), a negative ``mu`` spends it on the
dearer ones, so the mean cost is held at the target both ways; ``PACER_FLOOR=0``
makes the target a ceiling only. ``mu`` starts at ``target /
ADAPTIVE_ANSWER_VALUE_USD`` (the unpaced weight of cost). A tenant's target
(``tenants.NAME.cost_target_usd``) takes precedence over the route's
(``routes.NAME.cost_target_usd``).

State: one :class:`~app.routing.state.Pacer` per scope in the route row, updated
only at decisions, from log-ordered sums: a replay moves it identically.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.contract import RequestAccepted
from app.routing import context, evidence
from app.routing.policy import Policy
from app.routing.state import Pacer, RouteState

ROUTE_SCOPE = "route"
#: Upper bound of the multiplier (a target below every deployment's cost: cheapest wins).
MAX_MULTIPLIER = 1e6


@dataclass(frozen=True, slots=True)
class Target:
    scope: str
    usd: float


def target_of(accepted: RequestAccepted, policy: Policy) -> Target | None:
    """The cost target that applies to a request: its tenant's, else its route's."""
    tenant = accepted.request.tenant
    if tenant:
        preset = policy.config.tenants.get(tenant)
        if preset is not None and preset.cost_target_usd is not None:
            return Target(context.tenant_scope(tenant), preset.cost_target_usd)
    route = policy.config.routes.get(accepted.route)
    if route is not None and route.cost_target_usd is not None:
        return Target(ROUTE_SCOPE, route.cost_target_usd)
    return None


def spent(state: RouteState, scope: str) -> float:
    """Dollars the scope's answers have cost so far, as folded into the route state."""
    key = context.EVERYTHING if scope == ROUTE_SCOPE else scope
    return evidence.total((arm.evidence for arm in state.arms.values()), key).cost_usd


def advance(
    pacer: Pacer | None, spent_now: float, target: float, new_request: bool, policy: Policy
) -> Pacer:
    """The pacer after one decision: the spend since the last one, then this request's budget."""
    params = policy.params
    if pacer is None:
        pacer = Pacer(multiplier=target / params.adaptive_answer_value_usd, spent=spent_now)
    overspend = (spent_now - pacer.spent) / target - (1.0 if new_request else 0.0)
    multiplier = pacer.multiplier + params.pacer_step * overspend
    return Pacer(
        multiplier=min(MAX_MULTIPLIER, max(params.pacer_floor, multiplier)),
        spent=spent_now,
        requests=pacer.requests + int(new_request),
    )
