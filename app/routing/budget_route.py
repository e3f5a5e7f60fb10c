"""A route's side of budgets: ask before deciding, settle when done.

An attempt of a request under budgets (its route's, its tenant's, its API
key's) is parked before it is decided, and its worst-case cost asked of each
ledger in turn (:mod:`app.routing.budget`). Held by all, it is decided like any
other (it may still wait for a deployment); refused by one, the request is
answered ``budget_exceeded`` (429, not worth retrying) and the ledgers that held
it get it back. When the attempt ends, every ledger is told what it cost. An
answered request's holds that no attempt will settle (no call was made: a
deadline, a refusal, a lost attempt) are given back at cost 0.
"""

from __future__ import annotations

from dataclasses import replace

from app.contract import (
    BudgetAsk,
    BudgetSettle,
    BudgetVerdict,
    ErrorBody,
    RequestAccepted,
    Response,
    RoutingLogEvent,
    derived_id,
)
from app.routing.answers import at, deadline_of, error_response
from app.routing.budget_state import Amount
from app.routing.capabilities import serves
from app.routing.policy import Policy
from app.routing.state import Hold, Parked, RouteState, attempt_key
from app.routing.steps import Step

#: A parked attempt waiting for a verdict is looked at again only when one comes.
NO_LOOK = 1e18


def scopes_of(accepted: RequestAccepted, policy: Policy) -> tuple[str, ...]:
    """The budgets a request is under, in the order they are asked (a request that names
    no tenant is under ``tenant:*``, when there is one)."""
    budgets = policy.config.budget_by_key
    if not budgets:
        return ()
    request = accepted.request
    wanted = [f"route:{accepted.route}"]
    wanted.append(f"tenant:{request.tenant}" if request.tenant is not None else "tenant:*")
    if request.key_name is not None:
        wanted.append(f"key:{request.key_name}")
    return tuple(scope for scope in wanted if scope in budgets)


def worst_case(
    accepted: RequestAccepted, attempt: int, policy: Policy, scopes: tuple[str, ...]
) -> Amount:
    """What an attempt uses at most: every prompt character a token, ``max_tokens`` (else
    the budgets' default) output tokens, at the dearest deployment's prices; one request
    for the first attempt (a request counts once). An embeddings request writes no output
    tokens and is priced among the deployments that serve embeddings."""
    budgets = policy.config.budget_by_key
    output_tokens = accepted.request.max_tokens or max(
        budgets[scope].default_max_tokens for scope in scopes
    )
    if accepted.request.is_embeddings:
        output_tokens = 0
    requests = 1 if attempt == 1 else 0
    tokens = accepted.prompt_chars + output_tokens
    arms = policy.arms(accepted.route)
    if accepted.request.is_embeddings:
        arms = [arm for arm in arms if serves(arm, accepted)] or arms
    if not arms:
        return Amount(requests, tokens, 0.0)
    input_price = max(arm.provider.input_price for arm in arms)
    output_price = max(arm.provider.output_price for arm in arms)
    usd = (accepted.prompt_chars * input_price + output_tokens * output_price) / 1_000_000
    return Amount(requests, tokens, usd)


def ask_first(
    state: RouteState,
    accepted: RequestAccepted,
    attempt: int,
    tried: list[str],
    policy: Policy,
    *,
    carrier: int,
    waits: int,
) -> Step | None:
    """Park the attempt and ask the first ledger, unless every ledger already holds it
    (None: decide it now)."""
    scopes = scopes_of(accepted, policy)
    request_id = accepted.request.request_id
    key = attempt_key(request_id, attempt)
    hold = state.budgets.holds.get(key)
    if not scopes or (hold is not None and hold.granted):
        return None
    amount = worst_case(accepted, attempt, policy, scopes)
    deadline = deadline_of(accepted, policy)
    parked = Parked(
        request_id=request_id,
        attempt=attempt,
        carrier=carrier,
        deadline=deadline,
        tried=list(tried),
        retry_at=NO_LOOK,
        waits=waits,
    )
    state = replace(
        state,
        parking=state.parking.park(key, parked),
        budgets=state.budgets.hold(key, Hold(scopes, amount.usd)),
    )
    first = BudgetAsk(
        id=derived_id("budget.ask", request_id, attempt, 0),
        occurred_at=at(state.clock),
        route=accepted.route,
        request_id=request_id,
        attempt=attempt,
        amount_usd=amount.usd,
        tokens=amount.tokens,
        requests=amount.requests,
        scopes=list(scopes),
        index=0,
        deadline=deadline,
    )
    return Step(state, records=[first])


def on_verdict(state: RouteState, verdict: BudgetVerdict) -> Step:
    """Held: the parked attempt is looked at now. Refused: answered ``budget_exceeded``."""
    key = attempt_key(verdict.request_id, verdict.attempt)
    hold, parked = state.budgets.holds.get(key), state.parking.parked.get(key)
    if hold is not None and hold.granted:
        return Step(state)  # a copy (a ledger re-sent it): the attempt goes on as held
    if hold is None or parked is None:
        # Answered meanwhile (its deadline): give back what the ledgers hold for it.
        return Step(state, records=_give_back(state, verdict, verdict.scopes))
    if verdict.granted:
        return Step(
            replace(
                state,
                budgets=state.budgets.hold(key, replace(hold, granted=True)),
                parking=state.parking.park(key, replace(parked, retry_at=state.clock)),
            )
        )
    error = ErrorBody(
        type="budget_exceeded",
        message=f"budget {verdict.denied_by} cannot cover this request ({verdict.reason})",
        code="budget_exceeded",
        http_status=429,
        retry_after_s=verdict.retry_after_s,
    )
    state = replace(
        state,
        budgets=state.budgets.release((key,)),
        parking=state.parking.unpark(key),
    )
    response = error_response(verdict.request_id, verdict.attempt - 1, state.clock, error)
    return Step(state, responses=[response], records=_give_back(state, verdict, verdict.scopes))


def settle_attempt(
    state: RouteState, route: str, request_id: str, attempt: int, used: Amount
) -> tuple[RouteState, list[RoutingLogEvent]]:
    """An attempt ended: every ledger holding it learns what it used."""
    key = attempt_key(request_id, attempt)
    hold = state.budgets.holds.get(key)
    if hold is None:
        return state, []
    records = [_settle(state, route, request_id, attempt, s, used) for s in hold.scopes]
    return replace(state, budgets=state.budgets.release((key,))), list(records)


def give_back_answered(
    state: RouteState, route: str, responses: list[Response]
) -> tuple[RouteState, list[RoutingLogEvent]]:
    """Holds of answered requests that no open attempt will settle: given back."""
    holds = state.budgets.holds
    if not holds or not responses:
        return state, []
    answered = {r.request_id for r in responses}
    done = sorted(
        key
        for key in holds
        if key.rpartition("#")[0] in answered and key not in state.open_attempts
    )
    records: list[RoutingLogEvent] = []
    for key in done:
        request_id, _, number = key.rpartition("#")
        for scope in holds[key].scopes:
            records.append(_settle(state, route, request_id, int(number), scope, Amount()))
    return replace(state, budgets=state.budgets.release(done)), records


def _give_back(
    state: RouteState, verdict: BudgetVerdict, scopes: list[str]
) -> list[RoutingLogEvent]:
    return [
        _settle(state, verdict.route, verdict.request_id, verdict.attempt, scope, Amount())
        for scope in scopes
    ]


def _settle(
    state: RouteState, route: str, request_id: str, attempt: int, scope: str, used: Amount
) -> BudgetSettle:
    return BudgetSettle(
        id=derived_id("budget.settle", request_id, attempt, scope),
        occurred_at=at(state.clock),
        scope=scope,
        route=route,
        request_id=request_id,
        attempt=attempt,
        cost_usd=used.usd,
        tokens=used.tokens,
        requests=used.requests,
    )
