"""Taking a request: admission checks, then a deployment, a wait, or a refusal.

:func:`take_request` is what happens to a new request when it reaches the front
of its route: at once when nothing waits before it, else when the line
(:class:`app.routing.state.Line`) gets to it. It returns :class:`Blocked` when
the request must keep waiting in the log: every candidate is busy (a burst waits
for capacity, it is never refused for it: docs/design.md#robustness).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from app.contract import (
    ROUTE_NOT_ALLOWED,
    Decision,
    Dispatch,
    ErrorBody,
    Exclusion,
    RequestAccepted,
    derived_id,
)
from app.routing import affinity, auto, cache, parking, status
from app.routing.answers import at, backoff_s, deadline_error, deadline_of, error_response
from app.routing.attempts import attempt_limit, first_attempt, has_fallback
from app.routing.budget_route import ask_first
from app.routing.candidates import CandidatePlan, plan_candidates, tenant_policy
from app.routing.capabilities import refusal, split_capable
from app.routing.context import level_index
from app.routing.data_policy import refusal as data_refusal
from app.routing.data_policy import split_allowed
from app.routing.dynamic import fall_back, steer
from app.routing.learning import budgets, prepare
from app.routing.policy import Policy
from app.routing.rate_window import admit, prune, retry_after_s
from app.routing.records import trusted
from app.routing.reliability import NO_DEPLOYMENT_AVAILABLE
from app.routing.select import select
from app.routing.state import (
    NEW_ARM,
    OpenAttempt,
    Parked,
    RouteState,
    attempt_key,
    evolve_arm,
    evolve_route,
)
from app.routing.steps import Blocked, Step
from app.routing.strategies import algorithm_version

#: After its deadline, an executor makes no call; this much later no outcome can still come.
LOST_ATTEMPT_GRACE_S = 10.0


def take_request(
    state: RouteState, accepted: RequestAccepted, position: int, policy: Policy
) -> Step | Blocked:
    """Route a new request (at routing-log ``position``), or say it must wait in the log."""
    source = f"{accepted.source.topic}:{accepted.source.partition}"
    copy = accepted.source.offset <= state.accepted_through.get(source, -1)
    first = attempt_key(accepted.request.request_id, first_attempt(accepted))
    if copy or first in state.open_attempts or first in state.parking.parked:
        return Step(state, applied=False)
    marks = {**state.accepted_through, source: accepted.source.offset}
    state = evolve_route(state, accepted_through=marks)
    if state.clock >= deadline_of(accepted, policy):
        # Waited in the log past its deadline (a backlog, a worker that was down):
        # answered without a call, and nothing is held against any provider.
        seconds = policy.params.request_deadline_s
        error = deadline_error(f"not routed within {seconds:g}s (waited in the log)")
        request_id = accepted.request.request_id
        return Step(state, responses=[error_response(request_id, 0, state.clock, error)])
    return _admit(state, accepted, position, policy)


def _guardrail_refusal(accepted: RequestAccepted) -> ErrorBody | None:
    """The 400 of a request a guardrail refuses: the forbidden keyword it contains, or the
    input rule that blocks it (app/guardrails/); None when none does."""
    if accepted.guardrail is not None:
        found = f"contains the forbidden keyword {accepted.guardrail!r}"
        code = "forbidden_keyword"
    elif accepted.input_blocked is not None:
        found, code = f"was blocked by input rule {accepted.input_blocked!r}", "input_blocked"
    else:
        return None
    message = f"refused: the request {found}"
    return ErrorBody(type="guardrail", message=message, code=code, http_status=400)


def _admit(
    state: RouteState, accepted: RequestAccepted, position: int, policy: Policy
) -> Step | Blocked:
    """Before any provider: forbidden keywords and input rules, then the tenant's rate."""
    request_id = accepted.request.request_id
    guarded = _guardrail_refusal(accepted)
    if guarded is not None:
        return Step(state, responses=[error_response(request_id, 0, state.clock, guarded)])
    limit = tenant_policy(accepted, policy).rate_limit
    tenant = accepted.request.tenant
    if limit is not None and tenant is not None:
        rate, allowed = admit(state.rate, tenant, state.clock, limit.requests, limit.window_s)
        state = replace(state, rate=prune(rate, state.clock, limit.window_s))
        if not allowed:
            wait = retry_after_s(rate, tenant, state.clock, limit.window_s)
            error = ErrorBody(
                type="rate_limited",
                message=f"tenant {tenant!r} is over {limit.requests} requests per "
                f"{limit.window_s:g}s; retry in {wait:.3f}s",
                code="tenant_rate_limited",
                http_status=429,
            )
            return Step(state, responses=[error_response(request_id, 0, state.clock, error)])
    state, steered = steer(state, accepted, position, policy)
    if isinstance(steered, Step):
        return steered  # refused or forwarded by its dynamic route
    if _route_allowed(steered):
        state, found = cache.lookup(state, steered, policy)
        if found is not None:
            return cache.hit(state, steered, found, policy)  # no provider is called
    taken = route(
        state, steered, first_attempt(steered), [], policy, carrier=position, on_line=True
    )
    if isinstance(taken, Step) and taken.responses and not taken.dispatches:
        fallback = fall_back(taken.state, steered, taken.responses[0], position, policy)
        if fallback is not None:
            return fallback
    return taken


def _route_allowed(accepted: RequestAccepted) -> bool:
    """Its route is one of the request's ``routing.allowed_routes`` (a gateway key's
    allowlist), when it has such a list: whatever a dynamic route or fallback named."""
    options = accepted.request.routing
    allowed = options.allowed_routes if options is not None else None
    return allowed is None or accepted.route in allowed


def route(
    state: RouteState,
    accepted: RequestAccepted,
    attempt: int,
    tried: list[str],
    policy: Policy,
    *,
    carrier: int,
    waits: int = 0,
    on_line: bool = False,
    again: Collection[str] = (),
) -> Step | Blocked:
    """Decide an attempt. When no candidate can take it now: a new request (``on_line``)
    whose candidates are busy is :class:`Blocked`, to wait in the log; an attempt whose
    candidates are open or cooling down is parked while there is room; otherwise (none
    can ever take it, or no room to park) it is refused.

    A request with a fallback model left waits only for a candidate at capacity (a slot
    frees when one of the route's attempts ends): an open breaker, a probe in flight or
    a Retry-After sends it to the fallback model at once (the refusal here is what
    :func:`app.routing.dynamic.fall_back` forwards). ``again``: tried deployments whose
    failure a retry may mend (a 429, a 5xx, a reset), retried after the backoff, or
    after their Retry-After, when no untried candidate and no fallback model is left.
    """
    request_id = accepted.request.request_id
    if not _route_allowed(accepted):
        error = ErrorBody(
            type="invalid_request",
            message=f"route {accepted.route!r} is not one this request may use",
            code=ROUTE_NOT_ALLOWED,
            http_status=403,
        )
        refused = error_response(request_id, attempt - 1, state.clock, error)
        return Step(state, responses=[refused])
    plan = auto.plan(state, accepted, policy, tried)  # the auto router: model "auto"
    if plan is None:
        plan = plan_candidates(accepted, policy, attempt, tried, state)
    plan = _narrowed(plan, accepted, policy, state)
    if plan.refusal is not None:
        return Step(
            state, responses=[error_response(request_id, attempt - 1, state.clock, plan.refusal)]
        )
    asked = ask_first(state, accepted, attempt, tried, policy, carrier=carrier, waits=waits)
    if asked is not None:
        return asked  # parked until every budget holds its worst case
    learning = prepare(state, accepted, attempt, policy)
    keys = affinity.keys_of(accepted, policy)
    sticks = affinity.sticks(state, keys)
    out = _not_again(state, accepted, attempt, plan, tried, policy, again)
    selection = select(state, plan, request_id, attempt, out, policy, learning, sticks)
    if out is not tried and selection.chosen is not None:
        selection = replace(selection, rule="retry_same_deployment")
    arms = {**state.arms, **selection.arms}
    chosen = selection.chosen
    if chosen is None:
        state = replace(state, arms=arms)
        waiting = selection.excluded
        if has_fallback(accepted):
            waiting = [e for e in waiting if e.reason == "concurrency_full"]
        if parking.worth_waiting(waiting):
            if on_line and parking.wait_in_line(waiting):
                return Blocked(selection.arms)
            parked = _park(
                state, accepted, attempt, tried, waits, selection.excluded, policy, carrier, again
            )
            if parked is not None:
                return Step(parked)
        reasons = ", ".join(f"{e.deployment}: {e.reason}" for e in selection.excluded)
        error = ErrorBody(
            type=NO_DEPLOYMENT_AVAILABLE,
            message=f"no deployment of route {accepted.route!r} can take attempt {attempt} "
            f"({reasons})",
            code="exhausted" if tried else "no_candidate",
            http_status=503,
        )
        return Step(state, responses=[error_response(request_id, attempt - 1, state.clock, error)])

    arm_state = arms.get(chosen.deployment, NEW_ARM)
    arms[chosen.deployment] = evolve_arm(arm_state, in_flight=arm_state.in_flight + 1)
    deadline = deadline_of(accepted, policy)
    open_attempts = {
        **state.open_attempts,
        attempt_key(request_id, attempt): OpenAttempt(  # positional, in field order
            chosen.deployment,
            state.clock,  # decided_at
            deadline,
            tuple(accepted.dynamic.budget_nodes) if accepted.dynamic else (),  # budget_nodes
            keys,  # affinity
            cache.ref_of(accepted, policy),  # where its answer is cached
        ),
    }
    expiry = deadline + LOST_ATTEMPT_GRACE_S
    if state.open_attempts:
        expiry = min(expiry, state.expiry_check_at) if state.expiry_check_at else 0.0
    state = evolve_route(
        state,
        arms=arms,
        open_attempts=open_attempts,
        expiry_check_at=expiry,
        budgets=budgets(state, learning),
    )
    decision = trusted(Decision)(
        id=derived_id("decision", request_id, attempt),
        occurred_at=at(state.clock),
        request_id=request_id,
        attempt=attempt,
        route=accepted.route,
        deployment=chosen.deployment,
        provider=chosen.provider.id,
        model=chosen.model,
        strategy=policy.params.strategy.value,
        algorithm_version=algorithm_version(policy),
        candidates=list(selection.candidates),
        excluded=list(selection.excluded),
        config_hash=policy.config_hash,
        policy_version=policy.version,
        dynamic=accepted.dynamic,
        state_version=state.position,
        propensity=selection.propensity,
        selection_rule=selection.rule,
        domain=plan.domain,
        candidate_filter=plan.rule,
        mode=plan.mode.mode.value,
        mode_source=plan.mode.source,
        context=learning.key,
        context_level=selection.level,
        context_depth=level_index(learning.chain, selection.level),
        pacer_multiplier=learning.multiplier,
        cost_target_usd=learning.target_usd,
        auto=auto.trace(accepted, plan, selection),
        affinity=selection.affinity,
        prompt_sha256=accepted.prompt_sha256,
        prompt_chars=accepted.prompt_chars,
    )
    local_now = plan.min_confidence is not None  # local-first takes this attempt
    dispatch = trusted(Dispatch)(
        id=derived_id("dispatch", request_id, attempt),
        occurred_at=decision.occurred_at,
        decision=decision,
        accepted=accepted,
        timeout_s=chosen.provider.timeout_ms / 1000.0,
        max_attempts=attempt_limit(accepted, attempt, local_now, tried, policy),
        min_confidence=plan.min_confidence,
        tried=list(tried),
        not_before=state.clock + backoff_s(request_id, attempt, policy),
        deadline=deadline,
    )
    return Step(state, dispatches=[dispatch])


def _narrowed(
    plan: CandidatePlan, accepted: RequestAccepted, policy: Policy, state: RouteState
) -> CandidatePlan:
    """The plan without the deployments that cannot serve the request (its modalities,
    context window, answer length) or that its data and price rules leave out, whatever
    made the plan (a pin, the auto router, a dynamic route's model, a retry); refused
    when none is left (400 for what no model can do, 403 for what no rule allows)."""
    if plan.refusal is not None or not plan.arms:
        return plan
    kept, unable = split_capable(plan.arms, accepted, policy, state)
    kept, barred = split_allowed(kept, accepted, policy)
    kept, preview = status.split_preview(kept, accepted, policy)
    if not unable and not barred and not preview:
        return plan
    excluded = [*plan.excluded, *unable, *barred, *preview]
    if kept:
        return replace(plan, arms=kept, excluded=excluded)
    if preview:
        error = status.preview_refusal(preview)
    else:
        error = data_refusal(barred) if barred else refusal(unable, accepted)
    return replace(plan, arms=[], excluded=excluded, refusal=error)


def _not_again(
    state: RouteState,
    accepted: RequestAccepted,
    attempt: int,
    plan: CandidatePlan,
    tried: list[str],
    policy: Policy,
    again: Collection[str],
) -> list[str]:
    """The deployments the attempt must not use: all it tried (``tried`` itself), unless
    no untried candidate can take it now and no fallback model is left, when those in
    ``again`` are candidates once more."""
    if not again or has_fallback(accepted):
        return tried
    untried = select(state, plan, accepted.request.request_id, attempt, tried, policy)
    if untried.chosen is not None:
        return tried
    return [d for d in tried if d not in again]


def _park(
    state: RouteState,
    accepted: RequestAccepted,
    attempt: int,
    tried: list[str],
    waits: int,
    excluded: list[Exclusion],
    policy: Policy,
    carrier: int,
    again: Collection[str],
) -> RouteState | None:
    """The state with this attempt waiting for a deployment, or None when waiting can't help."""
    if len(state.parking.parked) >= policy.params.max_parked:
        return None
    request_id = accepted.request.request_id
    retry_at = state.clock + parking.wait_s(request_id, attempt, waits, policy)
    passing = [e for e in excluded if e.reason in parking.TEMPORARY]
    if passing and all(e.reason == "retry_after" for e in passing):
        # Only Retry-After keeps candidates out: no look before the first one's ends.
        retry_at = max(retry_at, min(state.arm(e.deployment).retry_after_until for e in passing))
    deadline = deadline_of(accepted, policy)
    if retry_at >= deadline:
        return None
    entry = Parked(
        request_id=request_id,
        attempt=attempt,
        carrier=carrier,
        deadline=deadline,
        tried=tried,
        retry_at=retry_at,
        waits=waits,
        again=list(again),
    )
    key = attempt_key(request_id, attempt)
    return replace(state, parking=state.parking.park(key, entry))
