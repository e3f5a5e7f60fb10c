"""The gateway's span: one SERVER span per HTTP request, its context put on the request
event it publishes.

The incoming ``traceparent`` (and ``tracestate``) header, W3C Trace Context, is the
span's parent; without one, the span starts a trace. :func:`stamp` writes the current
span's context into a request event as ``traceparent``/``tracestate``, so the worker's
spans join the trace. With tracing off in the gateway, a client's header is still
passed on to the event (the worker may trace), and nothing else is done.

Named ``{method} {route}`` (``POST /v1/chat/completions``) with the HTTP semantic
conventions' method, route and status code, and ``switchyard.request.id``. No header
other than the trace context is read, no body, no query, no path beyond its route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from opentelemetry import context
from opentelemetry.semconv.attributes import error_attributes, http_attributes
from opentelemetry.trace import SpanKind, Status, StatusCode, get_current_span

from app.contract.trace import TRACESTATE_MAX_CHARS
from app.telemetry import state
from app.telemetry.spans import REQUEST_ID, W3C

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: Probes: never traced.
UNTRACED = frozenset({"/healthz", "/readyz"})


@web.middleware
async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
    tracer = state.tracer
    if request.path in UNTRACED or (tracer is None and "traceparent" not in request.headers):
        return await handler(request)
    parent = W3C.extract(request.headers)
    if tracer is None:  # not traced here: the client's context goes on to the event
        token = context.attach(parent)
        try:
            return await handler(request)
        finally:
            context.detach(token)
    route = _route(request)
    attributes: dict[str, Any] = {http_attributes.HTTP_REQUEST_METHOD: request.method}
    if route:
        attributes[http_attributes.HTTP_ROUTE] = route
    name = f"{request.method} {route}" if route else request.method
    with tracer.start_as_current_span(
        name,
        parent,
        SpanKind.SERVER,
        attributes,
        record_exception=False,  # an exception's text is not the span's business
        set_status_on_exception=False,
    ) as span:
        try:
            response = await handler(request)
        except BaseException as exc:
            span.set_attribute(error_attributes.ERROR_TYPE, type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR))
            raise
        span.set_attribute(http_attributes.HTTP_RESPONSE_STATUS_CODE, response.status)
        if response.status >= 500:
            span.set_attribute(error_attributes.ERROR_TYPE, str(response.status))
            span.set_status(Status(StatusCode.ERROR))
        return response


def _route(request: web.Request) -> str:
    """The matched route's template (``/v1/chat/completions/{request_id}``), or ``""``."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else ""


def stamp(event: dict[str, Any]) -> None:
    """Put the current trace context on a request event (nothing when there is none)."""
    span = get_current_span()
    if not span.get_span_context().is_valid:
        return
    W3C.inject(event)
    if len(event.get("tracestate", "")) > TRACESTATE_MAX_CHARS:
        del event["tracestate"]  # the W3C lets a hop drop what it cannot carry
    if span.is_recording():
        span.set_attribute(REQUEST_ID, str(event.get("request_id")))
