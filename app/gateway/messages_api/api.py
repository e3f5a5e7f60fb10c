"""``POST /v1/messages``: Anthropic's Messages API on the gateway's routes.

The key comes in ``x-api-key`` (Anthropic's header) or ``Authorization: Bearer``; the
``anthropic-version`` header is required, as Anthropic's API requires it (any version is
taken: the SDKs send ``2023-06-01``). The body is translated (``inputs``), published
and answered from the log like a chat completion (``Gateway.prepare``, ``submit``,
``stream_items`` and the relay), the answer translated back (``message``, ``frames``).
Every error is in Anthropic's shape, with the gateway's status and retry headers.
Bodies and keys are never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from multidict import CIMultiDictProxy

from app.config.schema import GatewayKey
from app.gateway import shape
from app.gateway.errors import GatewayError, invalid, raise_if_failed
from app.gateway.keys import KeyRing
from app.gateway.messages_api.errors import error_response
from app.gateway.messages_api.frames import MessageEvents
from app.gateway.messages_api.inputs import chat_body, stop_sequences
from app.gateway.messages_api.message import message_of
from app.gateway.relay import Relay
from app.gateway.service import Gateway
from app.gateway.wire import read_body, relay_stream

log = logging.getLogger(__name__)
MESSAGES_PATH = "/v1/messages"
VERSION_HEADER = "anthropic-version"
REQUEST_ID_HEADER = "x-switchyard-request-id"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_routes(app: web.Application, gateway: Gateway) -> None:
    """Serve the Messages API on ``app`` for ``gateway``."""
    api = MessagesApi(gateway)
    app.router.add_post(MESSAGES_PATH, api.answering(api.create))
    app.router.add_post(f"{MESSAGES_PATH}/count_tokens", api.answering(api.count_tokens))


class MessagesApi:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def answering(self, handler: Handler) -> Handler:
        """``handler`` with every error answered in Anthropic's shape (the gateway's own
        middleware answers OpenAI's, and sees none of these)."""

        async def answer(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except GatewayError as error:
                return error_response(error)
            except web.HTTPRequestEntityTooLarge:
                limit = self.gateway.settings.max_request_bytes
                return error_response(GatewayError(413, f"body over {limit} bytes", "oversized"))
            except Exception as exc:
                log.exception("gateway error on %s %s", request.method, request.path)
                failure = GatewayError(500, f"internal error ({type(exc).__name__})")
                return error_response(failure)

        return answer

    async def create(self, request: web.Request) -> web.StreamResponse:
        gateway = self.gateway
        key = authenticate(gateway.keys, request.headers)
        check_version(request.headers)
        gateway.check_room()
        body = await read_body(request, gateway.settings)
        chat = chat_body(body)
        stops = stop_sequences(body)
        prepared = gateway.prepare(chat, key, request.headers.get(REQUEST_ID_HEADER))
        if chat.get("stream"):
            relay = Relay(prepared.request_id, frames=MessageEvents(prepared.request_id, stops))
            items = gateway.stream_items(prepared)
            return await relay_stream(request, relay, items, gateway.wait_s)
        response = await gateway.submit(prepared)
        raise_if_failed(response, shape.headers_of(response))
        return web.json_response(message_of(response, stops), headers=shape.headers_of(response))

    async def count_tokens(self, request: web.Request) -> web.StreamResponse:
        """Not served: a router cannot count with the tokenizer of a model it has not picked."""
        authenticate(self.gateway.keys, request.headers)
        message = (
            "count_tokens is not supported: the model (and its tokenizer) is chosen per "
            "request by the router; the usage of each answer has its token counts"
        )
        raise GatewayError(404, message, "not_supported", should_retry=False)


def authenticate(keys: KeyRing, headers: CIMultiDictProxy[str]) -> GatewayKey:
    """The key of ``x-api-key``, else of ``Authorization: Bearer``; 401 when none is known."""
    api_key = (headers.get("x-api-key") or "").strip()
    if api_key:
        return keys.authenticate(f"Bearer {api_key}")
    if not headers.get("Authorization"):
        message = "missing API key (x-api-key, or Authorization: Bearer ...)"
        raise GatewayError(401, message, "missing_api_key")
    return keys.authenticate(headers.get("Authorization"))


def check_version(headers: CIMultiDictProxy[str]) -> None:
    if not (headers.get(VERSION_HEADER) or "").strip():
        raise invalid(f"{VERSION_HEADER}: header is required", "missing_anthropic_version")
