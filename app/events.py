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

import hashlib
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.contract.features import Features

SCHEMA_VERSION = 1
_ID_NAMESPACE = uuid.UUID("5d1c3b52-6f0e-4c1e-9a44-7a9b1f3f0c11")
_ID_HASH = hashlib.sha1(_ID_NAMESPACE.bytes, usedforsecurity=False)


def derived_id(*parts: object) -> str:
    """A stable event id from what the event is about: ``uuid5(namespace, "a/b/c")``.

    Computed from a pre-seeded SHA-1 (the same bytes ``uuid.uuid5`` hashes): ids
    sit on the routing fold's hot path.
    """
    digest = _ID_HASH.copy()
    digest.update("/".join(str(p) for p in parts).encode())
    raw = bytearray(digest.digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50  # version 5
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


class Envelope(Frozen):
    id: str
    schema_version: int = SCHEMA_VERSION
    occurred_at: datetime


# --------------------------------------------------------------------------- input


class ChatMessage(BaseModel):
    """One OpenAI chat message. Extra keys (name, tool_calls ...) pass through."""

    model_config = ConfigDict(frozen=True, extra="allow", hide_input_in_errors=True)

    role: Literal["system", "user", "assistant", "tool", "developer", "function"]
    content: str | list[dict[str, Any]] | None = None


class RoutingOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    mode: Literal["balanced", "price", "latency", "quality", "throughput"] | None = None


class ProviderPreferences(BaseModel):
    """Seed 004's per-request provider lists."""

    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    only: list[str] | None = None
    ignore: list[str] = Field(default_factory=list)
    order: list[str] = Field(default_factory=list)


class ReplyTo(BaseModel):
    """Where a gateway waits for the answer (issue 12): a copy of the request's response
    goes to this partition of the replies topic, besides ``llm.responses``."""

    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    topic: Annotated[str, Field(min_length=1, max_length=249)]
    partition: Annotated[int, Field(ge=0)]


class ChatRequest(BaseModel):
    """What a platform publishes on ``llm.requests``. Unknown fields are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    request_id: Annotated[str, Field(min_length=1, max_length=200)]
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    session_id: str | None = None
    tenant: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    routing: RoutingOptions | None = None
    provider: ProviderPreferences | None = None
    #: OpenAI's ``tools``, ``tool_choice`` and ``response_format``, passed to the provider as is.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    #: Set by the gateway: where it waits for the response (a copy is sent there).
    reply_to: ReplyTo | None = None

    @field_validator("request_id")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("request_id must be printable")
        return value


class LogPosition(Frozen):
    topic: str
    partition: int
    offset: int


# --------------------------------------------------------------------------- routing log


class RequestAccepted(Envelope):
    """A valid request, on the routing log, keyed by route. Internal: carries the prompt."""

    type: Literal["request.accepted"] = "request.accepted"
    request: ChatRequest
    route: str
    prompt_sha256: str
    prompt_chars: int
    source: LogPosition
    #: Seed 000 §8, computed once at ingest (labels and counts, no prompt text).
    features: Features | None = None
    #: ``provider:model`` when ``model`` pinned a deployment (seed 004).
    pinned: str | None = None
    #: ``nitro`` or ``floor`` when ``model`` carried a routing suffix.
    suffix: str | None = None
    #: Why ``model`` could not be read, when it could not.
    model_error: str | None = None
    #: The forbidden keyword the request contains, when it does.
    guardrail: str | None = None
    #: When ingest forwarded it (its wall clock); ``occurred_at`` is when it was published.
    #: They differ for a backlog (a worker was down): the router's clock then follows
    #: ingest, so a request whose deadline passed in the log is answered without a call.
    ingested_at: datetime | None = None


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
    #: the provider's doing, so it never counts against it (issue 17 §2).
    EXPIRED = "expired"


#: The error code (and first word of the outcome's error) of an answer too large to be
#: delivered in a record (app/execution/envelope.py).
RESPONSE_TOO_LARGE = "response_too_large"


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
    #: The decision's context key (issue 10, ``Decision.context``), copied by the executor:
    #: the buckets this answer's cost and grade are learnt in.
    context: str | None = None


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


GradeSource = Literal["user", "judge", "task", "heuristic"]


class GradeApplied(Envelope):
    """A quality grade matched to the answer it grades (issue 10), on the routing log
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


RoutingLogEvent = Annotated[
    RequestAccepted | AttemptFinished | RouteTick | GradeApplied, Field(discriminator="type")
]


# --------------------------------------------------------------------------- feedback

FeedbackLabel = Literal["thumbs_up", "thumbs_down", "accepted", "rejected"]
#: What a label means as a score in [0, 1].
LABEL_SCORES: dict[str, float] = {
    "thumbs_up": 1.0,
    "thumbs_down": 0.0,
    "accepted": 1.0,
    "rejected": 0.0,
}
#: Bounds of a grade's weight (GradeApplied's too).
MAX_GRADE_WEIGHT = 100.0
_Id = Annotated[str, Field(min_length=1, max_length=200)]


class Feedback(BaseModel):
    """A quality grade of one answer, on ``llm.feedback`` (issue 10). Unknown fields are
    ignored and never stored: no free text goes further than this model.

    Exactly one of ``score`` (in [0, 1]) and ``label``. ``feedback_id`` defaults to
    one derived from the request id, source and score or label, so a re-send is the
    same feedback. ``occurred_at`` is informational: matching uses log time.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    request_id: _Id
    score: Annotated[float, Field(ge=0.0, le=1.0, strict=True)] | None = None
    label: FeedbackLabel | None = None
    source: GradeSource
    weight: Annotated[float, Field(gt=0.0, le=MAX_GRADE_WEIGHT, strict=True)] = 1.0
    feedback_id: _Id | None = None
    occurred_at: datetime | None = None

    @field_validator("request_id", "feedback_id")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("ids must be printable")
        return value

    @model_validator(mode="after")
    def _one_grade(self) -> Feedback:
        if (self.score is None) == (self.label is None):
            raise ValueError("exactly one of score and label")
        return self

    @property
    def grade(self) -> float:
        """The score, or the label's score."""
        return self.score if self.score is not None else LABEL_SCORES[str(self.label)]

    def with_id(self) -> Feedback:
        """This feedback with its ``feedback_id`` filled in (derived when absent)."""
        if self.feedback_id is not None:
            return self
        what = self.label if self.label is not None else repr(self.score)
        derived = derived_id("feedback", self.request_id, self.source, what)
        return self.model_copy(update={"feedback_id": derived})


class FeedbackAccepted(Envelope):
    """Internal: a valid feedback, re-keyed by request id onto the matching topic."""

    type: Literal["feedback.accepted"] = "feedback.accepted"
    feedback: Feedback
    #: Where it was on ``llm.feedback``.
    source: LogPosition


class FeedbackSweep(Envelope):
    """Internal: time passing on one partition of the matching topic (prunes the table)."""

    type: Literal["feedback.sweep"] = "feedback.sweep"
    partition: int


# --------------------------------------------------------------------------- decisions


class Candidate(Frozen):
    deployment: str
    #: None for an arm never tried, which seed 000 picks before any score.
    score: float | None
    #: Per-factor contributions; for UCB1 they add up to ``score``.
    factors: dict[str, float]


class Exclusion(Frozen):
    deployment: str
    reason: str


class Decision(Envelope):
    """Which deployment an attempt goes to, and why. No prompt text."""

    type: Literal["routing.decision"] = "routing.decision"
    request_id: str
    attempt: int
    route: str
    deployment: str
    provider: str
    model: str
    strategy: str
    algorithm_version: str
    candidates: list[Candidate]
    excluded: list[Exclusion]
    config_hash: str
    #: Routing-log offset of the event this decision was computed at.
    state_version: int
    propensity: float
    #: Why the chosen deployment won: "score", "untried_first" or "half_open_probe".
    selection_rule: str = "score"
    #: Seed 000 §6: the detected domain, and how it narrowed the candidates
    #: (``specialists``, ``fallback_generalists``, ``no_domain``, ``all_providers``, ``pinned``).
    domain: str | None = None
    candidate_filter: str = "no_domain"
    #: Seed 004: the routing mode and which setting chose it.
    mode: str = "balanced"
    mode_source: str = "default"
    #: Issue 10: the request's context key (``tenant|domain|length|code``, app/routing/
    #: context.py), the bucket the chosen deployment's estimate came from (``*``: none
    #: finer had enough evidence) and how coarse it is (0: the finest).
    context: str | None = None
    context_level: str | None = None
    context_depth: int | None = None
    #: The budget pacer's cost multiplier and target ($ per request) when one applies.
    pacer_multiplier: float | None = None
    cost_target_usd: float | None = None
    prompt_sha256: str
    prompt_chars: int


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


def route_of(event: RequestAccepted | AttemptFinished | RouteTick | GradeApplied) -> str:
    """The route a routing-log event belongs to (its partition key)."""
    if isinstance(event, AttemptFinished):
        return event.outcome.route
    return event.route


PUBLIC_EVENTS: dict[str, type[BaseModel]] = {
    "chat_request": ChatRequest,
    "decision": Decision,
    "outcome": Outcome,
    "response": Response,
    "deadletter": DeadLetter,
    "feedback": Feedback,
}
INTERNAL_EVENTS: dict[str, type[BaseModel]] = {
    "request_accepted": RequestAccepted,
    "attempt_finished": AttemptFinished,
    "dispatch": Dispatch,
    "route_tick": RouteTick,
    "grade_applied": GradeApplied,
    "feedback_accepted": FeedbackAccepted,
    "feedback_sweep": FeedbackSweep,
}
