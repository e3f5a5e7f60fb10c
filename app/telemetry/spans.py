"""The spans of a request's way, after the gateway's: ingest, routing, provider calls.

* ``process {topic}`` (CONSUMER), ingest's reading of a request. A request without a
  ``traceparent`` gets one here: this span is then its trace's root, and the request is
  forwarded to the routing log carrying it, so every later span joins that trace.
* ``route {route}`` (INTERNAL), one per decision, child of the request's ``traceparent``:
  the fold that decided, its rule, strategy, how many candidates and exclusions.
* ``chat {model}`` (CLIENT; ``embeddings {model}`` for an embeddings request), one per
  provider call, child of the request's ``traceparent``, with the GenAI semantic
  conventions' attributes.

The routing and provider-call spans are siblings under the request's span, not parent
and child: the dispatch record between them is the fold's own output, and carrying a
span id in it would make the log depend on tracing. Every span carries the request id
and attempt, so they sort out in any trace viewer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import messaging_attributes as messaging
from opentelemetry.semconv.attributes import error_attributes, http_attributes, server_attributes
from opentelemetry.trace import (
    Span,
    SpanKind,
    Status,
    StatusCode,
    set_span_in_context,
    use_span,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.contract import ChatRequest, Dispatch, RequestAccepted, StatusClass
from app.telemetry import state

if TYPE_CHECKING:
    from app.execution.outcome import CallResult

#: W3C Trace Context, the format of the request's ``traceparent``/``tracestate``.
W3C = TraceContextTextMapPropagator()

# Switchyard's own attributes (no semantic convention names them).
REQUEST_ID = "switchyard.request.id"
ATTEMPT = "switchyard.attempt"
ROUTE = "switchyard.route"
DEPLOYMENT = "switchyard.deployment"
DECISION_ID = "switchyard.decision.id"
RULE = "switchyard.decision.rule"
STRATEGY = "switchyard.decision.strategy"
MODE = "switchyard.decision.mode"
CANDIDATES = "switchyard.decision.candidates"
EXCLUDED = "switchyard.decision.excluded"
POLICY_VERSION = "switchyard.policy.version"
STATE_VERSION = "switchyard.state.version"
STATUS_CLASS = "switchyard.status_class"
COST_USD = "switchyard.cost_usd"

CHAT = gen_ai.GenAiOperationNameValues.CHAT.value
EMBEDDINGS = gen_ai.GenAiOperationNameValues.EMBEDDINGS.value


def parent_of(request: ChatRequest) -> Context | None:
    """The context of the span that sent ``request`` (None: it carries none)."""
    if request.traceparent is None:
        return None
    carrier = {"traceparent": request.traceparent}
    if request.tracestate:
        carrier["tracestate"] = request.tracestate
    return W3C.extract(carrier)


# --------------------------------------------------------------------------- ingest


def ingested(accepted: RequestAccepted) -> RequestAccepted:
    """Ingest's span for an accepted request; the request with its trace context (its
    own, or this span's when it came without)."""
    tracer = state.tracer
    if tracer is None:
        return accepted
    request, source = accepted.request, accepted.source
    attributes: dict[str, Any] = {
        messaging.MESSAGING_SYSTEM: messaging.MessagingSystemValues.KAFKA.value,
        messaging.MESSAGING_OPERATION_TYPE: messaging.MessagingOperationTypeValues.PROCESS.value,
        messaging.MESSAGING_DESTINATION_NAME: source.topic,
        messaging.MESSAGING_DESTINATION_PARTITION_ID: str(source.partition),
        messaging.MESSAGING_KAFKA_OFFSET: source.offset,
        REQUEST_ID: request.request_id,
        ROUTE: accepted.route,
    }
    span = tracer.start_span(
        f"process {source.topic}", parent_of(request), SpanKind.CONSUMER, attributes
    )
    span.end()
    if request.traceparent is not None:
        return accepted
    carrier: dict[str, str] = {}
    W3C.inject(carrier, set_span_in_context(span))
    update = {"traceparent": carrier.get("traceparent"), "tracestate": carrier.get("tracestate")}
    return accepted.model_copy(update={"request": request.model_copy(update=update)})


# --------------------------------------------------------------------------- routing


def decided(dispatches: Sequence[Dispatch], started: float) -> None:
    """One span per decision of a fold that began at ``started`` (``time.perf_counter``)."""
    tracer = state.tracer
    if tracer is None or not dispatches:
        return
    end = time.time_ns()
    start = end - int((time.perf_counter() - started) * 1e9)
    for dispatch in dispatches:
        decision = dispatch.decision
        attributes: dict[str, Any] = {
            REQUEST_ID: decision.request_id,
            ATTEMPT: decision.attempt,
            ROUTE: decision.route,
            DEPLOYMENT: decision.deployment,
            DECISION_ID: decision.id,
            RULE: decision.selection_rule,
            STRATEGY: decision.strategy,
            MODE: decision.mode,
            CANDIDATES: len(decision.candidates),
            EXCLUDED: len(decision.excluded),
            POLICY_VERSION: decision.policy_version,
            STATE_VERSION: decision.state_version,
        }
        span = tracer.start_span(
            f"route {decision.route}",
            parent_of(dispatch.accepted.request),
            SpanKind.INTERNAL,
            attributes,
            start_time=start,
        )
        span.end(end_time=end)


# --------------------------------------------------------------------------- provider calls


class ProviderCall:
    """The span of one provider call: opened by :func:`provider_call`, given the result
    by :meth:`ended` (without it, the span ends as an error of the exception's class)."""

    __slots__ = ("_result", "_scope", "span")

    def __init__(self, span: Span | None) -> None:
        self.span = span
        self._result: CallResult | None = None
        self._scope: Any = None

    def __enter__(self) -> ProviderCall:
        if self.span is not None:
            self._scope = use_span(self.span, end_on_exit=False)
            self._scope.__enter__()
        return self

    def ended(self, result: CallResult) -> None:
        if self.span is not None:  # the shared hook while off keeps nothing
            self._result = result

    def __exit__(self, kind: type[BaseException] | None, error: object, tb: object) -> None:
        span = self.span
        if span is None:
            return
        self._scope.__exit__(None, None, None)
        if self._result is not None:
            _describe(span, self._result)
        elif kind is not None:
            span.set_attribute(error_attributes.ERROR_TYPE, kind.__qualname__)
            span.set_status(Status(StatusCode.ERROR, kind.__qualname__))
        span.end()


#: The provider-call hook while tracing is off.
_OFF = ProviderCall(None)


def provider_call(dispatch: Dispatch, base_url: str, stream: bool) -> ProviderCall:
    """The span of an attempt's provider call (the current span while it runs)."""
    tracer = state.tracer
    if tracer is None:
        return _OFF
    decision, request = dispatch.decision, dispatch.accepted.request
    operation = EMBEDDINGS if request.is_embeddings else CHAT
    attributes: dict[str, Any] = {
        gen_ai.GEN_AI_OPERATION_NAME: operation,
        gen_ai.GEN_AI_PROVIDER_NAME: decision.provider,
        # The name before gen_ai.provider.name (semantic conventions 1.36 and older),
        # which many backends still read.
        gen_ai.GEN_AI_SYSTEM: decision.provider,
        gen_ai.GEN_AI_REQUEST_MODEL: decision.model,
        gen_ai.GEN_AI_REQUEST_STREAM: stream,
        REQUEST_ID: decision.request_id,
        ATTEMPT: decision.attempt,
        ROUTE: decision.route,
        DEPLOYMENT: decision.deployment,
        DECISION_ID: decision.id,
    }
    if request.max_tokens is not None:
        attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] = request.max_tokens
    if request.temperature is not None:
        attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] = request.temperature
    attributes.update(_server(base_url))
    span = tracer.start_span(
        f"{operation} {decision.model}", parent_of(request), SpanKind.CLIENT, attributes
    )
    return ProviderCall(span)


def _server(base_url: str) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of a provider's base URL (no path, no
    credentials)."""
    try:
        parts = urlsplit(base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return {}
    if not parts.hostname:
        return {}
    return {server_attributes.SERVER_ADDRESS: parts.hostname, server_attributes.SERVER_PORT: port}


def _describe(span: Span, result: CallResult) -> None:
    """What the call came to: usage, the answering model, the finish, or the error's class."""
    span.set_attribute(STATUS_CLASS, result.status_class.value)
    if result.http_status is not None:
        span.set_attribute(http_attributes.HTTP_RESPONSE_STATUS_CODE, result.http_status)
    span.set_attribute(gen_ai.GEN_AI_USAGE_INPUT_TOKENS, result.tokens_in)
    span.set_attribute(gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, result.tokens_out)
    if result.tokens_cached:
        span.set_attribute(gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, result.tokens_cached)
    if result.finish_reason is not None:
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_FINISH_REASONS, [result.finish_reason])
    if result.first_token_ms is not None:
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, result.first_token_ms / 1e3)
    completion = result.completion or {}
    model, answer_id = completion.get("model"), completion.get("id")
    if isinstance(model, str):
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_MODEL, model)
    if isinstance(answer_id, str):
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_ID, answer_id)
    if result.status_class is not StatusClass.SUCCESS:
        span.set_attribute(error_attributes.ERROR_TYPE, result.status_class.value)
        span.set_status(Status(StatusCode.ERROR, result.status_class.value))
