"""Errors in OpenAI's format, with the status, ``Retry-After`` and ``x-should-retry`` that
tell an SDK what to do (pure).

The official SDKs retry 408, 409, 429 and 5xx unless the server says
``x-should-retry: false``: sent where retrying cannot help (a tenant's rate limit, a
forbidden word, a budget, a request a provider refused), so a client does not retry
into a wall. Past the request deadline the answer is a 504 with ``Retry-After`` and
``x-should-retry: true``: a new try is a new request. Messages never carry a prompt or
an API key: they come from the router's error bodies (which name codes, deployments and
limits) or are fixed here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from app.contract import REQUEST_REFUSED, RESPONSE_TOO_LARGE, ErrorBody, Response

#: OpenAI's error ``type`` for each status the gateway answers with.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "timeout_error",
}
#: Ingest's dead-letter reasons, as statuses (checked by the gateway before publishing).
DEAD_LETTER_STATUS: dict[str, int] = {"oversized": 413, "unknown_route": 404}
#: Outcome status classes of a provider's failure, as the gateway's status.
PROVIDER_STATUS: dict[str, int] = {
    "rate_limited": 429,
    "timeout": 504,
    "expired": 504,
    "client_error": 400,
    "auth_error": 502,
    "server_error": 502,
    "connection_error": 502,
    "bad_response": 502,
}
#: How soon a client told to try again once the request deadline passed may do so.
DEADLINE_RETRY_AFTER_S = 1.0
_RETRY_IN = re.compile(r"retry in ([0-9.]+)\s*s")


@dataclass
class GatewayError(Exception):
    """An answer that is an error: status, OpenAI error fields and retry advice."""

    status: int
    message: str
    code: str | None = None
    retry_after_s: float | None = None
    #: False: tell the SDK not to retry (``x-should-retry: false``); None: its own rules.
    should_retry: bool | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        kind = ERROR_TYPES.get(self.status, "server_error")
        error = {"message": self.message, "type": kind, "param": None, "code": self.code}
        return {"error": error}

    def headers(self) -> dict[str, str]:
        headers = dict(self.extra_headers)
        if self.retry_after_s is not None:
            headers["Retry-After"] = str(max(0, math.ceil(self.retry_after_s)))
            headers["retry-after-ms"] = str(max(0, round(self.retry_after_s * 1000)))
        if self.should_retry is not None:
            headers["x-should-retry"] = "true" if self.should_retry else "false"
        return headers


def from_dead_letter(reason: str, detail: str) -> GatewayError:
    """A request ingest would dead-letter: 413 (too large), 404 (no such model) or 400."""
    status = DEAD_LETTER_STATUS.get(reason, 400)
    code = "model_not_found" if reason == "unknown_route" else reason
    return GatewayError(status, f"{reason}: {detail}", code, should_retry=False)


def raise_if_failed(response: Response, headers: dict[str, str]) -> None:
    """A failed answer as the gateway's error (its status, advice and ``headers``: the
    answer's own, app/gateway/shape.py); nothing for a successful one."""
    if response.status != "ok":
        error = from_error_body(response.error)
        error.extra_headers.update(headers)
        raise error


def from_error_body(error: ErrorBody | None) -> GatewayError:
    """The router's (or executor's) error answer as the gateway's status and advice."""
    if error is None:
        return GatewayError(500, "error answer without an error body", "internal_error")
    code, message = error.code or error.type, error.message
    if error.type == REQUEST_REFUSED:  # ingest refused what this gateway published (app/ingest.py)
        return from_dead_letter(code, message)
    if code == "forbidden_keyword":
        return GatewayError(400, message, code, should_retry=False)
    if code == "tenant_rate_limited":
        return GatewayError(429, message, code, _retry_in(message), should_retry=False)
    if "budget" in code or code == "insufficient_quota":
        # A limit whose next window would take it says when; a spent budget does not.
        later = error.retry_after_s
        return GatewayError(429, message, code, later, should_retry=None if later else False)
    if code == RESPONSE_TOO_LARGE:
        return GatewayError(502, message, code, should_retry=False)
    if code == "deadline_exceeded":
        return past_deadline(message, code)
    if error.type == "no_deployment_available":
        return GatewayError(503, message, code)
    if error.type == "invalid_request":  # 403 for a rule that forbids every deployment
        status = error.http_status if error.http_status in (400, 403, 404, 422) else 400
        return GatewayError(status, message, code, should_retry=False)
    return _provider_error(error, code)


def _provider_error(error: ErrorBody, code: str) -> GatewayError:
    status = PROVIDER_STATUS.get(error.type)
    if status is None:
        status = error.http_status if error.http_status in ERROR_TYPES else 500
    advice = False if status == 400 else None  # the provider refused the request itself
    return GatewayError(status, error.message, code, should_retry=advice)


def _retry_in(message: str) -> float | None:
    found = _RETRY_IN.search(message)
    return float(found.group(1)) if found else None


def past_deadline(message: str, code: str) -> GatewayError:
    """504 once the request deadline passed, with ``Retry-After`` and
    ``x-should-retry: true``: a new try is a new request, with a new deadline."""
    return GatewayError(504, message, code, DEADLINE_RETRY_AFTER_S, should_retry=True)


def no_answer_in_time(request_id: str, waited_s: float) -> GatewayError:
    """504 ``gateway_timeout``: no answer on the replies nor on ``llm.responses`` after
    the deadline and its grace. The request may still be answered in the log."""
    message = (
        f"no answer within {waited_s:g}s (the request deadline and its grace); it may "
        f"still be answered: GET /v1/switchyard/requests/{request_id}"
    )
    return past_deadline(message, "gateway_timeout")


def invalid(message: str, code: str) -> GatewayError:
    """400: the request itself is wrong; retrying it cannot help."""
    return GatewayError(400, message, code, should_retry=False)
