"""Errors in Anthropic's shape (pure): ``{"type": "error", "error": {"type", "message"}}``
with the gateway's status and its retry advice (``Retry-After``, ``retry-after-ms``,
``x-should-retry``, which the Anthropic SDKs honour as OpenAI's do).

The gateway's own code (``model_not_found``, ``tenant_rate_limited`` ...) is in the
``x-switchyard-error-code`` header: Anthropic's error object has no place for it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from app.gateway.errors import GatewayError

#: Anthropic's error ``type`` for each status the gateway answers with.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}
ERROR_CODE_HEADER = "x-switchyard-error-code"


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def error_response(error: GatewayError) -> web.Response:
    headers = error.headers()
    if error.code:
        headers[ERROR_CODE_HEADER] = error.code
    return web.json_response(
        error_body(error.status, error.message), status=error.status, headers=headers
    )
