"""The routing log's events: requests accepted, attempts finished, the time, grades
(with policy changes and budget records from their own modules), and the key each is
folded under."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from app.contract.base import Envelope, GradeSource, LogPosition
from app.contract.budget import BudgetAsk, BudgetSettle, BudgetVerdict, ledger_key
from app.contract.cache import CacheKey
from app.contract.dynamic import DynamicTrace
from app.contract.features import Features
from app.contract.outcome import Outcome
from app.contract.policy import PolicyChanged
from app.contract.request import ChatRequest


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
    #: The response cache's keys (hashes and a quantised vector, no text), when its route
    #: may answer it from the cache (docs/routing.md, "Response cache").
    cache: CacheKey | None = None


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
