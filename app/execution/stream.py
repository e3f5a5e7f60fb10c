"""Streaming calls (``stream: true``): time to first token, and no cut stream taken for an answer.

A stream counts as a success only when it carried a finish reason. A stream
that ends without one (truncated), drops the connection, or carries a chunk
that is not JSON is a ``bad_response``: it counts against the deployment's
availability (seed 004: "errors after the stream started") and is retried
elsewhere (a server that ignores ``stream: true`` and answers JSON is read as
an ordinary answer). The chunks are assembled into one ordinary OpenAI completion, so
the requester's response looks the same whether the provider streamed or not
(text, tool calls and refusal; UTF-16 surrogate halves a provider sent in separate
chunks are paired again, a lone one becomes U+FFFD).

With a :class:`DeltaSink` (``stream: true`` requests, issue 12) every piece of the
answer is also handed to the sink as it comes, without waiting (agents/executor.py
publishes them as ``response.delta`` events).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

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
from app.execution.pieces import merge_tool_call, whole_text


class DeltaSink(Protocol):
    """Takes the pieces of a streamed answer as they come (must not block)."""

    def piece(
        self, content: str, tool_calls: list[dict[str, Any]] | None, refusal: str | None
    ) -> None:
        """Text added, tool-call deltas, refusal text: at least one of them non-empty."""


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
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    refusal: list[str] = field(default_factory=list)
    sink: DeltaSink | None = None

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
            calls = _tool_call_deltas(delta.get("tool_calls"))
            refusal = delta.get("refusal") if isinstance(delta.get("refusal"), str) else None
            self.answered = self.answered or isinstance(text, str) or bool(calls) or bool(refusal)
            text = text if isinstance(text, str) else ""
            if text and self.first_token_ms is None:
                self.first_token_ms = elapsed_ms
            self._keep(text, calls, refusal)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _keep(self, text: str, calls: list[dict[str, Any]], refusal: str | None) -> None:
        if text:
            self.content.append(text)
        for call in calls:
            merge_tool_call(self.tool_calls, call)
        if refusal:
            self.refusal.append(refusal)
        if self.sink is not None and (text or calls or refusal):
            self.sink.piece(text, calls or None, refusal or None)

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": whole_text("".join(self.content)),
        }
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
            message["content"] = message["content"] or None
        if self.refusal:
            message["refusal"] = whole_text("".join(self.refusal))
        body: dict[str, Any] = {
            **self.meta,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
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
    sink: DeltaSink | None = None,
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
    assembly = _Assembly(sink=sink)
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream(
                "POST",
                chat_completions_url(provider.base_url),
                json=body,
                headers=auth_headers(key),
                timeout=timeout_s,
            ) as response:
                if not 200 <= response.status_code < 300 or _whole_json(response):
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


def _tool_call_deltas(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [call for call in value if isinstance(call, dict)]


def _whole_json(response: httpx.Response) -> bool:
    """A server that ignored ``stream: true`` and sent the whole completion as JSON."""
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith("application/json")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _failed(kind: StatusClass, error: str, started: float, assembly: _Assembly) -> CallResult:
    return CallResult(kind, None, _ms(started), error=error, first_token_ms=assembly.first_token_ms)
