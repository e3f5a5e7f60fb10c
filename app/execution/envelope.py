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

from dataclasses import replace
from datetime import datetime

from app.config import ProviderConfig
from app.events import RESPONSE_TOO_LARGE, Dispatch, Outcome, StatusClass
from app.execution.call import CallResult, build_outcome, feedback, is_final

__all__ = ["RESPONSE_TOO_LARGE", "seal"]


def seal(
    dispatch: Dispatch,
    result: CallResult,
    provider: ProviderConfig,
    *,
    occurred_at: datetime,
    max_record_bytes: int,
) -> tuple[Outcome, bytes]:
    """The attempt's outcome and its encoded feedback, which fits in ``max_record_bytes``."""
    try:
        outcome, value = _encode(dispatch, result, provider, occurred_at)
    except ValueError:  # pydantic cannot serialise the completion (lone surrogates)
        result = _unserialisable(result)
        outcome, value = _encode(dispatch, result, provider, occurred_at)
    if len(value) > max_record_bytes and not outcome.final and result.completion is not None:
        # A completion that is not the answer (a local-first one not confident enough):
        # the retry goes on without it.
        result = replace(result, completion=None)
        outcome, value = _encode(dispatch, result, provider, occurred_at)
    if len(value) > max_record_bytes:
        result = _too_large(result, len(value), max_record_bytes)
        outcome, value = _encode(dispatch, result, provider, occurred_at)
    return outcome, value


def _encode(
    dispatch: Dispatch, result: CallResult, provider: ProviderConfig, occurred_at: datetime
) -> tuple[Outcome, bytes]:
    final = is_final(dispatch, result)
    outcome = build_outcome(dispatch, result, provider, occurred_at=occurred_at, final=final)
    return outcome, feedback(dispatch, outcome, result).model_dump_json().encode()


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
