"""The records an attempt ends with: its ``Outcome``, and the ``AttemptFinished`` feedback,
encoded and known to fit.

The feedback carries the completion to the router, and the router's ``Response``
carries it on to the requester, so a completion too large for a record
(``Settings.max_record_bytes``) cannot be delivered. Such an attempt ends as a
``client_error`` whose error starts with ``response_too_large``: final (another
provider asked the same question would answer at the same length, and be paid
for it again), neutral for the provider's health (it did what was asked), and its
tokens and cost are still counted. A completion that cannot be serialised at all
(a lone surrogate in its text) is the provider's fault: ``bad_response``,
retried elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from app.config.providers import ProviderConfig
from app.contract import RESPONSE_TOO_LARGE, Dispatch, Outcome, Response, StatusClass
from app.execution.outcome import CallResult, finish
from app.routing.answers import answers, success_response

__all__ = ["RESPONSE_TOO_LARGE", "Sealed", "seal"]


@dataclass(frozen=True, slots=True)
class Sealed:
    outcome: Outcome
    #: The encoded AttemptFinished for the routing log.
    feedback: bytes
    #: The request's answer when this attempt is it (published by the executor).
    response: Response | None = None


def seal(
    dispatch: Dispatch,
    result: CallResult,
    provider: ProviderConfig,
    *,
    occurred_at: datetime,
    max_record_bytes: int,
) -> Sealed:
    """The attempt's outcome and its encoded feedback, which fits in ``max_record_bytes``.

    The feedback says ``answered`` when it carries the request's successful answer: the
    executor publishes that response itself (:func:`app.routing.answers.success_response`).
    """
    try:
        sealed = _encode(dispatch, result, provider, occurred_at)
    except ValueError:  # pydantic cannot serialise the completion (lone surrogates)
        result = _unserialisable(result)
        sealed = _encode(dispatch, result, provider, occurred_at)
    too_big = len(sealed.feedback) > max_record_bytes
    if too_big and not sealed.outcome.final and result.completion is not None:
        # A completion that is not the answer (a local-first one not confident enough):
        # the retry goes on without it.
        result = replace(result, completion=None)
        sealed = _encode(dispatch, result, provider, occurred_at)
    if len(sealed.feedback) > max_record_bytes:
        result = _too_large(result, len(sealed.feedback), max_record_bytes)
        sealed = _encode(dispatch, result, provider, occurred_at)
    return sealed


def _encode(
    dispatch: Dispatch, result: CallResult, provider: ProviderConfig, occurred_at: datetime
) -> Sealed:
    outcome, finished = finish(dispatch, result, provider, occurred_at=occurred_at)
    if not answers(finished):
        return Sealed(outcome, finished.model_dump_json().encode())
    finished = finished.model_copy(update={"answered": True})
    return Sealed(outcome, finished.model_dump_json().encode(), success_response(finished))


def _unserialisable(result: CallResult) -> CallResult:
    return replace(
        result,
        status_class=StatusClass.BAD_RESPONSE,
        completion=None,
        confidence=None,
        error="completion not serialisable (invalid text)",
    )


def _too_large(result: CallResult, size: int, limit: int) -> CallResult:
    return replace(
        result,
        status_class=StatusClass.CLIENT_ERROR,
        http_status=None,
        completion=None,
        confidence=None,
        retry_after_s=None,
        error=f"{RESPONSE_TOO_LARGE}: the answer's record is {size} bytes, over the "
        f"{limit}-byte limit",
    )
