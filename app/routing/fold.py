"""The router as a pure fold over the routing log: ``(state, event, policy) -> Step``.

The live router agent, ``switchyard replay`` and the benchmark simulator all
call :func:`handle`; nothing else changes routing state, and nothing else
answers a request: the router publishes every response, so a request's life
has one writer.

Idempotency: an event at or below the row's position was already folded (a
redelivery after a crash) and changes nothing. An attempt's outcome is applied
only while that attempt is open, and applying it closes it in the same state
write, so an outcome delivered twice (an executor that ran a dispatch twice)
changes nothing and answers nothing. A request is routed once: a copy that
ingest re-published after a crash sits at or below the route's watermark for
its source partition, and is ignored.

The router agent writes the returned state only once the broker has
acknowledged the step's sends: the row is what makes a redelivered event a
no-op here, so a row written before its sends would lose them in a crash.
An attempt still open when its request's deadline (plus a grace) has passed is
closed with a ``lost`` error response all the same (a safety net: an outcome
that never came back), so no accepted request goes unanswered.
``RouteTick`` events move the clock on idle routes.

When every candidate is saturated, open or cooling down, the attempt waits in
the state (:mod:`app.routing.parking`) and is routed on a later event once its
backoff has passed, or answered with ``deadline_exceeded`` at its deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from app.events import (
    AttemptFinished,
    Decision,
    Dispatch,
    ErrorBody,
    Exclusion,
    RequestAccepted,
    Response,
    RouteTick,
    RoutingLogEvent,
    StatusClass,
    derived_id,
)
from app.routing import bandit, parking
from app.routing.candidates import plan_candidates, tenant_policy
from app.routing.feedback import apply_outcome
from app.routing.policy import Policy
from app.routing.select import select
from app.routing.state import ArmState, OpenAttempt, Parked, RouteState, attempt_key
from app.routing.strategies import ALGORITHM_VERSION
from app.understanding.guardrails import admit, prune, retry_after_s

#: After its deadline, an executor makes no call; this much later no outcome can still come.
LOST_ATTEMPT_GRACE_S = 10.0


@dataclass(frozen=True)
class Step:
    state: RouteState
    dispatches: list[Dispatch] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)
    #: False when the event was a duplicate and changed nothing but the clock.
    applied: bool = True


def epoch(moment: datetime) -> float:
    return moment.timestamp()


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def handle(state: RouteState, event: RoutingLogEvent, position: int, policy: Policy) -> Step:
    if position <= state.position:
        # Redelivered after a crash or rebalance: this row already includes it.
        return Step(state, applied=False)
    clock = max(state.clock, epoch(event.occurred_at))
    state, expired = _expire_lost_attempts(
        state.model_copy(update={"clock": clock, "position": position})
    )
    if isinstance(event, RouteTick):
        step = Step(state)
    elif isinstance(event, RequestAccepted):
        source = f"{event.source.topic}:{event.source.partition}"
        copy = event.source.offset <= state.accepted_through.get(source, -1)
        first = attempt_key(event.request.request_id, 1)
        if copy or first in state.open_attempts or first in state.parked:
            step = Step(state, applied=False)
        else:
            marks = {**state.accepted_through, source: event.source.offset}
            state = state.model_copy(update={"accepted_through": marks})
            step = _admit(state, event, policy)
    else:
        step = _finish(state, event, policy)
    if step.state.parked:
        step = _look_again(step, policy)
    if expired:
        return Step(step.state, step.dispatches, expired + step.responses, step.applied)
    return step


def _look_again(step: Step, policy: Policy) -> Step:
    """Route the parked attempts whose wait is over, oldest first; answer the late ones."""
    state = step.state
    due = sorted((p.retry_at, key) for key, p in state.parked.items() if p.retry_at <= state.clock)
    dispatches, responses = list(step.dispatches), list(step.responses)
    for _, key in due:
        parked = state.parked[key]
        state = state.model_copy(
            update={"parked": {k: v for k, v in state.parked.items() if k != key}}
        )
        request_id = parked.accepted.request.request_id
        if state.clock >= deadline_of(parked.accepted, policy):
            error = ErrorBody(
                type="deadline_exceeded",
                message=f"no deployment became available within "
                f"{policy.params.request_deadline_s:g}s ({parked.waits} waits)",
                code="deadline_exceeded",
                http_status=504,
            )
            responses.append(_error_response(request_id, parked.attempt - 1, state, error))
            continue
        routed = _route(
            state, parked.accepted, parked.attempt, parked.tried, policy, parked.waits + 1
        )
        state = routed.state
        dispatches += routed.dispatches
        responses += routed.responses
    return Step(state, dispatches, responses, step.applied)


def _expire_lost_attempts(state: RouteState) -> tuple[RouteState, list[Response]]:
    if not state.open_attempts or state.clock <= state.expiry_check_at:
        return state, []
    lost = {
        key: attempt
        for key, attempt in state.open_attempts.items()
        if attempt.deadline + LOST_ATTEMPT_GRACE_S < state.clock
    }
    if not lost:
        next_check = min(a.deadline for a in state.open_attempts.values()) + LOST_ATTEMPT_GRACE_S
        return state.model_copy(update={"expiry_check_at": next_check}), []
    arms = dict(state.arms)
    responses = []
    for key, attempt in sorted(lost.items()):
        arm = arms.get(attempt.deployment) or ArmState()
        arms[attempt.deployment] = arm.model_copy(update={"in_flight": max(0, arm.in_flight - 1)})
        request_id, _, number = key.rpartition("#")
        error = ErrorBody(
            type="lost",
            message=f"attempt {number} on {attempt.deployment} never reported back",
            code="deadline_exceeded",
            http_status=504,
        )
        responses.append(_error_response(request_id, int(number), state, error))
    still_open = {k: v for k, v in state.open_attempts.items() if k not in lost}
    update = {"arms": arms, "open_attempts": still_open, "expiry_check_at": 0.0}
    return state.model_copy(update=update), responses


def _admit(state: RouteState, accepted: RequestAccepted, policy: Policy) -> Step:
    """Seed 000 §9 step 3, before any provider: forbidden keywords, then the tenant's rate."""
    request_id = accepted.request.request_id
    if accepted.guardrail is not None:
        error = ErrorBody(
            type="guardrail",
            message=f"refused: the request contains the forbidden keyword {accepted.guardrail!r}",
            code="forbidden_keyword",
            http_status=400,
        )
        return Step(state, responses=[_error_response(request_id, 0, state, error)])
    limit = tenant_policy(accepted, policy).rate_limit
    tenant = accepted.request.tenant
    if limit is not None and tenant is not None:
        rate, allowed = admit(state.rate, tenant, state.clock, limit.requests, limit.window_s)
        state = state.model_copy(update={"rate": prune(rate, state.clock, limit.window_s)})
        if not allowed:
            wait = retry_after_s(rate, tenant, state.clock, limit.window_s)
            error = ErrorBody(
                type="rate_limited",
                message=f"tenant {tenant!r} is over {limit.requests} requests per "
                f"{limit.window_s:g}s; retry in {wait:.3f}s",
                code="tenant_rate_limited",
                http_status=429,
            )
            return Step(state, responses=[_error_response(request_id, 0, state, error)])
    return _route(state, accepted, 1, [], policy)


def _route(
    state: RouteState,
    accepted: RequestAccepted,
    attempt: int,
    tried: list[str],
    policy: Policy,
    waits: int = 0,
) -> Step:
    request_id = accepted.request.request_id
    plan = plan_candidates(accepted, policy, attempt, tried)
    if plan.refusal is not None:
        return Step(
            state, responses=[_error_response(request_id, attempt - 1, state, plan.refusal)]
        )
    selection = select(state, plan, request_id, attempt, tried, policy)
    arms = {**state.arms, **selection.arms}
    chosen = selection.chosen
    if chosen is None:
        state = state.model_copy(update={"arms": arms})
        parked = _park(state, accepted, attempt, tried, waits, selection.excluded, policy)
        if parked is not None:
            return Step(parked)
        reasons = ", ".join(f"{e.deployment}: {e.reason}" for e in selection.excluded)
        error = ErrorBody(
            type="no_deployment_available",
            message=f"no deployment of route {accepted.route!r} can take attempt {attempt} "
            f"({reasons})",
            code="exhausted" if tried else "no_candidate",
            http_status=503,
        )
        return Step(state, responses=[_error_response(request_id, attempt - 1, state, error)])

    arm_state = arms.get(chosen.deployment) or ArmState()
    arms[chosen.deployment] = arm_state.model_copy(update={"in_flight": arm_state.in_flight + 1})
    timeout_s = chosen.provider.timeout_ms / 1000.0
    deadline = deadline_of(accepted, policy)
    open_attempts = {
        **state.open_attempts,
        attempt_key(request_id, attempt): OpenAttempt(
            deployment=chosen.deployment, decided_at=state.clock, deadline=deadline
        ),
    }
    expiry = deadline + LOST_ATTEMPT_GRACE_S
    if state.open_attempts:
        expiry = min(expiry, state.expiry_check_at) if state.expiry_check_at else 0.0
    update = {"arms": arms, "open_attempts": open_attempts, "expiry_check_at": expiry}
    state = state.model_copy(update=update)
    decision = Decision(
        id=derived_id("decision", request_id, attempt),
        occurred_at=at(state.clock),
        request_id=request_id,
        attempt=attempt,
        route=accepted.route,
        deployment=chosen.deployment,
        provider=chosen.provider.id,
        model=chosen.model,
        strategy=policy.params.strategy.value,
        algorithm_version=ALGORITHM_VERSION[policy.params.strategy],
        candidates=selection.candidates,
        excluded=selection.excluded,
        config_hash=policy.config_hash,
        state_version=state.position,
        propensity=selection.propensity,
        selection_rule=selection.rule,
        domain=plan.domain,
        candidate_filter=plan.rule,
        mode=plan.mode.mode.value,
        mode_source=plan.mode.source,
        prompt_sha256=accepted.prompt_sha256,
        prompt_chars=accepted.prompt_chars,
    )
    dispatch = Dispatch(
        id=derived_id("dispatch", request_id, attempt),
        occurred_at=decision.occurred_at,
        decision=decision,
        accepted=accepted,
        timeout_s=timeout_s,
        max_attempts=1 if plan.no_fallback else policy.max_attempts(accepted.route),
        min_confidence=plan.min_confidence,
        tried=list(tried),
        not_before=state.clock + backoff_s(request_id, attempt, policy),
        deadline=deadline_of(accepted, policy),
    )
    return Step(state, dispatches=[dispatch])


def _park(
    state: RouteState,
    accepted: RequestAccepted,
    attempt: int,
    tried: list[str],
    waits: int,
    excluded: list[Exclusion],
    policy: Policy,
) -> RouteState | None:
    """The state with this attempt waiting for a deployment, or None when waiting can't help."""
    if not parking.worth_waiting(excluded) or len(state.parked) >= policy.params.max_parked:
        return None
    request_id = accepted.request.request_id
    retry_at = state.clock + parking.wait_s(request_id, attempt, waits, policy)
    if retry_at >= deadline_of(accepted, policy):
        return None
    entry = Parked(accepted=accepted, attempt=attempt, tried=tried, retry_at=retry_at, waits=waits)
    key = attempt_key(request_id, attempt)
    return state.model_copy(update={"parked": {**state.parked, key: entry}})


def _finish(state: RouteState, event: AttemptFinished, policy: Policy) -> Step:
    outcome = event.outcome
    key = attempt_key(outcome.request_id, outcome.attempt)
    if key not in state.open_attempts:
        return Step(state, applied=False)
    open_attempts = {k: v for k, v in state.open_attempts.items() if k != key}
    arm = apply_outcome(state.arm(outcome.deployment), outcome, state.clock, policy)
    state = state.model_copy(
        update={"arms": {**state.arms, outcome.deployment: arm}, "open_attempts": open_attempts}
    )
    last_try = outcome.attempt >= policy.max_attempts(outcome.route)
    if event.retry is None or outcome.final or last_try:
        return Step(state, responses=[_final_response(event, state)])
    if state.clock >= deadline_of(event.retry, policy):
        error = ErrorBody(
            type="deadline_exceeded",
            message=f"no answer within {policy.params.request_deadline_s:g}s; "
            f"last: {outcome.error or outcome.status_class.value}",
            code="deadline_exceeded",
            http_status=504,
        )
        response = _error_response(outcome.request_id, outcome.attempt, state, error)
        return Step(state, responses=[response])
    step = _route(state, event.retry, outcome.attempt + 1, event.tried, policy)
    if step.responses:
        # Nothing left to try: the requester gets the last attempt's error.
        error = ErrorBody(
            type=outcome.status_class.value,
            message=f"all attempts failed; last: {outcome.error or outcome.status_class.value}",
            code="exhausted",
            http_status=outcome.http_status,
        )
        return Step(
            step.state,
            responses=[_error_response(outcome.request_id, outcome.attempt, step.state, error)],
        )
    return step


def _final_response(event: AttemptFinished, state: RouteState) -> Response:
    outcome = event.outcome
    if outcome.status_class is StatusClass.SUCCESS and event.completion is not None:
        return Response(
            id=derived_id("response", outcome.request_id),
            occurred_at=at(state.clock),
            request_id=outcome.request_id,
            status="ok",
            attempts=outcome.attempt,
            deployment=outcome.deployment,
            completion=event.completion,
        )
    error = ErrorBody(
        type=outcome.status_class.value,
        message=outcome.error or outcome.status_class.value,
        code="provider_error",
        http_status=outcome.http_status,
    )
    response = _error_response(outcome.request_id, outcome.attempt, state, error)
    return response.model_copy(update={"deployment": outcome.deployment})


def backoff_s(request_id: str, attempt: int, policy: Policy) -> float:
    """Seed 003 error n°1: exponential backoff between attempts, with seeded jitter.

    ``base x 2^(attempt-2) x U[0.5, 1)``; none before the first attempt. The
    jitter keeps retries of a failed burst from arriving together.
    """
    if attempt <= 1:
        return 0.0
    jitter = 0.5 + 0.5 * bandit.seeded_rng("backoff", request_id, attempt).random()
    return float(policy.params.retry_backoff_s * 2 ** (attempt - 2) * jitter)


def deadline_of(accepted: RequestAccepted, policy: Policy) -> float:
    return epoch(accepted.occurred_at) + policy.params.request_deadline_s


def _error_response(
    request_id: str, attempts: int, state: RouteState, error: ErrorBody
) -> Response:
    return Response(
        id=derived_id("response", request_id),
        occurred_at=at(state.clock),
        request_id=request_id,
        status="error",
        attempts=attempts,
        error=error,
    )
