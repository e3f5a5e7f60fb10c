"""The event contract: frozen pydantic v2 models, one per record type, and nothing else:
pydantic and the standard library only.

Every event carries a small envelope (``id``, ``type``, ``schema_version``,
``occurred_at``). Ids of derived events are deterministic (UUIDv5 of what they
are about), so a replay or a redelivery produces the same id and consumers can
drop duplicates by id.

Decision and outcome events never carry prompt or completion text; at most a
prompt hash and its length. The JSON Schemas in ``schemas/`` are generated from
these models (``switchyard schemas``) and a test fails when they are stale.
"""

from __future__ import annotations

from app.contract.answer import REQUEST_REFUSED, DeadLetter, ErrorBody, Response
from app.contract.auto import AutoTrace
from app.contract.base import SCHEMA_VERSION, Envelope, Frozen, GradeSource, LogPosition, derived_id
from app.contract.budget import BudgetAsk, BudgetSettle, BudgetVerdict, ledger_key
from app.contract.cache import CacheKey, CacheTrace
from app.contract.catalog import INTERNAL_EVENTS, PUBLIC_EVENTS
from app.contract.decision import Candidate, Decision, Exclusion
from app.contract.dispatch import Dispatch
from app.contract.dynamic import DynamicTrace
from app.contract.feedback import (
    LABEL_SCORES,
    MAX_GRADE_WEIGHT,
    Feedback,
    FeedbackAccepted,
    FeedbackLabel,
    FeedbackSweep,
)
from app.contract.outcome import (
    CONTENT_POLICY_VIOLATION,
    CONTEXT_LENGTH_EXCEEDED,
    OUTPUT_BLOCKED,
    REFUSAL_CODES,
    REGION_NOT_SERVED,
    RESPONSE_TOO_LARGE,
    ROUTE_NOT_ALLOWED,
    Outcome,
    StatusClass,
    refusal_code,
)
from app.contract.policy import PolicyChanged, PolicyDocument, PolicyProposed, PolicySource
from app.contract.request import (
    ChatMessage,
    ChatRequest,
    ProviderPreferences,
    ReplyTo,
    RoutingOptions,
)
from app.contract.routing_log import (
    AttemptFinished,
    GradeApplied,
    RequestAccepted,
    RouteTick,
    RoutingEvent,
    RoutingLogEvent,
    route_of,
)
from app.contract.stream import StreamDelta, StreamEnd, delta_id

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
    "AttemptFinished",
    "AutoTrace",
    "BudgetAsk",
    "BudgetSettle",
    "BudgetVerdict",
    "CacheKey",
    "CacheTrace",
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
