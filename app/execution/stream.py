"""Streaming calls (``stream: true``): time to first token, and no cut stream taken for an answer.

A stream counts as a success only when it carried a finish reason. A stream
that ends without one (truncated), drops the connection, or carries a chunk
that is not JSON is a ``bad_response``: it counts against the deployment's
availability (seed 004: "errors after the stream started") and is retried
elsewhere. The chunks are assembled into one ordinary OpenAI completion, so
the requester's response looks the same whether the provider streamed or not.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.config import ProviderConfig
from app.events import ChatRequest, StatusClass
from app.execution.call import (
    ERROR_FINISH_REASONS,
    CallResult,
    auth_headers,
    chat_completions_url,
    classify_response,
    is_header_safe,
    request_body,
    scrub,
    usage_of,
)


@dataclass
class _Assembly:
    """What the chunks of one streamed completion add up to."""

    content: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    first_token_ms: float | None = None
    #: Whether any delta carried content (an empty string counts) or tool calls.
    answered: bool = False

    def take(self, chunk: dict[str, Any], elapsed_ms: float) -> None:
        if not self.meta:
            self.meta = {k: chunk.get(k) for k in ("id", "created", "model")}
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            text = delta.get("content")
            self.answered = self.answered or isinstance(text, str) or bool(delta.get("tool_calls"))
            if isinstance(text, str) and text:
                if self.first_token_ms is None:
                    self.first_token_ms = elapsed_ms
                self.content.append(text)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def completion(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            **self.meta,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(self.content)},
                    "finish_reason": self.finish_reason,
                }
            ],
        }
        if self.usage is not None:
            body["usage"] = self.usage
        return body


async def stream_provider(
    client: httpx.AsyncClient,
    provider: ProviderConfig,
    model: str,
    request: ChatRequest,
    timeout_s: float,
) -> CallResult:
    key = provider.api_key.get_secret_value()
    if key and not is_header_safe(key):
        return CallResult(
            StatusClass.AUTH_ERROR, None, 0.0, error="API key is not a valid header value"
        )
    body = {
        **request_body(model, request),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    assembly = _Assembly()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream(
                "POST",
                chat_completions_url(provider.base_url),
                json=body,
                headers=auth_headers(key),
                timeout=timeout_s,
            ) as response:
                if not 200 <= response.status_code < 300:
                    await response.aread()
                    return classify_response(response, _ms(started), key)
                problem = await _read_events(response, assembly, started)
    except (httpx.TimeoutException, TimeoutError):
        return _failed(StatusClass.TIMEOUT, f"timeout after {timeout_s:g}s", started, assembly)
    except httpx.TransportError as exc:
        started_streaming = assembly.first_token_ms is not None
        kind = StatusClass.BAD_RESPONSE if started_streaming else StatusClass.CONNECTION_ERROR
        return _failed(kind, f"stream broken: {type(exc).__name__}", started, assembly)
    if problem is None and assembly.finish_reason is None:
        problem = "stream ended without a finish reason"
    if problem is None and assembly.finish_reason in ERROR_FINISH_REASONS:
        problem = f"finish_reason {assembly.finish_reason}"
    if problem is None and not assembly.answered:
        problem = "stream carried no content"
    if problem is not None:
        return _failed(StatusClass.BAD_RESPONSE, scrub(problem, key), started, assembly)
    completion = assembly.completion()
    usage = usage_of(assembly.usage)
    return CallResult(
        StatusClass.SUCCESS,
        response.status_code,
        _ms(started),
        tokens_in=usage.tokens_in,
        tokens_out=usage.tokens_out,
        tokens_cached=usage.tokens_cached,
        finish_reason=assembly.finish_reason,
        completion=completion,
        first_token_ms=assembly.first_token_ms,
    )


async def _read_events(response: httpx.Response, assembly: _Assembly, started: float) -> str | None:
    """Fold the server-sent events into ``assembly``; the problem found, if any."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return None
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):  # not JSON, bad UTF-8, 5,000-digit numbers, nesting
            return "malformed stream chunk"
        if not isinstance(chunk, dict):
            return "malformed stream chunk"
        if "error" in chunk:
            return "error event in stream"
        assembly.take(chunk, _ms(started))
    return None


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _failed(kind: StatusClass, error: str, started: float, assembly: _Assembly) -> CallResult:
    return CallResult(kind, None, _ms(started), error=error, first_token_ms=assembly.first_token_ms)
