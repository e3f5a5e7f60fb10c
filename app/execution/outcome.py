"""Call result → outcome + feedback: the one pure builder.

Every attempt ends here, whoever made the call: the executor (through
:func:`app.execution.envelope.seal`), the synthetic log of the audit tests, the
counterfactual replay (an outcome drawn from the record) and the quality
simulator (a call of its simulated world). :func:`finish` turns the attempt's
``Dispatch`` and its :class:`CallResult` into the ``Outcome`` event and the
``AttemptFinished`` feedback the router folds.

The request deadline's rule lives here too (docs/design.md#robustness), for the executor and
the simulator alike: a call made with less time left than the provider's
timeout is cut at the deadline (:func:`call_budget_s`), a deadline that passed
before the call is :func:`deadline_passed`, and a call cut short by it is
``expired``, not the provider's ``timeout`` (:func:`blame_deadline`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from app.config.providers import ProviderConfig
from app.contract import (
    CONTEXT_LENGTH_EXCEEDED,
    REGION_NOT_SERVED,
    AttemptFinished,
    Dispatch,
    Outcome,
    RequestAccepted,
    StatusClass,
    derived_id,
    refusal_code,
)
from app.execution.limits import FIRST_TOKEN, IDLE
from app.routing.reliability import ends_request, is_retriable

#: The first words of a timeout's error when a limit shorter than the whole call's ended it.
SHORTER_LIMITS = (f"{FIRST_TOKEN} ", f"{IDLE} ")


@dataclass(frozen=True, slots=True)
class CallResult:
    """What one provider call came to. ``completion`` is set on success only."""

    status_class: StatusClass
    http_status: int | None
    latency_ms: float
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    finish_reason: str | None = None
    completion: dict[str, Any] | None = None
    error: str | None = None
    retry_after_s: float | None = None
    confidence: float | None = None
    #: Streaming calls: time to the first content token.
    first_token_ms: float | None = None
    #: A failed stream's text the client was given (published as deltas), to go on from.
    partial: str | None = None
    #: The output guardrails that fired on the answer (``name:action``; app/guardrails/).
    output_rules: tuple[str, ...] = ()
    #: The credential the tenant or key brought for this call (its id), and whose key
    #: the result came from: ``own`` or ``managed`` (app/credentials/).
    credential: str | None = None
    key_source: Literal["own", "managed"] = "managed"


# --------------------------------------------------------------------------- the deadline


def call_budget_s(timeout_s: float, left_s: float) -> float:
    """How long the call may take: the provider's timeout, cut at the request deadline."""
    return min(timeout_s, left_s)


def deadline_passed() -> CallResult:
    """The result of an attempt whose request deadline passed before its call."""
    return CallResult(StatusClass.EXPIRED, None, 0.0, error="request deadline passed")


def blame_deadline(result: CallResult, *, timeout_s: float, left_s: float) -> CallResult:
    """``expired`` for a call the request deadline cut short, else the result unchanged.

    The call had ``left_s`` before the deadline; when that was less than the
    provider's ``timeout_s`` and the whole call timed out (no HTTP answer), the
    deadline ended it, not the provider: nothing counts against the provider. A
    first-token or idle limit that ended it is the provider's ``timeout`` (such a limit
    is only named when it falls before the call's end, the deadline's cut included).
    """
    cut_short = left_s < timeout_s
    # The first-token and idle limits are the provider's own, deadline or not.
    whole_call = not (result.error or "").startswith(SHORTER_LIMITS)
    timed_out = result.status_class is StatusClass.TIMEOUT and result.http_status is None
    if cut_short and timed_out and whole_call:
        return replace(
            result,
            status_class=StatusClass.EXPIRED,
            error="request deadline passed during the call",
        )
    return result


# --------------------------------------------------------------------------- the outcome


def cost_usd(
    provider: ProviderConfig, tokens_in: int, tokens_out: int, tokens_cached: int
) -> float:
    """Dollars for one call: uncached input, cached input and output, priced per 1M tokens."""
    billable_in = max(0, tokens_in - tokens_cached)
    return (
        billable_in * provider.input_price
        + tokens_cached * provider.cached_input_price
        + tokens_out * provider.output_price
    ) / 1_000_000


def reward(status_class: StatusClass) -> float:
    return 1.0 if status_class is StatusClass.SUCCESS else 0.0


def retriable(result: CallResult) -> bool:
    """Whether the request may be tried on another deployment after this result.

    The accounting table's rule (:func:`app.routing.reliability.is_retriable`), and a
    prompt the model's context window cannot hold, or a region the provider does not
    serve: a ``client_error`` another deployment may take (never this one again: the
    fold does not pick a tried one).
    """
    if refusal_code(result.error) in (CONTEXT_LENGTH_EXCEEDED, REGION_NOT_SERVED):
        return result.status_class is StatusClass.CLIENT_ERROR
    return is_retriable(result.status_class, result.http_status)


def is_final(dispatch: Dispatch, result: CallResult) -> bool:
    """True unless the attempt failed in a retriable way, or a local-first answer was not
    confident enough, and attempts remain."""
    attempt, max_attempts = dispatch.decision.attempt, dispatch.max_attempts
    if dispatch.min_confidence is None and retriable(result):
        return attempt >= max_attempts
    return ends_request(
        attempt,
        max_attempts,
        result.status_class,
        result.http_status,
        confidence=result.confidence,
        min_confidence=dispatch.min_confidence,
    )


def build_outcome(
    dispatch: Dispatch,
    result: CallResult,
    provider: ProviderConfig,
    *,
    occurred_at: datetime,
    final: bool,
    judged: float | None = None,
) -> Outcome:
    """The ``Outcome`` event of the dispatched attempt. Carries no prompt or completion text.

    ``judged`` replaces the reward of a success when the answer's worth is known at
    once (a recorded reward replayed, a simulated user's verdict); the live executor
    never knows it: the reward is 1.0 for a success, 0.0 otherwise.
    """
    decision = dispatch.decision
    if provider.id != decision.provider:
        raise ValueError(f"provider {provider.id!r} is not the decision's {decision.provider!r}")
    earned = reward(result.status_class)
    if judged is not None and earned:
        earned = judged
    return Outcome(
        id=derived_id("outcome", decision.request_id, decision.attempt),
        occurred_at=occurred_at,
        request_id=decision.request_id,
        attempt=decision.attempt,
        route=decision.route,
        deployment=decision.deployment,
        provider=decision.provider,
        model=decision.model,
        decision_id=decision.id,
        status_class=result.status_class,
        http_status=result.http_status,
        latency_ms=result.latency_ms,
        tokens_in=result.tokens_in,
        tokens_out=result.tokens_out,
        tokens_cached=result.tokens_cached,
        cost_usd=cost_usd(provider, result.tokens_in, result.tokens_out, result.tokens_cached),
        reward=earned,
        finish_reason=result.finish_reason,
        retriable=retriable(result),
        final=final,
        error=result.error,
        retry_after_s=result.retry_after_s,
        confidence=result.confidence,
        first_token_ms=result.first_token_ms,
        context=decision.context,
        output_rules=list(result.output_rules),
        credential=result.credential,
        key_source=result.key_source,
    )


def feedback(dispatch: Dispatch, outcome: Outcome, result: CallResult) -> AttemptFinished:
    """The routing-log event the router folds (and answers from) after an attempt."""
    return AttemptFinished(
        id=derived_id("finished", outcome.request_id, outcome.attempt),
        occurred_at=outcome.occurred_at,
        outcome=outcome,
        tried=[*dispatch.tried, outcome.deployment],
        retry=None if outcome.final else _going_on(dispatch.accepted, result.partial),
        completion=result.completion,
    )


def _going_on(accepted: RequestAccepted, partial: str | None) -> RequestAccepted:
    """The request its next attempt takes: with the text the client already has, when
    this attempt's broken stream gave it some (the next attempt continues after it)."""
    if not partial:
        return accepted
    prefix = (accepted.answered_prefix or "") + partial
    return accepted.model_copy(update={"answered_prefix": prefix})


def finish(
    dispatch: Dispatch,
    result: CallResult,
    provider: ProviderConfig,
    *,
    occurred_at: datetime,
    judged: float | None = None,
) -> tuple[Outcome, AttemptFinished]:
    """The attempt's ``Outcome`` and the ``AttemptFinished`` the router folds."""
    final = is_final(dispatch, result)
    outcome = build_outcome(
        dispatch, result, provider, occurred_at=occurred_at, final=final, judged=judged
    )
    return outcome, feedback(dispatch, outcome, result)


def recorded_result(outcome: Outcome) -> CallResult:
    """The call result an ``Outcome`` records (its completion is not on the record)."""
    return CallResult(
        outcome.status_class,
        outcome.http_status,
        outcome.latency_ms,
        tokens_in=outcome.tokens_in,
        tokens_out=outcome.tokens_out,
        tokens_cached=outcome.tokens_cached,
        finish_reason=outcome.finish_reason,
        error=outcome.error,
        retry_after_s=outcome.retry_after_s,
        confidence=outcome.confidence,
        first_token_ms=outcome.first_token_ms,
    )
