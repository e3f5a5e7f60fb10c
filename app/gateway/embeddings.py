"""``POST /v1/embeddings``: OpenAI's embeddings on the gateway's routes, keys and log.

The body (``model``, ``input``: a string or a list of strings, ``encoding_format``,
``dimensions``, ``user``; Switchyard's ``metadata``, ``provider``, ``routing``,
``preset``, ``session_id``) becomes one request event with ``operation: "embeddings"``
(``Gateway.prepare``: ingest's checks, the key's routes and preset), published on
``llm.requests`` and answered from the log like a chat completion: routed among the
route's deployments whose model is ``kind: embeddings``, recorded, replayable. The
answer is OpenAI's list of embeddings, in the format asked (the executor records it so:
app/execution/embeddings.py), ``model`` the model of the deployment that answered.

Refused with a 400: token arrays (``input`` as lists of integers: token ids are one
tokenizer's, and the router picks the model, so they may reach another's; the guardrails
and the routing features read text), an empty text or list, an unknown field.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from app.contract.request import MAX_EMBEDDING_INPUTS
from app.gateway import shape
from app.gateway.errors import invalid, raise_if_failed
from app.gateway.service import Gateway
from app.gateway.wire import read_body

EMBEDDINGS_PATH = "/v1/embeddings"
REQUEST_ID_HEADER = "x-switchyard-request-id"
#: Body fields the request event takes as a chat request would (``user`` becomes
#: ``metadata.user``), then the embeddings' own.
_COMMON = ("model", "user", "metadata", "provider", "routing", "preset", "session_id")
_OWN = ("input", "encoding_format", "dimensions")
ENCODINGS = ("float", "base64")


def add_routes(app: web.Application, gateway: Gateway) -> None:
    """Serve ``POST /v1/embeddings`` on ``app`` for ``gateway`` (errors in OpenAI's shape:
    the gateway's middleware answers them)."""

    async def create(request: web.Request) -> web.Response:
        return await embeddings(request, gateway)

    app.router.add_post(EMBEDDINGS_PATH, create)


async def embeddings(request: web.Request, gateway: Gateway) -> web.Response:
    key = gateway.keys.authenticate(request.headers.get("Authorization"))
    gateway.check_room()
    body = await read_body(request, gateway.settings)
    common, own = embeddings_event(body)
    prepared = gateway.prepare(common, key, request.headers.get(REQUEST_ID_HEADER), own)
    response = await gateway.submit(prepared)
    raise_if_failed(response, shape.headers_of(response))
    return web.json_response(shape.completion_of(response), headers=shape.headers_of(response))


def embeddings_event(body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the body's fields a chat body shares, for ``request_event``; the embeddings' own
    fields of the request event). GatewayError(400) for what cannot be one."""
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object", "invalid_body")
    unknown = sorted(k for k in body if k not in _COMMON and k not in _OWN)
    if unknown:
        raise invalid(f"unsupported parameter: {', '.join(unknown)}", "unsupported_parameter")
    own: dict[str, Any] = {"operation": "embeddings", "input": texts_of(body.get("input"))}
    encoding = body.get("encoding_format")
    if encoding is not None:
        if encoding not in ENCODINGS:
            raise invalid("encoding_format: 'float' or 'base64'", "invalid_encoding_format")
        own["encoding_format"] = encoding
    dimensions = body.get("dimensions")
    if dimensions is not None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise invalid("dimensions: a positive integer", "invalid_dimensions")
        own["dimensions"] = dimensions
    common = {k: body[k] for k in _COMMON if body.get(k) is not None}
    return common, own


def texts_of(value: Any) -> list[str]:
    """``input`` as a list of texts: one string, or a list of 1 to 2,048 non-empty ones."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise invalid("input: a string or a non-empty list of strings", "invalid_input")
    if any(isinstance(v, int | list) for v in value):
        raise invalid(
            "input: token arrays are not supported, send the text (the router picks the "
            "model, and with it the tokenizer)",
            "unsupported_input",
        )
    if not all(isinstance(v, str) for v in value):
        raise invalid("input: a string or a non-empty list of strings", "invalid_input")
    if not all(value):
        raise invalid("input: an empty string cannot be embedded", "invalid_input")
    if len(value) > MAX_EMBEDDING_INPUTS:
        raise invalid(f"input: at most {MAX_EMBEDDING_INPUTS} texts", "invalid_input")
    return value
