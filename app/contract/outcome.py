"""An attempt's result: its status class, the refusal codes its error may name, and the
``llm.outcomes`` record. No prompt or completion text."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from app.contract.base import Envelope


class StatusClass(StrEnum):
    SUCCESS = "success"
    CLIENT_ERROR = "client_error"
    AUTH_ERROR = "auth_error"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    CONNECTION_ERROR = "connection_error"
    BAD_RESPONSE = "bad_response"
    #: The request's deadline ran out before or during the call (a backlog, a worker that
    #: was down, a call cut short by the deadline rather than the provider's timeout): not
    #: the provider's doing, so it never counts against it (docs/design.md#robustness).
    EXPIRED = "expired"


#: The error code (and first word of the outcome's error) of an answer too large to be
#: delivered in a record (app/execution/envelope.py).
RESPONSE_TOO_LARGE = "response_too_large"
#: The error code (and first word of the outcome's error) of a request its provider
#: refused as longer than the model's context window (app/execution/refusals.py): a
#: ``client_error``, neutral for the provider's health, worth trying on another model.
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
#: The error code (and first word of the outcome's error) of a request or an answer its
#: provider's content policy rejected (a 4xx ``content_policy_violation`` or
#: ``content_filter``, or a 2xx whose finish reason is ``content_filter``): a final
#: ``client_error``, neutral for the provider's health.
CONTENT_POLICY_VIOLATION = "content_policy_violation"
#: The error code (and first word of the outcome's error) of an answer an output
#: guardrail blocked (app/guardrails/): a final ``client_error``, neutral for the
#: provider's health; the error names the rule, never the text.
OUTPUT_BLOCKED = "output_blocked"
#: The error code of a request a dynamic route or a fallback model sent to a route its
#: ``routing.allowed_routes`` (a gateway key's allowlist) does not hold: 403.
ROUTE_NOT_ALLOWED = "route_not_allowed"
#: The error code (and first word of the outcome's error) of a request its provider
#: refused for the region it came from (a 403 ``unsupported_country_region_territory``
#: and the like): a ``client_error``, neutral for the provider's health and counted
#: apart (``switchyard_region_refusals_total``), worth trying on another deployment.
REGION_NOT_SERVED = "region_not_served"
#: The first words of an outcome's error that name why the request was refused.
REFUSAL_CODES = frozenset(
    {CONTEXT_LENGTH_EXCEEDED, CONTENT_POLICY_VIOLATION, OUTPUT_BLOCKED, REGION_NOT_SERVED}
)


def refusal_code(error: str | None) -> str | None:
    """The refusal an outcome's error names first (one of ``REFUSAL_CODES``), else None."""
    word = (error or "").partition(":")[0]
    return word if word in REFUSAL_CODES else None


class Outcome(Envelope):
    """One attempt's result, on ``llm.outcomes``. No prompt or completion text."""

    type: Literal["attempt.outcome"] = "attempt.outcome"
    request_id: str
    attempt: int
    route: str
    deployment: str
    provider: str
    model: str
    decision_id: str
    status_class: StatusClass
    http_status: int | None
    latency_ms: float
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    cost_usd: float = 0.0
    reward: float
    finish_reason: str | None = None
    retriable: bool
    #: The provider's Retry-After, in seconds, when it sent one.
    retry_after_s: float | None = None
    #: exp(mean token log-probability) of the answer, when the provider reported them.
    confidence: float | None = None
    #: Time to the first content token, for providers called with ``stream: true``.
    first_token_ms: float | None = None
    #: True when this attempt ended the request (its response has been published).
    final: bool
    error: str | None = None
    #: The decision's context key (``Decision.context``), copied by the executor:
    #: the buckets this answer's cost and grade are learnt in.
    context: str | None = None
    #: The output guardrails that fired on the answer, as ``name:action`` (never the text).
    output_rules: list[str] = Field(default_factory=list)
    #: The id of the credential the tenant or key brought for this provider (never the
    #: key), and whose key the result came from: ``own`` or the deployment's (``managed``).
    credential: str | None = None
    key_source: Literal["own", "managed"] = "managed"
