"""The event contract: frozen pydantic v2 models, one per record type.

Every event carries a small envelope (``id``, ``type``, ``schema_version``,
``occurred_at``). Ids of derived events are deterministic (UUIDv5 of what they
are about), so a replay or a redelivery produces the same id and consumers can
drop duplicates by id.

Decision and outcome events never carry prompt or completion text; at most a
prompt hash and its length. The JSON Schemas in ``schemas/`` are generated from
these models (``switchyard schemas``) and a test fails when they are stale.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from app.contract.auto import AutoTrace
from app.contract.base import (
    _ID_NAMESPACE,
    SCHEMA_VERSION,
    Envelope,
    Frozen,
    GradeSource,
    LogPosition,
    derived_id,
)
from app.contract.budget import BudgetAsk, BudgetSettle, BudgetVerdict, ledger_key
from app.contract.decision import Candidate, Decision, Exclusion
from app.contract.dynamic import DynamicTrace
from app.contract.features import Features
from app.contract.feedback import (
    LABEL_SCORES,
    MAX_GRADE_WEIGHT,
    Feedback,
    FeedbackAccepted,
    FeedbackLabel,
    FeedbackSweep,
)
from app.contract.policy import PolicyChanged, PolicyDocument, PolicyProposed, PolicySource
from app.contract.request import (
    ChatMessage,
    ChatRequest,
    ProviderPreferences,
    ReplyTo,
    RoutingOptions,
)
from app.contract.stream import StreamDelta, StreamEnd, delta_id

# --------------------------------------------------------------------------- routing log


class RequestAccepted(Envelope):
    """A valid request, on the routing log, keyed by route. Internal: carries the prompt."""

    type: Literal["request.accepted"] = "request.accepted"
    request: ChatRequest
    route: str
    prompt_sha256: str
    prompt_chars: int
    source: LogPosition
    #: The request's features, computed once at ingest (labels and counts, no prompt text).
    features: Features | None = None
    #: ``provider:model`` when ``model`` pinned a deployment.
    pinned: str | None = None
    #: Set once a dynamic route was walked for it: what it decided.
    dynamic: DynamicTrace | None = None
    #: ``nitro`` or ``floor`` when ``model`` carried a routing suffix.
    suffix: str | None = None
    #: Why ``model`` could not be read, when it could not.
    model_error: str | None = None
    #: The forbidden keyword the request contains, when it does.
    guardrail: str | None = None
    #: The input rules that fired on the messages (``name:action``; app/guardrails/),
    #: and the one that blocks the request, when one does. Rule names only.
    input_rules: list[str] = Field(default_factory=list)
    input_blocked: str | None = None
    #: When ingest forwarded it (its wall clock); ``occurred_at`` is when it was published.
    #: They differ for a backlog (a worker was down): the router's clock then follows
    #: ingest, so a request whose deadline passed in the log is answered without a call.
    ingested_at: datetime | None = None
    #: SHA-256 of the prompt's prefix (tools and the messages up to the first
    #: user message, bounded): the context cache affinity pins. No text.
    prefix_sha256: str | None = None
    #: A streamed answer's text the client already has, when a provider's stream broke
    #: mid-answer and the request goes on (the retry an executor reports): the next
    #: attempt continues after it (docs/flow.md, mid-stream failover). Routing log only:
    #: like the prompt, never on a decision, an outcome or a trace.
    answered_prefix: str | None = None


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
#: The ``ErrorBody.type`` of the answer sent to a gateway's reply address when ingest
#: refuses a request that gateway published (app/ingest.py ``refusal_reply``); its code is
#: the dead letter's reason.
REQUEST_REFUSED = "request_refused"
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


class AttemptFinished(Envelope):
    """Feedback on the routing log. When ``retry`` is set the router routes it again."""

    type: Literal["attempt.finished"] = "attempt.finished"
    outcome: Outcome
    #: Deployments tried so far by this request, this attempt's included.
    tried: list[str]
    retry: RequestAccepted | None = None
    #: The OpenAI-format completion of a successful attempt.
    completion: dict[str, Any] | None = None
    #: The executor published the final answer itself (it is this attempt's successful
    #: completion): the router folds it, and does not send the response again.
    answered: bool = False


class RouteTick(Envelope):
    """The passing of time on a route, so that attempts lost in a crash expire on an idle route."""

    type: Literal["route.tick"] = "route.tick"
    route: str


class GradeApplied(Envelope):
    """A quality grade matched to the answer it grades, on the routing log
    keyed by route, so the route's single writer folds it in log order. No free text.

    Made from an ``llm.feedback`` record once its request's final answer is known:
    ``deployment`` and ``context`` are those of the attempt that answered. A second
    grade from the same ``source`` for the same request replaces the first: the
    replaced grade comes along (``replaces_*``) so the fold can take it back.
    """

    type: Literal["grade.applied"] = "grade.applied"
    request_id: str
    route: str
    deployment: str
    #: The context key the answering decision was made in (``Decision.context``).
    context: str | None = None
    source: GradeSource
    score: float = Field(ge=0.0, le=1.0)
    weight: float = Field(default=1.0, gt=0.0, le=100.0)
    feedback_id: str
    replaces_score: float | None = Field(default=None, ge=0.0, le=1.0)
    replaces_weight: float | None = Field(default=None, gt=0.0, le=100.0)


#: Every kind of event on the routing log (the union; ``RoutingLogEvent`` parses it).
RoutingEvent = (
    RequestAccepted
    | AttemptFinished
    | RouteTick
    | GradeApplied
    | PolicyChanged
    | BudgetAsk
    | BudgetVerdict
    | BudgetSettle
)
RoutingLogEvent = Annotated[RoutingEvent, Field(discriminator="type")]


# --------------------------------------------------------------------------- decisions


class Dispatch(Envelope):
    """Internal: a decision plus the request it routes, for the executors."""

    type: Literal["attempt.dispatch"] = "attempt.dispatch"
    decision: Decision
    accepted: RequestAccepted
    timeout_s: float
    max_attempts: int
    #: Epoch seconds: backoff before a retry; the executor does not call before it.
    not_before: float = 0.0
    #: Epoch seconds after which the request is no longer worth answering.
    deadline: float
    #: Deployments tried by earlier attempts of this request.
    tried: list[str] = Field(default_factory=list)
    #: Local-first attempt: keep the answer only at this confidence or above.
    min_confidence: float | None = None


# --------------------------------------------------------------------------- output


class ErrorBody(Frozen):
    type: str
    message: str
    code: str | None = None
    http_status: int | None = None
    #: When asking again may succeed (a limit's next window), seconds from the answer.
    retry_after_s: float | None = None


class Response(Envelope):
    """Exactly one per accepted request, on ``llm.responses``."""

    type: Literal["chat.response"] = "chat.response"
    request_id: str
    status: Literal["ok", "error"]
    attempts: int
    deployment: str | None = None
    completion: dict[str, Any] | None = None
    error: ErrorBody | None = None


class DeadLetter(Envelope):
    """An input that could not be accepted, with a machine-readable reason."""

    type: Literal["deadletter"] = "deadletter"
    reason: Literal[
        "not_json",
        "not_object",
        "schema_violation",
        "unknown_route",
        "unknown_preset",
        "oversized",
        "internal",
        "too_deep",
        "bad_number",
        "bad_text",
        "bad_feedback",
        "unmatched_feedback",
    ]
    detail: str
    source: LogPosition
    original_size: int
    original_truncated: bool
    #: The original bytes (up to the bound), base64-encoded: lossless for any input.
    original_base64: str


def route_of(event: RoutingEvent) -> str:
    """The route a routing-log event belongs to (its partition key); a budget's ledger
    is a key of its own (app/contract/budget.py)."""
    if isinstance(event, AttemptFinished):
        return event.outcome.route
    if isinstance(event, BudgetAsk):
        return ledger_key(event.scope)
    if isinstance(event, BudgetSettle):
        return ledger_key(event.scope)
    return event.route


PUBLIC_EVENTS: dict[str, type[BaseModel]] = {
    "chat_request": ChatRequest,
    "decision": Decision,
    "outcome": Outcome,
    "response": Response,
    "deadletter": DeadLetter,
    "feedback": Feedback,
    "policy_proposed": PolicyProposed,
}
INTERNAL_EVENTS: dict[str, type[BaseModel]] = {
    "request_accepted": RequestAccepted,
    "attempt_finished": AttemptFinished,
    "dispatch": Dispatch,
    "route_tick": RouteTick,
    "grade_applied": GradeApplied,
    "feedback_accepted": FeedbackAccepted,
    "feedback_sweep": FeedbackSweep,
    "policy_changed": PolicyChanged,
    "budget_ask": BudgetAsk,
    "budget_verdict": BudgetVerdict,
    "budget_settle": BudgetSettle,
    "stream_delta": StreamDelta,
}

__all__ = [
    "CONTENT_POLICY_VIOLATION",
    "CONTEXT_LENGTH_EXCEEDED",
    "INTERNAL_EVENTS",
    "LABEL_SCORES",
    "MAX_GRADE_WEIGHT",
    "OUTPUT_BLOCKED",
    "PUBLIC_EVENTS",
    "REFUSAL_CODES",
    "REGION_NOT_SERVED",
    "REQUEST_REFUSED",
    "RESPONSE_TOO_LARGE",
    "ROUTE_NOT_ALLOWED",
    "SCHEMA_VERSION",
    "_ID_NAMESPACE",
    "AttemptFinished",
    "AutoTrace",
    "BudgetAsk",
    "BudgetSettle",
    "BudgetVerdict",
    "Candidate",
    "ChatMessage",
    "ChatRequest",
    "DeadLetter",
    "Decision",
    "Dispatch",
    "DynamicTrace",
    "Envelope",
    "ErrorBody",
    "Exclusion",
    "Feedback",
    "FeedbackAccepted",
    "FeedbackLabel",
    "FeedbackSweep",
    "Frozen",
    "GradeApplied",
    "GradeSource",
    "LogPosition",
    "Outcome",
    "PolicyChanged",
    "PolicyDocument",
    "PolicyProposed",
    "PolicySource",
    "ProviderPreferences",
    "ReplyTo",
    "RequestAccepted",
    "Response",
    "RouteTick",
    "RoutingEvent",
    "RoutingLogEvent",
    "RoutingOptions",
    "StatusClass",
    "StreamDelta",
    "StreamEnd",
    "delta_id",
    "derived_id",
    "ledger_key",
    "refusal_code",
    "route_of",
]
