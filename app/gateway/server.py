"""The gateway's HTTP surface (aiohttp): OpenAI's chat completions and models, health,
readiness, answers by request id, and streams resumed from the log (``Last-Event-ID``,
app/gateway/resume.py). Bodies and keys are never logged."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from aiohttp import web

from app.config.schema import GatewayKey
from app.contract import Response, StreamDelta
from app.gateway import shape
from app.gateway.embeddings import add_routes as add_embeddings_routes
from app.gateway.errors import GatewayError, from_error_body, invalid, raise_if_failed
from app.gateway.messages_api.api import add_routes as add_messages_routes
from app.gateway.relay import Relay
from app.gateway.responses_api.api import ResponsesApi
from app.gateway.resume import asked_id, last_event_id
from app.gateway.service import Gateway, Prepared, event_request_id
from app.gateway.translate import wants_stream
from app.gateway.wire import read_body, relay_stream
from app.telemetry.http import traced

log = logging.getLogger(__name__)
GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway", Gateway)
REQUEST_ID_HEADER = "x-switchyard-request-id"
LAST_EVENT_ID = "Last-Event-ID"


def build_app(gateway: Gateway) -> web.Application:
    app = web.Application(
        client_max_size=gateway.settings.max_request_bytes,
        middlewares=[traced, _errors],  # the span sees the status _errors answers
    )
    app[GATEWAY] = gateway
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/chat/completions/{request_id}", completion_by_id)
    app.router.add_get("/v1/chat/completions/{request_id}/stream", resume_by_path)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/switchyard/requests/{request_id}", request_by_id)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    ResponsesApi(gateway).install(app)  # OpenAI's Responses API: app/gateway/responses_api/
    add_messages_routes(app, gateway)  # Anthropic's Messages API: app/gateway/messages_api/
    add_embeddings_routes(app, gateway)  # OpenAI's embeddings: app/gateway/embeddings.py
    return app


def error_response(error: GatewayError) -> web.Response:
    return web.json_response(error.body(), status=error.status, headers=error.headers())


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)  # type: ignore[no-any-return]
    except GatewayError as error:
        return error_response(error)
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[GATEWAY].settings.max_request_bytes
        return error_response(GatewayError(413, f"body over {limit} bytes", "oversized"))
    except web.HTTPException as exc:  # 404 / 405 from routing, in OpenAI's format
        if exc.status < 400:
            raise
        return error_response(GatewayError(exc.status, exc.reason, None))
    except Exception as exc:
        log.exception("gateway error on %s %s", request.method, request.path)
        return error_response(GatewayError(500, f"internal error ({type(exc).__name__})"))


async def chat_completions(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    key = gateway.keys.authenticate(request.headers.get("Authorization"))
    last = request.headers.get(LAST_EVENT_ID)
    if last is not None:  # a stream resumed: nothing is published
        asked = request.headers.get(REQUEST_ID_HEADER)
        if asked is None:
            message = f"{LAST_EVENT_ID} resumes a stream: name it by its {REQUEST_ID_HEADER}"
            raise invalid(message, "missing_request_id")
        body = await read_body(request, gateway.settings) if request.can_read_body else {}
        return await _resume(request, gateway, key, asked, last, _include_usage(body))
    gateway.check_room()
    body = await read_body(request, gateway.settings)
    prepared = gateway.prepare(body, key, request.headers.get(REQUEST_ID_HEADER))
    stream, include_usage = wants_stream(body)
    if stream:
        return await _stream_live(request, gateway, prepared, include_usage)
    response = await gateway.submit(prepared)
    raise_if_failed(response, shape.headers_of(response))
    return web.json_response(shape.completion_of(response), headers=shape.headers_of(response))


async def _stream_live(
    request: web.Request, gateway: Gateway, prepared: Prepared, include_usage: bool
) -> web.StreamResponse:
    """Server-sent chunks from the request's deltas as they come (app/gateway/relay.py).

    Nothing is sent before the first delta of a call (or the whole answer) arrives, so an
    error until then is an HTTP error. A client that goes away leaves the request to
    complete in the log.
    """
    relay = Relay(prepared.request_id, include_usage, int(time.time()))
    return await relay_stream(request, relay, gateway.stream_items(prepared), gateway.wait_s)


def _include_usage(body: Any) -> bool:
    options = body.get("stream_options") if isinstance(body, dict) else None
    return isinstance(options, dict) and options.get("include_usage") is True


async def resume_by_path(request: web.Request) -> web.StreamResponse:
    """``GET /v1/chat/completions/{id}/stream``: the stream again, after ``Last-Event-ID``
    (none: from its start), the usage chunk with ``?include_usage=true``."""
    gateway = request.app[GATEWAY]
    key = gateway.keys.authenticate(request.headers.get("Authorization"))
    last = request.headers.get(LAST_EVENT_ID, "0")
    usage = request.query.get("include_usage", "").lower() == "true"
    return await _resume(request, gateway, key, request.match_info["request_id"], last, usage)


async def _resume(
    request: web.Request,
    gateway: Gateway,
    key: GatewayKey,
    asked: str,
    last: str,
    include_usage: bool,
) -> web.StreamResponse:
    """The rest of a request's stream after ``last`` (its ``Last-Event-ID``), from the log:
    the whole answer's when it is complete, else its deltas as they come (any gateway)."""
    resume_after = last_event_id(last)
    request_id = event_request_id(key, asked_id(asked))
    record = await gateway.owned_request(key, request_id)
    relay = Relay(request_id, include_usage, int(time.time()), resume_after=resume_after)
    found = await gateway.find(request_id)
    if found is not None:
        return await relay_stream(request, relay, _one(found), gateway.wait_s)
    return await relay_stream(request, relay, gateway.resume_items(record), gateway.wait_s)


async def _one(response: Response) -> AsyncGenerator[StreamDelta | Response | None, None]:
    yield response


async def models(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    gateway.keys.authenticate(request.headers.get("Authorization"))
    return web.json_response({"object": "list", "data": gateway.models()})


async def completion_by_id(request: web.Request) -> web.Response:
    """``GET /v1/chat/completions/{id}``: the request's whole answer once it is complete (a
    failed request: its error, with its status); 409 ``request_in_progress`` before."""
    gateway = request.app[GATEWAY]
    key = gateway.keys.authenticate(request.headers.get("Authorization"))
    request_id = event_request_id(key, asked_id(request.match_info["request_id"]))
    await gateway.owned_request(key, request_id)
    found = await gateway.find(request_id)
    if found is None:
        message = f"request {request_id!r} is still in progress: its answer is not complete yet"
        raise GatewayError(409, message, "request_in_progress", retry_after_s=1.0)
    raise_if_failed(found, shape.headers_of(found))
    return web.json_response(shape.completion_of(found), headers=shape.headers_of(found))


async def request_by_id(request: web.Request) -> web.Response:
    """A request's answer by id, from this gateway's memory or ``llm.responses``."""
    gateway = request.app[GATEWAY]
    key = gateway.keys.authenticate(request.headers.get("Authorization"))
    request_id = event_request_id(key, request.match_info["request_id"])
    found = await gateway.find(request_id)
    if found is None:
        message = f"no answer for {request_id!r} (not answered yet, or older than the window)"
        raise GatewayError(404, message, "request_not_found")
    body: dict[str, Any] = {
        "id": found.request_id,
        "object": "switchyard.request",
        "status": found.status,
        "attempts": found.attempts,
        "deployment": found.deployment,
    }
    if found.status == "ok":
        body["completion"] = shape.completion_of(found)
    else:
        error = from_error_body(found.error)
        body["error"] = {**error.body()["error"], "status": error.status}
    return web.json_response(body, headers=shape.headers_of(found))


async def healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    if not gateway.ready:
        return web.json_response({"status": "not ready"}, status=503)
    return web.json_response({"status": "ready", "waiting": gateway.waiter.waiting})
