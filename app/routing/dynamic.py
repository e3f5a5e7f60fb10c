"""Dynamic routes in the fold: walk, steer, fall back.

A request of a tenant or API key bound to a graph walks it once, on the route it
arrived on (:func:`steer`): a refusal is answered there; a model node forwards
the request, with the node's mode, provider lists and the trace
(:class:`~app.contract.dynamic.DynamicTrace`), onto the log of the route it names
(a ``provider:model`` is pinned on a route that has it, this one first) — this
same route included, so that the steered request is an event of the log, which
is what a wait in the line or a parked attempt recalls. There it is routed like
any other and walks nothing again; its decisions carry the trace.

Fallback models (:func:`fall_back`): a request whose attempts on a model ended
in a provider failure (429, 500, 502, 503, 504, a timeout, a connection reset, a
cut or broken stream: with or without an HTTP status), or found no deployment of
the model able to take it now (an open breaker, a Retry-After), is forwarded to
the next fallback model, whose attempts number on from the ones made; a client
error is answered at once.

Rate and budget nodes count in the route's own state, on the route clock, so
every worker answers alike and replay re-derives them: a rate node counts the
requests that reached it on this route; a budget node the cost of the attempts
of requests that passed it on this route (exact per route; a graph whose
requests arrive on several routes has one count per route).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from app.contract import (
    DynamicTrace,
    ErrorBody,
    LogPosition,
    ProviderPreferences,
    RequestAccepted,
    Response,
    RoutingOptions,
    derived_id,
)
from app.routing.answers import error_response
from app.routing.graph import (
    BudgetCheck,
    Path,
    RateCheck,
    RequestFacts,
    walk,
)
from app.routing.policy import Policy
from app.routing.rate_window import RateWindow, admit
from app.routing.reliability import moves_on
from app.routing.state import RouteState, evolve_route
from app.routing.steps import Step

#: The source topic of requests a route forwarded (their copy-detection watermark).
FORWARD_SOURCE = "switchyard.forward"


@dataclass
class RouteCounters:
    """The walk's counters, over the route's state at the request's position."""

    counts: RateWindow
    spend: dict[str, tuple[str, float]]
    clock: float
    #: The budget nodes the walk asked about (``graph/node/subject``).
    budgets: list[str] = field(default_factory=list)

    def rate_within(self, check: RateCheck) -> bool:
        key = _key(check.graph, check.node, check.subject)
        self.counts, allowed = admit(
            self.counts, key, self.clock, check.spec.requests, check.spec.window_s
        )
        return allowed

    def budget_within(self, check: BudgetCheck) -> bool:
        key = _key(check.graph, check.node, check.subject)
        self.budgets.append(key)
        period, spent = self.spend.get(key, ("", 0.0))
        current = period_of(check.spec.period, self.clock)
        return (spent if period == current else 0.0) < check.spec.usd


def steer(
    state: RouteState, accepted: RequestAccepted, position: int, policy: Policy
) -> tuple[RouteState, RequestAccepted | Step]:
    """Walk the request's graph (if any, and not walked yet): the request to route here,
    or the step that answers or forwards it."""
    config = policy.config
    request = accepted.request
    if accepted.dynamic is not None or not config.dynamic_routes.root:
        return state, accepted
    graph = config.dynamic_routes.graph_for(tenant=request.tenant, api_key=request.key_name)
    if graph is None:
        return state, accepted
    counters = RouteCounters(state.node_counts, state.node_spend, state.clock)
    facts = RequestFacts.of(request, accepted.features, api_key=request.key_name)
    path = walk(graph, facts, counters)
    state = replace(state, node_counts=counters.counts)
    refusal = path.refusal
    if refusal is not None:
        error = ErrorBody(
            type="route_refused",
            message=refusal.message or f"refused by dynamic route {graph.name!r}",
            code=refusal.code,
            http_status=refusal.status,
        )
        return state, Step(
            state, responses=[error_response(request.request_id, 0, state.clock, error)]
        )
    model = path.model
    assert model is not None
    trace = DynamicTrace(
        graph=graph.name,
        path=path.trace(),
        target=model.target,
        fallbacks=list(model.fallback_models),
        budget_nodes=counters.budgets,
    )
    # Forwarded even to this same route: the steered request is then an event of the
    # log, which is what a wait in the line or a parked attempt recalls.
    steered = _with_model_node(accepted, path)
    return _to_target(state, steered, trace, position, policy)


def fall_back(
    state: RouteState,
    accepted: RequestAccepted,
    response: Response,
    position: int,
    policy: Policy,
) -> Step | None:
    """The request forwarded to its next fallback model, instead of ``response`` (None:
    no fallback applies)."""
    trace = accepted.dynamic
    error = response.error
    if trace is None or not trace.fallbacks or error is None or response.status != "error":
        return None
    asked = accepted.request.provider
    if asked is not None and not asked.allow_fallbacks:
        return None
    if not moves_on(error.type, error.http_status, error.code):
        return None
    following = trace.model_copy(
        update={
            "target": trace.fallbacks[0],
            "fallbacks": trace.fallbacks[1:],
            "attempt_base": response.attempts,  # attempts so far, earlier models' included
        }
    )
    base = accepted.model_copy(update={"pinned": None, "dynamic": None})
    return _to_target(state, base, following, position, policy)[1]


def count_spend(
    state: RouteState, budget_nodes: tuple[str, ...], cost_usd: float, policy: Policy
) -> RouteState:
    """An attempt's cost, added to the budget nodes its request passed."""
    if not budget_nodes or cost_usd <= 0.0:
        return state
    spend = dict(state.node_spend)
    for key in budget_nodes:
        graph_name, node_id, _ = key.split("/", 2)
        graph = policy.config.dynamic_routes.root.get(graph_name)
        node = None if graph is None else graph.nodes.get(node_id)
        period_kind = getattr(node, "period", "day")
        current = period_of(period_kind, state.clock)
        period, spent = spend.get(key, ("", 0.0))
        spend[key] = (current, (spent if period == current else 0.0) + cost_usd)
    return replace(state, node_spend=spend)


def period_of(kind: str, clock: float) -> str:
    """The UTC calendar period (``day``, ``week``, ``month``) holding ``clock``."""
    moment = datetime.fromtimestamp(clock, UTC)
    if kind == "week":
        year, week, _ = moment.isocalendar()
        return f"{year}-W{week:02d}"
    return moment.strftime("%Y-%m" if kind == "month" else "%Y-%m-%d")


def _to_target(
    state: RouteState,
    accepted: RequestAccepted,
    trace: DynamicTrace,
    position: int,
    policy: Policy,
) -> tuple[RouteState, Step]:
    config = policy.config
    target = trace.target
    if target in config.route_names():
        route, pinned = target, None
    else:
        provider = target.partition(":")[0]
        routes = config.routes_with(provider)
        route = accepted.route if accepted.route in routes else routes[0]
        pinned = target
    steered = accepted.model_copy(update={"pinned": pinned, "dynamic": trace})
    offset = max(position, state.forwarded_through + 1)
    state = evolve_route(state, forwarded_through=offset)
    forwarded = steered.model_copy(
        update={
            "id": derived_id("forward", accepted.request.request_id, trace.attempt_base, route),
            "route": route,
            "source": LogPosition(
                topic=f"{FORWARD_SOURCE}.{accepted.route}", partition=0, offset=offset
            ),
            "dynamic": trace.model_copy(update={"forwarded_from": accepted.route}),
        }
    )
    return state, Step(state, records=[forwarded])


def _with_model_node(accepted: RequestAccepted, path: Path) -> RequestAccepted:
    """The request with the model node's mode and provider lists (the graph's choice
    wins over the request's own: a request cannot widen its graph)."""
    model = path.model
    assert model is not None
    changes: dict[str, object] = {}
    if model.mode is not None:
        # The node's mode; the request's other options (its affinity opt-outs) stay.
        asked = accepted.request.routing.model_dump() if accepted.request.routing else {}
        changes["routing"] = RoutingOptions.model_validate({**asked, "mode": str(model.mode)})
    if model.provider is not None:
        # The node's lists replace the request's; the request's other controls (its
        # data rules, price caps, sort) still hold: a graph cannot lift them.
        asked = accepted.request.provider.model_dump() if accepted.request.provider else {}
        lists = model.provider.model_dump(include={"only", "ignore", "order"})
        changes["provider"] = ProviderPreferences.model_validate({**asked, **lists})
    if not changes:
        return accepted
    return accepted.model_copy(update={"request": accepted.request.model_copy(update=changes)})


def _key(graph: str, node: str, subject: str | None) -> str:
    return f"{graph}/{node}/{subject or '-'}"
