"""The router as a pure fold over the routing log: ``(state, event, policy) -> Step``.

The live router agent, ``switchyard replay`` and the benchmark simulator all
call :func:`handle`; nothing else changes routing state.

Idempotency: an attempt's outcome is applied only while that attempt is open,
and applying it closes it in the same state write, so a redelivered outcome
changes nothing. A redelivered request whose first attempt is still open is
ignored the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from app.events import (
    AttemptFinished,
    Decision,
    Dispatch,
    ErrorBody,
    Outcome,
    RequestAccepted,
    Response,
    RoutingLogEvent,
    StatusClass,
    derived_id,
)
from app.routing import bandit, breaker
from app.routing.policy import Policy
from app.routing.reliability import ACCOUNTING, Availability
from app.routing.select import select
from app.routing.state import ArmState, BreakerPhase, OpenAttempt, RouteState, attempt_key
from app.routing.strategies import ALGORITHM_VERSION

#: An attempt open this long past its provider timeout is presumed lost (its
#: dispatch or outcome never reached the log) and its concurrency slot is freed.
LOST_ATTEMPT_GRACE_S = 60.0


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
    state = _expire_lost_attempts(state.model_copy(update={"clock": clock, "position": position}))
    if isinstance(event, RequestAccepted):
        if attempt_key(event.request.request_id, 1) in state.open_attempts:
            return Step(state, applied=False)
        return _route(state, event, 1, [], policy)
    return _finish(state, event, policy)


def _expire_lost_attempts(state: RouteState) -> RouteState:
    lost = {
        key: attempt
        for key, attempt in state.open_attempts.items()
        if attempt.decided_at + attempt.timeout_s + LOST_ATTEMPT_GRACE_S < state.clock
    }
    if not lost:
        return state
    arms = dict(state.arms)
    for attempt in lost.values():
        arm = arms.get(attempt.deployment) or ArmState()
        arms[attempt.deployment] = arm.model_copy(update={"in_flight": max(0, arm.in_flight - 1)})
    still_open = {k: v for k, v in state.open_attempts.items() if k not in lost}
    return state.model_copy(update={"arms": arms, "open_attempts": still_open})


def _route(
    state: RouteState, accepted: RequestAccepted, attempt: int, tried: list[str], policy: Policy
) -> Step:
    request_id = accepted.request.request_id
    selection = select(state, accepted.route, request_id, attempt, tried, policy)
    arms = {**state.arms, **selection.arms}
    chosen = selection.chosen
    if chosen is None:
        state = state.model_copy(update={"arms": arms})
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
    open_attempts = {
        **state.open_attempts,
        attempt_key(request_id, attempt): OpenAttempt(
            deployment=chosen.deployment, decided_at=state.clock, timeout_s=timeout_s
        ),
    }
    state = state.model_copy(update={"arms": arms, "open_attempts": open_attempts})
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
        prompt_sha256=accepted.prompt_sha256,
        prompt_chars=accepted.prompt_chars,
    )
    dispatch = Dispatch(
        id=derived_id("dispatch", request_id, attempt),
        occurred_at=decision.occurred_at,
        decision=decision,
        accepted=accepted,
        timeout_s=timeout_s,
        max_attempts=policy.max_attempts(accepted.route),
        tried=list(tried),
        not_before=state.clock + backoff_s(request_id, attempt, policy),
        deadline=deadline_of(accepted, policy),
    )
    return Step(state, dispatches=[dispatch])


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
    if (
        event.retry is None
        or outcome.final
        or outcome.attempt >= policy.max_attempts(outcome.route)
    ):
        return Step(state)
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


def apply_outcome(arm: ArmState, outcome: Outcome, now: float, policy: Policy) -> ArmState:
    """Fold one attempt outcome into its arm: bandit, latency EMAs, breaker, rate limits."""
    accounting = ACCOUNTING[outcome.status_class]
    alpha, beta = bandit.thompson_update(arm.alpha, arm.beta, outcome.reward)
    update: dict[str, object] = {
        "pulls": arm.pulls + 1,
        "total_reward": arm.total_reward + outcome.reward,
        "alpha": alpha,
        "beta": beta,
        "in_flight": max(0, arm.in_flight - 1),
    }
    if accounting.availability is not Availability.NEUTRAL:
        update.update(_health_update(arm, outcome, accounting.availability, now, policy))
    if outcome.status_class is StatusClass.RATE_LIMITED:
        update["rate_limited"] = arm.rate_limited + 1
        if outcome.retry_after_s:
            update["retry_after_until"] = max(arm.retry_after_until, now + outcome.retry_after_s)
    return arm.model_copy(update=update)


def _health_update(
    arm: ArmState, outcome: Outcome, availability: Availability, now: float, policy: Policy
) -> dict[str, object]:
    """Latency EMA (seed 000), failure and latency EWMAs (seed 003) and the breaker."""
    alpha = policy.params.ewma_alpha
    failed = availability is Availability.DOWN
    ewma_failure = alpha * float(failed) + (1 - alpha) * arm.ewma_failure
    if arm.observations == 0:
        ewma_latency = outcome.latency_ms
    else:
        ewma_latency = alpha * outcome.latency_ms + (1 - alpha) * arm.ewma_latency_ms
    update: dict[str, object] = {
        "avg_latency_s": bandit.ema_latency(
            arm.avg_latency_s, outcome.latency_ms / 1000.0, arm.latency_samples
        ),
        "latency_samples": arm.latency_samples + 1,
        "ewma_failure": ewma_failure,
        "ewma_latency_ms": ewma_latency,
        "observations": arm.observations + 1,
    }
    params = policy.breaker
    if not failed:
        moved = breaker.on_success(arm.breaker, params)
    elif params.ewma:
        moved = breaker.on_ewma_failure(
            arm.breaker, ewma_failure, arm.observations + 1, now, params
        )
    else:
        moved = breaker.on_failure(arm.breaker, now, params)
    update["breaker"] = moved
    if params.ewma and moved.state is BreakerPhase.CLOSED and arm.breaker.state is not moved.state:
        # Closed after probing: the failure history that tripped it is spent.
        update.update(ewma_failure=0.0, observations=0)
    return update


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
