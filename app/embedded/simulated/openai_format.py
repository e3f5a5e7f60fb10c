"""OpenAI's chat-completion format as the simulator reads and answers it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from app.embedded.simulated.models import DEFAULT_COMPLETION_TOKENS

CANNED_COMPLETION = "This is a simulated reply from {model}. No model was run."


def estimate_prompt_tokens(messages: Sequence[Any]) -> int:
    """chars/4 over every message's text content, at least 1."""
    chars = sum(len(message_text(m)) for m in messages)
    return max(1, chars // 4)


def message_text(message: Any) -> str:
    """A message's text: its string content, or its text parts joined."""
    if not isinstance(message, Mapping):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def error_body(message: str, err_type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": None, "code": code}}


def completion_body(
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    finish_reason: str,
    content: str | None = None,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    """A chat completion; ``cached_tokens`` > 0: OpenAI's ``prompt_tokens_details``."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return {
        "id": f"chatcmpl-sim-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content or CANNED_COMPLETION.format(model=model),
                },
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
    }


class RequestError(Exception):
    """A malformed request; answered 400 in OpenAI's error format."""


def parse_max_tokens(body: Mapping[str, Any]) -> int:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return DEFAULT_COMPLETION_TOKENS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError("max_tokens must be a positive integer")
    return value


def parse_messages(body: Mapping[str, Any]) -> list[Any]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array")
    return messages


def server_error_response(message: str) -> web.Response:
    body = error_body(message, "server_error", "service_unavailable")
    return web.json_response(body, status=503)


def invalid_request_response(message: str) -> web.Response:
    return web.json_response(error_body(message, "invalid_request_error"), status=400)


def unknown_provider_response(provider_id: str) -> web.Response:
    body = error_body(
        f"no simulated provider {provider_id!r}", "invalid_request_error", "not_found"
    )
    return web.json_response(body, status=404)


async def read_json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise RequestError("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    return body


async def read_chat_request(request: web.Request) -> tuple[dict[str, Any], list[Any], int]:
    """A chat completion request's body, messages and ``max_tokens`` (RequestError: not one)."""
    body = await read_json_body(request)
    messages, max_tokens = parse_messages(body), parse_max_tokens(body)
    if body.get("stream") not in (None, False, True):
        raise RequestError("stream must be a boolean")
    return body, messages, max_tokens
