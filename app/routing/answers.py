"""What the fold answers with: response events, deadlines and the retry backoff.

Pure helpers shared by the fold (:mod:`app.routing.fold`) and admission
(:mod:`app.routing.admission`); the simulator's baselines use the same
deadline and backoff.
"""

from __future__ import annotations

from datetime import UTC, datetime

from app.contract import (
    RESPONSE_TOO_LARGE,
    AttemptFinished,
    ErrorBody,
    RequestAccepted,
    Response,
    StatusClass,
    derived_id,
    refusal_code,
)
from app.routing import bandit
from app.routing.policy import Policy
from app.routing.records import trusted


def epoch(moment: datetime) -> float:
    return moment.timestamp()


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def deadline_of(accepted: RequestAccepted, policy: Policy) -> float:
    return epoch(accepted.occurred_at) + policy.params.request_deadline_s


def backoff_s(request_id: str, attempt: int, policy: Policy) -> float:
    """Exponential backoff between attempts, with seeded jitter (the fallback loop,
    docs/design.md#fallback-loop-reliability-accounting-cost).

    ``base x 2^(attempt-2) x U[0.5, 1)``; none before the first attempt. The
    jitter keeps retries of a failed burst from arriving together.
    """
    if attempt <= 1:
        return 0.0
    jitter = 0.5 + 0.5 * bandit.seeded_rng("backoff", request_id, attempt).random()
    return float(policy.params.retry_backoff_s * 2 ** (attempt - 2) * jitter)


def error_response(request_id: str, attempts: int, clock: float, error: ErrorBody) -> Response:
    return trusted(Response)(
        id=derived_id("response", request_id),
        occurred_at=at(clock),
        request_id=request_id,
        status="error",
        attempts=attempts,
        error=error,
    )


def deadline_error(message: str) -> ErrorBody:
    return ErrorBody(
        type="deadline_exceeded", message=message, code="deadline_exceeded", http_status=504
    )


def provider_error(
    status_class: StatusClass,
    http_status: int | None,
    error: str | None,
    code: str = "provider_error",
) -> ErrorBody:
    """The error answered for a provider's result: its class, and a refusal the provider
    named (its context window, its content policy) as the code, a 400 whatever the
    provider's status (a 2xx cut by ``content_filter``), so the client reads the reason."""
    refused = refusal_code(error)
    return ErrorBody(
        type=status_class.value,
        message=error or status_class.value,
        code=refused or code,
        http_status=400 if refused else http_status,
    )


def answers(event: AttemptFinished) -> bool:
    """Whether this attempt's result is the request's successful answer."""
    outcome = event.outcome
    return (
        outcome.status_class is StatusClass.SUCCESS
        and outcome.final
        and event.retry is None
        and event.completion is not None
    )


def success_response(event: AttemptFinished) -> Response:
    """The answer of a successful final attempt. Stamped with the attempt's own time, so
    the executor that got it can publish it at once, the same record the fold derives."""
    outcome = event.outcome
    completion = None if event.completion is None else dict(event.completion)
    return trusted(Response)(
        id=derived_id("response", outcome.request_id),
        occurred_at=event.occurred_at,
        request_id=outcome.request_id,
        status="ok",
        attempts=outcome.attempt,
        deployment=outcome.deployment,
        completion=completion,
    )


def final_response(event: AttemptFinished, clock: float) -> Response:
    outcome = event.outcome
    if outcome.status_class is StatusClass.SUCCESS and event.completion is not None:
        return success_response(event)
    if outcome.status_class is StatusClass.EXPIRED:
        error = deadline_error(outcome.error or "the request's deadline passed")
    elif (outcome.error or "").startswith(RESPONSE_TOO_LARGE):
        # The provider answered; the answer cannot be carried in a record (502, final).
        error = ErrorBody(
            type=RESPONSE_TOO_LARGE,
            message=outcome.error or RESPONSE_TOO_LARGE,
            code=RESPONSE_TOO_LARGE,
            http_status=502,
        )
    else:
        error = provider_error(outcome.status_class, outcome.http_status, outcome.error)
    response = error_response(outcome.request_id, outcome.attempt, clock, error)
    return response.model_copy(update={"deployment": outcome.deployment})
